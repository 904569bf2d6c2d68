//! `VerticalPodAutoscaler` in `autoscaling.tailor.dev/v1`: field for field the upstream
//! `autoscaling.k8s.io/v1` schema, so an upstream manifest moves over by changing `apiVersion`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::open_enum::open_enum;
use crate::schema;

/// Longest `spec.resourcePolicy.containerPolicies` (the CRD's `maxItems`; upstream sets none): one policy per
/// container and init container of a pod Tailor sizes (256 each) is far more than any workload has.
pub const MAX_CONTAINER_POLICIES: usize = 512;
/// Longest `controlledResources` of one container policy (the CRD's `maxItems`): only `cpu` and `memory` are
/// valid, so a longer list is a mistake or an attack.
pub const MAX_CONTROLLED_RESOURCES: usize = 16;
/// Longest `status.recommendation.containerRecommendations` (the CRD's `maxItems`).
pub const MAX_CONTAINER_RECOMMENDATIONS: usize = 512;

/// Resource name → quantity, as in a container's `resources.requests`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Desired state of a VerticalPodAutoscaler.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.tailor.dev",
    version = "v1",
    kind = "VerticalPodAutoscaler",
    plural = "verticalpodautoscalers",
    singular = "verticalpodautoscaler",
    shortname = "tvpa",
    category = "tailor",
    namespaced,
    status = "VerticalPodAutoscalerStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "VerticalPodAutoscaler is the configuration for a vertical pod autoscaler, which automatically manages pod resources based on historical and real time resource utilization.",
    printcolumn = r#"{"name": "Mode", "type": "string", "jsonPath": ".spec.updatePolicy.updateMode"}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.recommendation.containerRecommendations[0].target.cpu"}"#,
    printcolumn = r#"{"name": "Mem", "type": "string", "jsonPath": ".status.recommendation.containerRecommendations[0].target.memory"}"#,
    printcolumn = r#"{"name": "Provided", "type": "string", "jsonPath": ".status.conditions[?(@.type=='RecommendationProvided')].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "MinReplicas", "type": "integer", "jsonPath": ".spec.updatePolicy.minReplicas", "priority": 1}"#,
    printcolumn = r#"{"name": "OOMSeconds", "type": "integer", "jsonPath": ".spec.updatePolicy.evictAfterOOMSeconds", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::require_target_ref)]
pub struct VerticalPodAutoscalerSpec {
    // Required by the schema (see `schema::require_target_ref`) but optional here, so that validation can
    // report its absence the way upstream does.
    /// The controller whose pods this autoscaler governs (Deployment, StatefulSet, DaemonSet, Job, CronJob,
    /// ReplicaSet, ReplicationController, or any kind with a `/scale` subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<CrossVersionObjectReference>,

    /// How changes to recommended resources are applied. Defaulted to `{updateMode: Recreate}` by the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_policy: Option<PodUpdatePolicy>,

    /// Per-container limits on what the autoscaler may recommend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_policy: Option<PodResourcePolicy>,

    /// The recommender responsible for this object; empty means the default recommender. At most one entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommenders: Option<Vec<VerticalPodAutoscalerRecommenderSelector>>,

    /// Pod-level CPU boost during start-up (alpha upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_boost: Option<StartupBoost>,
}

/// A reference to the target controller (`autoscaling/v1 CrossVersionObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct CrossVersionObjectReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent, e.g. `Deployment`.
    pub kind: String,
    /// Name of the referent, in the autoscaler's namespace.
    pub name: String,
}

open_enum! {
    /// How recommendations are applied to pods.
    UpdateMode {
        /// Recommendations are computed but never applied.
        Off,
        /// Applied only when pods are created.
        Initial,
        /// Applied at creation and by evicting running pods.
        Recreate,
        /// Applied in place where possible, by eviction otherwise.
        InPlaceOrRecreate,
        /// Applied in place only.
        InPlace,
        /// Deprecated synonym of `Recreate`.
        Auto,
    }
}

