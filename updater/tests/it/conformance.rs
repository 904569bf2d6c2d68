//! Conformance with upstream's updater unit vectors (`tests/data/updater/*.json`), through the functions
//! the updater binary runs. Upstream annotation keys and metric names map to Tailor's; ids listed in the
//! "Updater" section of DEVIATIONS.md are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_crds::sizing::{
    ContainerResources, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
};
use tailor_crds::{EvictionRequirement, RecommendedPodResources, VerticalPodAutoscaler};
use tailor_updater::calculator::PriorityCalculator;
use tailor_updater::config::{FeatureGates, PriorityConfig, RestrictionConfig};
use tailor_updater::events::{EventObject, UpdaterEvent};
use tailor_updater::eviction_admission::{self, EvictionAdmission};
use tailor_updater::infeasible::{InfeasibleAttempts, is_infeasible_error};
use tailor_updater::iteration::{
    self, ActError, Actuator, ClusterView, Gate, IterationConfig, UpdaterState, evict_pod,
    in_place_update,
};
use tailor_updater::metrics::{GaugeKind, IterationGauges, Metrics, VpaLabel};
use tailor_updater::priority::{PodPriority, has_lower_resource, pod_priority};
use tailor_updater::rate_limit::RateSettings;
use tailor_updater::resize::{ResizeError, ResizePlan, resize_operations};
use tailor_updater::restriction::{
    Creator, InPlaceDecision, ReplicaLookup, Restriction, RestrictionError,
};
use tailor_updater::skip::Skip;
use tailor_updater::{lease, modes, pods};

type Check = Result<(), String>;

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
                o.entry("name").or_insert_with(|| json!(""));
                o.entry("image").or_insert_with(|| json!(""));
                o.entry("imageID").or_insert_with(|| json!(""));
                o.entry("ready").or_insert_with(|| json!(false));
                o.entry("restartCount").or_insert_with(|| json!(0));
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

fn pod_of(v: &Value) -> Result<Pod, String> {
    serde_json::from_value(fix_pod(v.clone())).map_err(|e| format!("pod: {e}"))
}

fn vpa_of(v: &Value) -> Result<VerticalPodAutoscaler, String> {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.entry("metadata").or_insert_with(|| json!({}));
        o.entry("spec").or_insert_with(|| json!({}));
        o.insert("apiVersion".into(), json!("autoscaling.tailor.dev/v1"));
        o.insert("kind".into(), json!("VerticalPodAutoscaler"));
    }
    serde_json::from_value(v).map_err(|e| format!("vpa: {e}"))
}

fn rec_of(v: &Value) -> Result<Option<RecommendedPodResources>, String> {
    if v.is_null() {
        return Ok(None);
    }
    serde_json::from_value(v.clone())
        .map(Some)
        .map_err(|e| format!("recommendation: {e}"))
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

fn pods_of(v: &Value) -> Result<Vec<Arc<Pod>>, String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|p| pod_of(p).map(Arc::new))
        .collect()
}

fn eq<T: PartialEq + std::fmt::Debug>(got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("got {got:?}, want {want:?}"))
    }
}

fn priority(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let rec = rec_of(&input["recommendation"])?;
    let got = pod_priority(&pod, rec.as_ref()).map_err(|e| e.to_string())?;
    // Only the fields a vector states are asserted (some assert resourceDiff alone).
    let got = json!({
        "outsideRecommendedRange": got.outside_recommended_range,
        "scaleUp": got.scale_up,
        "resourceDiff": got.resource_diff,
    });
    for key in ["outsideRecommendedRange", "scaleUp", "resourceDiff"] {
        if let Some(want) = expected.get(key) {
            let same = match (got[key].as_f64(), want.as_f64()) {
                (Some(g), Some(w)) if key == "resourceDiff" => (g - w).abs() < 1e-4,
                _ => got[key] == *want,
            };
            if !same {
                return Err(format!("{key}: got {}, want {want}", got[key]));
            }
        }
    }
    Ok(())
}

fn prio_of(v: &Value) -> PodPriority {
    PodPriority {
        outside_recommended_range: v["outsideRecommendedRange"].as_bool().unwrap_or_default(),
        scale_up: v["scaleUp"].as_bool().unwrap_or_default(),
        resource_diff: v["resourceDiff"].as_f64().unwrap_or_default(),
    }
}

