//! Tailor's API (`autoscaling.tailor.dev/v1`): the custom resources and their CRDs, nothing else. The rules
//! that read them live in `tailor-core`, the cluster plumbing in `tailor-kube`.
//!
//! - [`vpa`] and [`checkpoint`]: the custom resources, field-compatible with upstream `autoscaling.k8s.io/v1`.
//! - [`crd`]: the CustomResourceDefinitions generated from those types (`crdgen` writes `crds/yaml/`).
//! - [`schema`]: the hand-written schema pieces where the derived ones differ from upstream's CRD.

mod open_enum;

pub mod checkpoint;
pub mod crd;
pub mod schema;
pub mod vpa;

pub use checkpoint::{
    HistogramCheckpoint, VerticalPodAutoscalerCheckpoint, VerticalPodAutoscalerCheckpointSpec,
    VerticalPodAutoscalerCheckpointStatus,
};
pub use crd::{crds, crds_yaml};
pub use vpa::{
    ContainerResourcePolicy, ContainerScalingMode, ControlledValues, CrossVersionObjectReference,
    EvictionChangeRequirement, EvictionRequirement, GenericStartupBoost, MAX_CONTAINER_POLICIES,
    MAX_CONTAINER_RECOMMENDATIONS, MAX_CONTROLLED_RESOURCES, PodResourcePolicy, PodUpdatePolicy,
    RecommendedContainerResources, RecommendedPodResources, ResourceList, StartupBoost,
    StartupBoostType, UpdateMode, VerticalPodAutoscaler, VerticalPodAutoscalerCondition,
    VerticalPodAutoscalerRecommenderSelector, VerticalPodAutoscalerSpec,
    VerticalPodAutoscalerStatus, condition,
};

/// The API group of Tailor's resources.
pub const GROUP: &str = "autoscaling.tailor.dev";
/// The upstream API group: Tailor never writes it; its updater reads upstream VPAs (read-only) to stand down
/// on the workloads they also cover.
pub const UPSTREAM_GROUP: &str = "autoscaling.k8s.io";
