//! The inputs of every vector kind (`conformance/updater/README.md`), typed field by field: a vector is
//! evaluated only when the evaluation reads every field it carries. Unknown fields are refused
//! (`deny_unknown_fields` here; inside Kubernetes objects by [`object`], which refuses what the shipped
//! types would drop), and the test doubles accept only the values whose behaviour the evaluation
//! reproduces (`admission: "admitAll"`, `evictionRateLimit: "unlimited"`, …); anything else fails the case
//! with the field's path.
//!
//! Absent fields take upstream's zero value where the README or the vectors' notes say so (the updater
//! struct of upstream's tests is built directly); the fields that make a vector what it is are required.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::de::{DeserializeOwned, Error as _, IgnoredAny};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::CaseError;
use tailor_updater::decisions::config::FeatureGates;
use tailor_updater::decisions::priority::PodPriority;
use tailor_updater::decisions::restriction::InPlaceDecision;

/// Parses a vector's `input` as `T`; an error names the offending field's path (`input.config.foo`).
pub(super) fn parse<T: DeserializeOwned>(input: &Value) -> Result<T, CaseError> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            "input".to_owned()
        } else {
            format!("input.{path}")
        };
        CaseError(format!("{at}: {}", e.inner()))
    })
}

/// Parses the Kubernetes object at `path` as `T` (what the binary's API client would give the shipped
/// code) and refuses it when `T` would drop one of its fields: a field the shipped types do not hold is
/// a field the evaluation would ignore. Empty values (`null`, `{}`, `[]`) carry nothing and are not
/// counted.
pub(super) fn object<T: Serialize + DeserializeOwned>(
    path: &str,
    v: &Value,
) -> Result<T, CaseError> {
    let parsed: T = serde_path_to_error::deserialize(v).map_err(|e| {
        let at = e.path().to_string();
        let at = if at == "." {
            path.to_owned()
        } else {
            format!("{path}.{at}")
        };
        CaseError(format!("{at}: {}", e.inner()))
    })?;
    let back = serde_json::to_value(&parsed).map_err(|e| CaseError(format!("{path}: {e}")))?;
    let lost = tailor_core::json_fields::dropped_fields(v, &back, path);
    if lost.is_empty() {
        Ok(parsed)
    } else {
        Err(CaseError(format!(
            "unknown field(s) {}: not part of the object as the shipped code reads it",
            lost.join(", ")
        )))
    }
}

/// A Go duration string (`12h`, `10m`, `0s`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(GoDuration)
            .map_err(|e| D::Error::custom(format!("duration {s:?}: {e}")))
    }
}

/// An RFC 3339 time (`0001-01-01T00:00:00Z` is Go's zero time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Time(pub Timestamp);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map(Time)
            .map_err(|e| D::Error::custom(format!("time {s:?}: {e}")))
    }
}

/// `featureGates`: upstream's gate names; an absent gate is off.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Gates {
    #[serde(default, rename = "CPUStartupBoost")]
    cpu_startup_boost: bool,
    #[serde(default, rename = "InPlace")]
    in_place: bool,
    #[serde(default, rename = "PerVPAConfig")]
    per_vpa_config: bool,
}

impl From<&Gates> for FeatureGates {
    fn from(g: &Gates) -> Self {
        FeatureGates {
            cpu_startup_boost: g.cpu_startup_boost,
            in_place: g.in_place,
            per_vpa_config: g.per_vpa_config,
            pod_level_resources: false,
        }
    }
}

/// A `PodPriority` as upstream's fake priority processor returns it (absent fields are Go's zero).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Priority {
    #[serde(default)]
    outside_recommended_range: bool,
    #[serde(default)]
    scale_up: bool,
    #[serde(default)]
    resource_diff: f64,
}

impl From<&Priority> for PodPriority {
    fn from(p: &Priority) -> Self {
        PodPriority {
            outside_recommended_range: p.outside_recommended_range,
            scale_up: p.scale_up,
            resource_diff: p.resource_diff,
        }
    }
}

