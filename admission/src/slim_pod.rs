//! The pod as a review reads it: only the fields that matching and sizing look at are decoded, straight from
//! the review's text into a sparse [`Pod`]; everything else (env, probes, volumes, `managedFields`, …) is
//! skipped without building anything. A pod as the API server sends it is mostly such fields: decoding all of
//! it into k8s-openapi's types (and `managedFields` into a JSON tree) was most of a review's CPU.
//!
//! Read (everything else is left at its default):
//! - `metadata`: `name`, `generateName`, `namespace`, `labels`, `annotations`, `ownerReferences`;
//! - `spec`: `containers` and `initContainers` (each `name`, `resources`, `restartPolicy`), `resources`, and
//!   for quota fit `overhead`, `priorityClassName`, `activeDeadlineSeconds`;
//! - `status`: `containerStatuses` and `initContainerStatuses` (each `name`, `resources`).
//!
//! As k8s-openapi's decoder, a missing or `null` field takes its default; a field of the wrong type is an error.
//! A malformed field that sizing does not read is no longer an error: the pod is sized as any other.
//!
//! The budgets of [`crate::review_budgets`] are kept in the same pass: at most [`MAX_CONTAINERS`] containers per list,
//! [`MAX_LABELS`] labels and [`MAX_ANNOTATION_BYTES`] of annotations are built; past a budget the rest is only
//! counted (for the error), so neither the memory nor the work of a review follows what a client sends.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::review_budgets::{MAX_ANNOTATION_BYTES, MAX_CONTAINERS, MAX_LABELS, PodTooLarge};

/// Why a pod's object was not sized.
#[derive(Debug, thiserror::Error)]
pub enum PodDecodeError {
    /// Over one of Tailor's budgets.
    #[error("pod not sized: {0}")]
    TooLarge(#[from] PodTooLarge),
    /// Not JSON shaped like a pod.
    #[error("cannot decode pod: {0}")]
    Json(#[from] serde_json::Error),
}

/// Decodes the fields of a pod that a review reads (see the module's documentation), within the budgets.
pub fn decode_pod(text: &str) -> Result<Pod, PodDecodeError> {
    let DecodedPod(pod) = serde_json::from_str(text)?;
    Ok(*pod?)
}

/// A pod decoded slim from any deserializer, or the budget it exceeds: what [`decode_pod`] gives, for a decoder
/// that meets the pod inside a larger document (the review's one pass over its body, [`crate::review::decode_one_pass`]).
/// Past a budget the decoder only counts, so exceeding one is not a decoding error. Boxed: a `Pod` is kilobytes,
/// and the review moves its decoded parts several times on their way to the handler.
pub struct DecodedPod(pub Result<Box<Pod>, PodTooLarge>);

impl<'de> Deserialize<'de> for DecodedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pod = SlimPod::deserialize(d)?;
        Ok(DecodedPod(pod.check().map(|()| Box::new(Pod::from(pod)))))
    }
}

