//! Upstream's updater vectors (`tests/data/updater/*.json` of this crate, in the format its
//! `conformance/tests/data/updater/README.md` describes) evaluated through the functions the updater runs: `tailor plan --case`
//! prints what each gives, and the conformance test compares it with the vectors' expectations.
//!
//! Every input field is read: each kind's input is parsed into a type that names every field the README
//! documents (see `inputs`), an unknown field (also inside the Kubernetes objects) fails the case, and so
//! does a value the evaluation cannot reproduce (a test double other than the ones upstream's tests use).
//! Loop vectors run the binary's own iteration, [`Updater::iterate`], including its admission-status gate.
//!
//! Upstream's test doubles appear here as inputs demand: a fake priority processor (`priorityProcessor.fake`),
//! mocked restriction answers and a fixed status validator for loop vectors (`mocks`,
//! `admissionControllerStatusValid`), and fake resize calculators (`patchCalculators`). Upstream annotation
//! keys map to Tailor's (`vpaCpuStartupBoost/` ↔ `cpu-startup-boost.tailor.dev/`, `vpaObservedContainers` ↔
//! `tailor.dev/observed-containers`), metric names `vpa_updater_` ↔ `tailor_updater_`.
//!
//! They live in this crate, not in `tailor-updater`, so that the updater's library and binary carry none of
//! these test doubles.

mod inputs;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_core::quantity::QuantityError;
use tailor_core::sizing::{
    ContainerResources, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
};
use tailor_crds::{
    EvictionRequirement, PodUpdatePolicy, RecommendedPodResources, ResourceList,
    VerticalPodAutoscaler,
};

use inputs::{
    AttemptsOp, Controller, Cycle, ErrorInput, GaugeIteration, GetResponse, LoopAdmission,
    LoopPriorityProcessor, LoopRateLimit, LoopRecommendationProcessor, LowerResourceInput,
    MetricCall, Mocks, PatchCalculators, PriorityProcessor, PriorityThresholds,
    RecommendationProcessor, StepOp, object, parse,
};
use tailor_kube::rate::{RateSettings, TokenBucket};
use tailor_updater::decisions::calculator::PriorityCalculator;
use tailor_updater::decisions::config::{PriorityConfig, RestrictionConfig};
use tailor_updater::decisions::eviction_admission::{self, EvictionAdmission};
use tailor_updater::decisions::infeasible::{InfeasibleAttempts, is_infeasible_error};
use tailor_updater::decisions::modes;
use tailor_updater::decisions::priority::{
    PodPriority, has_lower_resource, list_has_lower, pod_priority,
};
use tailor_updater::decisions::resize::{ResizeError, ResizePlan, resize_operations};
use tailor_updater::decisions::restriction::{
    Creator, InPlaceDecision, ReplicaLookup, Restriction, RestrictionError, unknown_kind_replicas,
};
use tailor_updater::decisions::skip::Skip;
use tailor_updater::iteration::{
    ActError, Actuator, Candidates, ClusterView, Gate, IterationConfig, UpdaterState, evict_pod,
    in_place_update,
};
use tailor_updater::process::metrics::{GaugeKind, IterationGauges, Metrics, VpaLabel};
use tailor_updater::run_loop::{AdmissionStatus, Outcome, Updater};
use tailor_updater::views::pods::CachedPod;
use tailor_updater::views::{lease, pods};
use tailor_updater::writers::events::{EventObject, UpdaterEvent};

/// A vector that cannot be evaluated (the CLI exits 2): malformed, carrying a field the evaluation does
/// not read, or asking for a behaviour it cannot reproduce. The message names the field's path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct CaseError(pub String);

type Out = Result<Value, CaseError>;

fn err(e: impl std::fmt::Display) -> CaseError {
    CaseError(e.to_string())
}

