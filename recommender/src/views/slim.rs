//! A slim Pod: only the fields the loop and the OOM observer read. The pod watch deserialises straight
//! into it, so the full `Pod` (several KiB per object in memory) is never built.

use k8s_openapi::api::core::v1::{ContainerState, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tailor_cluster_fit::pod_spec::{SlimPodSpec, SlimResources};

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
    use crate::views::pod_store::{Interner, StoredPod};
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