open_enum! {
    /// Which condition a resource's recommendation must meet before the updater evicts a pod.
    EvictionChangeRequirement {
        /// The target is higher than the current request.
        TargetHigherThanRequests,
        /// The target is lower than the current request.
        TargetLowerThanRequests,
    }
}

/// `spec.updatePolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodUpdatePolicy {
    /// How changes are applied; required whenever `updatePolicy` is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_mode: Option<UpdateMode>,
    /// Minimum number of live replicas before the updater evicts; must be positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Conditions that must all hold before the updater evicts a pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_requirements: Option<Vec<EvictionRequirement>>,
    /// Evict a pod this many seconds after an OOM kill (per-VPA configuration).
    #[serde(
        default,
        rename = "evictAfterOOMSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub evict_after_oom_seconds: Option<i32>,
}

/// One entry of `spec.updatePolicy.evictionRequirements`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRequirement {
    /// Resources the requirement applies to.
    pub resources: Vec<String>,
    /// The comparison that must hold.
    pub change_requirement: EvictionChangeRequirement,
}

/// `spec.resourcePolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodResourcePolicy {
    /// Per-container policies; `containerName: "*"` is the default for containers without an entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CONTAINER_POLICIES))]
    pub container_policies: Option<Vec<ContainerResourcePolicy>>,
}

open_enum! {
    /// Whether the autoscaler recommends for a container.
    ContainerScalingMode {
        /// Recommend (the default).
        Auto,
        /// Never recommend for this container.
        Off,
    }
}

open_enum! {
    /// Which resource values the autoscaler sets.
    ControlledValues {
        /// Requests, with limits scaled in proportion (the default).
        RequestsAndLimits,
        /// Requests only; limits stay and cap the requests.
        RequestsOnly,
    }
}

/// One entry of `spec.resourcePolicy.containerPolicies`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResourcePolicy {
    /// Container name, or `*` for the default policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// `Auto` (default) or `Off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ContainerScalingMode>,
    /// Lower clamp on recommendations; a zero quantity is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_list")]
    pub min_allowed: Option<ResourceList>,
    /// Upper clamp on recommendations; a zero quantity is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_list")]
    pub max_allowed: Option<ResourceList>,
    /// Resources to recommend for; default `[cpu, memory]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CONTROLLED_RESOURCES))]
    pub controlled_resources: Option<Vec<String>>,
    /// `RequestsAndLimits` (default) or `RequestsOnly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controlled_values: Option<ControlledValues>,
    /// Memory bump ratio after an OOM kill (per-VPA configuration); at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::quantity")]
    pub oom_bump_up_ratio: Option<Quantity>,
    /// Minimum memory bump after an OOM kill (per-VPA configuration); at least 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::quantity")]
    pub oom_min_bump_up: Option<Quantity>,
    /// Length of one memory-peak aggregation interval, in seconds (per-VPA configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_aggregation_interval_seconds: Option<i32>,
    /// Number of memory-peak aggregation intervals kept (per-VPA configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_aggregation_interval_count: Option<i64>,
    /// Container-level CPU boost during start-up, overriding the pod-level one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_boost: Option<StartupBoost>,
}

/// Selects the recommender that serves an autoscaler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscalerRecommenderSelector {
    /// Name of the recommender (its `--recommender-name`).
    pub name: String,
}

/// `startupBoost`: a CPU boost while a pod starts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupBoost {
    /// The CPU boost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<GenericStartupBoost>,
}

open_enum! {
    /// How a start-up boost is expressed.
    StartupBoostType {
        /// Multiply the request by `factor`.
        Factor,
        /// Add `quantity` to the request.
        Quantity,
    }
}