fn pod_priority_less(input: &Value, expected: &Value) -> Check {
    let (a, b) = (prio_of(&input["prio"]), prio_of(&input["other"]));
    eq(
        (a.less(&b), b.less(&a)),
        (
            expected["prioLessOther"].as_bool().unwrap_or_default(),
            expected["otherLessPrio"].as_bool().unwrap_or_default(),
        ),
    )
}

fn lower_resource(input: &Value, expected: &Value) -> Check {
    if input["function"] == "resources.HasLowerResource" {
        let a = serde_json::from_value(input["a"].clone()).unwrap_or_default();
        let b = serde_json::from_value(input["b"].clone()).unwrap_or_default();
        let got = tailor_updater::priority::list_has_lower(&a, &b).map_err(|e| e.to_string())?;
        return eq(got, expected["result"].as_bool().unwrap_or_default());
    }
    let pick = |names: &[&str]| {
        names
            .iter()
            .map(|n| &input[*n])
            .find(|v| !v.is_null())
            .cloned()
            .unwrap_or(Value::Null)
    };
    let last = rec_of(&pick(&["lastAttempt", "a", "last", "lastRecommendation"]))?;
    let new = rec_of(&pick(&[
        "newRecommendation",
        "b",
        "new",
        "current",
        "currentRecommendation",
    ]))?;
    let got = has_lower_resource(last.as_ref(), new.as_ref()).map_err(|e| e.to_string())?;
    eq(got, expected["result"].as_bool().unwrap_or_default())
}

fn priority_config(v: &Value) -> PriorityConfig {
    PriorityConfig {
        min_change_priority: v["minChangePriority"].as_f64().unwrap_or(0.0),
        pod_lifetime_update_threshold: duration(&v["podLifetimeUpdateThreshold"]),
        evict_after_oom_threshold: duration(&v["evictAfterOOMThreshold"]),
        quick_oom_max_age: Some(Duration::from_secs(12 * 3600)),
    }
}

fn priority_calculator(input: &Value, expected: &Value) -> Check {
    let vpa = if input["vpa"].is_null() {
        vpa_of(&json!({}))?
    } else {
        vpa_of(&input["vpa"])?
    };
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
            Value::String(s) if s == "real" => {
                pod_priority(&pod, rec.as_ref()).map_err(|e| e.to_string())?
            }
            other => prio_of(&other["fake"][pods::name(&pod)]),
        };
        calc.add_pod(pod, rec, prio, &infeasible, now)
            .map_err(|e| e.to_string())?;
    }
    let (sorted, _) = calc
        .sorted(&EvictionAdmission::default())
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = sorted
        .iter()
        .map(|c| pods::name(&c.pod).to_owned())
        .collect();
    let want: Vec<String> =
        serde_json::from_value(expected["sortedPods"].clone()).unwrap_or_default();
    eq(names, want)
}

fn eviction_admission_kind(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let reqs: Option<Vec<EvictionRequirement>> =
        serde_json::from_value(input["evictionRequirements"].clone()).map_err(|e| e.to_string())?;
    let rec = rec_of(&input["recommendation"])?;
    let got = eviction_admission::admit(&pod, reqs.as_deref(), rec.as_ref())
        .map_err(|e| e.to_string())?;
    eq(got, expected["admit"].as_bool().unwrap_or_default())
}