/// `priority`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PriorityInput {
    pub pod: Value,
    #[serde(default)]
    pub recommendation: Value,
}

/// The calculator thresholds (`UpdateConfig`); absent = Go's zero.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PriorityThresholds {
    #[serde(default)]
    pub min_change_priority: f64,
    #[serde(default)]
    pub pod_lifetime_update_threshold: GoDuration,
    #[serde(rename = "evictAfterOOMThreshold", default)]
    pub evict_after_oom_threshold: GoDuration,
}

/// `priorityProcessor`: the real one, or upstream's fake with its answer per pod name.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum PriorityProcessor {
    /// `"real"`: the shipped `pod_priority`.
    Real,
    /// `{"fake": {podName: PodPriority}}`: a pod not in the map is an error (upstream's fake panics).
    Fake(BTreeMap<String, Priority>),
}

/// `recommendationProcessor`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum RecommendationProcessor {
    /// `"identity"`: `vpa.status.recommendation` as is.
    Identity,
    /// `{"fixed": rec}`: this recommendation for every pod.
    Fixed(Value),
}

/// The eviction admission handed to `GetSortedPods`.
#[derive(Debug, Deserialize)]
pub(super) enum Admission {
    /// Upstream's default admission: every pod admitted (also what `null` means upstream).
    #[serde(rename = "admitAll")]
    AdmitAll,
}

/// `priority_calculator`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PriorityCalculatorInput {
    #[serde(default)]
    pub config: PriorityThresholds,
    #[serde(default)]
    pub feature_gates: Gates,
    #[serde(default)]
    pub vpa: Value,
    pub pods: Vec<Value>,
    pub now: Time,
    pub priority_processor: PriorityProcessor,
    pub recommendation_processor: RecommendationProcessor,
    #[serde(default)]
    pub infeasible_attempts: Option<BTreeMap<String, Value>>,
    /// `null` and `"admitAll"` both admit every pod.
    #[serde(default)]
    pub admission: Option<Admission>,
}

/// `pod_priority_less`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PodPriorityLessInput {
    pub prio: Priority,
    pub other: Priority,
}

/// `lower_resource`: the function compared and its arguments.
#[derive(Debug, Deserialize)]
#[serde(tag = "function", deny_unknown_fields)]
pub(super) enum LowerResourceInput {
    /// `priority.hasLowerResourceRecommendation(lastAttempt, newRecommendation)`.
    #[serde(
        rename = "priority.hasLowerResourceRecommendation",
        rename_all = "camelCase"
    )]
    HasLowerResourceRecommendation {
        #[serde(default)]
        last_attempt: Value,
        #[serde(default)]
        new_recommendation: Value,
    },
    /// `resources.RecommendationHasLowerResource(a, b)`.
    #[serde(rename = "resources.RecommendationHasLowerResource")]
    RecommendationHasLowerResource {
        #[serde(default)]
        a: Value,
        #[serde(default)]
        b: Value,
    },
    /// `resources.HasLowerResource(a, b)` on resource lists.
    #[serde(rename = "resources.HasLowerResource")]
    HasLowerResource { a: Value, b: Value },
}

/// `eviction_admission`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct EvictionAdmissionInput {
    pub pod: Value,
    /// `null`: the pod is not in the admission's map.
    pub eviction_requirements: Value,
    #[serde(default)]
    pub recommendation: Value,
}

/// One VPA of a `loopInits` entry, with the names of its pods.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoopInitEntry {
    pub vpa: Value,
    pub pods: Vec<String>,
}

/// `eviction_admission_loop_init`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct LoopInitInput {
    pub pods: Vec<Value>,
    pub loop_inits: Vec<Vec<LoopInitEntry>>,
}

/// Name and namespace of a controller.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControllerMeta {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// `spec` of a controller: the configured replicas.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControllerSpec {
    #[serde(default)]
    pub replicas: Option<i32>,
}