/// An error at `path` of the input.
fn at(path: &str, what: impl std::fmt::Display) -> CaseError {
    CaseError(format!("{path}: {what}"))
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

/// The pod at `path`, as the binary's cache holds it.
fn pod_of(path: &str, v: &Value) -> Result<CachedPod, CaseError> {
    object::<Pod>(path, &fix_pod(v.clone())).map(CachedPod::from)
}

fn pods_of(path: &str, list: &[Value]) -> Result<Vec<Arc<CachedPod>>, CaseError> {
    list.iter()
        .enumerate()
        .map(|(n, p)| pod_of(&format!("{path}[{n}]"), p).map(Arc::new))
        .collect()
}

/// The VPA at `path` (`null`: an empty one), in Tailor's API group.
fn vpa_of(path: &str, v: &Value) -> Result<VerticalPodAutoscaler, CaseError> {
    let mut v = if v.is_null() { json!({}) } else { v.clone() };
    if let Some(o) = v.as_object_mut() {
        o.entry("metadata").or_insert_with(|| json!({}));
        o.entry("spec").or_insert_with(|| json!({}));
        o.insert("apiVersion".into(), json!("autoscaling.tailor.dev/v1"));
        o.insert("kind".into(), json!("VerticalPodAutoscaler"));
    }
    object(path, &v)
}

/// The recommendation at `path` (`null`: none).
fn rec_of(path: &str, v: &Value) -> Result<Option<RecommendedPodResources>, CaseError> {
    if v.is_null() {
        return Ok(None);
    }
    object(path, v).map(Some)
}

/// The infeasible attempts of `input.infeasibleAttempts` (a `null` attempt is refused: the shipped record
/// holds a recommendation).
fn infeasible_of(map: Option<&BTreeMap<String, Value>>) -> Result<InfeasibleAttempts, CaseError> {
    let mut attempts = InfeasibleAttempts::default();
    for (uid, rec) in map.into_iter().flatten() {
        let path = format!("input.infeasibleAttempts.{uid}");
        let rec =
            rec_of(&path, rec)?.ok_or_else(|| at(&path, "an attempt needs a recommendation"))?;
        attempts.record(uid, rec);
    }
    Ok(attempts)
}

/// The calculator thresholds; the quick-OOM age limit as the updater ships it
/// (`--in-recommendation-bounds-eviction-lifetime-threshold`).
fn priority_config(t: &PriorityThresholds) -> PriorityConfig {
    PriorityConfig {
        min_change_priority: t.min_change_priority,
        pod_lifetime_update_threshold: t.pod_lifetime_update_threshold.0,
        evict_after_oom_threshold: t.evict_after_oom_threshold.0,
        quick_oom_max_age: Some(t.pod_lifetime_update_threshold.0),
    }
}

fn priority(input: &Value) -> Out {
    let i: inputs::PriorityInput = parse(input)?;
    let pod = pod_of("input.pod", &i.pod)?;
    let rec = rec_of("input.recommendation", &i.recommendation)?;
    let p = pod_priority(&pod, rec.as_ref()).map_err(err)?;
    Ok(
        json!({"outsideRecommendedRange": p.outside_recommended_range, "scaleUp": p.scale_up, "resourceDiff": p.resource_diff}),
    )
}

fn priority_calculator(input: &Value) -> Out {
    let i: inputs::PriorityCalculatorInput = parse(input)?;
    let vpa = vpa_of("input.vpa", &i.vpa)?;
    let config = priority_config(&i.config);
    let mut calc = PriorityCalculator::new(&vpa, &config, (&i.feature_gates).into());
    let infeasible = infeasible_of(i.infeasible_attempts.as_ref())?;
    let fixed = match &i.recommendation_processor {
        RecommendationProcessor::Identity => None,
        RecommendationProcessor::Fixed(v) => {
            Some(rec_of("input.recommendationProcessor.fixed", v)?)
        }
    };
    let all = pods_of("input.pods", &i.pods)?;
    if let PriorityProcessor::Fake(map) = &i.priority_processor
        && let Some(name) = map
            .keys()
            .find(|n| !all.iter().any(|p| pods::name(p) == n.as_str()))
    {
        return Err(at(
            "input.priorityProcessor.fake",
            format!("{name:?} names no pod of input.pods"),
        ));
    }
    for pod in all {
        let rec = match &fixed {
            None => vpa.status.as_ref().and_then(|s| s.recommendation.clone()),
            Some(r) => r.clone(),
        };
        let prio = match &i.priority_processor {
            PriorityProcessor::Real => pod_priority(&pod, rec.as_ref()).map_err(err)?,
            PriorityProcessor::Fake(map) => map
                .get(pods::name(&pod))
                .map(PodPriority::from)
                .ok_or_else(|| {
                    at(
                        "input.priorityProcessor.fake",
                        format!("no priority for pod {:?}", pods::name(&pod)),
                    )
                })?,
        };
        calc.add_pod(pod, rec.map(Arc::new), prio, &infeasible, i.now.0)
            .map_err(err)?;
    }
    // `null` and `"admitAll"` both admit every pod: the shipped admission does for pods outside its map
    // (an empty one). Other values are refused when parsed.
    let admission = match i.admission {
        None | Some(inputs::Admission::AdmitAll) => EvictionAdmission::default(),
    };
    let (sorted, _) = calc.sorted(&admission).map_err(err)?;
    let names: Vec<&str> = sorted.iter().map(|c| pods::name(&c.pod)).collect();
    Ok(json!({"sortedPods": names}))
}

fn pod_priority_less(input: &Value) -> Out {
    let i: inputs::PodPriorityLessInput = parse(input)?;
    let (a, b) = (PodPriority::from(&i.prio), PodPriority::from(&i.other));
    Ok(json!({"prioLessOther": a.less(&b), "otherLessPrio": b.less(&a)}))
}

fn lower_resource(input: &Value) -> Out {
    let result = match parse::<LowerResourceInput>(input)? {
        LowerResourceInput::HasLowerResource { a, b } => {
            let a: ResourceList = object("input.a", &a)?;
            let b: ResourceList = object("input.b", &b)?;
            list_has_lower(&a, &b).map_err(err)?
        }
        LowerResourceInput::HasLowerResourceRecommendation {
            last_attempt,
            new_recommendation,
        } => {
            let last = rec_of("input.lastAttempt", &last_attempt)?;
            let new = rec_of("input.newRecommendation", &new_recommendation)?;
            has_lower_resource(last.as_ref(), new.as_ref()).map_err(err)?
        }
        LowerResourceInput::RecommendationHasLowerResource { a, b } => {
            let last = rec_of("input.a", &a)?;
            let new = rec_of("input.b", &b)?;
            has_lower_resource(last.as_ref(), new.as_ref()).map_err(err)?
        }
    };
    Ok(json!({"result": result}))
}

fn eviction_admission_case(input: &Value) -> Out {
    let i: inputs::EvictionAdmissionInput = parse(input)?;
    let pod = pod_of("input.pod", &i.pod)?;
    let reqs: Option<Vec<EvictionRequirement>> = if i.eviction_requirements.is_null() {
        None
    } else {
        Some(object(
            "input.evictionRequirements",
            &i.eviction_requirements,
        )?)
    };
    let rec = rec_of("input.recommendation", &i.recommendation)?;
    Ok(
        json!({"admit": eviction_admission::admit(&pod, reqs.as_deref(), rec.as_ref()).map_err(err)?}),
    )
}

fn eviction_admission_loop_init(input: &Value) -> Out {
    let i: inputs::LoopInitInput = parse(input)?;
    let all = pods_of("input.pods", &i.pods)?;
    let mut admission = EvictionAdmission::default();
    for (n, init) in i.loop_inits.iter().enumerate() {
        let mut owned: Vec<(VerticalPodAutoscaler, Vec<Arc<CachedPod>>)> = Vec::new();
        for (m, entry) in init.iter().enumerate() {
            let path = format!("input.loopInits[{n}][{m}]");
            if let Some(name) = entry
                .pods
                .iter()
                .find(|name| !all.iter().any(|p| pods::name(p) == name.as_str()))
            {
                return Err(at(
                    &format!("{path}.pods"),
                    format!("{name:?} names no pod of input.pods"),
                ));
            }
            let matched = all
                .iter()
                .filter(|p| entry.pods.iter().any(|n| n == pods::name(p)))
                .cloned()
                .collect();
            owned.push((vpa_of(&format!("{path}.vpa"), &entry.vpa)?, matched));
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

/// Refuses a controller field the replica lookup of its kind does not read
/// (docs/design/upstream-updater.md §3.1 table): configured replicas (`spec.replicas`) for
/// ReplicationController, ReplicaSet and StatefulSet, ready pods (`status.numberReady`) for DaemonSet, neither
/// for Job (its live pods) or other kinds.
fn check_controllers(list: &[Controller]) -> Result<(), CaseError> {
    for (n, c) in list.iter().enumerate() {
        let (replicas, ready) = match c.kind.as_str() {
            "ReplicationController" | "ReplicaSet" | "StatefulSet" => (true, false),
            "DaemonSet" => (false, true),
            _ => (false, false),
        };
        if !replicas && c.spec.replicas.is_some() {
            return Err(at(
                &format!("input.controllers[{n}].spec.replicas"),
                format!("not read for kind {}", c.kind),
            ));
        }
        if !ready && c.status.number_ready.is_some() {
            return Err(at(
                &format!("input.controllers[{n}].status.numberReady"),
                format!("not read for kind {}", c.kind),
            ));
        }
    }
    Ok(())
}

/// Replica counts from a vector's controllers (docs/design/upstream-updater.md §3.1 table), looked up by kind,
/// namespace and name.
struct Controllers(Vec<Controller>);

impl ReplicaLookup for Controllers {
    fn configured(&self, creator: &Creator, live: i32) -> Result<i32, String> {
        let found = self.0.iter().find(|c| {
            c.kind == creator.kind
                && c.metadata.name == creator.name
                && c.metadata.namespace == creator.namespace
        });
        let positive = |n: Option<i32>| n.filter(|n| *n > 0);
        match creator.kind.as_str() {
            "ReplicationController" | "ReplicaSet" | "StatefulSet" => {
                positive(found.and_then(|c| c.spec.replicas)).ok_or_else(|| "no replicas".into())
            }
            "DaemonSet" => positive(found.and_then(|c| c.status.number_ready))
                .ok_or_else(|| "no ready pods".into()),
            "Job" => Ok(live),
            _ => Ok(unknown_kind_replicas()),
        }
    }
}

/// API calls that all succeed, recording events: upstream's fake clientset. Its waits take a token of
/// the shipped limiters at once (a vector cannot wait: a wait would fail as past the deadline).
struct Recorder {
    events: Vec<UpdaterEvent>,
    eviction: TokenBucket,
    in_place: TokenBucket,
}

impl Recorder {
    fn new(eviction: RateSettings, in_place: RateSettings) -> Self {
        Recorder {
            events: Vec::new(),
            eviction: TokenBucket::new(eviction),
            in_place: TokenBucket::new(in_place),
        }
    }
}

impl Default for Recorder {
    /// Without limits (upstream's restriction tests have none).
    fn default() -> Self {
        let unlimited = RateSettings::from_flags(0.0, 0);
        Recorder::new(unlimited, unlimited)
    }
}

impl Actuator for Recorder {
    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        self.eviction.reserve(0.0, 0.0)?;
        Ok(())
    }
    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        self.in_place.reserve(0.0, 0.0)?;
        Ok(())
    }
    async fn evict(&mut self, _pod: &CachedPod) -> Result<(), ActError> {
        Ok(())
    }
    async fn resize(&mut self, _pod: &CachedPod, _plan: &ResizePlan) -> Result<(), ActError> {
        Ok(())
    }
    fn event(&mut self, _pod: &CachedPod, _vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        self.events.push(event);
    }
    fn vpa_event(&mut self, _vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        self.events.push(event);
    }
    async fn set_conditions(
        &mut self,
        _vpa: &VerticalPodAutoscaler,
        _conditions: Vec<tailor_crds::VerticalPodAutoscalerCondition>,
    ) -> Result<(), ActError> {
        // Upstream's doubles have no VPA status; the vectors hold no conflict.
        Ok(())
    }
}

/// Upstream's `fakeSingleResizePatch`: one resize operation for any pod.
fn single_resize_patch() -> ResizePlan {
    ResizePlan {
        resize: vec![tailor_core::sizing::add_op(
            "/spec/containers/0/resources/requests/cpu",
            json!("1"),
        )],
        ..ResizePlan::default()
    }
}

/// The view of restriction vectors: only the (fake) resize calculators are consulted.
struct FakeCalculators(PatchCalculators);

impl ClusterView for FakeCalculators {
    type Gate = Restriction;
    fn namespace_labels(&self, _namespace: &str) -> Option<BTreeMap<String, String>> {
        // Upstream's doubles have no namespaces; no vector sets a namespace selector.
        None
    }
    fn fetch_selector(&self, _vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        Ok(())
    }
    fn controlling_vpa(&self, _pod: &CachedPod, _selected: &Candidates) -> Option<usize> {
        None
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<CachedPod>]) -> Restriction {
        Restriction::new(
            &VerticalPodAutoscaler::default(),
            &[],
            &Controllers(Vec::new()),
            &RestrictionConfig::default(),
            Default::default(),
        )
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &CachedPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        Ok(vpa
            .status
            .as_ref()
            .and_then(|s| s.recommendation.clone())
            .map(Arc::new))
    }
    fn priority(
        &self,
        pod: &CachedPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String> {
        pod_priority(pod, rec.map(|r| r.as_ref())).map_err(|e| e.to_string())
    }
    fn resize_plan(
        &self,
        _pod: &CachedPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        match self.0 {
            PatchCalculators::FakeSingleResizePatch => Ok(single_resize_patch()),
            // Upstream: "no resource patches were calculated to apply".
            PatchCalculators::None => Err(ResizeError::NothingToApply),
        }
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
    let i: inputs::RestrictionInput = parse(input)?;
    let config = RestrictionConfig {
        min_replicas: i.config.min_replicas,
        eviction_tolerance: i.config.eviction_tolerance_fraction,
        in_place_skip_disruption_budget: i.config.in_place_skip_disruption_budget,
        timers_from_patch: true,
        // The binary's defaults (docs/decisions/disruption-budgets.md): readiness counts (no vector pod is
        // Ready=False), DaemonSets and Jobs as upstream (the chart's safer values change
        // TestEvictReplicatedByDaemonSet/Job).
        count_readiness: true,
        daemonset_max_unavailable: 0,
        evict_job_pods: true,
        deferred_timeout: tailor_updater::decisions::config::DEFERRED_TIMEOUT,
        in_progress_timeout: tailor_updater::decisions::config::IN_PROGRESS_TIMEOUT,
    };
    check_controllers(&i.controllers)?;
    let all = pods_of("input.pods", &i.pods)?;
    let creator_vpa = vpa_of("input.vpaForCreatorMaps", &i.vpa_for_creator_maps)?;
    let vpa = vpa_of("input.vpa", &i.vpa)?;
    let controllers = Controllers(i.controllers);
    let mut gate = Restriction::new(
        &creator_vpa,
        &all,
        &controllers,
        &config,
        (&i.feature_gates).into(),
    );
    let now = i.now.map_or_else(pods::go_zero_time, |t| t.0);
    let mut state = UpdaterState {
        infeasible: infeasible_of(i.infeasible_attempts.as_ref())?,
        ..UpdaterState::default()
    };
    for (key, t) in &i.last_in_place_attempt {
        state.timers.set(key, t.0, None);
    }
    let calculators = FakeCalculators(i.patch_calculators);
    let (mut results, mut events, mut successes) = (Vec::new(), Vec::new(), 0);
    for (n, step) in i.steps.iter().enumerate() {
        let pod = all
            .iter()
            .find(|p| pods::name(p) == step.pod)
            .ok_or_else(|| {
                at(
                    &format!("input.steps[{n}].pod"),
                    format!("{:?} names no pod of input.pods", step.pod),
                )
            })?;
        let mut actuator = Recorder::default();
        let result = match step.op {
            StepOp::CanEvict => json!(Gate::can_evict(&mut gate, pod, &mut state, now).is_ok()),
            StepOp::Evict => json!(
                evict_pod(&mut actuator, &mut gate, &mut state, pod, &vpa, now)
                    .await
                    .is_ok()
            ),
            StepOp::CanInPlaceUpdate => json!(
                Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                    .map_err(err)?
                    .name()
            ),
            StepOp::InPlaceUpdate => json!(
                in_place_update(
                    &calculators,
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
            StepOp::TryInPlace => {
                let d = Gate::can_in_place_update(&mut gate, pod, &vpa, &mut state, now)
                    .map_err(err)?;
                json!(
                    d == InPlaceDecision::Approved
                        && in_place_update(
                            &calculators,
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
        };
        if result == json!(true) && matches!(step.op, StepOp::TryInPlace | StepOp::InPlaceUpdate) {
            successes += 1;
        }
        results.push(result);
        events.push(Value::Array(
            actuator.events.iter().map(event_json).collect(),
        ));
    }
    Ok(json!({"results": results, "successCount": successes, "eventsPerStep": events}))
}

fn pod_case(input: &Value, f: impl Fn(&CachedPod) -> Value) -> Out {
    let i: inputs::PodInput = parse(input)?;
    Ok(f(&pod_of("input.pod", &i.pod)?))
}

fn upstream_key(key: &str) -> String {
    key.replace(STARTUP_BOOST_ANNOTATION_PREFIX, "vpaCpuStartupBoost/")
}

fn boost_expiry(input: &Value) -> Out {
    let i: inputs::BoostExpiryInput = parse(input)?;
    let pod = pod_of("input.pod", &i.pod)?;
    let vpa = vpa_of("input.vpa", &i.vpa)?;
    let keys: BTreeSet<String> = pods::expired_boost_keys(&pod, &vpa, i.now.0)
        .iter()
        .map(|k| upstream_key(k))
        .collect();
    Ok(json!({"expiredAnnotations": keys}))
}

fn resource_list(path: &str, v: &Value) -> Result<ResourceList, CaseError> {
    if v.is_null() {
        Ok(ResourceList::default())
    } else {
        object(path, v)
    }
}

fn inplace_patch(input: &Value) -> Out {
    let i: inputs::InPlacePatchInput = parse(input)?;
    let pod = pod_of("input.pod", &i.pod)?;
    let vpa = vpa_of("input.vpa", &i.vpa)?;
    let mut provided = Vec::new();
    for (n, r) in i.recommended_container_resources.iter().enumerate() {
        let path = format!("input.recommendedContainerResources[{n}]");
        provided.push(ContainerResources {
            requests: resource_list(&format!("{path}.requests"), &r.requests)?,
            limits: resource_list(&format!("{path}.limits"), &r.limits)?,
            ..ContainerResources::default()
        });
    }
    let expired = pods::expired_boost_keys(&pod, &vpa, i.now.0);
    let ops = resize_operations(&pod, &vpa, &provided, &expired).map_err(err)?;
    Ok(json!({"resizePatches": ops}))
}

fn status_lease(input: &Value) -> Out {
    let i: inputs::StatusLeaseInput = parse(input)?;
    let lease: Lease = object("input.lease", &i.lease)?;
    Ok(json!({"valid": lease::is_valid(&lease, i.lease_timeout.0, i.now.0)}))
}

/// An API error as the vectors name them: a connection reset (retryable) or any other error.
fn wire_error(response: &GetResponse) -> kube::Error {
    let io = match response {
        GetResponse::Error(message) => std::io::Error::other(message.clone()),
        _ => std::io::Error::from(std::io::ErrorKind::ConnectionReset),
    };
    kube::Error::Service(Box::new(io))
}

async fn status_lease_fetch(input: &Value) -> Out {
    let i: inputs::StatusLeaseFetchInput = parse(input)?;
    let given = i.get_responses.len();
    let mut next = i.get_responses.into_iter();
    let ran_out = Cell::new(false);
    let result = lease::fetch_with_retry(
        || {
            let r = next.next();
            if r.is_none() {
                ran_out.set(true);
            }
            async move {
                match r {
                    Some(GetResponse::Ok) => Ok(()),
                    Some(other) => Err(wire_error(&other)),
                    None => Err(wire_error(&GetResponse::Error("no response".into()))),
                }
            }
        },
        |_| async {},
    )
    .await;
    if ran_out.get() {
        return Err(at(
            "input.getResponses",
            format!("the status GET was attempted more than the {given} responses given"),
        ));
    }
    Ok(json!({"error": result.is_err()}))
}

fn rate_limiter(input: &Value) -> Out {
    let i: inputs::RateLimiterInput = parse(input)?;
    let s = RateSettings::from_flags(i.rate_limit, i.burst);
    let limit = if s.limit.is_infinite() {
        json!("+Inf")
    } else {
        json!(s.limit)
    };
    Ok(json!({"limit": limit, "burst": s.burst}))
}

fn infeasible_error(input: &Value) -> Out {
    let i: inputs::InfeasibleErrorInput = parse(input)?;
    let error = match &i.error {
        Some(ErrorInput::StatusError { reason, causes }) => {
            let causes: Vec<Value> = causes.iter().map(|c| json!({"reason": c.type_})).collect();
            let status = json!({"reason": reason, "details": {"causes": causes}});
            Some(kube::Error::Api(Box::new(
                serde_json::from_value(status).map_err(err)?,
            )))
        }
        Some(ErrorInput::Plain { message }) => {
            Some(wire_error(&GetResponse::Error(message.clone())))
        }
        None => None,
    };
    Ok(json!({"infeasible": is_infeasible_error(error.as_ref())}))
}

fn infeasible_attempts(input: &Value) -> Out {
    let i: inputs::InfeasibleAttemptsInput = parse(input)?;
    let mut attempts = InfeasibleAttempts::default();
    let mut keys = Vec::new();
    for op in &i.ops {
        match op {
            AttemptsOp::Record { pod_uid } => {
                attempts.record(pod_uid, RecommendedPodResources::default())
            }
            AttemptsOp::Cleanup { live_uids } => {
                attempts.retain_live(live_uids.iter().map(String::as_str))
            }
        }
        keys.push(attempts.uids());
    }
    Ok(json!({"keysAfterEachOp": keys}))
}

fn deprecation_warning(input: &Value) -> Out {
    let i: inputs::DeprecationInput = parse(input)?;
    let policy: Option<PodUpdatePolicy> = if i.update_policy.is_null() {
        None
    } else {
        Some(object("input.updatePolicy", &i.update_policy)?)
    };
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

fn label<'a>(size: &usize, name: &'a str, namespace: &'a str, mode: &'a str) -> VpaLabel<'a> {
    VpaLabel {
        size: *size,
        name,
        namespace,
        mode,
    }
}

fn metric_call(m: &Metrics, call: &MetricCall) {
    match call {
        MetricCall::AddEvictedPod {
            vpa_size,
            vpa_name,
            vpa_namespace,
            mode,
        } => m.add_evicted_pod(&label(vpa_size, vpa_name, vpa_namespace, mode)),
        MetricCall::InitCounters {
            vpa_size,
            vpa_name,
            vpa_namespace,
            mode,
        } => m.init_counters(&label(vpa_size, vpa_name, vpa_namespace, mode)),
        MetricCall::RecordFailedEviction {
            vpa_size,
            vpa_name,
            vpa_namespace,
            mode,
            reason,
        } => m.record_failed_eviction(&label(vpa_size, vpa_name, vpa_namespace, mode), reason),
        MetricCall::RecordFailedInPlaceUpdate {
            vpa_size,
            vpa_name,
            vpa_namespace,
            reason,
        } => m.record_failed_in_place_update(&label(vpa_size, vpa_name, vpa_namespace, ""), reason),
        MetricCall::RecordInPlaceInfeasibleCached {
            vpa_size,
            vpa_name,
            vpa_namespace,
        } => m.record_infeasible_cached(&label(vpa_size, vpa_name, vpa_namespace, "")),
        MetricCall::AddInPlaceUpdatedPod {
            vpa_size,
            vpa_name,
            vpa_namespace,
        } => m.add_in_place_updated_pod(&label(vpa_size, vpa_name, vpa_namespace, "")),
    }
}

/// Whether the gauge is labelled by update mode (the others by size only).
fn by_mode(kind: GaugeKind) -> bool {
    matches!(
        kind,
        GaugeKind::ControlledPods
            | GaugeKind::EvictablePods
            | GaugeKind::VpasWithEvictablePods
            | GaugeKind::VpasWithEvictedPods
    )
}

fn gauge_iterations(m: &Metrics, name: &str, list: &[GaugeIteration]) -> Out {
    let kind = name
        .strip_prefix("vpa_updater_")
        .and_then(GaugeKind::from_name)
        .ok_or_else(|| at("input.gauge", format!("unknown gauge {name:?}")))?;
    let mut iterations = Vec::new();
    for (n, iteration) in list.iter().enumerate() {
        let mut gauges = IterationGauges::default();
        for (k, a) in iteration.additions.iter().enumerate() {
            let path = format!("input.iterations[{n}].additions[{k}].mode");
            let mode = match (&a.mode, by_mode(kind)) {
                (Some(mode), true) => mode.as_str(),
                (None, false) => "",
                (None, true) => return Err(at(&path, format!("{name} is labelled by mode"))),
                (Some(_), false) => {
                    return Err(at(&path, format!("{name} is not labelled by mode")));
                }
            };
            gauges.add(kind, a.vpa_size, mode, a.value);
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

fn metrics(input: &Value) -> Out {
    let i: inputs::MetricsInput = parse(input)?;
    let m = Metrics::new();
    match (&i.call, &i.gauge, &i.iterations) {
        (Some(call), None, None) => {
            metric_call(&m, call);
            Ok(json!({"samples": samples(&m.encode())}))
        }
        (None, Some(name), Some(list)) => gauge_iterations(&m, name, list),
        _ => Err(at(
            "input",
            "a metrics vector has either `call`, or `gauge` and `iterations`",
        )),
    }
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
    mocks: Mocks,
    calls: Arc<Mutex<Calls>>,
}

impl MockGate {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The mocked answer, or a record of the call that upstream's mock would have refused.
    fn answer<T: Copy>(&self, key: &str, mock: Option<T>) -> Option<T> {
        if mock.is_none() {
            self.calls().unexpected.push(key.to_owned());
        }
        mock
    }
}

impl Gate for MockGate {
    fn can_evict(
        &mut self,
        _pod: &CachedPod,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<(), Skip> {
        match self.answer("canEvict", self.mocks.can_evict) {
            Some(true) => Ok(()),
            _ => Err(Skip::ToleranceExhausted),
        }
    }
    fn can_in_place_update(
        &mut self,
        _pod: &CachedPod,
        _vpa: &VerticalPodAutoscaler,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<InPlaceDecision, QuantityError> {
        Ok(self
            .answer("canInPlaceUpdate", self.mocks.can_in_place_update)
            .map_or(InPlaceDecision::Deferred, InPlaceDecision::from))
    }
    fn can_unboost(
        &mut self,
        _pod: &CachedPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> bool {
        self.calls().unboost += 1;
        self.answer("canUnboost", self.mocks.can_unboost)
            .unwrap_or(false)
    }
    fn check_evict(
        &mut self,
        _pod: &CachedPod,
        _s: &mut UpdaterState,
        _now: Timestamp,
    ) -> Result<(), RestrictionError> {
        self.calls().evict += 1;
        Ok(())
    }
    fn evicted(&mut self, _pod: &CachedPod) {}
    fn check_in_place(&mut self, pod: &CachedPod) -> Result<(), RestrictionError> {
        self.calls().in_place += 1;
        if self.mocks.in_place_update_fails {
            Err(RestrictionError::NotInGroup {
                action: "in-place update",
                pod: pods::name(pod).into(),
            })
        } else {
            Ok(())
        }
    }
    fn in_place_started(&mut self, _pod: &CachedPod, _s: &mut UpdaterState, _now: Timestamp) {}
    fn deferral_reason(&self, _pod: &CachedPod) -> Skip {
        Skip::ResizeDeferred
    }
}

/// Upstream's loop fixture: selectors by VPA name (parsed as the binary parses a `/scale` selector), the
/// pod's controller owner as its top-most controller, the strongest VPA of that target as the binary
/// picks it.
struct LoopView {
    selectors: BTreeMap<String, LabelSelector>,
    recommendations: LoopRecommendationProcessor,
    priorities: LoopPriorityProcessor,
    mocks: Mocks,
    calls: Arc<Mutex<Calls>>,
    fetched: Cell<bool>,
}

impl ClusterView for LoopView {
    type Gate = MockGate;
    fn namespace_labels(&self, _namespace: &str) -> Option<BTreeMap<String, String>> {
        // Upstream's doubles have no namespaces; no vector sets a namespace selector.
        None
    }
    fn fetch_selector(&self, vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        self.fetched.set(true);
        let name = vpa.metadata.name.clone().unwrap_or_default();
        self.selectors
            .get(&name)
            .map(|_| ())
            .ok_or_else(|| "no selector".into())
    }
    fn controlling_vpa(&self, pod: &CachedPod, selected: &Candidates) -> Option<usize> {
        let owner = pods::controller(pod)?;
        // Upstream: among the VPAs of the pod's top-most controller whose selector selects the pod, the
        // strongest (the binary reads one selector per target, so it can pick the strongest first).
        let candidates: Vec<&VerticalPodAutoscaler> = selected
            .for_target(&owner.namespace, &owner.kind, &owner.name)
            .iter()
            .map(|&i| selected.vpas[i].as_ref())
            .filter(|v| {
                self.selectors
                    .get(v.metadata.name.as_deref().unwrap_or_default())
                    .is_some_and(|s| {
                        tailor_core::target::selector_matches(s, pods::labels(pod)).unwrap_or(false)
                    })
            })
            .collect();
        let strongest = tailor_kube::index::strongest(candidates)?;
        selected
            .vpas
            .iter()
            .position(|v| std::ptr::eq(v.as_ref(), strongest))
    }
    fn gate(&self, _vpa: &VerticalPodAutoscaler, _pods: &[Arc<CachedPod>]) -> MockGate {
        MockGate {
            mocks: self.mocks,
            calls: self.calls.clone(),
        }
    }
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        _pod: &CachedPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        match self.recommendations {
            LoopRecommendationProcessor::Identity => Ok(vpa
                .status
                .as_ref()
                .and_then(|s| s.recommendation.clone())
                .map(Arc::new)),
        }
    }
    fn priority(
        &self,
        pod: &CachedPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String> {
        match self.priorities {
            LoopPriorityProcessor::Real => {
                pod_priority(pod, rec.map(|r| r.as_ref())).map_err(|e| e.to_string())
            }
        }
    }
    fn resize_plan(
        &self,
        _pod: &CachedPod,
        _vpa: &VerticalPodAutoscaler,
        _now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        Ok(single_resize_patch())
    }
}

/// Upstream's fake status validator: the answer of `config.admissionControllerStatusValid`.
struct VectorStatus {
    valid: bool,
}

impl AdmissionStatus for VectorStatus {
    async fn check(&self, _now: Timestamp) -> Result<(), String> {
        if self.valid {
            Ok(())
        } else {
            Err("the admission controller's status is not valid".into())
        }
    }
}

/// The cycles of a loop vector: `cycles`, or the one given at the top level.
fn loop_cycles(i: inputs::LoopInput) -> Result<Vec<(String, Cycle)>, CaseError> {
    match (i.cycles, i.vpas, i.pods, i.mocks) {
        (Some(cycles), None, None, None) => Ok(cycles
            .into_iter()
            .enumerate()
            .map(|(n, c)| (format!("input.cycles[{n}]"), c))
            .collect()),
        (Some(_), ..) => Err(at(
            "input",
            "`cycles` excludes top-level `vpas`, `pods` and `mocks`",
        )),
        (None, vpas, pods, Some(mocks)) => Ok(vec![(
            "input".to_owned(),
            Cycle {
                vpas: vpas.unwrap_or_default(),
                pods: pods.unwrap_or_default(),
                mocks,
            },
        )]),
        (None, _, _, None) => Err(at("input.mocks", "missing (or give `cycles`)")),
    }
}

/// Loop vectors: upstream's `RunOnce` on one updater, once per cycle, through the binary's
/// [`Updater::iterate`] (admission-status gate, then the iteration) over upstream's doubles.
async fn updater_loop(input: &Value) -> Out {
    let i: inputs::LoopInput = parse(input)?;
    let c = &i.config;
    if !c.controller_fetcher.starts_with("identity") {
        return Err(at(
            "input.config.controllerFetcher",
            format!(
                "{:?}: only the identity fetcher (the pod's controller owner is its top-most controller) is modelled",
                c.controller_fetcher
            ),
        ));
    }
    let status = loop_status(c)?;
    let rate = |r: &LoopRateLimit| match r {
        LoopRateLimit::Unlimited => RateSettings::from_flags(0.0, 0),
    };
    let actuator = Recorder::new(rate(&c.eviction_rate_limit), rate(&c.in_place_rate_limit));
    let (recommendations, priorities, admission) = (
        c.recommendation_processor,
        c.priority_processor,
        c.eviction_admission,
    );
    let config = loop_iteration_config(&i);
    check_controllers(&i.controllers)?;
    let selectors = loop_selectors(&i.selectors)?;
    let several = i.cycles.is_some();
    let calls = Arc::new(Mutex::new(Calls::default()));
    let mut updater = Updater {
        config,
        state: UpdaterState::default(),
        view: LoopView {
            selectors,
            recommendations,
            priorities,
            mocks: Mocks::default(),
            calls: calls.clone(),
            fetched: Cell::new(false),
        },
        actuator,
        status,
        vpas: Box::new(Vec::new),
        pods: Box::new(Vec::new),
        metrics: Arc::new(Metrics::new()),
    };
    let mut per_cycle = Vec::new();
    for (path, cycle) in loop_cycles(i)? {
        per_cycle.push(loop_cycle(&mut updater, &calls, &path, cycle, admission).await?);
    }
    Ok(if several {
        json!({"perCycle": per_cycle})
    } else {
        per_cycle.pop().unwrap_or(Value::Null)
    })
}

/// The updater of loop vectors, over upstream's doubles.
type LoopUpdater = Updater<LoopView, Recorder, VectorStatus>;

/// The status validator of a loop vector's `config`: none when the updater does not use the admission
/// controller's status, else the vector's answer (then required).
fn loop_status(c: &inputs::LoopConfig) -> Result<Option<VectorStatus>, CaseError> {
    match (
        c.use_admission_controller_status,
        c.admission_controller_status_valid,
    ) {
        // Upstream consults no validator then; its answer cannot matter.
        (false, _) => Ok(None),
        (true, Some(valid)) => Ok(Some(VectorStatus { valid })),
        (true, None) => Err(at(
            "input.config.admissionControllerStatusValid",
            "required when useAdmissionControllerStatus is true",
        )),
    }
}

/// The iteration settings of a loop vector: its `config`'s thresholds and ignored namespaces and its feature
/// gates, with the binary's behaviour everywhere else.
fn loop_iteration_config(i: &inputs::LoopInput) -> IterationConfig {
    let c = &i.config;
    IterationConfig {
        priority: priority_config(&PriorityThresholds {
            min_change_priority: c.min_change_priority,
            pod_lifetime_update_threshold: c.pod_lifetime_update_threshold,
            evict_after_oom_threshold: c.evict_after_oom_threshold,
        }),
        gates: (&i.feature_gates).into(),
        ignored_namespaces: c.ignored_namespaces.clone(),
        in_place_honours_deferrals: true,
        fair_order: true,
        webhook_scope: Default::default(),
        skip_conflicting_vpas: true,
        unsized_replacement_probe_interval: None,
    }
}

/// A loop vector's `selectors` by VPA name, parsed as the binary parses a `/scale` selector.
fn loop_selectors(
    texts: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, LabelSelector>, CaseError> {
    let mut selectors = BTreeMap::new();
    for (name, text) in texts {
        let path = format!("input.selectors.{name}");
        let parsed = tailor_core::label_selector::parse(text).map_err(|e| at(&path, e))?;
        // A selector that cannot be evaluated (an empty set) is refused here, not read as "no match".
        tailor_core::target::selector_matches(&parsed, &BTreeMap::new())
            .map_err(|e| at(&path, e))?;
        selectors.insert(name.clone(), parsed);
    }
    Ok(selectors)
}

/// One cycle of a loop vector (at `path`): its VPAs, pods and mocks given to `updater`, one
/// [`Updater::iterate`], and what it did as the vector's `expected` says it.
async fn loop_cycle(
    updater: &mut LoopUpdater,
    calls: &Mutex<Calls>,
    path: &str,
    cycle: Cycle,
    admission: LoopAdmission,
) -> Out {
    let vpas = cycle_vpas(path, &cycle.vpas, admission)?;
    let all = pods_of(&format!("{path}.pods"), &cycle.pods)?;
    *calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Calls::default();
    updater.view.mocks = cycle.mocks;
    updater.view.fetched.set(false);
    updater.vpas = Box::new(move || vpas.clone());
    updater.pods = Box::new(move || all.clone());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let outcome = updater.iterate(Timestamp::now(), deadline).await;
    let (alive, pods_listed) = match &outcome {
        Outcome::AdmissionNotAlive(_) => (false, false),
        Outcome::Ran(report) => (true, report.pods_listed),
    };
    let calls = calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !calls.unexpected.is_empty() {
        return Err(at(
            &format!("{path}.mocks"),
            format!("unmocked calls {:?}", calls.unexpected),
        ));
    }
    Ok(json!({
        "admissionAlive": alive,
        "selectorFetched": updater.view.fetched.get(),
        "evictCalls": calls.evict,
        "inPlaceUpdateCalls": calls.in_place,
        "canUnboostCalls": calls.unboost,
        "podsListed": pods_listed,
    }))
}

/// A cycle's VPAs; under `admission`, none may have what the shipped admission would refuse to admit.
fn cycle_vpas(
    path: &str,
    list: &[Value],
    admission: LoopAdmission,
) -> Result<Vec<Arc<VerticalPodAutoscaler>>, CaseError> {
    let vpas: Vec<Arc<VerticalPodAutoscaler>> = list
        .iter()
        .enumerate()
        .map(|(n, v)| vpa_of(&format!("{path}.vpas[{n}]"), v).map(Arc::new))
        .collect::<Result<_, _>>()?;
    // The iteration runs the shipped scaling-direction admission, which admits every pod while no
    // VPA has `evictionRequirements`.
    match admission {
        LoopAdmission::AdmitAll => {
            if let Some(n) = vpas.iter().position(|v| {
                v.spec.update_policy.as_ref().is_some_and(|p| {
                    p.eviction_requirements
                        .as_ref()
                        .is_some_and(|r| !r.is_empty())
                })
            }) {
                return Err(at(
                    &format!("{path}.vpas[{n}].spec.updatePolicy.evictionRequirements"),
                    "config.evictionAdmission \"admitAll\" admits every pod; the shipped admission would not",
                ));
            }
        }
    }
    Ok(vpas)
}

/// Evaluates one vector (`kind`, `input`) and returns what the shipped functions give, shaped like the
/// vector's `expected`. A field of `input` the evaluation would not read, or a value it cannot reproduce,
/// is an error naming the field.
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

/// The fields a case of a vector file may have (README "File layout").
const CASE_FIELDS: [&str; 6] = ["id", "kind", "input", "expected", "source", "notes"];

/// Evaluates one case of a vector file (`{"id", "kind", "input", "expected"?, "source"?, "notes"?}`): an
/// unknown field of the case, or an error of [`evaluate`], is an error naming the case's id.
pub async fn evaluate_case(case: &Value) -> Out {
    let id = case["id"].as_str().unwrap_or("?");
    let fail = |e: CaseError| CaseError(format!("{id}: {e}"));
    let Some(fields) = case.as_object() else {
        return Err(fail(CaseError("a case is an object".into())));
    };
    if let Some(unknown) = fields.keys().find(|k| !CASE_FIELDS.contains(&k.as_str())) {
        return Err(fail(CaseError(format!(
            "unknown field {unknown:?} (a case has {})",
            CASE_FIELDS.join(", ")
        ))));
    }
    let kind = case["kind"]
        .as_str()
        .ok_or_else(|| fail(CaseError("no kind".into())))?;
    evaluate(kind, &case["input"]).await.map_err(fail)
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
