//! Upstream's updater vectors (`tests/data/updater/*.json` of this crate, the format of
//! `conformance/updater/README.md`) evaluated through the functions the updater runs: `tailor plan --case`
//! prints what each gives, and the conformance test compares it with the vectors' expectations.
//!
//! Upstream's test doubles appear here as inputs demand: a fake priority processor (`priorityProcessor.fake`),
//! mocked restriction answers for loop vectors (`mocks`), and a fake resize calculator. Upstream annotation
//! keys map to Tailor's (`vpaCpuStartupBoost/` ↔ `cpu-startup-boost.tailor.dev/`, `vpaObservedContainers` ↔
//! `tailor.dev/observed-containers`), metric names `vpa_updater_` ↔ `tailor_updater_`.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_crds::quantity::QuantityError;
use tailor_crds::sizing::{
    ContainerResources, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
};
use tailor_crds::{
    EvictionRequirement, PodUpdatePolicy, RecommendedPodResources, VerticalPodAutoscaler,
};

use crate::calculator::PriorityCalculator;
use crate::config::{FeatureGates, PriorityConfig, RestrictionConfig};
use crate::events::{EventObject, UpdaterEvent};
use crate::eviction_admission::{self, EvictionAdmission};
use crate::infeasible::{InfeasibleAttempts, is_infeasible_error};
use crate::iteration::{
    self, ActError, Actuator, Candidates, ClusterView, Gate, IterationConfig, UpdaterState,
    evict_pod, in_place_update,
};
use crate::metrics::{GaugeKind, IterationGauges, Metrics, VpaLabel};
use crate::pods::CompactPod;
use crate::priority::{PodPriority, has_lower_resource, list_has_lower, pod_priority};
use crate::rate_limit::RateSettings;
use crate::resize::{ResizeError, ResizePlan, resize_operations};
use crate::restriction::{
    Creator, InPlaceDecision, ReplicaLookup, Restriction, RestrictionError, unknown_kind_replicas,
};
use crate::skip::Skip;
use crate::{lease, modes, pods};

/// A vector that cannot be evaluated (the CLI exits 2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct CaseError(pub String);

type Out = Result<Value, CaseError>;

fn err(e: impl std::fmt::Display) -> CaseError {
    CaseError(e.to_string())
}

fn rename_keys(map: &mut serde_json::Map<String, Value>) {
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        let new = if let Some(c) = k.strip_prefix("vpaCpuStartupBoost/") {
            format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{c}")
        } else if k == "vpaObservedContainers" {
            OBSERVED_CONTAINERS_ANNOTATION.to_owned()
        } else {
            continue;
        };
        if let Some(v) = map.remove(&k) {
            map.insert(new, v);
        }
    }
}

/// Fills what k8s-openapi requires and the vectors omit, and maps upstream annotation keys to Tailor's.
fn fix_pod(mut v: Value) -> Value {
    if v.is_null() {
        v = json!({});
    }
    if let Some(o) = v.as_object_mut() {
        o.entry("metadata").or_insert_with(|| json!({}));
    }
    if let Some(a) = v
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        rename_keys(a);
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("containers").or_insert_with(|| json!([]));
        for c in spec
            .get_mut("containers")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(o) = c.as_object_mut() {
                o.entry("name").or_insert_with(|| json!(""));
            }
        }
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        for c in status
            .get_mut("containerStatuses")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(o) = c.as_object_mut() {
                for (k, d) in [
                    ("name", json!("")),
                    ("image", json!("")),
                    ("imageID", json!("")),
                    ("ready", json!(false)),
                    ("restartCount", json!(0)),
                ] {
                    o.entry(k).or_insert(d);
                }
            }
        }
        for c in status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(o) = c.as_object_mut() {
                o.entry("status").or_insert_with(|| json!(""));
            }
        }
    }
    v
}

fn pod_of(v: &Value) -> Result<CompactPod, CaseError> {
    serde_json::from_value::<Pod>(fix_pod(v.clone()))
        .map(CompactPod::from)
        .map_err(|e| CaseError(format!("pod: {e}")))
}

fn vpa_of(v: &Value) -> Result<VerticalPodAutoscaler, CaseError> {
    let mut v = if v.is_null() { json!({}) } else { v.clone() };
    if let Some(o) = v.as_object_mut() {
        o.entry("metadata").or_insert_with(|| json!({}));
        o.entry("spec").or_insert_with(|| json!({}));
        o.insert("apiVersion".into(), json!("autoscaling.tailor.dev/v1"));
        o.insert("kind".into(), json!("VerticalPodAutoscaler"));
    }
    serde_json::from_value(v).map_err(|e| CaseError(format!("vpa: {e}")))
}

