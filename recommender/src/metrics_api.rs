//! Live usage from `metrics.k8s.io/v1beta1` PodMetrics (metrics-server): one CPU and one memory sample per
//! container per poll, stamped with the PodMetrics timestamp.
//!
//! The list is read into one buffer kept between polls and decoded item by item into a callback (the loop
//! feeds each pod's samples straight into the model), so no list of objects is ever built: at 50,000 pods
//! the poll costs the response text and nothing per item that outlives it.

use std::borrow::Cow;
use std::fmt;

use futures::AsyncBufReadExt as _;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::time::parse_rfc3339;
use tailor_engine::units::Nanos;

/// Errors reading the metrics API.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The list call failed.
    #[error("listing PodMetrics: {0}")]
    Api(#[from] kube::Error),
    /// The list request could not be built.
    #[error("listing PodMetrics: building the request: {0}")]
    Request(#[from] kube::core::request::Error),
    /// The response body could not be read.
    #[error("listing PodMetrics: reading the response: {0}")]
    Read(#[from] std::io::Error),
    /// The response is not a list of objects.
    #[error("listing PodMetrics: decoding the response: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Usage of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// CPU in millicores, if reported and readable.
    pub cpu_millicores: Option<i64>,
    /// Working-set memory in bytes, if reported and readable.
    pub memory_bytes: Option<i64>,
}

/// One pod's metrics snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMetrics {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Sample time (end of the measurement window for metrics-server).
    pub timestamp: Nanos,
    /// Containers (init containers are filtered by the loop, which knows the pod spec).
    pub containers: Vec<ContainerUsage>,
}

/// A container's usage as listed: strings borrowed from the response where they hold no escapes; usage
/// keys other than `cpu` and `memory` are skipped.
#[derive(Deserialize)]
struct RawContainer<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    usage: RawUsage<'a>,
}

#[derive(Deserialize, Default)]
struct RawUsage<'a> {
    #[serde(default, borrow)]
    cpu: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    memory: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct RawMeta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
}

/// One listed object as read: metadata typed (as for every object), the rest kept as unparsed JSON text
/// (borrowed from the response) so that one odd object is counted as unreadable instead of failing the
/// whole list.
#[derive(Deserialize)]
struct RawPodMetrics<'a> {
    #[serde(default, borrow)]
    metadata: RawMeta<'a>,
    #[serde(default, borrow)]
    timestamp: Option<&'a RawValue>,
    #[serde(default, borrow)]
    containers: Option<&'a RawValue>,
}

/// The amount of `resource` in a listed usage value, if it reads as a quantity.
fn usage_amount(resource: &str, text: Option<Cow<'_, str>>) -> Option<i64> {
    let q = Quantity(text?.into_owned());
    tailor_crds::quantity::amount(resource, &q).ok()
}

fn containers(raw: Vec<RawContainer<'_>>) -> Vec<ContainerUsage> {
    raw.into_iter()
        .map(|c| ContainerUsage {
            cpu_millicores: usage_amount("cpu", c.usage.cpu),
            memory_bytes: usage_amount("memory", c.usage.memory),
            name: c.name.into_owned(),
        })
        .collect()
}

impl RawPodMetrics<'_> {
    fn into_metrics(self) -> Option<PodMetrics> {
        let name = self.metadata.name?.into_owned();
        let timestamp = serde_json::from_str::<Cow<'_, str>>(self.timestamp?.get()).ok()?;
        let timestamp = parse_rfc3339(&timestamp)?;
        let raw: Vec<RawContainer<'_>> = self
            .containers
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or_default();
        Some(PodMetrics {
            namespace: self
                .metadata
                .namespace
                .map(Cow::into_owned)
                .unwrap_or_default(),
            name,
            timestamp,
            containers: containers(raw),
        })
    }
}

/// Decodes a `PodMetricsList` body, handing each readable object to `each` as soon as it is read;
/// returns how many objects were readable and how many were not.
pub fn decode_list(
    body: &[u8],
    each: &mut dyn FnMut(PodMetrics),
) -> Result<(usize, usize), serde_json::Error> {
    let mut counts = (0, 0);
    let mut de = serde_json::Deserializer::from_slice(body);
    ListSeed {
        each,
        counts: &mut counts,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(counts)
}

/// The list object: `items` streamed, every other field skipped.
struct ListSeed<'a> {
    each: &'a mut dyn FnMut(PodMetrics),
    counts: &'a mut (usize, usize),
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a PodMetricsList")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "items" {
                map.next_value_seed(ItemsSeed {
                    each: &mut *self.each,
                    counts: &mut *self.counts,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct ItemsSeed<'a> {
    each: &'a mut dyn FnMut(PodMetrics),
    counts: &'a mut (usize, usize),
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of PodMetrics")
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<RawPodMetrics>()? {
            match item.into_metrics() {
                Some(pm) => {
                    self.counts.0 += 1;
                    (self.each)(pm);
                }
                None => self.counts.1 += 1,
            }
        }
        Ok(())
    }
}

/// The `pods` resource of `metrics.k8s.io/v1beta1`.
pub fn pod_metrics_resource() -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    }
}

