//! The pod as a review reads it: only the fields that matching and sizing look at are decoded, straight from
//! the review's text into a sparse [`Pod`]; everything else (env, probes, volumes, `managedFields`, …) is
//! skipped without building anything. A pod as the API server sends it is mostly such fields: decoding all of
//! it into k8s-openapi's types (and `managedFields` into a JSON tree) was most of a review's CPU.
//!
//! Read (everything else is left at its default):
//! - `metadata`: `name`, `generateName`, `namespace`, `labels`, `annotations`, `ownerReferences`;
//! - `spec`: `containers` and `initContainers` (each `name`, `resources`, `restartPolicy`), `resources`;
//! - `status`: `containerStatuses` and `initContainerStatuses` (each `name`, `resources`).
//!
//! As k8s-openapi's decoder, a missing or `null` field takes its default; a field of the wrong type is an error.
//! A malformed field that sizing does not read is no longer an error: the pod is sized as any other.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;

/// Decodes the fields of a pod that a review reads (see the module's documentation).
pub fn decode_pod(text: &str) -> Result<Pod, serde_json::Error> {
    serde_json::from_str::<SlimPod>(text).map(Pod::from)
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
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(default)]
    containers: Option<Vec<SlimContainer>>,
    #[serde(default)]
    init_containers: Option<Vec<SlimContainer>>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
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
                labels: m.labels,
                annotations: m.annotations,
                owner_references: m.owner_references,
                ..ObjectMeta::default()
            })
            .unwrap_or_default();
        let spec = pod.spec.map(|s| PodSpec {
            containers: all(s.containers).unwrap_or_default(),
            init_containers: all(s.init_containers),
            resources: s.resources,
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