/// `status` of a controller: a DaemonSet's ready pods.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct ControllerStatus {
    #[serde(default)]
    pub number_ready: Option<i32>,
}

/// A controller of `controllers` (docs/design/upstream-updater.md §3.1 table): what the replica lookup reads.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Controller {
    pub kind: String,
    /// Changes nothing, upstream or here: controllers are looked up by kind, namespace and name (upstream's
    /// informers; the loop vectors' ReplicationController even says `apps/v1`).
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<IgnoredAny>,
    pub metadata: ControllerMeta,
    #[serde(default)]
    pub spec: ControllerSpec,
    #[serde(default)]
    pub status: ControllerStatus,
}

/// `config` of restriction vectors (the factory's settings).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RestrictionSettings {
    pub min_replicas: i32,
    pub eviction_tolerance_fraction: f64,
    #[serde(default)]
    pub in_place_skip_disruption_budget: bool,
}

/// `patchCalculators` of restriction vectors.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum PatchCalculators {
    /// Upstream's `fakeSingleResizePatch`: one resize patch for any pod.
    #[serde(rename = "fakeSingleResizePatch")]
    FakeSingleResizePatch,
    /// No calculator: an in-place update has nothing to apply (upstream's error).
    #[serde(rename = "none")]
    None,
}

/// A restriction step's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum StepOp {
    /// `CanEvict`.
    CanEvict,
    /// `Evict`.
    Evict,
    /// `CanInPlaceUpdate` (→ decision name).
    CanInPlaceUpdate,
    /// `InPlaceUpdate`.
    InPlaceUpdate,
    /// Decide, then update only if approved.
    TryInPlace,
}

/// One step of a restriction vector.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Step {
    pub op: StepOp,
    pub pod: String,
}

/// `eviction_restriction` and `inplace_restriction`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RestrictionInput {
    pub config: RestrictionSettings,
    #[serde(default)]
    pub feature_gates: Gates,
    #[serde(default)]
    pub controllers: Vec<Controller>,
    pub pods: Vec<Value>,
    pub vpa_for_creator_maps: Value,
    pub vpa: Value,
    /// `null`: upstream passed no clock (Go's zero time is used).
    #[serde(default)]
    pub now: Option<Time>,
    #[serde(default)]
    pub last_in_place_attempt: BTreeMap<String, Time>,
    #[serde(default)]
    pub infeasible_attempts: Option<BTreeMap<String, Value>>,
    pub patch_calculators: PatchCalculators,
    pub steps: Vec<Step>,
}

/// `resize_status`, `non_disruptive_resize`, `boost_in_progress`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PodInput {
    pub pod: Value,
}

/// A container's resources as the recommendation provider gives them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProvidedResources {
    #[serde(default)]
    pub requests: Value,
    #[serde(default)]
    pub limits: Value,
}

/// `inplace_patch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct InPlacePatchInput {
    pub pod: Value,
    pub vpa: Value,
    pub recommended_container_resources: Vec<ProvidedResources>,
    pub now: Time,
}

/// `boost_expiry`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BoostExpiryInput {
    pub pod: Value,
    pub vpa: Value,
    pub now: Time,
}

/// A rate limiter of loop vectors.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum LoopRateLimit {
    /// No limit: every wait passes at once.
    #[serde(rename = "unlimited")]
    Unlimited,
}

/// The recommendation processor of loop vectors.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum LoopRecommendationProcessor {
    /// `vpa.status.recommendation` as is.
    #[serde(rename = "identity")]
    Identity,
}

/// The priority processor of loop vectors.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum LoopPriorityProcessor {
    /// The shipped `pod_priority`.
    #[serde(rename = "real")]
    Real,
}

/// The eviction admission of loop vectors.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum LoopAdmission {
    /// Every pod admitted: what the shipped scaling-direction admission does while no VPA has
    /// `evictionRequirements` (a vector with some is refused).
    #[serde(rename = "admitAll")]
    AdmitAll,
}

