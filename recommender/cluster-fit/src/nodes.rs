//! Nodes as node fit reads them ([`SlimNode`]: labels, taints, whether cordoned, allocatable CPU and memory)
//! and what the recommender keeps of a Node or a NodePool in memory ([`strip_node`], [`strip_pool`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::karpenter::{NodePool, SlimTaint};
use crate::node_fit::{Candidate, MAX_ITEMS, Req, Taint};

/// `spec` of a Node: taints and whether it is cordoned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNodeSpec {
    /// Taints.
    #[serde(default)]
    pub taints: Vec<SlimTaint>,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// `status` of a Node: what it offers pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNodeStatus {
    /// Allocatable resources (only `cpu` and `memory` are kept).
    #[serde(default)]
    pub allocatable: BTreeMap<String, Quantity>,
}

/// A Node, as far as node fit reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNode {
    /// Metadata (name and labels kept).
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: SlimNodeSpec,
    /// Status.
    #[serde(default)]
    pub status: SlimNodeStatus,
}

tailor_core::trimmed_resource!(SlimNode => k8s_openapi::api::core::v1::Node);

fn strip_meta(m: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        labels: m.labels,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    }
}

/// Keeps of a Node only what node fit reads.
pub fn strip_node(mut n: SlimNode) -> SlimNode {
    n.metadata = strip_meta(n.metadata);
    n.status
        .allocatable
        .retain(|k, _| k == "cpu" || k == "memory");
    n
}

/// Keeps of a NodePool only what node fit reads.
pub fn strip_pool(mut p: NodePool) -> NodePool {
    p.metadata = ObjectMeta {
        name: p.metadata.name,
        resource_version: p.metadata.resource_version,
        ..ObjectMeta::default()
    };
    p
}

impl SlimNode {
    /// The node as a candidate; `None` past [`MAX_ITEMS`] labels or taints, or with an unreadable
    /// allocatable. A cordoned node carries the `node.kubernetes.io/unschedulable` taint.
    pub fn candidate(&self) -> Option<Candidate> {
        let labels = self.metadata.labels.clone().unwrap_or_default();
        if labels.len() > MAX_ITEMS || self.spec.taints.len() > MAX_ITEMS {
            return None;
        }
        let mut taints: Vec<Taint> = self.spec.taints.iter().map(SlimTaint::taint).collect();
        if self.spec.unschedulable {
            taints.push(Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
            });
        }
        let allocatable = Req::of(Some(&self.status.allocatable)).ok()?;
        Some(Candidate::node(
            self.metadata.name.as_deref().unwrap_or_default(),
            &labels,
            taints,
            allocatable,
        ))
    }
}