fn rec_of(v: &Value) -> Result<Option<RecommendedPodResources>, CaseError> {
    if v.is_null() {
        return Ok(None);
    }
    serde_json::from_value(v.clone())
        .map(Some)
        .map_err(|e| CaseError(format!("recommendation: {e}")))
}

fn ts(v: &Value) -> Timestamp {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(pods::go_zero_time)
}

fn duration(v: &Value) -> Duration {
    v.as_str()
        .and_then(|s| humantime::parse_duration(s).ok())
        .unwrap_or_default()
}

fn gates_of(v: &Value) -> FeatureGates {
    FeatureGates {
        cpu_startup_boost: v["CPUStartupBoost"].as_bool().unwrap_or(false),
        in_place: v["InPlace"].as_bool().unwrap_or(false),
        per_vpa_config: v["PerVPAConfig"].as_bool().unwrap_or(false),
    }
}

fn pods_of(v: &Value) -> Result<Vec<Arc<CompactPod>>, CaseError> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|p| pod_of(p).map(Arc::new))
        .collect()
}

fn as_i32(v: &Value, default: i32) -> i32 {
    v.as_i64()
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(default)
}

fn as_usize(v: &Value) -> usize {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

fn priority(input: &Value) -> Out {
    let pod = pod_of(&input["pod"])?;
    let rec = rec_of(&input["recommendation"])?;
    let p = pod_priority(&pod, rec.as_ref()).map_err(err)?;
    Ok(
        json!({"outsideRecommendedRange": p.outside_recommended_range, "scaleUp": p.scale_up, "resourceDiff": p.resource_diff}),
    )
}

fn prio_of(v: &Value) -> PodPriority {
    PodPriority {
        outside_recommended_range: v["outsideRecommendedRange"].as_bool().unwrap_or_default(),
        scale_up: v["scaleUp"].as_bool().unwrap_or_default(),
        resource_diff: v["resourceDiff"].as_f64().unwrap_or_default(),
    }
}

fn pod_priority_less(input: &Value) -> Out {
    let (a, b) = (prio_of(&input["prio"]), prio_of(&input["other"]));
    Ok(json!({"prioLessOther": a.less(&b), "otherLessPrio": b.less(&a)}))
}

fn lower_resource(input: &Value) -> Out {
    let result = if input["function"] == "resources.HasLowerResource" {
        let a = serde_json::from_value(input["a"].clone()).map_err(err)?;
        let b = serde_json::from_value(input["b"].clone()).map_err(err)?;
        list_has_lower(&a, &b).map_err(err)?
    } else {
        let pick = |names: &[&str]| {
            names
                .iter()
                .map(|n| &input[*n])
                .find(|v| !v.is_null())
                .cloned()
                .unwrap_or(Value::Null)
        };
        let last = rec_of(&pick(&["lastAttempt", "a"]))?;
        let new = rec_of(&pick(&["newRecommendation", "b"]))?;
        has_lower_resource(last.as_ref(), new.as_ref()).map_err(err)?
    };
    Ok(json!({"result": result}))
}

fn priority_config(v: &Value) -> PriorityConfig {
    PriorityConfig {
        min_change_priority: v["minChangePriority"].as_f64().unwrap_or(0.0),
        pod_lifetime_update_threshold: duration(&v["podLifetimeUpdateThreshold"]),
        evict_after_oom_threshold: duration(&v["evictAfterOOMThreshold"]),
        // As the updater ships (`--in-recommendation-bounds-eviction-lifetime-threshold`).
        quick_oom_max_age: Some(duration(&v["podLifetimeUpdateThreshold"])),
    }
}

fn priority_calculator(input: &Value) -> Out {
    let vpa = vpa_of(&input["vpa"])?;
    let config = priority_config(&input["config"]);
    let mut calc = PriorityCalculator::new(&vpa, &config, gates_of(&input["featureGates"]));
    let now = ts(&input["now"]);
    let mut infeasible = InfeasibleAttempts::default();
    for (uid, rec) in input["infeasibleAttempts"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if let Some(rec) = rec_of(rec)? {
            infeasible.record(uid, rec);
        }
    }
    for pod in pods_of(&input["pods"])? {
        let rec = match &input["recommendationProcessor"] {
            Value::String(s) if s == "identity" => {
                vpa.status.as_ref().and_then(|s| s.recommendation.clone())
            }
            other => rec_of(&other["fixed"])?,
        };
        let prio = match &input["priorityProcessor"] {
            Value::String(s) if s == "real" => pod_priority(&pod, rec.as_ref()).map_err(err)?,
            other => prio_of(&other["fake"][pods::name(&pod)]),
        };
        calc.add_pod(pod, rec.map(Arc::new), prio, &infeasible, now)
            .map_err(err)?;
    }
    let (sorted, _) = calc.sorted(&EvictionAdmission::default()).map_err(err)?;
    let names: Vec<&str> = sorted.iter().map(|c| pods::name(&c.pod)).collect();
    Ok(json!({"sortedPods": names}))
}

fn eviction_admission_case(input: &Value) -> Out {
    let pod = pod_of(&input["pod"])?;
    let reqs: Option<Vec<EvictionRequirement>> =
        serde_json::from_value(input["evictionRequirements"].clone()).map_err(err)?;
    let rec = rec_of(&input["recommendation"])?;
    Ok(
        json!({"admit": eviction_admission::admit(&pod, reqs.as_deref(), rec.as_ref()).map_err(err)?}),
    )
}

fn eviction_admission_loop_init(input: &Value) -> Out {
    let all = pods_of(&input["pods"])?;
    let mut admission = EvictionAdmission::default();
    for init in input["loopInits"].as_array().into_iter().flatten() {
        let mut owned: Vec<(VerticalPodAutoscaler, Vec<Arc<CompactPod>>)> = Vec::new();
        for entry in init.as_array().into_iter().flatten() {
            let names: Vec<&str> = entry["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let matched = all
                .iter()
                .filter(|p| names.contains(&pods::name(p)))
                .cloned()
                .collect();
            owned.push((vpa_of(&entry["vpa"])?, matched));
        }
        admission.loop_init(owned.iter().map(|(v, p)| (v, p.as_slice())));
    }
    let mut by_pod = serde_json::Map::new();
    for p in &all {
        if let Some(r) = admission.requirements(p) {
            by_pod.insert(
                pods::name(p).to_owned(),
                serde_json::to_value(r).map_err(err)?,
            );
        }
    }
    Ok(json!({"requirementsByPod": by_pod}))
}

/// Replica counts from a vector's controllers (§3.1 table).
struct Controllers(Vec<Value>);

impl ReplicaLookup for Controllers {
    fn configured(&self, creator: &Creator, live: i32) -> Result<i32, String> {
        let found = self.0.iter().find(|c| {
            c["kind"].as_str() == Some(creator.kind.as_str())
                && c["metadata"]["name"].as_str() == Some(creator.name.as_str())
        });
        let positive = |v: Option<&Value>| v.map(|v| as_i32(v, 0)).filter(|n| *n > 0);
        match creator.kind.as_str() {
            "ReplicationController" | "ReplicaSet" | "StatefulSet" => {
                positive(found.map(|c| &c["spec"]["replicas"])).ok_or_else(|| "no replicas".into())
            }
            "DaemonSet" => positive(found.map(|c| &c["status"]["numberReady"]))
                .ok_or_else(|| "no ready pods".into()),
            "Job" => Ok(live),
            _ => Ok(unknown_kind_replicas()),
        }
    }
}

/// API calls that all succeed (or all resizes fail), recording events: upstream's fake clientset.
#[derive(Default)]
struct Recorder {
    events: Vec<UpdaterEvent>,
    fail_resize: bool,
}

impl Actuator for Recorder {
    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        Ok(())
    }
    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        Ok(())
    }
    async fn evict(&mut self, _pod: &CompactPod) -> Result<(), ActError> {
        Ok(())
    }
    async fn resize(&mut self, _pod: &CompactPod, _plan: &ResizePlan) -> Result<(), ActError> {
        if self.fail_resize {
            Err(ActError::Other("resize failed".into()))
        } else {
            Ok(())
        }
    }
    fn event(&mut self, _pod: &CompactPod, _vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        self.events.push(event);
    }
}