/// `config` of loop vectors: the updater struct upstream's test builds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct LoopConfig {
    /// `--use-admission-controller-status`.
    pub use_admission_controller_status: bool,
    /// The status validator's answer (required when the status is used).
    #[serde(default)]
    pub admission_controller_status_valid: Option<bool>,
    #[serde(default)]
    pub min_change_priority: f64,
    #[serde(default)]
    pub pod_lifetime_update_threshold: GoDuration,
    #[serde(rename = "evictAfterOOMThreshold", default)]
    pub evict_after_oom_threshold: GoDuration,
    pub eviction_rate_limit: LoopRateLimit,
    pub in_place_rate_limit: LoopRateLimit,
    pub recommendation_processor: LoopRecommendationProcessor,
    pub priority_processor: LoopPriorityProcessor,
    pub eviction_admission: LoopAdmission,
    /// Must describe the identity fetcher (`identity …`): the pod's controller owner is its top-most
    /// controller.
    pub controller_fetcher: String,
    #[serde(default)]
    pub ignored_namespaces: Vec<String>,
}

/// A mocked `CanInPlaceUpdate` answer, by upstream's name.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) enum MockDecision {
    /// `InPlaceApproved`.
    #[serde(rename = "InPlaceApproved")]
    Approved,
    /// `InPlaceDeferred`.
    #[serde(rename = "InPlaceDeferred")]
    Deferred,
    /// `InPlaceEvict`.
    #[serde(rename = "InPlaceEvict")]
    Evict,
    /// `InPlaceInfeasible`.
    #[serde(rename = "InPlaceInfeasible")]
    Infeasible,
    /// `InPlaceInfeasibleCached`.
    #[serde(rename = "InPlaceInfeasibleCached")]
    InfeasibleCached,
}

impl From<MockDecision> for InPlaceDecision {
    fn from(d: MockDecision) -> Self {
        match d {
            MockDecision::Approved => InPlaceDecision::Approved,
            MockDecision::Deferred => InPlaceDecision::Deferred,
            MockDecision::Evict => InPlaceDecision::Evict,
            MockDecision::Infeasible => InPlaceDecision::Infeasible,
            MockDecision::InfeasibleCached => InPlaceDecision::InfeasibleCached,
        }
    }
}

/// Mocked restriction answers; an absent (`null`) answer must not be asked for.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Mocks {
    #[serde(default)]
    pub can_evict: Option<bool>,
    #[serde(default)]
    pub can_in_place_update: Option<MockDecision>,
    #[serde(default)]
    pub can_unboost: Option<bool>,
    /// Every `InPlaceUpdate` returns an error.
    #[serde(default)]
    pub in_place_update_fails: bool,
}

/// One `RunOnce` of a loop vector.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Cycle {
    #[serde(default)]
    pub vpas: Vec<Value>,
    #[serde(default)]
    pub pods: Vec<Value>,
    pub mocks: Mocks,
}

/// `updater_loop`: one cycle at the top level, or `cycles`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct LoopInput {
    pub config: LoopConfig,
    #[serde(default)]
    pub feature_gates: Gates,
    /// What the pods' owner references and the VPAs' `targetRef` name; nothing reads them beyond that
    /// (restriction answers are mocked, the controller fetcher is the identity).
    #[serde(default)]
    pub controllers: Vec<Controller>,
    #[serde(default)]
    pub selectors: BTreeMap<String, String>,
    #[serde(default)]
    pub vpas: Option<Vec<Value>>,
    #[serde(default)]
    pub pods: Option<Vec<Value>>,
    #[serde(default)]
    pub mocks: Option<Mocks>,
    #[serde(default)]
    pub cycles: Option<Vec<Cycle>>,
}

/// `rate_limiter`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RateLimiterInput {
    pub rate_limit: f64,
    pub burst: u32,
}

/// A cause of a `StatusError`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Cause {
    #[serde(rename = "type")]
    pub type_: String,
}

