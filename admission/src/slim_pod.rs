//! The pod as a review reads it: only the fields that matching and sizing look at are read from the review's
//! text; everything else (env, probes, volumes, `managedFields`, …) is skipped without building anything. A pod
//! as the API server sends it is mostly such fields: decoding all of it into k8s-openapi's types (and
//! `managedFields` into a JSON tree) was most of a review's CPU.
//!
//! Read in two steps. The body's pass decodes the metadata that matching reads and keeps the fields of `spec`
//! and `status` that sizing reads as their text ([`PodText`]), which is also the patch memo's key: the pods a
//! controller creates from one template are recognised as equal without being decoded, and only a pod that is
//! sized has those fields decoded ([`PodText::pod`]). The annotations are kept as text too: the pass
//! measures them and notes whether Tailor's or upstream's updates annotation is among them (all the memo's key
//! needs), and they are decoded with the spec.
//!
//! Read (everything else is left at its default):
//! - `metadata`: `name`, `generateName`, `namespace`, `labels`, `annotations`, `ownerReferences`;
//! - `spec`: `containers` and `initContainers` (each `name`, `resources`, `restartPolicy`), `resources`, and
//!   for quota fit `overhead`, `priorityClassName`, `activeDeadlineSeconds`;
//! - `status`: `containerStatuses` and `initContainerStatuses` (each `name`, `resources`).
//!
//! As k8s-openapi's decoder, a missing or `null` field takes its default; a field of the wrong type is an error
//! (for a field of `spec` and `status`, when the pod is sized). A malformed field that sizing does not read is
//! no error: the pod is sized as any other.
//!
//! The budgets of [`crate::review_budgets`] are kept in the same pass: at most [`MAX_CONTAINERS`] containers per list,
//! [`MAX_LABELS`] labels and [`MAX_ANNOTATION_BYTES`] of annotations are built; past a budget the rest is only
//! counted (for the error), so neither the memory nor the work of a review follows what a client sends.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use tailor_core::sizing::{UPDATES_ANNOTATION, UPSTREAM_UPDATES_ANNOTATION};
use tailor_core::target::LabelLookup;

use crate::body_text::Text;
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
    Ok(read_pod(text)?.into_pod()?)
}

/// Reads a pod as the review's pass does: its metadata decoded, its spec's and status's sizing fields kept as
/// `text`'s slices, within the budgets.
pub fn read_pod(text: &str) -> Result<Box<SlimPod<'_>>, PodDecodeError> {
    let DecodedPod(pod) = serde_json::from_str(text)?;
    Ok(pod?)
}

/// A pod read slim from any deserializer, or the budget it exceeds: what [`decode_pod`] reads, for a decoder
/// that meets the pod inside a larger document (the review's one pass over its body, [`crate::review::decode_one_pass`]).
/// Past a budget the decoder only counts, so exceeding one is not a decoding error. Boxed: the review moves
/// its decoded parts several times on their way to the handler.
pub struct DecodedPod<'a>(pub Result<Box<SlimPod<'a>>, PodTooLarge>);

impl<'de: 'a, 'a> Deserialize<'de> for DecodedPod<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pod = WirePod::deserialize(d)?;
        Ok(DecodedPod(pod.check().map(|()| Box::new(pod.into()))))
    }
}

/// A pod as the review's pass read it: its metadata decoded, the sizing fields of its spec and status as text.
/// No [`Pod`] is built until the pod is sized ([`PodText::pod`]): k8s-openapi's `Pod` is over 2 KB, mostly
/// the spec's fields the review never reads, and a pod answered from the patch memo needs none of it.
#[derive(Debug)]
pub struct SlimPod<'a> {
    /// The pod's metadata, without its labels and annotations (kept in `text` until the pod is sized).
    pub meta: ObjectMeta,
    /// The fields of `spec` and `status` that sizing reads, as sent.
    pub text: PodText<'a>,
}