/// Lists PodMetrics in one namespace or all of them, into a buffer reused from poll to poll.
pub struct MetricsApiSource {
    client: Client,
    url: String,
    buffer: Vec<u8>,
}

impl MetricsApiSource {
    /// A source over `client`; `namespace` empty means all namespaces.
    pub fn new(client: Client, namespace: &str) -> Self {
        let ar = pod_metrics_resource();
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(client.clone(), &ar)
        } else {
            Api::namespaced_with(client.clone(), namespace, &ar)
        };
        MetricsApiSource {
            url: api.resource_url().to_string(),
            client,
            buffer: Vec::new(),
        }
    }

    /// Fetches the list into the buffer (the first phase of a poll; [`MetricsApiSource::decode`] follows).
    pub async fn fetch(&mut self) -> Result<(), SourceError> {
        let req = kube::core::Request::new(&self.url).list(&ListParams::default())?;
        let mut body = self.client.request_stream(req).await?;
        self.buffer.clear();
        // Chunk by chunk rather than `read_to_end`, which zeroes the buffer's whole spare capacity again
        // each time the body is not ready yet: with a buffer kept at the size of the last list that was
        // about 5% of the loop's CPU at 50,000 pods (BENCHMARKS.md, issue 14).
        loop {
            let chunk = body.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(());
            }
            let n = chunk.len();
            self.buffer.extend_from_slice(chunk);
            body.consume_unpin(n);
        }
    }

    /// Decodes the fetched list, handing each pod's snapshot to `each`; returns how many objects could
    /// not be read. The buffer keeps its capacity for the next poll.
    pub fn decode(&mut self, each: &mut dyn FnMut(PodMetrics)) -> Result<usize, SourceError> {
        let result = decode_list(&self.buffer, each);
        self.buffer.clear();
        Ok(result?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: serde_json::Value) -> (Vec<PodMetrics>, usize, usize) {
        let mut out = Vec::new();
        let text = body.to_string();
        let (ok, bad) = decode_list(text.as_bytes(), &mut |p| out.push(p)).unwrap();
        (out, ok, bad)
    }

    #[test]
    fn decodes_metrics_server_objects_one_by_one() {
        let (pods, ok, bad) = decode(serde_json::json!({
            "kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"resourceVersion": "1"},
            "items": [
                {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
                 "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
                 "timestamp": "2023-11-14T22:13:20Z", "window": "15.003s",
                 "containers": [
                    {"name": "app", "usage": {"cpu": "250123456n", "memory": "100Mi"}},
                    {"name": "side", "usage": {"cpu": "bad"}}
                 ]},
                {"metadata": {"name": "no-time", "namespace": "default"}, "containers": []},
                {"metadata": {"namespace": "default"}, "timestamp": "2023-11-14T22:13:20Z"},
                {"metadata": {"name": "odd", "namespace": "default"}, "timestamp": 5},
                {"metadata": {"name": "odd-containers", "namespace": "x"},
                 "timestamp": "2023-11-14T22:13:20Z", "containers": {"not": "a list"}}
            ]
        }));
        assert_eq!((ok, bad), (2, 3));
        let p = &pods[0];
        assert_eq!(p.name, "web-1");
        assert_eq!(p.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(p.containers[0].cpu_millicores, Some(251));
        assert_eq!(p.containers[0].memory_bytes, Some(104_857_600));
        assert_eq!(p.containers[1].cpu_millicores, None);
        assert!(
            pods[1].containers.is_empty(),
            "unreadable containers read as none"
        );
    }

    #[test]
    fn escaped_strings_are_read_as_well_as_borrowed_ones() {
        let body = br#"{"items": [{"metadata": {"name": "web\u002d1", "namespace": "d\u0065fault"},
            "timestamp": "2023-11-14T22:13:20\u005a",
            "containers": [{"name": "\u0061pp", "usage": {"cpu": "25\u0030m", "memory": "1Ki"}}]}]}"#;
        let mut pods = Vec::new();
        assert_eq!(decode_list(body, &mut |p| pods.push(p)).unwrap(), (1, 0));
        let p = &pods[0];
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("default", "web-1")
        );
        assert_eq!(p.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(p.containers[0].name, "app");
        assert_eq!(p.containers[0].cpu_millicores, Some(250));
        assert_eq!(p.containers[0].memory_bytes, Some(1024));
    }

    #[test]
    fn a_list_without_items_is_empty_and_a_broken_body_is_an_error() {
        assert_eq!(
            decode(serde_json::json!({"kind": "PodMetricsList", "items": null})).1,
            0
        );
        assert_eq!(decode(serde_json::json!({"kind": "PodMetricsList"})).1, 0);
        assert!(decode_list(b"{\"items\": [", &mut |_| {}).is_err());
        assert!(decode_list(b"[]", &mut |_| {}).is_err());
    }
}
