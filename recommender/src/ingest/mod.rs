//! Ingest: VPAs, pods, checkpoints, usage samples and OOMs into the model ([`ClusterState`], the one
//! model of the controller). What changes is decided purely ([`vpa_action`], [`PodFilter`]); the steps
//! then apply it to the model.
//!
//! [`ClusterState`]: tailor_engine::model::ClusterState

mod pods;
mod restore;
mod runs;
mod usage;
mod vpas;

use std::collections::HashMap;

use tailor_crds::{PodResourcePolicy, VerticalPodAutoscalerSpec};

use tailor_engine::model::{Labels, Selector};
use tailor_engine::policy::{self, PolicyError};

pub(crate) use crate::tracked::{PodEntry, VpaEntry};
pub use crate::tracked::{VpaKey, key_of};

/// The names in `spec.recommenders`.
pub fn recommender_names(spec: &VerticalPodAutoscalerSpec) -> Vec<String> {
    spec.recommenders
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

/// The VPA's `resourcePolicy`, once every `minAllowed` / `maxAllowed` quantity is known to parse.
pub fn resource_policy(
    spec: &VerticalPodAutoscalerSpec,
) -> Result<Option<PodResourcePolicy>, PolicyError> {
    let Some(p) = spec.resource_policy.as_ref() else {
        return Ok(None);
    };
    policy::validate(p)?;
    Ok(Some(p.clone()))
}

/// What a sync does with one owned VPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VpaAction {
    /// New to the model.
    Add,
    /// Same identity and selector: only policy, annotations and target state are refreshed.
    Keep,
    /// Same identity and target, whose selector appeared or went (the target became resolvable or stopped
    /// being so): re-linked in place, restored history kept. (Upstream drops the history on any selector
    /// change, a target that cannot be read for a moment included.)
    Reselect,
    /// Same identity, another workload (a new `targetRef`, or a selector that changed between two resolved
    /// ones): the history is dropped and the VPA's checkpoints deleted, as upstream drops it.
    Retarget,
    /// A new object under the same name: the old one is retired and the new one starts over.
    Replace,
}

/// The action for a VPA with `uid` resolving to `selector`, given the model's current `(uid, selector)`
/// and whether its `targetRef` names another workload than before (`retargeted`).
pub fn vpa_action(
    current: Option<(&str, &Selector)>,
    uid: &str,
    selector: &Selector,
    retargeted: bool,
) -> VpaAction {
    match current {
        None => VpaAction::Add,
        Some((u, _)) if u != uid => VpaAction::Replace,
        Some(_) if retargeted => VpaAction::Retarget,
        Some((_, s)) if s == selector => VpaAction::Keep,
        Some((_, s)) if *s == Selector::Nothing || *selector == Selector::Nothing => {
            VpaAction::Reselect
        }
        Some(_) => VpaAction::Retarget,
    }
}

/// Which pods enter the model: with `--memory-saver`, only those some VPA of their namespace selects;
/// otherwise all.
#[derive(Debug)]
pub struct PodFilter<'a> {
    memory_saver: bool,
    selectors: HashMap<&'a str, Vec<&'a Selector>>,
}

impl<'a> PodFilter<'a> {
    /// A filter over the selectors of `vpas` (namespace, selector).
    pub fn new(
        memory_saver: bool,
        vpas: impl IntoIterator<Item = (&'a str, &'a Selector)>,
    ) -> Self {
        let mut selectors: HashMap<&str, Vec<&Selector>> = HashMap::new();
        for (ns, s) in vpas {
            if *s != Selector::Nothing {
                selectors.entry(ns).or_default().push(s);
            }
        }
        PodFilter {
            memory_saver,
            selectors,
        }
    }

    /// Whether a pod in `namespace` with `labels` is tracked.
    pub fn tracks(&self, namespace: &str, labels: &Labels) -> bool {
        !self.memory_saver
            || self
                .selectors
                .get(namespace)
                .is_some_and(|s| s.iter().any(|s| s.matches(labels)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpa_action_follows_identity_then_selector() {
        let a = Selector::parse("app=a").unwrap();
        let b = Selector::parse("app=b").unwrap();
        let nothing = Selector::Nothing;
        assert_eq!(vpa_action(None, "u1", &a, false), VpaAction::Add);
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u1", &a, false),
            VpaAction::Keep
        );
        // Another workload: by its targetRef, or by a selector that changed between resolved ones.
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u1", &a, true),
            VpaAction::Retarget
        );
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u1", &b, false),
            VpaAction::Retarget
        );
        // The same target becoming resolvable, or not: re-linked, history kept.
        assert_eq!(
            vpa_action(Some(("u1", &nothing)), "u1", &a, false),
            VpaAction::Reselect
        );
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u1", &nothing, false),
            VpaAction::Reselect
        );
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u2", &a, false),
            VpaAction::Replace
        );
        assert_eq!(
            vpa_action(Some(("u1", &a)), "u2", &b, true),
            VpaAction::Replace
        );
    }

    #[test]
    fn pod_filter_ignores_vpas_that_select_nothing() {
        let nothing = Selector::Nothing;
        let everything = Selector::everything();
        let labels = Labels::new();
        let f = PodFilter::new(true, [("a", &nothing), ("b", &everything)]);
        assert!(!f.tracks("a", &labels));
        assert!(f.tracks("b", &labels));
        assert!(!f.tracks("c", &labels));
        assert!(PodFilter::new(false, []).tracks("c", &labels));
    }
}