impl SlimPod<'_> {
    /// The whole slim pod, its spec and status decoded.
    pub fn into_pod(self) -> Result<Pod, serde_json::Error> {
        self.text.pod(self.meta)
    }
}

/// The fields of a pod's `spec` and `status` that sizing reads, as the review's text (see the module's
/// documentation): decoded only for a pod that is sized, and compared as they are for the patch memo.
#[derive(Debug, Default)]
pub struct PodText<'a> {
    spec: Option<WireSpec<'a>>,
    status: Option<WireStatus<'a>>,
    annotations: Option<Annotations<'a>>,
    labels: Option<Labels<'a>>,
}

/// Appends `bytes` to a key with their length first, so that no two different sequences of parts write the
/// same bytes.
pub(crate) fn key_bytes(key: &mut Vec<u8>, bytes: &[u8]) {
    key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    key.extend_from_slice(bytes);
}

/// Appends `raw` to a key: absent, or its text ([`key_bytes`]).
fn key_field(key: &mut Vec<u8>, raw: Option<&RawValue>) {
    match raw {
        None => key.push(0),
        Some(raw) => {
            key.push(1);
            key_bytes(key, raw.get().as_bytes());
        }
    }
}

/// Appends a list's length to a key (`u64::MAX` for no list).
fn key_len(key: &mut Vec<u8>, len: Option<usize>) {
    let len = len.map_or(u64::MAX, |n| n as u64);
    key.extend_from_slice(&len.to_le_bytes());
}

/// Decodes one kept field (`None`: absent or `null`).
fn decoded<T: DeserializeOwned>(raw: Option<&RawValue>) -> Result<Option<T>, serde_json::Error> {
    raw.map(|raw| serde_json::from_str(raw.get())).transpose()
}

impl PodText<'_> {
    /// Appends the kept fields to `key`, each with its place: two pods write the same bytes exactly when their
    /// kept fields are the same text, and so decode to the same spec and status.
    pub fn write_key(&self, key: &mut Vec<u8>) {
        match &self.spec {
            None => key.push(0),
            Some(spec) => {
                key.push(1);
                for list in [&spec.containers, &spec.init_containers] {
                    key_len(key, list.as_ref().map(|l| l.items.len()));
                    for c in list.iter().flat_map(|l| &l.items) {
                        key_field(key, c.name);
                        key_field(key, c.resources);
                        key_field(key, c.restart_policy);
                    }
                }
                for raw in [
                    spec.resources,
                    spec.overhead,
                    spec.priority_class_name,
                    spec.active_deadline_seconds,
                ] {
                    key_field(key, raw);
                }
            }
        }
        match &self.status {
            None => key.push(0),
            Some(status) => {
                key.push(1);
                for list in [&status.container_statuses, &status.init_container_statuses] {
                    key_len(key, list.as_ref().map(Vec::len));
                    for s in list.iter().flatten() {
                        key_field(key, s.name);
                        key_field(key, s.resources);
                    }
                }
            }
        }
    }

    /// The pod with `metadata` and the kept fields decoded: its `spec`, `status`, labels and annotations
    /// (each `None` when the pod had none).
    pub fn pod(&self, mut metadata: ObjectMeta) -> Result<Pod, serde_json::Error> {
        metadata.annotations = decoded(self.annotations.as_ref().map(|a| a.text))?;
        metadata.labels = self.labels.as_ref().map(Labels::to_map);
        Ok(Pod {
            metadata,
            spec: self.spec.as_ref().map(WireSpec::decode).transpose()?,
            status: self.status.as_ref().map(WireStatus::decode).transpose()?,
        })
    }

    /// Whether the pod has annotations (`metadata.annotations` present and not `null`).
    pub fn has_annotations(&self) -> bool {
        self.annotations.is_some()
    }

    /// Whether the pod carries Tailor's updates annotation, and whether it carries upstream's.
    pub fn updates_annotations(&self) -> (bool, bool) {
        self.annotations
            .as_ref()
            .map_or((false, false), |a| (a.tailor, a.upstream))
    }
}

