//! The pod spec as the recommender reads it: containers and their requests and limits, init containers
//! and native sidecars, and what decides where the pod may land (node selector, required node affinity,
//! tolerations, RuntimeClass overhead). The recommender's pod watch deserialises into it; node fit reads
//! a pod's shape from it ([`crate::node_fit::PodShape`]), and `tailor recommend --snapshot` reads a
//! snapshot's pods into it the same way.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
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