/// Upstream's `fakeSingleResizePatch`: one resize operation for any pod.
fn single_resize_patch() -> ResizePlan {
    ResizePlan {
        resize: vec![tailor_crds::sizing::add_op(
            "/spec/containers/0/resources/requests/cpu",
            json!("1"),
        )],
        annotations: Vec::new(),
    }
}

/// The view of restriction vectors: only the (fake) resize calculator is consulted.
struct FakeCalculators;

impl ClusterView for FakeCalculators {
    type Gate = Restriction;
    fn fetch_selector(&self, _vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        Ok(())
    }
    fn controlling_vpa(&self, _pod: &CompactPod, _selected: &Candidates) -> Option<usize> {
        None
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<CompactPod>]) -> Restriction {
        Restriction::new(
            &VerticalPodAutoscaler::default(),
            &[],
            &Controllers(Vec::new()),
            &RestrictionConfig::default(),
            FeatureGates::default(),
        )
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &CompactPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        Ok(vpa
            .status
            .as_ref()
            .and_then(|s| s.recommendation.clone())
            .map(Arc::new))
    }
    fn priority(
        &self,
        pod: &CompactPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String> {
        pod_priority(pod, rec.map(|r| r.as_ref())).map_err(|e| e.to_string())
    }
    fn resize_plan(
        &self,
        _pod: &CompactPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        Ok(single_resize_patch())
    }
}