#[derive(Deserialize)]
struct WirePod<'a> {
    #[serde(default, borrow)]
    metadata: Option<SlimMeta<'a>>,
    #[serde(default, borrow)]
    spec: Option<WireSpec<'a>>,
    #[serde(default, borrow)]
    status: Option<WireStatus<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default, borrow)]
    labels: Option<Labels<'a>>,
    #[serde(default, borrow)]
    annotations: Option<Annotations<'a>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec<'a> {
    #[serde(default, borrow)]
    containers: Option<Containers<'a>>,
    #[serde(default, borrow)]
    init_containers: Option<Containers<'a>>,
    #[serde(default, borrow)]
    resources: Option<&'a RawValue>,
    // Read by quota fit (`tailor_core::quota`): the pod's charge and its quota scopes.
    #[serde(default, borrow)]
    overhead: Option<&'a RawValue>,
    #[serde(default, borrow)]
    priority_class_name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    active_deadline_seconds: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer<'a> {
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    resources: Option<&'a RawValue>,
    #[serde(default, borrow)]
    restart_policy: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus<'a> {
    #[serde(default, borrow)]
    container_statuses: Option<Vec<WireContainerStatus<'a>>>,
    #[serde(default, borrow)]
    init_container_statuses: Option<Vec<WireContainerStatus<'a>>>,
}

#[derive(Debug, Deserialize)]
struct WireContainerStatus<'a> {
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    resources: Option<&'a RawValue>,
}

impl WireContainer<'_> {
    fn decode(&self) -> Result<Container, serde_json::Error> {
        Ok(Container {
            name: decoded(self.name)?.unwrap_or_default(),
            resources: decoded(self.resources)?,
            restart_policy: decoded(self.restart_policy)?,
            ..Container::default()
        })
    }
}

impl WireContainerStatus<'_> {
    fn decode(&self) -> Result<ContainerStatus, serde_json::Error> {
        Ok(ContainerStatus {
            name: decoded(self.name)?.unwrap_or_default(),
            resources: decoded(self.resources)?,
            ..ContainerStatus::default()
        })
    }
}

impl WireSpec<'_> {
    fn decode(&self) -> Result<PodSpec, serde_json::Error> {
        let list = |l: &Option<Containers<'_>>| {
            l.as_ref()
                .map(|l| l.items.iter().map(WireContainer::decode).collect())
                .transpose()
        };
        Ok(PodSpec {
            containers: list(&self.containers)?.unwrap_or_default(),
            init_containers: list(&self.init_containers)?,
            resources: decoded(self.resources)?,
            overhead: decoded(self.overhead)?,
            priority_class_name: decoded(self.priority_class_name)?,
            active_deadline_seconds: decoded(self.active_deadline_seconds)?,
            ..PodSpec::default()
        })
    }
}

impl WireStatus<'_> {
    fn decode(&self) -> Result<PodStatus, serde_json::Error> {
        let list = |l: &Option<Vec<WireContainerStatus<'_>>>| {
            l.as_ref()
                .map(|l| l.iter().map(WireContainerStatus::decode).collect())
                .transpose()
        };
        Ok(PodStatus {
            container_statuses: list(&self.container_statuses)?,
            init_container_statuses: list(&self.init_container_statuses)?,
            ..PodStatus::default()
        })
    }
}

impl<'a> From<WirePod<'a>> for SlimPod<'a> {
    fn from(pod: WirePod<'a>) -> Self {
        let (mut annotations, mut labels) = (None, None);
        let metadata = pod
            .metadata
            .map(|m| {
                annotations = m.annotations;
                labels = m.labels;
                ObjectMeta {
                    name: m.name,
                    generate_name: m.generate_name,
                    namespace: m.namespace,
                    owner_references: m.owner_references,
                    ..ObjectMeta::default()
                }
            })
            .unwrap_or_default();
        SlimPod {
            meta: metadata,
            text: PodText {
                spec: pod.spec,
                status: pod.status,
                annotations,
                labels,
            },
        }
    }
}