/// A boost of one resource, by factor or by quantity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::require_type)]
#[x_kube(
    validation = Rule::new("(self.type == 'Factor') == has(self.factor)")
        .message("factor is required when type is Factor and forbidden otherwise"),
    validation = Rule::new("(self.type == 'Quantity') == has(self.quantity)")
        .message("quantity is required when type is Quantity and forbidden otherwise")
)]
pub struct GenericStartupBoost {
    /// `Factor` or `Quantity`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<StartupBoostType>,
    /// Multiplier for type `Factor`; at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<i32>,
    /// Amount for type `Quantity`; a whole number of millicores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::quantity")]
    pub quantity: Option<Quantity>,
    /// How long to keep the boost after the pod is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i32>,
}

/// Observed state of a VerticalPodAutoscaler, written by the recommender.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscalerStatus {
    /// The most recent recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<RecommendedPodResources>,
    /// Conditions (`RecommendationProvided`, `LowConfidence`, `NoPodsMatched`, `FetchingHistory`,
    /// `ConfigDeprecated`, `ConfigUnsupported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<VerticalPodAutoscalerCondition>>,
    /// The generation of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// Recommended resources for every container of a pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecommendedPodResources {
    /// One entry per container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CONTAINER_RECOMMENDATIONS))]
    pub container_recommendations: Option<Vec<RecommendedContainerResources>>,
}

/// Recommended resources for one container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecommendedContainerResources {
    /// Name of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// The recommended requests.
    #[schemars(schema_with = "schema::resource_list")]
    pub target: ResourceList,
    /// Minimum resources the container can use without harm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_list")]
    pub lower_bound: Option<ResourceList>,
    /// Maximum resources worth giving the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_list")]
    pub upper_bound: Option<ResourceList>,
    /// The target before the resource policy was applied (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_list")]
    pub uncapped_target: Option<ResourceList>,
}

/// A condition of a VerticalPodAutoscaler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscalerCondition {
    /// Condition type, e.g. `RecommendationProvided`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the condition last changed status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason for the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// Condition types written to `status.conditions`.
pub mod condition {
    /// A recommendation is in `status.recommendation`.
    pub const RECOMMENDATION_PROVIDED: &str = "RecommendationProvided";
    /// The recommendation rests on little history (Tailor sets it below one day).
    pub const LOW_CONFIDENCE: &str = "LowConfidence";
    /// No pod matches the target's selector.
    pub const NO_PODS_MATCHED: &str = "NoPodsMatched";
    /// History is being loaded from a metrics store.
    pub const FETCHING_HISTORY: &str = "FetchingHistory";
    /// The object uses deprecated configuration.
    pub const CONFIG_DEPRECATED: &str = "ConfigDeprecated";
    /// The object cannot be served (for example an unresolvable targetRef).
    pub const CONFIG_UNSUPPORTED: &str = "ConfigUnsupported";
    /// Tailor's: a stored checkpoint of this VPA could not be read back at restore and was skipped (its
    /// container started without its history). Set for a day after the restore.
    pub const CHECKPOINT_SKIPPED: &str = "CheckpointSkipped";
    /// Tailor: the updater leaves the VPA's pods, or some of them, alone (another VPA targets the same
    /// workload, or the webhook does not size them); written by the updater, kept by the recommender.
    pub const UPDATES_BLOCKED: &str = "UpdatesBlocked";
    /// Tailor (docs/decisions/node-fit.md): `True` when `target` was lowered so that the pods fit the largest
    /// node or Karpenter NodePool instance they can schedule on (named in the message; `uncappedTarget` is not
    /// lowered); `False` with reason `NoNodeFits` when they fit none whatever the target.
    pub const CAPPED_TO_NODE_SIZE: &str = "CappedToNodeSize";
    /// Tailor (docs/decisions/hpa-coherence.md): an HPA scales the workload on CPU or memory utilization;
    /// Tailor leaves that resource's requests to it (no target or bounds for it are published) and sizes the
    /// other.
    pub const RESOURCES_LEFT_TO_HPA: &str = "ResourcesLeftToHPA";
}