/// The error handed to `isInfeasibleError`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub(super) enum ErrorInput {
    /// An API status error.
    StatusError {
        reason: String,
        #[serde(default)]
        causes: Vec<Cause>,
    },
    /// Any other error.
    #[serde(rename = "plain")]
    Plain { message: String },
}

/// `infeasible_error`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InfeasibleErrorInput {
    pub error: Option<ErrorInput>,
}

/// An operation on the infeasible attempts.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub(super) enum AttemptsOp {
    /// Records an attempt for the pod.
    #[serde(rename = "record")]
    Record {
        #[serde(rename = "podUID")]
        pod_uid: String,
    },
    /// Forgets the attempts of pods not live.
    #[serde(rename = "cleanup")]
    Cleanup {
        #[serde(rename = "liveUIDs")]
        live_uids: Vec<String>,
    },
}

/// `infeasible_attempts`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InfeasibleAttemptsInput {
    pub ops: Vec<AttemptsOp>,
}

/// `deprecation_warning`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct DeprecationInput {
    pub update_policy: Value,
}

/// `status_lease`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct StatusLeaseInput {
    pub lease: Value,
    pub lease_timeout: GoDuration,
    pub now: Time,
}

/// A response of the fake API to the status GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GetResponse {
    /// `"ok"`.
    Ok,
    /// `"ECONNRESET"`: a connection reset (retryable).
    ConnectionReset,
    /// `"error:<message>"`: any other error (not retryable).
    Error(String),
}

impl<'de> Deserialize<'de> for GetResponse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "ok" => Ok(GetResponse::Ok),
            "ECONNRESET" => Ok(GetResponse::ConnectionReset),
            _ => s
                .strip_prefix("error:")
                .map(|m| GetResponse::Error(m.to_owned()))
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "response {s:?}: expected \"ok\", \"ECONNRESET\" or \"error:<message>\""
                    ))
                }),
        }
    }
}

/// `status_lease_fetch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct StatusLeaseFetchInput {
    pub get_responses: Vec<GetResponse>,
}

/// A counter call of `metrics` vectors, with the arguments its upstream function takes.
#[derive(Debug, Deserialize)]
#[serde(tag = "fn", deny_unknown_fields)]
pub(super) enum MetricCall {
    /// `AddEvictedPod(vpa, mode)`.
    #[serde(rename_all = "camelCase")]
    AddEvictedPod {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
        mode: String,
    },
    /// `InitCounters(vpa, mode)`.
    #[serde(rename_all = "camelCase")]
    InitCounters {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
        mode: String,
    },
    /// `RecordFailedEviction(vpa, mode, reason)`.
    #[serde(rename_all = "camelCase")]
    RecordFailedEviction {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
        mode: String,
        reason: String,
    },
    /// `RecordFailedInPlaceUpdate(vpa, reason)`.
    #[serde(rename_all = "camelCase")]
    RecordFailedInPlaceUpdate {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
        reason: String,
    },
    /// `RecordInPlaceInfeasibleCached(vpa)`.
    #[serde(rename_all = "camelCase")]
    RecordInPlaceInfeasibleCached {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
    },
    /// `AddInPlaceUpdatedPod(vpa)`.
    #[serde(rename_all = "camelCase")]
    AddInPlaceUpdatedPod {
        vpa_size: usize,
        vpa_name: String,
        vpa_namespace: String,
    },
}

/// One addition to a gauge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct GaugeAddition {
    pub vpa_size: usize,
    /// Read by the gauges labelled by mode; the size-only gauges take no mode (then it must be absent).
    #[serde(default)]
    pub mode: Option<String>,
    pub value: i64,
}

/// One iteration of gauge additions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GaugeIteration {
    pub additions: Vec<GaugeAddition>,
}

/// `metrics`: a counter call, or a gauge and its iterations.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsInput {
    #[serde(default)]
    pub call: Option<MetricCall>,
    #[serde(default)]
    pub gauge: Option<String>,
    #[serde(default)]
    pub iterations: Option<Vec<GaugeIteration>>,
}
