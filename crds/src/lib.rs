//! Tailor's API (`autoscaling.tailor.dev/v1`) and the resource-policy semantics both components share.
//!
//! - [`vpa`] and [`checkpoint`]: the custom resources, field-compatible with upstream `autoscaling.k8s.io/v1`.
//! - [`crd`]: the CustomResourceDefinitions generated from those types.
//! - [`quantity`]: resource quantities, parsed, compared and printed exactly (Go's `resource.Quantity`
//!   rules, implemented here without floating point).
//! - [`policy`]: container-policy lookup and per-container settings.
//! - [`capping`]: min/max clamping of recommendations.
//! - [`validation`]: VPA validation and defaulting, with upstream's rules and messages.
//! - [`convert`]: upstream manifests → Tailor manifests.
//! - [`limitrange`] and [`sizing`]: LimitRange merging and pod sizing (recommendation processing,
//!   proportional limits) shared by the webhook and the updater.
//! - [`target`]: target resolution shared by both components (well-known kinds, controller owner, workload
//!   selectors, label-selector matching).
//! - [`workload`]: the seven well-known workload kinds reduced to what target matching reads.
//! - [`cluster`] (feature `kube`): the plumbing both binaries share — workload reflectors and the client,
//!   log, listen-address and shutdown flag groups.

mod open_enum;

pub mod capping;
pub mod checkpoint;
#[cfg(feature = "kube")]
pub mod cluster;
pub mod convert;
pub mod crd;
pub mod json_fields;
pub mod label_selector;
pub mod limitrange;
pub mod policy;
pub mod quantity;
pub mod schema;
pub mod sizing;
pub mod target;
pub mod text;
pub mod validation;
pub mod vpa;
pub mod workload;

pub use checkpoint::{
    HistogramCheckpoint, VerticalPodAutoscalerCheckpoint, VerticalPodAutoscalerCheckpointSpec,
    VerticalPodAutoscalerCheckpointStatus,
};
pub use crd::{crds, crds_yaml};
pub use vpa::*;

/// The API group of Tailor's resources.
pub const GROUP: &str = "autoscaling.tailor.dev";
/// The upstream API group, which Tailor never reads or writes at run time.
pub const UPSTREAM_GROUP: &str = "autoscaling.k8s.io";
