//! Target resolution shared by the admission webhook and the recommender: which kinds are read from
//! caches, the controller-owner rule, the pod selector each well-known workload declares, and label-selector
//! matching. Pure: callers fetch the objects (reflector stores, fixed sets) and, for other kinds, the
//! `/scale` subresource themselves.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::Resource;

/// Kinds read from caches, matched by kind whatever the group (as upstream does). Any other kind is
/// resolved through its `/scale` subresource.
pub const WELL_KNOWN_KINDS: [&str; 7] = [
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicationController",
];

/// Whether `kind` is one of [`WELL_KNOWN_KINDS`].
pub fn is_well_known(kind: &str) -> bool {
    WELL_KNOWN_KINDS.contains(&kind)
}

/// The controller owner: the last ownerReference with `controller: true` (upstream keeps the last one).
pub fn controller_owner(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().rev().find(|o| o.controller == Some(true))
}

/// The equality selector `matchLabels: labels` (an absent map gives the empty selector, which matches
/// every pod, as upstream's `SetAsLabelSelector(nil)`).
pub fn equality_selector(labels: Option<&BTreeMap<String, String>>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.cloned().unwrap_or_default()),
        match_expressions: None,
    }
}

/// The labels of a CronJob's job template's pod template (`spec.jobTemplate.spec.template.metadata.labels`).
pub fn cron_job_template_labels(cron_job: &CronJob) -> Option<&BTreeMap<String, String>> {
    cron_job
        .spec
        .as_ref()
        .and_then(|s| s.job_template.spec.as_ref())
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
}

/// A well-known workload kind: how its objects declare the pods they control.
pub trait Workload: Resource {
    /// The pod selector: `spec.selector` (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job), the
    /// equality selector of [`cron_job_template_labels`] (CronJob, always present) or of the `spec.selector`
    /// map (ReplicationController). `None` when the object declares none.
    fn pod_selector(&self) -> Option<LabelSelector>;
}

macro_rules! spec_selector {
    ($($kind:ty),+) => {$(
        impl Workload for $kind {
            fn pod_selector(&self) -> Option<LabelSelector> {
                self.spec.as_ref().map(|s| s.selector.clone())
            }
        }
    )+};
}

spec_selector!(Deployment, ReplicaSet, StatefulSet, DaemonSet);

impl Workload for Job {
    fn pod_selector(&self) -> Option<LabelSelector> {
        self.spec.as_ref().and_then(|s| s.selector.clone())
    }
}

impl Workload for CronJob {
    fn pod_selector(&self) -> Option<LabelSelector> {
        Some(equality_selector(cron_job_template_labels(self)))
    }
}

impl Workload for ReplicationController {
    fn pod_selector(&self) -> Option<LabelSelector> {
        self.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|m| equality_selector(Some(m)))
    }
}

/// What target resolution needs from a workload object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadInfo {
    /// Its controller owner ([`controller_owner`]).
    pub owner: Option<OwnerReference>,
    /// Its pod selector ([`Workload::pod_selector`]).
    pub selector: Option<LabelSelector>,
}

/// Selector and controller owner of a well-known workload object.
pub fn workload_info<K: Workload>(object: &K) -> WorkloadInfo {
    WorkloadInfo {
        owner: controller_owner(object.meta().owner_references.as_ref()).cloned(),
        selector: object.pod_selector(),
    }
}

/// A label selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `In` / `NotIn` without values.
    #[error("{key}: {operator} needs values")]
    NeedsValues {
        /// Label key.
        key: String,
        /// `In` or `NotIn`.
        operator: &'static str,
    },
    /// An operator other than `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{key}: unknown operator {operator:?}")]
    UnknownOperator {
        /// Label key.
        key: String,
        /// The operator as written.
        operator: String,
    },
}