fn event_json(e: &UpdaterEvent) -> Value {
    let object = match e.object {
        EventObject::Pod => "pod",
        EventObject::Vpa => "vpa",
    };
    json!({"object": object, "type": e.type_, "reason": e.reason})
}

async fn restriction(input: &Value) -> Out {
    let c = &input["config"];
    let config = RestrictionConfig {
        min_replicas: as_i32(&c["minReplicas"], 2),
        eviction_tolerance: c["evictionToleranceFraction"].as_f64().unwrap_or(0.5),
        in_place_skip_disruption_budget: c["inPlaceSkipDisruptionBudget"]
            .as_bool()
            .unwrap_or(false),
        timers_from_patch: true,
    };
    let gates = gates_of(&input["featureGates"]);
    let all = pods_of(&input["pods"])?;
    let creator_vpa = vpa_of(&input["vpaForCreatorMaps"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let controllers = Controllers(input["controllers"].as_array().cloned().unwrap_or_default());
    let mut gate = Restriction::new(&creator_vpa, &all, &controllers, &config, gates);
    let now = ts(&input["now"]);
    let mut state = UpdaterState::default();
    for (key, at) in input["lastInPlaceAttempt"]
        .as_object()
        .into_iter()
        .flatten()
    {
        state.timers.set(key, ts(at), None);
    }
    for (uid, rec) in input["infeasibleAttempts"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if let Some(rec) = rec_of(rec)? {
            state.infeasible.record(uid, rec);
        }
    }
    let (mut results, mut events, mut successes) = (Vec::new(), Vec::new(), 0);
    for step in input["steps"].as_array().into_iter().flatten() {
        let name = step["pod"].as_str().unwrap_or_default();
        let pod = all
            .iter()
            .find(|p| pods::name(p) == name)
            .ok_or_else(|| CaseError(format!("no pod {name}")))?;
        let mut actuator = Recorder::default();
        let op = step["op"].as_str().unwrap_or_default();
        let result = match op {
            "canEvict" => json!(Gate::can_evict(&mut gate, pod, &mut state, now).is_ok()),
            "evict" => json!(
                evict_pod(&mut actuator, &mut gate, &mut state, pod, &vpa, now)
                    .await
                    .is_ok()
            ),
            "canInPlaceUpdate" => json!(
                Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                    .map_err(err)?
                    .name()
            ),
            "inPlaceUpdate" => json!(
                in_place_update(
                    &FakeCalculators,
                    &mut actuator,
                    &mut gate,
                    &mut state,
                    pod,
                    &vpa,
                    now
                )
                .await
                .is_ok()
            ),
            "tryInPlace" => {
                let d = Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                    .map_err(err)?;
                json!(
                    d == InPlaceDecision::Approved
                        && in_place_update(
                            &FakeCalculators,
                            &mut actuator,
                            &mut gate,
                            &mut state,
                            pod,
                            &vpa,
                            now
                        )
                        .await
                        .is_ok()
                )
            }
            other => return Err(CaseError(format!("unknown step {other}"))),
        };
        if result == json!(true) && matches!(op, "tryInPlace" | "inPlaceUpdate") {
            successes += 1;
        }
        results.push(result);
        events.push(Value::Array(
            actuator.events.iter().map(event_json).collect(),
        ));
    }
    Ok(json!({"results": results, "successCount": successes, "eventsPerStep": events}))
}

fn pod_case(input: &Value, f: impl Fn(&CompactPod) -> Value) -> Out {
    Ok(f(&pod_of(&input["pod"])?))
}

fn upstream_key(key: &str) -> String {
    key.replace(STARTUP_BOOST_ANNOTATION_PREFIX, "vpaCpuStartupBoost/")
}

fn boost_expiry(input: &Value) -> Out {
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let keys: BTreeSet<String> = pods::expired_boost_keys(&pod, &vpa, ts(&input["now"]))
        .iter()
        .map(|k| upstream_key(k))
        .collect();
    Ok(json!({"expiredAnnotations": keys}))
}

fn inplace_patch(input: &Value) -> Out {
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let mut provided = Vec::new();
    for r in input["recommendedContainerResources"]
        .as_array()
        .into_iter()
        .flatten()
    {
        provided.push(ContainerResources {
            requests: serde_json::from_value(r.get("requests").cloned().unwrap_or(json!({})))
                .map_err(err)?,
            limits: serde_json::from_value(r.get("limits").cloned().unwrap_or(json!({})))
                .map_err(err)?,
            annotations: Vec::new(),
        });
    }
    let expired = pods::expired_boost_keys(&pod, &vpa, ts(&input["now"]));
    let ops = resize_operations(&pod, &vpa, &provided, &expired).map_err(err)?;
    Ok(json!({"resizePatches": ops}))
}

fn status_lease(input: &Value) -> Out {
    let lease: Lease = serde_json::from_value(input["lease"].clone()).map_err(err)?;
    Ok(
        json!({"valid": lease::is_valid(&lease, duration(&input["leaseTimeout"]), ts(&input["now"]))}),
    )
}

/// An API error as the vectors name them: `ECONNRESET` (retryable) or `error:<message>`.
fn wire_error(text: &str) -> kube::Error {
    let io = if text == "ECONNRESET" {
        std::io::Error::from(std::io::ErrorKind::ConnectionReset)
    } else {
        std::io::Error::other(text.trim_start_matches("error:").to_owned())
    };
    kube::Error::Service(Box::new(io))
}

async fn status_lease_fetch(input: &Value) -> Out {
    let responses: Vec<String> =
        serde_json::from_value(input["getResponses"].clone()).map_err(err)?;
    let mut next = responses.into_iter();
    let result = lease::fetch_with_retry(
        || {
            let r = next
                .next()
                .unwrap_or_else(|| "error:no more responses".into());
            async move {
                if r == "ok" {
                    Ok(())
                } else {
                    Err(wire_error(&r))
                }
            }
        },
        |_| async {},
    )
    .await;
    Ok(json!({"error": result.is_err()}))
}

fn rate_limiter(input: &Value) -> Out {
    let burst = u32::try_from(input["burst"].as_u64().unwrap_or(0)).map_err(err)?;
    let s = RateSettings::from_flags(input["rateLimit"].as_f64().unwrap_or(0.0), burst);
    let limit = if s.limit.is_infinite() {
        json!("+Inf")
    } else {
        json!(s.limit)
    };
    Ok(json!({"limit": limit, "burst": s.burst}))
}

fn infeasible_error(input: &Value) -> Out {
    let e = &input["error"];
    let error = match e["type"].as_str() {
        Some("StatusError") => {
            let causes: Vec<Value> = e["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| json!({"reason": c["type"]}))
                .collect();
            let status = json!({"reason": e["reason"], "details": {"causes": causes}});
            Some(kube::Error::Api(Box::new(
                serde_json::from_value(status).map_err(err)?,
            )))
        }
        Some(_) => Some(wire_error(e["message"].as_str().unwrap_or_default())),
        None => None,
    };
    Ok(json!({"infeasible": is_infeasible_error(error.as_ref())}))
}

fn infeasible_attempts(input: &Value) -> Out {
    let mut attempts = InfeasibleAttempts::default();
    let mut keys = Vec::new();
    for op in input["ops"].as_array().into_iter().flatten() {
        match op["op"].as_str() {
            Some("record") => attempts.record(
                op["podUID"].as_str().unwrap_or_default(),
                RecommendedPodResources::default(),
            ),
            Some("cleanup") => attempts.retain_live(
                op["liveUIDs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            ),
            other => return Err(CaseError(format!("unknown op {other:?}"))),
        }
        keys.push(attempts.uids());
    }
    Ok(json!({"keysAfterEachOp": keys}))
}

fn deprecation_warning(input: &Value) -> Out {
    let policy: Option<PodUpdatePolicy> =
        serde_json::from_value(input["updatePolicy"].clone()).map_err(err)?;
    Ok(json!({"warn": modes::is_deprecated(policy.as_ref())}))
}

/// The samples of a text exposition: `{"metric", "labels", "value"}` each, metric names upstream's.
fn samples(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels: BTreeMap<String, String> = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
            .collect();
        let value: f64 = value.parse().unwrap_or(f64::NAN);
        out.push(json!({"metric": name.replace("tailor_updater_", "vpa_updater_"), "labels": labels, "value": value}));
    }
    out
}

fn metrics(input: &Value) -> Out {
    let m = Metrics::new();
    if let Some(call) = input.get("call") {
        let label = VpaLabel {
            size: as_usize(&call["vpaSize"]),
            name: call["vpaName"].as_str().unwrap_or_default(),
            namespace: call["vpaNamespace"].as_str().unwrap_or_default(),
            mode: call["mode"].as_str().unwrap_or_default(),
        };
        let reason = call["reason"].as_str().unwrap_or_default();
        match call["fn"].as_str().unwrap_or_default() {
            "AddEvictedPod" => m.add_evicted_pod(&label),
            "InitCounters" => m.init_counters(&label),
            "RecordFailedEviction" => m.record_failed_eviction(&label, reason),
            "RecordFailedInPlaceUpdate" => m.record_failed_in_place_update(&label, reason),
            "RecordInPlaceInfeasibleCached" => m.record_infeasible_cached(&label),
            "AddInPlaceUpdatedPod" => m.add_in_place_updated_pod(&label),
            other => return Err(CaseError(format!("unknown metrics call {other}"))),
        }
        return Ok(json!({"samples": samples(&m.encode())}));
    }
    let name = input["gauge"].as_str().unwrap_or_default();
    let kind = GaugeKind::from_name(name.trim_start_matches("vpa_updater_"))
        .ok_or_else(|| CaseError(format!("unknown gauge {name}")))?;
    let mut iterations = Vec::new();
    for iteration in input["iterations"].as_array().into_iter().flatten() {
        let mut gauges = IterationGauges::default();
        for a in iteration["additions"].as_array().into_iter().flatten() {
            gauges.add(
                kind,
                as_usize(&a["vpaSize"]),
                a["mode"].as_str().unwrap_or_default(),
                a["value"].as_i64().unwrap_or_default(),
            );
        }
        m.publish(&gauges);
        let series: Vec<Value> = samples(&m.encode())
            .into_iter()
            .filter(|s| s["metric"] == name && s["value"].as_f64().is_some_and(|v| v != 0.0))
            .map(|s| json!({"labels": s["labels"], "value": s["value"]}))
            .collect();
        iterations.push(series);
    }
    Ok(json!({"iterations": iterations}))
}

#[derive(Default, Debug)]
struct Calls {
    evict: usize,
    in_place: usize,
    unboost: usize,
    unexpected: Vec<String>,
}

/// Upstream's mocked restriction of loop vectors: fixed answers, counted calls; a `null` answer must not
/// be asked for.
struct MockGate {
    mocks: Value,
    calls: Arc<Mutex<Calls>>,
}

impl MockGate {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn answer(&self, key: &str) -> Option<Value> {
        let v = &self.mocks[key];
        if v.is_null() {
            self.calls().unexpected.push(key.to_owned());
            None
        } else {
            Some(v.clone())
        }
    }
}

impl Gate for MockGate {
    fn can_evict(
        &mut self,
        _pod: &CompactPod,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<(), Skip> {
        match self.answer("canEvict").and_then(|v| v.as_bool()) {
            Some(true) => Ok(()),
            _ => Err(Skip::ToleranceExhausted),
        }
    }
    fn can_in_place_update(
        &mut self,
        _pod: &CompactPod,
        _vpa: &VerticalPodAutoscaler,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<InPlaceDecision, QuantityError> {
        Ok(
            match self
                .answer("canInPlaceUpdate")
                .as_ref()
                .and_then(Value::as_str)
            {
                Some("InPlaceApproved") => InPlaceDecision::Approved,
                Some("InPlaceEvict") => InPlaceDecision::Evict,
                Some("InPlaceInfeasible") => InPlaceDecision::Infeasible,
                Some("InPlaceInfeasibleCached") => InPlaceDecision::InfeasibleCached,
                _ => InPlaceDecision::Deferred,
            },
        )
    }
    fn can_unboost(
        &mut self,
        _pod: &CompactPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> bool {
        self.calls().unboost += 1;
        self.answer("canUnboost")
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }
    fn check_evict(
        &mut self,
        _pod: &CompactPod,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<(), RestrictionError> {
        self.calls().evict += 1;
        Ok(())
    }
    fn evicted(&mut self, _pod: &CompactPod) {}
    fn check_in_place(&mut self, pod: &CompactPod) -> Result<(), RestrictionError> {
        self.calls().in_place += 1;
        if self.mocks["inPlaceUpdateFails"].as_bool().unwrap_or(false) {
            Err(RestrictionError::NotInGroup {
                action: "in-place update",
                pod: pods::name(pod).into(),
            })
        } else {
            Ok(())
        }
    }
    fn in_place_started(&mut self, _pod: &CompactPod, _s: &mut UpdaterState, _now: Timestamp) {}
    fn deferral_reason(&self, _pod: &CompactPod) -> Skip {
        Skip::ResizeDeferred
    }
}

/// Upstream's loop fixture: selectors by VPA name, the pod's controller owner as its top-most controller.
struct LoopView {
    selectors: BTreeMap<String, String>,
    mocks: Value,
    calls: Arc<Mutex<Calls>>,
    fetched: Cell<bool>,
}

/// Matches the equality selectors of the vectors (`key = value`, comma-separated).
fn matches_selector(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    selector
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .all(|req| match req.split_once('=') {
            Some((k, v)) => labels.get(k.trim()).map(String::as_str) == Some(v.trim()),
            None => false,
        })
}

impl ClusterView for LoopView {
    type Gate = MockGate;
    fn fetch_selector(&self, vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        self.fetched.set(true);
        let name = vpa.metadata.name.clone().unwrap_or_default();
        self.selectors
            .get(&name)
            .map(|_| ())
            .ok_or_else(|| "no selector".into())
    }
    fn controlling_vpa(&self, pod: &CompactPod, selected: &Candidates) -> Option<usize> {
        let owner = pods::controller(pod)?;
        selected.vpas.iter().position(|v| {
            v.metadata.namespace == pod.metadata.namespace
                && v.spec
                    .target_ref
                    .as_ref()
                    .is_some_and(|t| t.kind == owner.kind && t.name == owner.name)
                && self
                    .selectors
                    .get(v.metadata.name.as_deref().unwrap_or_default())
                    .is_some_and(|s| matches_selector(s, pods::labels(pod)))
        })
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<CompactPod>]) -> MockGate {
        MockGate {
            mocks: self.mocks.clone(),
            calls: self.calls.clone(),
        }
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &CompactPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        Ok(vpa
            .status
            .as_ref()
            .and_then(|s| s.recommendation.clone())
            .map(Arc::new))
    }
    fn priority(
        &self,
        pod: &CompactPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String> {
        pod_priority(pod, rec.map(|r| r.as_ref())).map_err(|e| e.to_string())
    }
    fn resize_plan(
        &self,
        _pod: &CompactPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        Ok(single_resize_patch())
    }
}

async fn updater_loop(input: &Value) -> Out {
    let c = &input["config"];
    let config = IterationConfig {
        priority: priority_config(c),
        gates: gates_of(&input["featureGates"]),
        ignored_namespaces: serde_json::from_value(c["ignoredNamespaces"].clone())
            .unwrap_or_default(),
        in_place_honours_deferrals: true,
        fair_order: true,
    };
    let selectors: BTreeMap<String, String> =
        serde_json::from_value(input["selectors"].clone()).unwrap_or_default();
    let cycles: Vec<Value> = match input.get("cycles") {
        Some(list) => list.as_array().cloned().unwrap_or_default(),
        None => vec![input.clone()],
    };
    let mut state = UpdaterState::default();
    let mut per_cycle = Vec::new();
    for cycle in &cycles {
        let calls = Arc::new(Mutex::new(Calls::default()));
        let view = LoopView {
            selectors: selectors.clone(),
            mocks: cycle["mocks"].clone(),
            calls: calls.clone(),
            fetched: Cell::new(false),
        };
        let vpas: Vec<Arc<VerticalPodAutoscaler>> = cycle["vpas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| vpa_of(v).map(Arc::new))
            .collect::<Result<_, _>>()?;
        let all = pods_of(&cycle["pods"])?;
        let mut actuator = Recorder::default();
        let mut gauges = IterationGauges::default();
        let report = iteration::run_once(
            &config,
            &mut state,
            &view,
            &mut actuator,
            &vpas,
            || all.clone(),
            Timestamp::now(),
            &mut gauges,
            None,
        )
        .await;
        let calls = calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !calls.unexpected.is_empty() {
            return Err(CaseError(format!("unmocked calls {:?}", calls.unexpected)));
        }
        per_cycle.push(json!({
            "selectorFetched": view.fetched.get(),
            "evictCalls": calls.evict,
            "inPlaceUpdateCalls": calls.in_place,
            "canUnboostCalls": calls.unboost,
            "podsListed": report.pods_listed,
        }));
    }
    Ok(if input.get("cycles").is_some() {
        json!({"perCycle": per_cycle})
    } else {
        per_cycle.pop().unwrap_or(Value::Null)
    })
}

/// Evaluates one vector (`kind`, `input`) and returns what the shipped functions give, shaped like the
/// vector's `expected`.
pub async fn evaluate(kind: &str, input: &Value) -> Out {
    match kind {
        "priority" => priority(input),
        "priority_calculator" => priority_calculator(input),
        "pod_priority_less" => pod_priority_less(input),
        "lower_resource" => lower_resource(input),
        "eviction_admission" => eviction_admission_case(input),
        "eviction_admission_loop_init" => eviction_admission_loop_init(input),
        "eviction_restriction" | "inplace_restriction" => restriction(input).await,
        "resize_status" => pod_case(
            input,
            |p| json!({"resizeStatus": pods::resize_status(p).name()}),
        ),
        "non_disruptive_resize" => pod_case(
            input,
            |p| json!({"nonDisruptive": pods::is_non_disruptive(p)}),
        ),
        "boost_in_progress" => {
            pod_case(input, |p| json!({"result": pods::has_boost_annotation(p)}))
        }
        "inplace_patch" => inplace_patch(input),
        "boost_expiry" => boost_expiry(input),
        "updater_loop" => updater_loop(input).await,
        "rate_limiter" => rate_limiter(input),
        "infeasible_error" => infeasible_error(input),
        "infeasible_attempts" => infeasible_attempts(input),
        "deprecation_warning" => deprecation_warning(input),
        "status_lease" => status_lease(input),
        "status_lease_fetch" => status_lease_fetch(input).await,
        "metrics" => metrics(input),
        other => Err(CaseError(format!("unknown kind {other:?}"))),
    }
}

/// Whether `output` gives what `expected` asserts: only the keys `expected` has; `results` entries listed
/// in `unasserted` are skipped; `resourceDiff` within 1e-4; `expiredAnnotations` and gauge series as
/// sets; metric samples must be among the output's.
pub fn matches(kind: &str, expected: &Value, output: &Value) -> Result<(), String> {
    if kind == "metrics" {
        if let Some(list) = output.get("samples").and_then(Value::as_array) {
            let wanted: Vec<Value> = match expected.get("samples") {
                Some(s) => s.as_array().cloned().unwrap_or_default(),
                None => vec![expected.clone()],
            };
            for w in wanted {
                let found = list.iter().any(|s| {
                    s["metric"] == w["metric"]
                        && s["labels"] == w["labels"]
                        && s["value"].as_f64() == w["value"].as_f64()
                });
                if !found {
                    return Err(format!("no sample {w} in {list:?}"));
                }
            }
            return Ok(());
        }
        let sets = |v: &Value| -> Vec<BTreeSet<String>> {
            v["iterations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|it| {
                    it.as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| {
                            json!({"labels": s["labels"], "value": s["value"].as_f64()}).to_string()
                        })
                        .collect()
                })
                .collect()
        };
        return if sets(expected) == sets(output) {
            Ok(())
        } else {
            Err(format!("gauges {output} != {expected}"))
        };
    }
    let unasserted: BTreeSet<usize> =
        serde_json::from_value(expected["unasserted"].clone()).unwrap_or_default();
    let Some(fields) = expected.as_object() else {
        return Err("expected is not an object".into());
    };
    for (key, want) in fields {
        if matches!(key.as_str(), "comparison" | "unasserted" | "notes") {
            continue;
        }
        let got = &output[key];
        let same = match key.as_str() {
            "resourceDiff" => {
                matches!((got.as_f64(), want.as_f64()), (Some(g), Some(w)) if (g - w).abs() < 1e-4)
            }
            "expiredAnnotations" => {
                let set = |v: &Value| {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(Value::to_string)
                        .collect::<BTreeSet<_>>()
                };
                set(got) == set(want)
            }
            "results" => {
                let (g, w) = (
                    got.as_array().cloned().unwrap_or_default(),
                    want.as_array().cloned().unwrap_or_default(),
                );
                g.len() == w.len()
                    && g.iter()
                        .zip(&w)
                        .enumerate()
                        .all(|(i, (a, b))| unasserted.contains(&i) || a == b)
            }
            "perCycle" => {
                let (g, w) = (
                    got.as_array().cloned().unwrap_or_default(),
                    want.as_array().cloned().unwrap_or_default(),
                );
                g.len() == w.len()
                    && g.iter()
                        .zip(&w)
                        .all(|(a, b)| b.as_object().into_iter().flatten().all(|(k, v)| &a[k] == v))
            }
            _ => got == want,
        };
        if !same {
            return Err(format!("{key}: got {got}, want {want}"));
        }
    }
    Ok(())
}
