//! Live usage from `metrics.k8s.io/v1beta1` PodMetrics (metrics-server): one CPU and one memory sample per
//! container per poll, stamped with the PodMetrics timestamp.

use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};
use serde::Deserialize;

use crate::time::parse_rfc3339;
use tailor_engine::units::Nanos;

/// Errors reading the metrics API.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The list call failed.
    #[error("listing PodMetrics: {0}")]
    Api(#[from] kube::Error),
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

#[derive(Deserialize)]
struct RawContainer {
    name: String,
    #[serde(default)]
    usage:
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
}

/// Reads one PodMetrics object; `None` if it has no name or timestamp.
pub fn parse(obj: &DynamicObject) -> Option<PodMetrics> {
    let name = obj.metadata.name.clone()?;
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let timestamp = obj
        .data
        .get("timestamp")?
        .as_str()
        .and_then(parse_rfc3339)?;
    let raw: Vec<RawContainer> = obj
        .data
        .get("containers")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let containers = raw
        .into_iter()
        .map(|c| ContainerUsage {
            cpu_millicores: c
                .usage
                .get("cpu")
                .and_then(|q| tailor_crds::quantity::amount("cpu", q).ok()),
            memory_bytes: c
                .usage
                .get("memory")
                .and_then(|q| tailor_crds::quantity::amount("memory", q).ok()),
            name: c.name,
        })
        .collect();
    Some(PodMetrics {
        namespace,
        name,
        timestamp,
        containers,
    })
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

/// Lists PodMetrics in one namespace or all of them.
#[derive(Clone)]
pub struct MetricsApiSource {
    api: Api<DynamicObject>,
}

impl MetricsApiSource {
    /// A source over `client`; `namespace` empty means all namespaces.
    pub fn new(client: Client, namespace: &str) -> Self {
        let ar = pod_metrics_resource();
        let api = if namespace.is_empty() {
            Api::all_with(client, &ar)
        } else {
            Api::namespaced_with(client, namespace, &ar)
        };
        MetricsApiSource { api }
    }

    /// Every pod's snapshot, and how many objects could not be read.
    pub async fn list(&self) -> Result<(Vec<PodMetrics>, usize), SourceError> {
        let list = self.api.list(&ListParams::default()).await?;
        let total = list.items.len();
        let pods: Vec<PodMetrics> = list.items.iter().filter_map(parse).collect();
        let bad = total - pods.len();
        Ok((pods, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metrics_server_objects() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": "web-1", "namespace": "default"},
            "timestamp": "2023-11-14T22:13:20Z", "window": "15.003s",
            "containers": [
                {"name": "app", "usage": {"cpu": "250123456n", "memory": "100Mi"}},
                {"name": "side", "usage": {"cpu": "bad"}}
            ]
        }))
        .unwrap();
        let p = parse(&obj).unwrap();
        assert_eq!(p.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(p.containers[0].cpu_millicores, Some(251));
        assert_eq!(p.containers[0].memory_bytes, Some(104_857_600));
        assert_eq!(p.containers[1].cpu_millicores, None);
    }
}
