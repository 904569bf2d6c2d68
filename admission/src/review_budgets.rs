//! Budgets per review: list lengths and sizes checked so that the work and memory of a review follow what
//! Tailor uses, not what a client sends. A VPA's lists are counted on its raw JSON before it is decoded, with
//! counting visitors (no allocation per element); a pod's are kept while its slim decoder reads it
//! ([`crate::slim_pod::decode_pod`]: past a budget the rest is only counted). Where the API server
//! has a limit of its own, Tailor's is the same; where it has none, the limit is far above any real workload
//! and the reason is given with the constant.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tailor_core::validation::{ErrorKind, FieldError};

/// Containers (and, separately, init containers) of a pod Tailor sizes. Kubernetes sets no count: a pod is
/// bounded only by etcd's 1.5 MiB object limit, about 60,000 minimal containers. Larger pods are admitted
/// unchanged.
pub const MAX_CONTAINERS: usize = 256;
/// Labels of a pod Tailor matches. Kubernetes sets no count (each key ≤ 317 bytes, value ≤ 63 bytes); a
/// selector is matched against them per VPA, so their number bounds the matching work.
pub const MAX_LABELS: usize = 1024;
/// Total size of a pod's annotation keys and values: the API server's own limit
/// (`TotalAnnotationSizeLimitB`, 256 KiB, in apimachinery's `ValidateAnnotations`).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// `spec.resourcePolicy.containerPolicies` of a VPA: one per container (see [`MAX_CONTAINERS`]) plus `*`.
/// Also the CRD's `maxItems`.
pub const MAX_CONTAINER_POLICIES: usize = tailor_crds::vpa::MAX_CONTAINER_POLICIES;
/// `controlledResources` of one container policy: only `cpu` and `memory` are valid. Also the CRD's `maxItems`.
pub const MAX_CONTROLLED_RESOURCES: usize = tailor_crds::vpa::MAX_CONTROLLED_RESOURCES;
/// `status.recommendation.containerRecommendations`: containers plus init containers. Also the CRD's
/// `maxItems`.
pub const MAX_CONTAINER_RECOMMENDATIONS: usize = tailor_crds::vpa::MAX_CONTAINER_RECOMMENDATIONS;

/// Why a pod is too large for Tailor to size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodTooLarge {
    /// More containers in one list than [`MAX_CONTAINERS`].
    #[error("{count} {list} (Tailor sizes pods of at most {MAX_CONTAINERS})")]
    Containers {
        /// `containers` or `initContainers`.
        list: &'static str,
        /// How many the pod has.
        count: usize,
    },
    /// More labels than [`MAX_LABELS`].
    #[error("{0} labels (Tailor matches pods of at most {MAX_LABELS})")]
    Labels(usize),
    /// Annotations larger than [`MAX_ANNOTATION_BYTES`].
    #[error("{0} bytes of annotations (the API server allows {MAX_ANNOTATION_BYTES})")]
    Annotations(usize),
}

/// The list-length errors of a VPA object (the same `Too many` errors the CRD's `maxItems` gives), checked on
/// its raw JSON. `Err` when the text is not shaped like a VPA.
pub fn check_vpa(raw: &RawValue) -> Result<Vec<FieldError>, serde_json::Error> {
    let shape: VpaShape = serde_json::from_str(raw.get())?;
    let mut errors = Vec::new();
    let mut too_many = |field: String, count: usize, max: usize| {
        if count > max {
            errors.push(FieldError {
                field,
                kind: ErrorKind::TooMany(count, max),
            });
        }
    };
    let policies = &shape.spec.resource_policy.container_policies;
    too_many(
        "spec.resourcePolicy.containerPolicies".into(),
        policies.count,
        MAX_CONTAINER_POLICIES,
    );
    if let Some((index, count)) = policies.longest_controlled {
        too_many(
            format!("spec.resourcePolicy.containerPolicies[{index}].controlledResources"),
            count,
            MAX_CONTROLLED_RESOURCES,
        );
    }
    too_many(
        "status.recommendation.containerRecommendations".into(),
        shape.status.recommendation.container_recommendations.0,
        MAX_CONTAINER_RECOMMENDATIONS,
    );
    Ok(errors)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VpaShape {
    spec: VpaSpecShape,
    status: VpaStatusShape,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct VpaSpecShape {
    resource_policy: PolicyShape,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PolicyShape {
    container_policies: Policies,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VpaStatusShape {
    recommendation: RecommendationShape,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RecommendationShape {
    container_recommendations: Count,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ContainerPolicyShape {
    controlled_resources: Count,
}

/// Number of elements of a list or entries of a map (0 for `null`); elements are skipped unread.
#[derive(Default)]
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list, a map or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_any(V)
    }
}

/// Total bytes of a string map's keys and values (0 for `null`).
#[derive(Default)]
struct Policies {
    count: usize,
    longest_controlled: Option<(usize, usize)>,
}

impl<'de> Deserialize<'de> for Policies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Policies;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of container policies or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Policies, E> {
                Ok(Policies::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Policies, A::Error> {
                let mut out = Policies::default();
                while let Some(p) = seq.next_element::<ContainerPolicyShape>()? {
                    let n = p.controlled_resources.0;
                    if out.longest_controlled.is_none_or(|(_, m)| n > m) {
                        out.longest_controlled = Some((out.count, n));
                    }
                    out.count += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn vpa_lists_over_budget_are_too_many() {
        let resources = vec![json!("cpu"); MAX_CONTROLLED_RESOURCES + 5];
        let vpa = json!({"spec": {"resourcePolicy": {"containerPolicies": [
            {"containerName": "a"}, {"containerName": "b", "controlledResources": resources}]}}});
        let errors = check_vpa(&raw(vpa)).unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            format!(
                "spec.resourcePolicy.containerPolicies[1].controlledResources: Too many: {}: must have at most {} items",
                MAX_CONTROLLED_RESOURCES + 5,
                MAX_CONTROLLED_RESOURCES
            )
        );
        let fine = json!({"spec": {"resourcePolicy": {"containerPolicies": [{"controlledResources": ["cpu"]}]}}});
        assert!(check_vpa(&raw(fine)).unwrap().is_empty());
    }
}