impl WirePod<'_> {
    /// The budgets, in the order they are reported.
    fn check(&self) -> Result<(), PodTooLarge> {
        let spec = self.spec.as_ref();
        let count = |c: Option<&Containers<'_>>| c.map_or(0, |c| c.count);
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

/// A container list: at most [`MAX_CONTAINERS`] kept, all counted.
#[derive(Debug)]
struct Containers<'a> {
    items: Vec<WireContainer<'a>>,
    count: usize,
}

impl<'de: 'a, 'a> Deserialize<'de> for Containers<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Containers<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of containers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Containers<'a>, A::Error> {
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
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

/// Labels: at most [`MAX_LABELS`] kept as the body's strings, all counted. Matching looks them up as they
/// are; they are copied into a map only for a pod that is sized.
#[derive(Debug)]
struct Labels<'a> {
    /// In the order sent, or, past [`SORTED_FROM`] labels, sorted by key (stably: a key sent twice keeps its
    /// values in the order sent).
    items: Vec<(Text<'a>, Text<'a>)>,
    count: usize,
}

/// From this many labels on, they are sorted once and looked up by halving: a selector's keys are each looked
/// up, and a scan of [`MAX_LABELS`] per key would let one pod cost a review many times the usual.
const SORTED_FROM: usize = 16;

impl Labels<'_> {
    /// The labels as a decoded map holds them.
    fn to_map(&self) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        for (k, v) in &self.items {
            map.insert(k.0.to_string(), v.0.to_string());
        }
        map
    }
}

impl LabelLookup for Labels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        // A key sent twice holds its last value, as in a decoded map.
        let (k, value) = if self.items.len() >= SORTED_FROM {
            let after = self.items.partition_point(|(k, _)| *k.0 <= *key);
            self.items.get(after.checked_sub(1)?)?
        } else {
            self.items.iter().rev().find(|(k, _)| k.0 == key)?
        };
        (k.0 == key).then_some(&*value.0)
    }
}

impl LabelLookup for PodText<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.label(key)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Labels<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels<'a>, A::Error> {
                let mut out = Labels {
                    items: Vec::new(),
                    count: 0,
                };
                let mut ended = false;
                while out.count < MAX_LABELS && !ended {
                    match map.next_entry::<Text<'a>, Text<'a>>()? {
                        Some(entry) => {
                            out.items.push(entry);
                            out.count += 1;
                        }
                        None => ended = true,
                    }
                }
                while !ended && map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    out.count += 1;
                }
                if out.items.len() >= SORTED_FROM {
                    out.items.sort_by(|(a, _), (b, _)| a.0.cmp(&b.0));
                }
                Ok(out)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// Annotations as sent: measured (their keys and values, for [`MAX_ANNOTATION_BYTES`]) and searched for the
/// updates annotations in the pass, without building a map; decoded only for a pod that is sized.
#[derive(Debug)]
struct Annotations<'a> {
    text: &'a RawValue,
    bytes: usize,
    /// Whether Tailor's updates annotation is among them.
    tailor: bool,
    /// Whether upstream's is.
    upstream: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <&'a RawValue>::deserialize(d)?;
        let Measured {
            bytes,
            tailor,
            upstream,
        } = serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?;
        Ok(Annotations {
            text,
            bytes,
            tailor,
            upstream,
        })
    }
}

/// What the pass learns of the annotations' text: a map of strings to strings, or an error.
struct Measured {
    bytes: usize,
    tailor: bool,
    upstream: bool,
}

