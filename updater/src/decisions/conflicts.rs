//! Two VPAs on one workload (docs/decisions/conflicting-vpas.md; docs/design/upstream-updater.md §8 item 8).
//! The webhook sizes a pod from the oldest VPA that names its controller, in any mode but `Off`; upstream's
//! updater looks only at the VPAs whose mode updates running pods. With an `Initial` VPA and a `Recreate` one
//! on the same Deployment, upstream evicts by the `Recreate` one, the webhook sizes the replacement by the
//! `Initial` one, and the pod is evicted again every iteration. Tailor acts on no VPA of such a target and says
//! so on each.

use std::collections::HashMap;
use std::sync::Arc;

use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{is_active, strongest};

/// Most VPAs named in one conflict message.
const MAX_NAMES: usize = 8;

/// (namespace, kind, name) of a target.
type TargetKey = (String, String, String);

/// Targets named by more than one VPA that takes part in the webhook's matching.
#[derive(Debug, Default)]
pub struct Conflicts {
    by_target: HashMap<TargetKey, String>,
}

fn key(vpa: &VerticalPodAutoscaler) -> Option<TargetKey> {
    let t = vpa.spec.target_ref.as_ref()?;
    Some((
        vpa.metadata.namespace.clone().unwrap_or_default(),
        t.kind.clone(),
        t.name.clone(),
    ))
}

impl Conflicts {
    /// The conflicts among `vpas` (the webhook's candidates: every VPA but `Off` ones without a start-up
    /// boost, [`is_active`]), each with the sentence that explains it.
    pub fn of(vpas: &[Arc<VerticalPodAutoscaler>]) -> Self {
        let mut groups: HashMap<TargetKey, Vec<&Arc<VerticalPodAutoscaler>>> = HashMap::new();
        for v in vpas {
            if !is_active(v) {
                continue;
            }
            if let Some(k) = key(v) {
                groups.entry(k).or_default().push(v);
            }
        }
        let by_target = groups
            .into_iter()
            .filter(|(_, g)| g.len() > 1)
            .map(|((ns, kind, name), group)| {
                let mut names: Vec<&str> = group
                    .iter()
                    .map(|v| v.metadata.name.as_deref().unwrap_or_default())
                    .collect();
                names.sort_unstable();
                let count = names.len();
                let mut listed = names
                    .iter()
                    .take(MAX_NAMES)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                if count > MAX_NAMES {
                    listed.push_str(&format!(" and {} more", count - MAX_NAMES));
                }
                let oldest = strongest(group.iter().map(|v| v.as_ref()).collect())
                    .and_then(|v| v.metadata.name.clone())
                    .unwrap_or_default();
                let text = format!(
                    "conflicting VPAs: {count} VPAs ({listed}) target {kind} {ns}/{name}; the webhook \
                     sizes its pods from the oldest ({oldest}) and the updater updates none of them \
                     until only one remains"
                );
                ((ns, kind, name), text)
            })
            .collect();
        Conflicts { by_target }
    }

    /// Why `vpa` is in a conflict, if it is (only VPAs that take part in matching are).
    pub fn of_vpa(&self, vpa: &VerticalPodAutoscaler) -> Option<&str> {
        if self.by_target.is_empty() || !is_active(vpa) {
            return None;
        }
        self.by_target.get(&key(vpa)?).map(String::as_str)
    }

    /// Whether there is no conflict.
    pub fn is_empty(&self) -> bool {
        self.by_target.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_testkit::fixtures::VpaFixture;

    fn vpa(name: &str, mode: &str, target: &str, created: &str) -> Arc<VerticalPodAutoscaler> {
        let v = VpaFixture::new("shop", name)
            .created(created)
            .target("Deployment", target)
            .mode(mode);
        Arc::new(v.build())
    }

    #[test]
    fn an_initial_and_a_recreate_vpa_on_one_deployment_conflict_and_off_does_not() {
        let a = vpa("a-initial", "Initial", "web", "2026-01-01T00:00:00Z");
        let b = vpa("b-recreate", "Recreate", "web", "2026-01-02T00:00:00Z");
        let off = vpa("c-off", "Off", "api", "2026-01-01T00:00:00Z");
        let api = vpa("d-recreate", "Recreate", "api", "2026-01-02T00:00:00Z");
        let conflicts = Conflicts::of(&[a.clone(), b.clone(), off.clone(), api.clone()]);
        let text = conflicts.of_vpa(&b).expect("b conflicts");
        assert!(text.contains("a-initial, b-recreate"), "{text}");
        assert!(text.contains("oldest (a-initial)"), "{text}");
        assert_eq!(conflicts.of_vpa(&a), Some(text));
        assert_eq!(conflicts.of_vpa(&off), None);
        assert_eq!(conflicts.of_vpa(&api), None);
    }
}