/// A pod's labels as a selector reads them: the value of a key, if set.
pub trait LabelLookup {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<T: LabelLookup + ?Sized> LabelLookup for &T {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

/// Whether `labels` satisfy a Kubernetes label selector (`matchLabels` and `matchExpressions`, all must
/// hold). An empty selector matches everything.
pub fn selector_matches<L: LabelLookup + ?Sized>(
    selector: &LabelSelector,
    labels: &L,
) -> Result<bool, SelectorError> {
    let pairs = (selector.match_labels.iter().flatten()).map(|(k, v)| (k.as_str(), v.as_str()));
    let requirements = selector.match_expressions.iter().flatten().map(|r| {
        let values = r.values.as_deref().unwrap_or_default();
        (r.key.as_str(), r.operator.as_str(), values)
    });
    selector_parts_match(pairs, requirements, labels)
}

/// [`selector_matches`] of a selector given as its parts, for a selector kept in another form than
/// k8s-openapi's: its `matchLabels` pairs, and its `matchExpressions` as key, operator and values.
pub fn selector_parts_match<'s, V, L>(
    pairs: impl IntoIterator<Item = (&'s str, &'s str)>,
    requirements: impl IntoIterator<Item = (&'s str, &'s str, &'s [V])>,
    labels: &L,
) -> Result<bool, SelectorError>
where
    V: AsRef<str> + 's,
    L: LabelLookup + ?Sized,
{
    for (k, v) in pairs {
        if labels.label(k) != Some(v) {
            return Ok(false);
        }
    }
    for (key, operator, values) in requirements {
        if !requirement_holds(key, operator, values, labels)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `labels` satisfy one `matchExpressions` entry, given as its key, operator and values.
fn requirement_holds<V: AsRef<str>, L: LabelLookup + ?Sized>(
    key: &str,
    operator: &str,
    values: &[V],
    labels: &L,
) -> Result<bool, SelectorError> {
    let value = labels.label(key);
    let listed = |v: &str| values.iter().any(|x| x.as_ref() == v);
    let needs_values = |operator| SelectorError::NeedsValues {
        key: key.to_owned(),
        operator,
    };
    match operator {
        "In" if values.is_empty() => Err(needs_values("In")),
        "In" => Ok(value.is_some_and(listed)),
        "NotIn" if values.is_empty() => Err(needs_values("NotIn")),
        "NotIn" => Ok(value.is_none_or(|v| !listed(v))),
        "Exists" => Ok(value.is_some()),
        "DoesNotExist" => Ok(value.is_none()),
        other => Err(SelectorError::UnknownOperator {
            key: key.to_owned(),
            operator: other.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn owner(kind: &str, name: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: name.into(),
            controller,
            ..Default::default()
        }
    }

    #[test]
    fn well_known_kinds() {
        assert!(is_well_known("CronJob"));
        assert!(!is_well_known("deployment"));
        assert!(!is_well_known("Etcd"));
    }

    #[test]
    fn last_controller_owner_wins() {
        let owners = vec![
            owner("ReplicaSet", "a", Some(true)),
            owner("Node", "n", Some(false)),
            owner("ReplicaSet", "b", Some(true)),
            owner("ReplicaSet", "c", None),
        ];
        assert_eq!(
            controller_owner(Some(&owners)).map(|o| o.name.as_str()),
            Some("b")
        );
        assert_eq!(controller_owner(None), None);
        assert_eq!(controller_owner(Some(&owners[1..2].to_vec())), None);
    }

    #[test]
    fn selectors_per_kind() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "ownerReferences": [
                {"apiVersion": "x/v1", "kind": "Etcd", "name": "e", "uid": "1", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
        }))
        .unwrap();
        let info = workload_info(&d);
        assert_eq!(info.owner.map(|o| o.kind), Some("Etcd".into()));
        assert_eq!(
            info.selector,
            Some(equality_selector(Some(&labels(&[("app", "web")]))))
        );

        let job: Job =
            serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {}}}))
                .unwrap();
        assert_eq!(workload_info(&job).selector, None);

        let cj: CronJob = serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"job": "c"}}}}}}}))
        .unwrap();
        assert_eq!(
            cron_job_template_labels(&cj),
            Some(&labels(&[("job", "c")]))
        );
        assert_eq!(
            cj.pod_selector(),
            Some(equality_selector(Some(&labels(&[("job", "c")]))))
        );
        // Without template labels: the empty selector.
        let bare = CronJob::default();
        assert_eq!(cron_job_template_labels(&bare), None);
        assert_eq!(bare.pod_selector(), Some(equality_selector(None)));

        let rc: ReplicationController = serde_json::from_value(
            json!({"metadata": {"name": "r"}, "spec": {"selector": {"app": "r"}}}),
        )
        .unwrap();
        assert_eq!(
            rc.pod_selector(),
            Some(equality_selector(Some(&labels(&[("app", "r")]))))
        );
        assert_eq!(ReplicationController::default().pod_selector(), None);
    }

    #[test]
    fn label_selector_matching() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["a"]},
                {"key": "team", "operator": "Exists"}
            ]
        }))
        .unwrap();
        let ok = labels(&[("app", "web"), ("tier", "fe"), ("team", "x")]);
        assert_eq!(selector_matches(&sel, &ok), Ok(true));
        for bad in [
            labels(&[("app", "api"), ("tier", "fe"), ("team", "x")]),
            labels(&[("app", "web"), ("tier", "db"), ("team", "x")]),
            labels(&[
                ("app", "web"),
                ("tier", "fe"),
                ("team", "x"),
                ("canary", "1"),
            ]),
            labels(&[("app", "web"), ("tier", "fe"), ("team", "x"), ("zone", "a")]),
            labels(&[("app", "web"), ("tier", "fe")]),
        ] {
            assert_eq!(selector_matches(&sel, &bad), Ok(false), "{bad:?}");
        }
        assert_eq!(
            selector_matches(&LabelSelector::default(), &labels(&[])),
            Ok(true)
        );
    }

    #[test]
    fn invalid_selectors() {
        let sel = |op: &str| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: op.into(),
                values: None,
            }]),
        };
        let err = |op| selector_matches(&sel(op), &labels(&[])).map_err(|e| e.to_string());
        assert_eq!(err("In"), Err("k: In needs values".into()));
        assert_eq!(err("NotIn"), Err("k: NotIn needs values".into()));
        assert_eq!(err("Gt"), Err("k: unknown operator \"Gt\"".into()));
    }
}