impl<'de> Deserialize<'de> for Measured {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Measured;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Measured, A::Error> {
                let mut out = Measured {
                    bytes: 0,
                    tailor: false,
                    upstream: false,
                };
                while let Some((k, v)) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    out.bytes = out
                        .bytes
                        .saturating_add(k.0.len())
                        .saturating_add(v.0.len());
                    out.tailor |= k.0 == UPDATES_ANNOTATION;
                    out.upstream |= k.0 == UPSTREAM_UPDATES_ANNOTATION;
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
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
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
    fn annotations_are_decoded_with_the_spec() {
        let text =
            json!({"metadata": {"annotations": {"a": "b", UPDATES_ANNOTATION: "x"}}, "spec": {}})
                .to_string();
        let slim = read_pod(&text).unwrap();
        assert_eq!(slim.meta.annotations, None, "not built in the pass");
        assert!(slim.text.has_annotations());
        assert_eq!(slim.text.updates_annotations(), (true, false));
        let annotations = slim.into_pod().unwrap().metadata.annotations.unwrap();
        assert_eq!(annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(annotations.len(), 2);
        // A key written with escapes is the same key.
        let escaped = r#"{"metadata":{"annotations":{"vpa\u0055pdates":"x"}}}"#;
        assert_eq!(
            read_pod(escaped).unwrap().text.updates_annotations(),
            (false, true)
        );
        // `null` is none; anything but a map of strings is refused in the pass, as the map's decoder does.
        let none = read_pod(r#"{"metadata":{"annotations":null}}"#).unwrap();
        assert!(!none.text.has_annotations());
        assert_eq!(none.into_pod().unwrap().metadata.annotations, None);
        for bad in [json!({"a": 1}), json!([]), json!("a")] {
            let pod = json!({"metadata": {"annotations": bad}});
            assert!(matches!(decode(pod), Err(PodDecodeError::Json(_))), "{bad}");
        }
    }

    /// Matching reads the labels as sent, as the decoded map holds them: a key sent twice has its last value,
    /// and a key or value written with escapes is the same string.
    #[test]
    fn labels_are_looked_up_as_the_map_holds_them() {
        let text =
            r#"{"metadata":{"labels":{"app":"a","tier":"f\u0065","app":"b","\u0061pp2":"c"}}}"#;
        let slim = read_pod(text).unwrap();
        assert_eq!(slim.meta.labels, None, "not built in the pass");
        let map = decode_pod(text).unwrap().metadata.labels.unwrap();
        for key in ["app", "tier", "app2", "missing"] {
            assert_eq!(
                slim.text.label(key),
                map.get(key).map(String::as_str),
                "{key}"
            );
        }
        assert_eq!(slim.text.label("app"), Some("b"));
        assert_eq!(map.len(), 3);
        // Many labels are looked up by halving, with the same answers.
        let mut many: Vec<String> = (0..40)
            .map(|i| format!(r#""k{}":"v{i}""#, 39 - i))
            .collect();
        many.push(r#""k7":"again""#.to_owned());
        many.push(r#""k\u0030":"escaped""#.to_owned());
        let text = format!(r#"{{"metadata":{{"labels":{{{}}}}}}}"#, many.join(","));
        let slim = read_pod(&text).unwrap();
        let map = decode_pod(&text).unwrap().metadata.labels.unwrap();
        for key in ["k0", "k7", "k39", "k4", "k40", "", "a", "z"] {
            assert_eq!(
                slim.text.label(key),
                map.get(key).map(String::as_str),
                "{key}"
            );
        }
        assert_eq!(slim.text.label("k7"), Some("again"));
        assert_eq!(slim.text.label("k0"), Some("escaped"));
        assert_eq!(slim.into_pod().unwrap().metadata.labels, Some(map));
        let none = read_pod(r#"{"metadata":{"labels":null}}"#).unwrap();
        assert_eq!(none.text.label("app"), None);
        assert_eq!(none.into_pod().unwrap().metadata.labels, None);
        for bad in [json!({"a": 1}), json!([]), json!("a")] {
            let pod = json!({"metadata": {"labels": bad}});
            assert!(matches!(decode(pod), Err(PodDecodeError::Json(_))), "{bad}");
        }
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
        let pod: WirePod<'_> = serde_json::from_str(&text).unwrap();
        let list = pod.spec.and_then(|s| s.containers).unwrap();
        assert_eq!(
            (list.items.len(), list.count),
            (MAX_CONTAINERS, MAX_CONTAINERS + 10)
        );
    }
}