fn eviction_admission_loop_init(input: &Value, expected: &Value) -> Check {
    let all = pods_of(&input["pods"])?;
    let mut admission = EvictionAdmission::default();
    let mut last = BTreeMap::new();
    for init in input["loopInits"].as_array().into_iter().flatten() {
        let mut owned: Vec<(VerticalPodAutoscaler, Vec<Arc<Pod>>)> = Vec::new();
        for entry in init.as_array().into_iter().flatten() {
            let vpa = vpa_of(&entry["vpa"])?;
            let names: Vec<&str> = entry["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let ps = all
                .iter()
                .filter(|p| names.contains(&pods::name(p)))
                .cloned()
                .collect();
            owned.push((vpa, ps));
        }
        admission.loop_init(owned.iter().map(|(v, p)| (v, p.as_slice())));
        last = all
            .iter()
            .filter_map(|p| {
                admission.requirements(p).map(|r| {
                    (
                        pods::name(p).to_owned(),
                        serde_json::to_value(r).unwrap_or_default(),
                    )
                })
            })
            .collect::<BTreeMap<_, _>>();
    }
    let want: BTreeMap<String, Value> =
        serde_json::from_value(expected["requirementsByPod"].clone()).unwrap_or_default();
    eq(last, want)
}

/// Replica counts from the vector's controllers (§3.1 table).
struct Controllers(Vec<Value>);

impl ReplicaLookup for Controllers {
    fn configured(&self, creator: &Creator, live: i32) -> Result<i32, String> {
        let found = self.0.iter().find(|c| {
            c["kind"].as_str() == Some(creator.kind.as_str())
                && c["metadata"]["name"].as_str() == Some(creator.name.as_str())
        });
        match creator.kind.as_str() {
            "ReplicationController" | "ReplicaSet" | "StatefulSet" => found
                .and_then(|c| c["spec"]["replicas"].as_i64())
                .filter(|n| *n > 0)
                .map(|n| n as i32)
                .ok_or_else(|| "no replicas".into()),
            "DaemonSet" => found
                .and_then(|c| c["status"]["numberReady"].as_i64())
                .filter(|n| *n > 0)
                .map(|n| n as i32)
                .ok_or_else(|| "no ready pods".into()),
            "Job" => Ok(live),
            _ => Ok(tailor_updater::restriction::unknown_kind_replicas()),
        }
    }
}

/// An actuator whose API calls succeed (or all fail), recording events.
#[derive(Default)]
struct Recorder {
    events: Vec<UpdaterEvent>,
    evictions: usize,
    resizes: usize,
    fail_resize: bool,
}

impl Actuator for Recorder {
    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        Ok(())
    }
    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        Ok(())
    }
    async fn evict(&mut self, _pod: &Pod) -> Result<(), ActError> {
        self.evictions += 1;
        Ok(())
    }
    async fn resize(&mut self, _pod: &Pod, _plan: &ResizePlan) -> Result<(), ActError> {
        self.resizes += 1;
        if self.fail_resize {
            Err(ActError::Other("resize failed".into()))
        } else {
            Ok(())
        }
    }
    fn event(&mut self, _pod: &Pod, _vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        self.events.push(event);
    }
}

fn fake_plan() -> ResizePlan {
    ResizePlan {
        resize: vec![tailor_crds::sizing::add_op(
            "/spec/containers/0/resources/requests/cpu",
            json!("1"),
        )],
        annotations: Vec::new(),
    }
}

/// A view for the restriction vectors: only `resize_plan` is used (upstream's fake calculators).
struct PatchOnly;

impl ClusterView for PatchOnly {
    type Gate = Restriction;
    fn fetch_selector(&self, _vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        Ok(())
    }
    fn controlling_vpa(
        &self,
        _pod: &Pod,
        _selected: &[Arc<VerticalPodAutoscaler>],
    ) -> Option<usize> {
        None
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<Pod>]) -> Restriction {
        unreachable!("restriction vectors build their restriction directly")
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &Pod,
    ) -> Result<Option<RecommendedPodResources>, String> {
        Ok(vpa.status.as_ref().and_then(|s| s.recommendation.clone()))
    }
    fn priority(
        &self,
        pod: &Pod,
        rec: Option<&RecommendedPodResources>,
    ) -> Result<PodPriority, String> {
        pod_priority(pod, rec).map_err(|e| e.to_string())
    }
    fn resize_plan(
        &self,
        _pod: &Pod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        Ok(fake_plan())
    }
}

fn event_json(e: &UpdaterEvent) -> Value {
    json!({"object": match e.object { EventObject::Pod => "pod", EventObject::Vpa => "vpa" }, "type": e.type_, "reason": e.reason})
}