#[derive(Deserialize)]
struct SlimPod {
    #[serde(default)]
    metadata: Option<SlimMeta>,
    #[serde(default)]
    spec: Option<SlimSpec>,
    #[serde(default)]
    status: Option<SlimStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<Labels>,
    #[serde(default)]
    annotations: Option<Annotations>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(default)]
    containers: Option<Containers>,
    #[serde(default)]
    init_containers: Option<Containers>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    // Read by quota fit (`tailor_core::quota`): the pod's charge and its quota scopes.
    #[serde(default)]
    overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    priority_class_name: Option<String>,
    #[serde(default)]
    active_deadline_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimContainer {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimStatus {
    #[serde(default)]
    container_statuses: Option<Vec<SlimContainerStatus>>,
    #[serde(default)]
    init_container_statuses: Option<Vec<SlimContainerStatus>>,
}

#[derive(Deserialize)]
struct SlimContainerStatus {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

impl From<SlimContainer> for Container {
    fn from(c: SlimContainer) -> Self {
        Container {
            name: c.name.unwrap_or_default(),
            resources: c.resources,
            restart_policy: c.restart_policy,
            ..Container::default()
        }
    }
}

impl From<SlimContainerStatus> for ContainerStatus {
    fn from(s: SlimContainerStatus) -> Self {
        ContainerStatus {
            name: s.name.unwrap_or_default(),
            resources: s.resources,
            ..ContainerStatus::default()
        }
    }
}

fn all<S, T: From<S>>(list: Option<Vec<S>>) -> Option<Vec<T>> {
    list.map(|l| l.into_iter().map(T::from).collect())
}

impl From<SlimPod> for Pod {
    fn from(pod: SlimPod) -> Self {
        let metadata = pod
            .metadata
            .map(|m| ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                labels: m.labels.map(|l| l.map),
                annotations: m.annotations.map(|a| a.map),
                owner_references: m.owner_references,
                ..ObjectMeta::default()
            })
            .unwrap_or_default();
        let spec = pod.spec.map(|s| PodSpec {
            containers: all(s.containers.map(|c| c.items)).unwrap_or_default(),
            init_containers: all(s.init_containers.map(|c| c.items)),
            resources: s.resources,
            overhead: s.overhead,
            priority_class_name: s.priority_class_name,
            active_deadline_seconds: s.active_deadline_seconds,
            ..PodSpec::default()
        });
        let status = pod.status.map(|s| PodStatus {
            container_statuses: all(s.container_statuses),
            init_container_statuses: all(s.init_container_statuses),
            ..PodStatus::default()
        });
        Pod {
            metadata,
            spec,
            status,
        }
    }
}

impl SlimPod {
    /// The budgets, in the order they are reported.
    fn check(&self) -> Result<(), PodTooLarge> {
        let spec = self.spec.as_ref();
        let count = |c: Option<&Containers>| c.map_or(0, |c| c.count);
        for (list, count) in [
            (
                "containers",
                count(spec.and_then(|s| s.containers.as_ref())),
            ),
            (
                "initContainers",
                count(spec.and_then(|s| s.init_containers.as_ref())),
            ),
        ] {
            if count > MAX_CONTAINERS {
                return Err(PodTooLarge::Containers { list, count });
            }
        }
        let meta = self.metadata.as_ref();
        let labels = meta.and_then(|m| m.labels.as_ref()).map_or(0, |l| l.count);
        if labels > MAX_LABELS {
            return Err(PodTooLarge::Labels(labels));
        }
        let bytes = meta
            .and_then(|m| m.annotations.as_ref())
            .map_or(0, |a| a.bytes);
        if bytes > MAX_ANNOTATION_BYTES {
            return Err(PodTooLarge::Annotations(bytes));
        }
        Ok(())
    }
}

/// A container list: at most [`MAX_CONTAINERS`] decoded, all counted.
struct Containers {
    items: Vec<SlimContainer>,
    count: usize,
}

impl<'de> Deserialize<'de> for Containers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Containers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of containers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Containers, A::Error> {
                let mut out = Containers {
                    items: Vec::new(),
                    count: 0,
                };
                while out.count < MAX_CONTAINERS {
                    match seq.next_element()? {
                        Some(c) => out.items.push(c),
                        None => return Ok(out),
                    }
                    out.count += 1;
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    out.count += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}

/// Labels: at most [`MAX_LABELS`] decoded, all counted.
struct Labels {
    map: BTreeMap<String, String>,
    count: usize,
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                let mut out = Labels {
                    map: BTreeMap::new(),
                    count: 0,
                };
                while out.count < MAX_LABELS {
                    match map.next_entry::<String, String>()? {
                        Some((k, v)) => drop(out.map.insert(k, v)),
                        None => return Ok(out),
                    }
                    out.count += 1;
                }
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    out.count += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Annotations: kept while their keys and values total at most [`MAX_ANNOTATION_BYTES`], all measured.
struct Annotations {
    map: BTreeMap<String, String>,
    bytes: usize,
}

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Annotations, A::Error> {
                let mut out = Annotations {
                    map: BTreeMap::new(),
                    bytes: 0,
                };
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.bytes = out.bytes.saturating_add(k.len()).saturating_add(v.len());
                    if out.bytes <= MAX_ANNOTATION_BYTES {
                        out.map.insert(k, v);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(v: serde_json::Value) -> Result<Pod, PodDecodeError> {
        decode_pod(&v.to_string())
    }

    fn too_large(v: serde_json::Value) -> Option<PodTooLarge> {
        match decode(v) {
            Err(PodDecodeError::TooLarge(e)) => Some(e),
            _ => None,
        }
    }

    #[test]
    fn pods_within_budget_pass() {
        let pod = json!({"metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "app"}], "initContainers": null}});
        assert!(decode(pod).is_ok());
        assert!(decode(json!({})).is_ok());
    }

    #[test]
    fn pods_over_budget_are_named() {
        let containers: Vec<_> = (0..=MAX_CONTAINERS)
            .map(|i| json!({"name": i.to_string()}))
            .collect();
        let pod = json!({"spec": {"initContainers": containers}});
        assert_eq!(
            too_large(pod),
            Some(PodTooLarge::Containers {
                list: "initContainers",
                count: MAX_CONTAINERS + 1
            })
        );
        let big = "x".repeat(MAX_ANNOTATION_BYTES);
        let pod = json!({"metadata": {"annotations": {"k": big}}});
        assert_eq!(
            too_large(pod),
            Some(PodTooLarge::Annotations(MAX_ANNOTATION_BYTES + 1))
        );
        let labels: serde_json::Map<_, _> = (0..=MAX_LABELS)
            .map(|i| (i.to_string(), json!("v")))
            .collect();
        let pod = json!({"metadata": {"labels": labels}});
        assert_eq!(too_large(pod), Some(PodTooLarge::Labels(MAX_LABELS + 1)));
        assert!(matches!(
            decode(json!({"spec": {"containers": 3}})),
            Err(PodDecodeError::Json(_))
        ));
    }

    #[test]
    fn what_quota_fit_reads_is_kept() {
        let text = json!({"spec": {"containers": [{"name": "app"}], "priorityClassName": "high",
            "activeDeadlineSeconds": 600, "overhead": {"cpu": "250m"}, "nodeName": "n1"}})
        .to_string();
        let spec = decode_pod(&text).unwrap().spec.unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
        assert_eq!(spec.active_deadline_seconds, Some(600));
        assert_eq!(
            spec.overhead.unwrap().get("cpu"),
            Some(&Quantity("250m".into()))
        );
        assert_eq!(spec.node_name, None, "not read");
    }

    #[test]
    fn at_most_the_budget_is_built() {
        let containers: Vec<_> = (0..MAX_CONTAINERS + 10)
            .map(|i| json!({"name": i.to_string()}))
            .collect();
        let text = json!({"spec": {"containers": containers}}).to_string();
        let pod: SlimPod = serde_json::from_str(&text).unwrap();
        let list = pod.spec.and_then(|s| s.containers).unwrap();
        assert_eq!(
            (list.items.len(), list.count),
            (MAX_CONTAINERS, MAX_CONTAINERS + 10)
        );
    }
}
