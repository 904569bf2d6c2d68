//! A slim Pod: only the fields the loop and the OOM observer read. The pod watch deserialises straight
//! into it, so the full `Pod` (several KiB per object in memory) is never built.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerState, NodeSelector, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// `resources` of a container or container status: requests and limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimResources {
    /// Requests by resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
    /// Limits by resource name (the dashboard shows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// A container: its name and requests (and, for init containers, whether it is a native sidecar).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    /// Name.
    pub name: String,
    /// Requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SlimResources>,
    /// `Always` for a native sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// `spec.affinity`, as far as node fit reads it: the required node affinity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimAffinity {
    /// Node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<SlimNodeAffinity>,
}

/// `spec.affinity.nodeAffinity`: only the required part (the preferred part does not limit placement).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimNodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
}

/// Container lists of the pod spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    /// Regular containers.
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    /// Init containers (their requests and sidecar flags count in node fit).
    #[serde(default)]
    pub init_containers: Vec<SlimContainer>,
    /// `nodeSelector` (node fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `affinity` (node fit: the required node affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<SlimAffinity>,
    /// `tolerations` (node fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// `overhead` of the pod's RuntimeClass (node fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// `nodeName` (the dashboard prices a workload by its nodes' instance family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Pod-level `resources` (whether the pod budgets at pod level, docs/pod-level-resources.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SlimResources>,
}

/// A container status: what OOM detection compares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainerStatus {
    /// Container name.
    pub name: String,
    /// Restarts so far.
    #[serde(default)]
    pub restart_count: i32,
    /// Current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    /// Previous state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    /// Resources as applied (in-place resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SlimResources>,
}

/// Phase and container statuses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodStatus {
    /// `Running`, `Succeeded`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Statuses of regular containers.
    #[serde(default)]
    pub container_statuses: Vec<SlimContainerStatus>,
}

/// A Pod reduced to what the recommender reads; watched and stored in place of `Pod`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchedPod {
    /// Metadata (stripped further before storing).
    pub metadata: ObjectMeta,
    /// Containers.
    #[serde(default)]
    pub spec: SlimPodSpec,
    /// Status.
    #[serde(default)]
    pub status: SlimPodStatus,
}

tailor_core::trimmed_resource!(WatchedPod => k8s_openapi::api::core::v1::Pod);

impl WatchedPod {
    /// The slim form of a full Pod (through its JSON form, as the watch would deliver it).
    pub fn from_pod(pod: &Pod) -> Result<WatchedPod, serde_json::Error> {
        serde_json::to_value(pod).and_then(serde_json::from_value)
    }

    /// The memory request of a container: status resources first, then the spec.
    pub fn memory_request(&self, container: &str) -> Option<&Quantity> {
        let from_status = self
            .status
            .container_statuses
            .iter()
            .find(|c| c.name == container)
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"));
        from_status.or_else(|| {
            self.spec
                .containers
                .iter()
                .find(|c| c.name == container)
                .and_then(|c| c.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_store::{Interner, StoredPod};
    use tailor_engine::model::PodPhase;

    #[test]
    fn a_full_pod_reads_and_compacts_to_what_the_loop_needs() {
        let pod: WatchedPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"},
                "resourceVersion": "7",
                "annotations": {"big": "x"}, "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n1", "volumes": [{"name": "v"}],
                "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "containerStatuses": [{"name": "app", "image": "nginx", "imageID": "x", "ready": true,
                    "restartCount": 2, "state": {"running": {"startedAt": "2023-11-14T22:13:20Z"}}}]}
        }))
        .unwrap();
        assert_eq!(
            pod.memory_request("app").map(|q| q.0.as_str()),
            Some("300Mi")
        );
        let mut interner = Interner::default();
        let s = StoredPod::of(pod, &mut interner).unwrap();
        assert_eq!(s.labels["app"], "web");
        assert_eq!((&*s.namespace, &*s.name), ("default", "web-0"));
        assert_eq!(s.resource_version.as_deref(), Some("7"));
        assert_eq!(s.phase, PodPhase::Running);
        assert_eq!(s.containers.len(), 1);
        assert_eq!(&*s.containers[0], "app");
        assert_eq!(&*s.init_containers[0], "init");
        let st = s.status("app").unwrap();
        assert_eq!(st.restart_count, 2);
        assert!(st.running && st.terminated.is_none());
        assert_eq!(st.memory_request, 300 * 1024 * 1024);
    }
}