async fn restriction(input: &Value, expected: &Value) -> Check {
    let c = &input["config"];
    let config = RestrictionConfig {
        min_replicas: c["minReplicas"].as_i64().unwrap_or(2) as i32,
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
    let mut results = Vec::new();
    let mut events = Vec::new();
    let mut successes = 0;
    for step in input["steps"].as_array().into_iter().flatten() {
        let name = step["pod"].as_str().unwrap_or_default();
        let pod = all
            .iter()
            .find(|p| pods::name(p) == name)
            .ok_or_else(|| format!("no pod {name}"))?;
        let mut actuator = Recorder::default();
        let result = match step["op"].as_str().unwrap_or_default() {
            "canEvict" => json!(Gate::can_evict(&mut gate, pod, &mut state, now).is_ok()),
            "evict" => json!(
                evict_pod(&mut actuator, &mut gate, &mut state, pod, &vpa, now)
                    .await
                    .is_ok()
            ),
            "canInPlaceUpdate" => {
                json!(
                    Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                        .map_err(|e| e.to_string())?
                        .name()
                )
            }
            "inPlaceUpdate" => {
                json!(
                    in_place_update(
                        &PatchOnly,
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
            "tryInPlace" => {
                let d = Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                    .map_err(|e| e.to_string())?;
                let ok = d == InPlaceDecision::Approved
                    && in_place_update(
                        &PatchOnly,
                        &mut actuator,
                        &mut gate,
                        &mut state,
                        pod,
                        &vpa,
                        now,
                    )
                    .await
                    .is_ok();
                json!(ok)
            }
            other => return Err(format!("unknown step {other}")),
        };
        if result == json!(true)
            && matches!(step["op"].as_str(), Some("tryInPlace" | "inPlaceUpdate"))
        {
            successes += 1;
        }
        results.push(result);
        events.push(Value::Array(
            actuator.events.iter().map(event_json).collect(),
        ));
    }
    let unasserted: BTreeSet<usize> =
        serde_json::from_value(expected["unasserted"].clone()).unwrap_or_default();
    for (i, (got, want)) in results
        .iter()
        .zip(expected["results"].as_array().into_iter().flatten())
        .enumerate()
    {
        if !unasserted.contains(&i) && got != want {
            return Err(format!("step {i}: got {got}, want {want}"));
        }
    }
    if let Some(n) = expected["successCount"].as_u64() {
        eq(successes, n as usize)?;
    }
    if let Some(want) = expected["eventsPerStep"].as_array() {
        eq(&events, want)?;
    }
    Ok(())
}

fn resize_status(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    eq(
        pods::resize_status(&pod).name(),
        expected["resizeStatus"].as_str().unwrap_or_default(),
    )
}

fn non_disruptive(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    eq(
        pods::is_non_disruptive(&pod),
        expected["nonDisruptive"].as_bool().unwrap_or_default(),
    )
}

fn boost_in_progress(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    eq(
        pods::has_boost_annotation(&pod),
        expected["result"].as_bool().unwrap_or_default(),
    )
}

fn upstream_key(key: &str) -> String {
    key.replace(STARTUP_BOOST_ANNOTATION_PREFIX, "vpaCpuStartupBoost/")
}

fn boost_expiry(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let got: BTreeSet<String> = pods::expired_boost_keys(&pod, &vpa, ts(&input["now"]))
        .iter()
        .map(|k| upstream_key(k))
        .collect();
    let want: BTreeSet<String> =
        serde_json::from_value(expected["expiredAnnotations"].clone()).unwrap_or_default();
    eq(got, want)
}

fn inplace_patch(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let provided: Vec<ContainerResources> = input["recommendedContainerResources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| ContainerResources {
            requests: serde_json::from_value(r["requests"].clone()).unwrap_or_default(),
            limits: serde_json::from_value(r["limits"].clone()).unwrap_or_default(),
            annotations: Vec::new(),
        })
        .collect();
    let expired = pods::expired_boost_keys(&pod, &vpa, ts(&input["now"]));
    let ops = resize_operations(&pod, &vpa, &provided, &expired).map_err(|e| e.to_string())?;
    eq(
        serde_json::to_value(&ops).unwrap_or_default(),
        expected["resizePatches"].clone(),
    )
}

fn status_lease(input: &Value, expected: &Value) -> Check {
    let lease: Lease = serde_json::from_value(input["lease"].clone()).map_err(|e| e.to_string())?;
    let got = lease::is_valid(&lease, duration(&input["leaseTimeout"]), ts(&input["now"]));
    eq(got, expected["valid"].as_bool().unwrap_or_default())
}

fn kube_error(text: &str) -> kube::Error {
    let io = if text == "ECONNRESET" {
        std::io::Error::from(std::io::ErrorKind::ConnectionReset)
    } else {
        std::io::Error::other(text.trim_start_matches("error:").to_owned())
    };
    kube::Error::Service(Box::new(io))
}

async fn status_lease_fetch(input: &Value, expected: &Value) -> Check {
    let responses: Vec<String> =
        serde_json::from_value(input["getResponses"].clone()).unwrap_or_default();
    let mut next = responses.into_iter();
    let mut sleeps = Vec::new();
    let result = lease::fetch_with_retry(
        || {
            let r = next
                .next()
                .unwrap_or_else(|| "error:no more responses".into());
            async move {
                if r == "ok" {
                    Ok(())
                } else {
                    Err(kube_error(&r))
                }
            }
        },
        |d| {
            sleeps.push(d);
            async {}
        },
    )
    .await;
    eq(
        result.is_err(),
        expected["error"].as_bool().unwrap_or_default(),
    )
}

fn rate_limiter(input: &Value, expected: &Value) -> Check {
    let s = RateSettings::from_flags(
        input["rateLimit"].as_f64().unwrap_or(0.0),
        input["burst"].as_u64().unwrap_or(0) as u32,
    );
    let limit = if s.limit.is_infinite() {
        json!("+Inf")
    } else {
        json!(s.limit)
    };
    eq(
        (limit, s.burst as u64),
        (
            expected["limit"].clone(),
            expected["burst"].as_u64().unwrap_or_default(),
        ),
    )
}

fn infeasible_error(input: &Value, expected: &Value) -> Check {
    let e = &input["error"];
    let err = match e["type"].as_str() {
        Some("StatusError") => Some(kube::Error::Api(Box::new(kube::core::Status {
            reason: e["reason"].as_str().unwrap_or_default().into(),
            details: Some(kube::core::response::StatusDetails {
                causes: e["causes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| kube::core::response::StatusCause {
                        reason: c["type"].as_str().unwrap_or_default().into(),
                        message: String::new(),
                        field: String::new(),
                    })
                    .collect(),
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                retry_after_seconds: 0,
            }),
            ..Default::default()
        }))),
        Some(_) => Some(kube_error(e["message"].as_str().unwrap_or_default())),
        None => None,
    };
    eq(
        is_infeasible_error(err.as_ref()),
        expected["infeasible"].as_bool().unwrap_or_default(),
    )
}

fn infeasible_attempts(input: &Value, expected: &Value) -> Check {
    let mut attempts = InfeasibleAttempts::default();
    let mut got = Vec::new();
    for op in input["ops"].as_array().into_iter().flatten() {
        match op["op"].as_str() {
            Some("record") => attempts.record(
                op["podUID"].as_str().unwrap_or_default(),
                RecommendedPodResources::default(),
            ),
            _ => attempts.retain_live(
                op["liveUIDs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            ),
        }
        got.push(attempts.uids());
    }
    let want: Vec<Vec<String>> =
        serde_json::from_value(expected["keysAfterEachOp"].clone()).unwrap_or_default();
    eq(got, want)
}

fn deprecation_warning(input: &Value, expected: &Value) -> Check {
    let policy: Option<tailor_crds::PodUpdatePolicy> =
        serde_json::from_value(input["updatePolicy"].clone()).map_err(|e| e.to_string())?;
    eq(
        modes::is_deprecated(policy.as_ref()),
        expected["warn"].as_bool().unwrap_or_default(),
    )
}

/// Parses the text exposition into (name, labels) → value.
fn samples(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let mut out = BTreeMap::new();
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
        out.insert((name.to_owned(), labels), value.parse().unwrap_or(f64::NAN));
    }
    out
}

fn tailor_metric(name: &str) -> String {
    name.replace("vpa_updater_", "tailor_updater_")
}

fn labels_of(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn metrics(input: &Value, expected: &Value) -> Check {
    let m = Metrics::new();
    if let Some(call) = input.get("call") {
        let label = VpaLabel {
            size: call["vpaSize"].as_u64().unwrap_or_default() as usize,
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
            other => return Err(format!("unknown call {other}")),
        }
        let got = samples(&m.encode());
        let wanted: Vec<Value> = match expected.get("samples") {
            Some(list) => list.as_array().cloned().unwrap_or_default(),
            None => vec![expected.clone()],
        };
        for w in wanted {
            let key = (
                tailor_metric(w["metric"].as_str().unwrap_or_default()),
                labels_of(&w["labels"]),
            );
            eq(got.get(&key).copied(), w["value"].as_f64())?;
        }
        return Ok(());
    }
    let name = input["gauge"].as_str().unwrap_or_default();
    let short = name.trim_start_matches("vpa_updater_");
    let kind = GaugeKind::from_name(short).ok_or_else(|| format!("unknown gauge {name}"))?;
    for (i, iteration) in input["iterations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut gauges = IterationGauges::default();
        for a in iteration["additions"].as_array().into_iter().flatten() {
            gauges.add(
                kind,
                a["vpaSize"].as_u64().unwrap_or_default() as usize,
                a["mode"].as_str().unwrap_or_default(),
                a["value"].as_i64().unwrap_or_default(),
            );
        }
        m.publish(&gauges);
        let metric = tailor_metric(name);
        let got: BTreeMap<BTreeMap<String, String>, f64> = samples(&m.encode())
            .into_iter()
            .filter(|((n, _), v)| *n == metric && *v != 0.0)
            .map(|((_, l), v)| (l, v))
            .collect();
        let want: BTreeMap<BTreeMap<String, String>, f64> = expected["iterations"][i]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    labels_of(&s["labels"]),
                    s["value"].as_f64().unwrap_or_default(),
                )
            })
            .collect();
        eq(&got, &want).map_err(|e| format!("iteration {i}: {e}"))?;
    }
    Ok(())
}

/// Upstream's mocked restriction for loop vectors: fixed answers, counted calls.
struct MockGate {
    mocks: Value,
    calls: Arc<std::sync::Mutex<Calls>>,
}

#[derive(Default, Debug)]
struct Calls {
    evict: usize,
    in_place: usize,
    unboost: usize,
    unexpected: Vec<String>,
}

impl MockGate {
    fn answer(&self, key: &str) -> Option<Value> {
        let v = &self.mocks[key];
        if v.is_null() {
            self.calls.lock().unwrap().unexpected.push(key.to_owned());
            None
        } else {
            Some(v.clone())
        }
    }
}

impl Gate for MockGate {
    fn can_evict(
        &mut self,
        _pod: &Pod,
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
        _pod: &Pod,
        _vpa: &VerticalPodAutoscaler,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<InPlaceDecision, tailor_crds::quantity::QuantityError> {
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
    fn can_unboost(&mut self, _pod: &Pod, _vpa: &VerticalPodAutoscaler, _now: Timestamp) -> bool {
        self.calls.lock().unwrap().unboost += 1;
        self.answer("canUnboost")
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }
    fn check_evict(
        &mut self,
        _pod: &Pod,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<(), RestrictionError> {
        self.calls.lock().unwrap().evict += 1;
        Ok(())
    }
    fn evicted(&mut self, _pod: &Pod) {}
    fn check_in_place(&mut self, pod: &Pod) -> Result<(), RestrictionError> {
        self.calls.lock().unwrap().in_place += 1;
        if self.mocks["inPlaceUpdateFails"].as_bool().unwrap_or(false) {
            Err(RestrictionError::NotInGroup {
                action: "in-place update",
                pod: pods::name(pod).into(),
            })
        } else {
            Ok(())
        }
    }
    fn in_place_started(&mut self, _pod: &Pod, _s: &mut UpdaterState, _now: Timestamp) {}
}

/// Upstream's loop fixture: selectors by VPA name, the pod's controller owner as its top-most controller.
struct LoopView {
    selectors: BTreeMap<String, String>,
    mocks: Value,
    calls: Arc<std::sync::Mutex<Calls>>,
    fetched: std::cell::Cell<bool>,
}

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
    fn controlling_vpa(&self, pod: &Pod, selected: &[Arc<VerticalPodAutoscaler>]) -> Option<usize> {
        let owner = tailor_crds::target::controller_owner(pod.metadata.owner_references.as_ref())?;
        selected.iter().position(|v| {
            v.metadata.namespace == pod.metadata.namespace
                && v.spec
                    .target_ref
                    .as_ref()
                    .is_some_and(|t| t.kind == owner.kind && t.name == owner.name)
                && self
                    .selectors
                    .get(v.metadata.name.as_deref().unwrap_or_default())
                    .is_some_and(|s| matches_selector(s, &pods::labels(pod)))
        })
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<Pod>]) -> MockGate {
        MockGate {
            mocks: self.mocks.clone(),
            calls: self.calls.clone(),
        }
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &Pod,
    ) -> Result<Option<RecommendedPodResources>, String> {
        Ok(vpa.status.as_ref().and_then(|s| s.recommendation.clone()))
    }
    fn priority(
        &self,
        pod: &Pod,
        rec: Option<&RecommendedPodResources>,
    ) -> Result<PodPriority, String> {
        pod_priority(pod, rec).map_err(|e| e.to_string())
    }
    fn resize_plan(
        &self,
        _pod: &Pod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        Ok(fake_plan())
    }
}

async fn updater_loop(input: &Value, expected: &Value) -> Check {
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
    let wanted: Vec<Value> = match expected.get("perCycle") {
        Some(list) => list.as_array().cloned().unwrap_or_default(),
        None => vec![expected.clone()],
    };
    let mut state = UpdaterState::default();
    for (i, (cycle, want)) in cycles.iter().zip(&wanted).enumerate() {
        let calls = Arc::new(std::sync::Mutex::new(Calls::default()));
        let view = LoopView {
            selectors: selectors.clone(),
            mocks: cycle["mocks"].clone(),
            calls: calls.clone(),
            fetched: false.into(),
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
        let calls = calls.lock().unwrap();
        if !calls.unexpected.is_empty() {
            return Err(format!("cycle {i}: unmocked calls {:?}", calls.unexpected));
        }
        let mut got = json!({
            "selectorFetched": view.fetched.get(),
            "evictCalls": calls.evict,
            "inPlaceUpdateCalls": calls.in_place,
        });
        if want.get("canUnboostCalls").is_some() {
            got["canUnboostCalls"] = json!(calls.unboost);
        }
        if want.get("podsListed").is_some() {
            got["podsListed"] = json!(report.pods_listed);
        }
        eq(&got, want).map_err(|e| format!("cycle {i}: {e}"))?;
    }
    Ok(())
}

fn deviation_ids() -> BTreeSet<String> {
    let path = format!("{}/../DEVIATIONS.md", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut ids = BTreeSet::new();
    let mut in_section = false;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_section = title.trim().starts_with("Updater");
            continue;
        }
        if in_section && line.starts_with('|') {
            let id = line
                .trim_matches('|')
                .split('|')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('`');
            if !id.is_empty() && !id.starts_with('-') && id != "Vector id" {
                ids.insert(id.to_owned());
            }
        }
    }
    ids
}

async fn check(kind: &str, input: &Value, expected: &Value) -> Check {
    match kind {
        "priority" => priority(input, expected),
        "priority_calculator" => priority_calculator(input, expected),
        "pod_priority_less" => pod_priority_less(input, expected),
        "lower_resource" => lower_resource(input, expected),
        "eviction_admission" => eviction_admission_kind(input, expected),
        "eviction_admission_loop_init" => eviction_admission_loop_init(input, expected),
        "eviction_restriction" | "inplace_restriction" => restriction(input, expected).await,
        "resize_status" => resize_status(input, expected),
        "non_disruptive_resize" => non_disruptive(input, expected),
        "inplace_patch" => inplace_patch(input, expected),
        "boost_expiry" => boost_expiry(input, expected),
        "boost_in_progress" => boost_in_progress(input, expected),
        "updater_loop" => updater_loop(input, expected).await,
        "rate_limiter" => rate_limiter(input, expected),
        "infeasible_error" => infeasible_error(input, expected),
        "infeasible_attempts" => infeasible_attempts(input, expected),
        "deprecation_warning" => deprecation_warning(input, expected),
        "status_lease" => status_lease(input, expected),
        "status_lease_fetch" => status_lease_fetch(input, expected).await,
        "metrics" => metrics(input, expected),
        other => Err(format!("unknown kind {other}")),
    }
}

#[tokio::test]
async fn updater_vectors() {
    let dir = format!("{}/tests/data/updater", env!("CARGO_MANIFEST_DIR"));
    let skip = deviation_ids();
    let mut total = 0;
    let mut passed = 0;
    let mut failures = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for case in doc["cases"].as_array().into_iter().flatten() {
            let id = case["id"].as_str().unwrap_or_default();
            if skip.contains(id) {
                continue;
            }
            total += 1;
            match check(
                case["kind"].as_str().unwrap_or_default(),
                &case["input"],
                &case["expected"],
            )
            .await
            {
                Ok(()) => passed += 1,
                Err(e) => failures.push(format!("{id}: {e}")),
            }
        }
    }
    println!(
        "conformance: {passed}/{total} updater vectors (skipped by DEVIATIONS.md: {})",
        skip.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 200, "only {total} vectors found in {dir}");
}
