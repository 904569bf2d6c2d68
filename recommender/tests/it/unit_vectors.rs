//! Conformance: every recommender-kind vector of `tests/data/recommender/unit-vectors.json` (drawn from
//! upstream's unit tests). Kinds owned elsewhere are reported, not run: `container_policy` and `capping`
//! (tailor-core), `limitrange_capping` (updater/admission path, tailor-admission).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tailor_crds::{VerticalPodAutoscalerCondition, VerticalPodAutoscalerStatus};
use tailor_engine::estimate::{
    BoundChains, ContainerRecommendation, Estimator, RawEstimate, RecommenderConfig,
    apply_integer_cpu, confidence_from, estimate_with, extract_container_name, humanize_memory,
    integer_cpu, map_to_list, memory_quantity, round_up_to_scale,
};
use tailor_engine::histogram::{
    DecayingHistogram, Histogram, HistogramCheckpoint, HistogramOptions, ZERO_TIME,
};
use tailor_engine::model::{
    AggregateCheckpoint, AggregateContainerState, AggregationsConfig, ClusterState, ContainerId,
    ContainerState, Labels, PodPhase, Sample, SampleSink, Selector, VpaState,
};
use tailor_engine::policy::Resources;
use tailor_engine::quantity::parse_milli;
use tailor_engine::units::{self, Nanos, Resource};
use tailor_recommender::ingest::PodFilter;
use tailor_recommender::selection;
use tailor_recommender::views::target::{self, TargetKey, TargetLookup};
use tailor_recommender::writers::checkpoint_writer::{
    CheckpointCandidate, checkpoint_plan, fetching_history, may_start,
};
use tailor_recommender::writers::status_writer::{Findings, plan_status, to_api_recommendation};

const OWNED_ELSEWHERE: [&str; 3] = ["container_policy", "capping", "limitrange_capping"];
/// Vector ids deliberately skipped (each is a row in DEVIATIONS.md). Empty: none.
const EXCLUDED: [&str; 0] = [];

fn t(s: &str) -> Nanos {
    let st = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("bad time {s}: {e}"));
    match st.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

fn ts(v: &Value) -> Option<Nanos> {
    v.as_str().map(t)
}

fn fmt_t(n: Nanos) -> String {
    if n == ZERO_TIME {
        return "0001-01-01T00:00:00Z".into();
    }
    let st = if n >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(n as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_nanos(n.unsigned_abs())
    };
    humantime::format_rfc3339(st).to_string()
}

fn opts(v: &Value) -> &'static HistogramOptions {
    if let Some(p) = v.get("preset").and_then(Value::as_str) {
        return match p {
            "vpa_cpu" => HistogramOptions::vpa_cpu(),
            "vpa_memory" => HistogramOptions::vpa_memory(),
            other => panic!("unknown preset {other}"),
        };
    }
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("missing {k}"));
    let o = match v["type"].as_str() {
        Some("linear") => HistogramOptions::linear(f("max_value"), f("bucket_size"), f("epsilon")),
        Some("exponential") => HistogramOptions::exponential(
            f("max_value"),
            f("first_bucket_size"),
            f("ratio"),
            f("epsilon"),
        ),
        other => panic!("unknown options {other:?}"),
    };
    Box::leak(Box::new(o.expect("valid options")))
}

fn secs(v: &Value) -> i64 {
    (v.as_f64().expect("seconds") * 1e9).round() as i64
}

// ---------------------------------------------------------------------------------------------------------
// Comparison

#[derive(Clone, Copy)]
enum Tol {
    Exact,
    Relative(f64),
}

fn tol_of(v: &Value) -> Tol {
    match v.get("relative").and_then(Value::as_f64) {
        Some(r) => Tol::Relative(r.max(1e-12)),
        None => Tol::Exact,
    }
}

/// `expected` ⊆ `got`: objects compare only expected keys; numbers with the tolerance.
fn matches(expected: &Value, got: &Value, tol: Tol) -> bool {
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => e
            .iter()
            .all(|(k, ev)| g.get(k).is_some_and(|gv| matches(ev, gv, tol))),
        (Value::Array(e), Value::Array(g)) => {
            e.len() == g.len() && e.iter().zip(g).all(|(a, b)| matches(a, b, tol))
        }
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            match tol {
                Tol::Exact => a == b,
                Tol::Relative(r) => a == b || ((a - b).abs() <= r * a.abs().max(b.abs())),
            }
        }
        (a, b) => a == b,
    }
}

fn same_set(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

fn lookup<'a>(results: &'a BTreeMap<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = results.get(path) {
        return Some(v);
    }
    let (head, rest) = path.split_once('.')?;
    let mut v = results.get(head)?;
    for part in rest.split('.') {
        v = v.get(part)?;
    }
    Some(v)
}

/// Resolves an expected key against results: plain ids, dotted paths, `A == B`, `A != 0`, `A non-empty`.
fn resolve(results: &BTreeMap<String, Value>, key: &str) -> Option<Value> {
    if let Some((a, b)) = key.split_once(" == ") {
        return Some(json!(lookup(results, a)? == lookup(results, b)?));
    }
    if let Some(a) = key.strip_suffix(" != 0") {
        return Some(json!(lookup(results, a)?.as_f64()? != 0.0));
    }
    if let Some(a) = key.strip_suffix(" non-empty") {
        let v = lookup(results, a)?;
        return Some(json!(v.as_object().map_or(!v.is_null(), |o| !o.is_empty())));
    }
    lookup(results, key).cloned()
}

struct Outcome {
    failures: Vec<String>,
}

fn check_results(v: &Value, results: &BTreeMap<String, Value>, out: &mut Outcome) {
    let id = v["id"].as_str().unwrap_or("?");
    let tol = tol_of(&v["tolerance"]);
    for (k, ev) in v["expected"].as_object().into_iter().flatten() {
        match resolve(results, k) {
            Some(g) if matches(ev, &g, tol) => {}
            // "<x>_equals": "<description of the histogram it must equal>" → our equality check must hold.
            Some(g) if k.ends_with("_equals") && ev.is_string() && g == json!(true) => {}
            // Condition lists: upstream's assertion does not fix an order; ours is sorted by type.
            Some(Value::Array(g))
                if k == "conditions" && ev.as_array().is_some_and(|e| same_set(e, &g)) => {}
            Some(g) => out
                .failures
                .push(format!("{id}: {k}: expected {ev}, got {g}")),
            None => out.failures.push(format!("{id}: {k}: no result")),
        }
    }
    // Derived values are stricter checks of the same algorithm; keys that do not resolve are descriptive.
    for (k, ev) in v
        .get("expected_derived")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(g) = resolve(results, k)
            && !matches(ev, &g, Tol::Relative(1e-12))
        {
            out.failures
                .push(format!("{id}: derived {k}: expected {ev}, got {g}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Histogram vectors

enum H {
    Plain(Histogram),
    Decaying(DecayingHistogram),
}

impl H {
    fn plain(&self) -> &Histogram {
        match self {
            H::Plain(h) => h,
            H::Decaying(d) => d.histogram(),
        }
    }
    fn cp(&self) -> HistogramCheckpoint {
        match self {
            H::Plain(h) => h.save_to_checkpoint(),
            H::Decaying(d) => d.save_to_checkpoint(),
        }
    }
    fn reference(&self) -> Option<Nanos> {
        match self {
            H::Plain(_) => None,
            H::Decaying(d) => d.reference_timestamp(),
        }
    }
}

fn cp_json(cp: &HistogramCheckpoint) -> Value {
    let bw: serde_json::Map<String, Value> = cp
        .bucket_weights
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut o = json!({"total_weight": cp.total_weight, "bucket_weights": bw});
    if let Some(r) = cp.reference_timestamp {
        o["reference_timestamp"] = json!(fmt_t(r));
    }
    o
}

fn cp_from_json(v: &Value) -> Option<HistogramCheckpoint> {
    if v.is_null() {
        return None;
    }
    let bucket_weights = v["bucket_weights"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, w)| {
                    (
                        k.parse::<i64>().expect("index"),
                        w.as_u64().expect("weight") as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Some(HistogramCheckpoint {
        reference_timestamp: ts(&v["reference_timestamp"]),
        bucket_weights,
        total_weight: v["total_weight"].as_f64().unwrap_or(0.0),
    })
}

fn state_json(h: &H) -> Value {
    let p = h.plain();
    let bw: serde_json::Map<String, Value> = p
        .buckets()
        .map(|(i, w)| (i.to_string(), json!(w)))
        .collect();
    let mut o = json!({"total_weight": p.total_weight(), "bucket_weights": bw, "min_bucket": p.min_bucket(), "max_bucket": p.max_bucket()});
    if let Some(r) = h.reference() {
        o["reference_timestamp"] = json!(fmt_t(r));
    }
    o
}

fn run_histogram_ops(v: &Value) -> BTreeMap<String, Value> {
    let input = &v["input"];
    let mut hs: BTreeMap<String, H> = BTreeMap::new();
    for (name, spec) in input["histograms"].as_object().expect("histograms") {
        let o = opts(&spec["options"]);
        let h = match spec["half_life_s"].as_f64() {
            Some(hl) => H::Decaying(DecayingHistogram::new(o, (hl * 1e9) as i64)),
            None => H::Plain(Histogram::new(o)),
        };
        hs.insert(name.clone(), h);
    }
    let mut results = BTreeMap::new();
    for op in input["ops"].as_array().expect("ops") {
        let hname = op["h"].as_str().unwrap_or("h").to_string();
        let id = op["id"].as_str().map(String::from);
        let value = op["value"].as_f64().unwrap_or(0.0);
        let weight = op["weight"].as_f64().unwrap_or(0.0);
        let time = ts(&op["time"]).unwrap_or(0);
        match op["op"].as_str().expect("op") {
            "add" => match hs.get_mut(&hname).expect("histogram") {
                H::Plain(h) => h.add_sample(value, weight),
                H::Decaying(d) => d.add_sample(value, weight, time),
            },
            "subtract" => match hs.get_mut(&hname).expect("histogram") {
                H::Plain(h) => h.subtract_sample(value, weight),
                H::Decaying(d) => d.subtract_sample(value, weight, time),
            },
            "merge" => {
                let from = hs
                    .remove(op["from"].as_str().expect("from"))
                    .expect("from histogram");
                match (
                    hs.get_mut(op["into"].as_str().expect("into"))
                        .expect("into histogram"),
                    &from,
                ) {
                    (H::Plain(a), H::Plain(b)) => a.merge(b),
                    (H::Decaying(a), H::Decaying(b)) => a.merge(b),
                    _ => panic!("merge of different kinds"),
                }
                hs.insert(op["from"].as_str().unwrap_or_default().to_string(), from);
            }
            "percentile" => {
                let p = op["p"].as_f64().expect("p");
                results.insert(id.expect("id"), json!(hs[&hname].plain().percentile(p)));
            }
            "is_empty" => {
                results.insert(id.expect("id"), json!(hs[&hname].plain().is_empty()));
            }
            "save_checkpoint" => {
                results.insert(id.expect("id"), cp_json(&hs[&hname].cp()));
            }
            "load_checkpoint" => {
                let cpv = match &op["checkpoint"] {
                    Value::String(r) if r.starts_with('$') => {
                        results.get(&r[1..]).cloned().unwrap_or(Value::Null)
                    }
                    other => other.clone(),
                };
                let cp = cp_from_json(&cpv);
                let r = match hs.get_mut(&hname).expect("histogram") {
                    H::Plain(h) => h.load_from_checkpoint(cp.as_ref()),
                    H::Decaying(d) => d.load_from_checkpoint(cp.as_ref()),
                };
                results.insert(id.expect("id"), json!({"error": r.is_err()}));
                results.insert(
                    format!("{hname}.min_bucket_after_load"),
                    json!(hs[&hname].plain().min_bucket()),
                );
            }
            "state" => {
                results.insert(id.expect("id"), state_json(&hs[&hname]));
            }
            "equals" => {
                let (a, b) = (
                    &hs[op["a"].as_str().expect("a")],
                    &hs[op["b"].as_str().expect("b")],
                );
                let eq = match (a, b) {
                    (H::Plain(x), H::Plain(y)) => x.equals(y),
                    (H::Decaying(x), H::Decaying(y)) => x.equals(y),
                    _ => false,
                };
                results.insert(id.expect("id"), json!(eq));
            }
            other => panic!("unknown op {other}"),
        }
    }
    results
}

fn run_histogram_options(v: &Value) -> BTreeMap<String, Value> {
    let o = opts(&v["input"]["options"]);
    let e = &v["expected"];
    let starts: serde_json::Map<String, Value> = e["bucket_start"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| (k.clone(), json!(o.bucket_start(k.parse().expect("index")))))
        .collect();
    let finds: Vec<Value> = e["find_bucket"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let x = p[0].as_f64().expect("value");
            json!([x, o.find_bucket(x)])
        })
        .collect();
    BTreeMap::from([
        ("num_buckets".to_string(), json!(o.num_buckets())),
        ("epsilon".to_string(), json!(o.epsilon())),
        ("bucket_start".to_string(), Value::Object(starts)),
        ("find_bucket".to_string(), Value::Array(finds)),
    ])
}

// ---------------------------------------------------------------------------------------------------------
// Estimators

fn estimator(v: &Value) -> Estimator {
    let base = || Box::new(estimator(&v["base"]));
    match v["type"].as_str().expect("type") {
        "const" => Estimator::Const(v["value"].as_i64().expect("value")),
        "percentile" => Estimator::Percentile(v["p"].as_f64().expect("p")),
        "margin" => Estimator::Margin {
            fraction: v["fraction"].as_f64().expect("fraction"),
            base: base(),
        },
        "confidence_multiplier" => Estimator::Confidence {
            multiplier: v["multiplier"].as_f64().expect("multiplier"),
            exponent: v["exponent"].as_f64().expect("exponent"),
            interval: secs(&v["confidence_interval_s"]),
            base: base(),
        },
        "min_resource" => Estimator::MinResource {
            min: v["min"].as_i64().expect("min"),
            base: base(),
        },
        other => panic!("unknown estimator {other}"),
    }
}

fn aggregate_from(v: &Value) -> AggregateContainerState {
    let mut agg = AggregateContainerState::new(&AggregationsConfig::default(), 0);
    for (key, which) in [("cpu_histogram", 0), ("memory_histogram", 1)] {
        let Some(h) = v.get(key) else { continue };
        let hl = h["half_life_s"]
            .as_f64()
            .map_or(86_400_000_000_000, |s| (s * 1e9) as i64);
        let mut d = DecayingHistogram::new(opts(&h["options"]), hl);
        for s in h["samples"].as_array().into_iter().flatten() {
            d.add_sample(
                s["value"].as_f64().expect("value"),
                s["weight"].as_f64().expect("weight"),
                ts(&s["time"]).unwrap_or(0),
            );
        }
        if which == 0 {
            agg.cpu = d;
        } else {
            agg.memory = d;
        }
    }
    for s in v
        .get("cpu_usage_samples")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        agg.add_cpu(
            s["cpu_millicores"].as_i64().expect("millicores"),
            t(s["time"].as_str().expect("time")),
        );
    }
    agg
}

fn run_estimator(v: &Value) -> BTreeMap<String, Value> {
    let agg = aggregate_from(&v["input"]["aggregate"]);
    let cpu = estimator(&v["input"]["estimator"]["cpu"]).estimate(Resource::Cpu, &agg);
    let mem = estimator(&v["input"]["estimator"]["memory"]).estimate(Resource::Memory, &agg);
    BTreeMap::from([
        ("cpu_millicores".to_string(), json!(cpu)),
        ("memory_bytes".to_string(), json!(mem)),
        (
            "cpu_cores".to_string(),
            json!(units::cores_from_cpu_amount(cpu)),
        ),
    ])
}

fn run_confidence(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let c = confidence_from(
        ts(&i["first_sample_start"]).unwrap_or(ZERO_TIME),
        ts(&i["last_sample_start"]).unwrap_or(ZERO_TIME),
        i["total_samples_count"].as_u64().expect("count"),
        secs(&i["confidence_interval_s"]),
    );
    BTreeMap::from([("confidence".to_string(), json!(c))])
}

fn resources_json(r: &Resources) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(c) = r.cpu {
        m.insert("cpu".into(), json!(c));
    }
    if let Some(b) = r.memory {
        m.insert("memory".into(), json!(b));
    }
    Value::Object(m)
}

fn keys(r: &Resources) -> Value {
    let mut k = Vec::new();
    if r.cpu.is_some() {
        k.push("cpu");
    }
    if r.memory.is_some() {
        k.push("memory");
    }
    json!(k)
}

fn run_pod_recommendation(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let mut results = BTreeMap::new();
    if let Some(map) = i.get("map_to_list").and_then(Value::as_object) {
        let f = &i["format"];
        let config = RecommenderConfig {
            humanize_memory: f["humanize_memory"].as_bool().unwrap_or(false),
            round_cpu_millicores: f["round_cpu_millicores"].as_i64().unwrap_or(1),
            round_memory_bytes: f["round_memory_bytes"].as_i64().unwrap_or(1),
            ..Default::default()
        };
        let raw: BTreeMap<String, RawEstimate> = map
            .iter()
            .map(|(name, r)| {
                let res = |b: &str| Resources {
                    cpu: r[b]["cpu"].as_i64(),
                    memory: r[b]["memory"].as_i64(),
                };
                (
                    name.clone(),
                    RawEstimate {
                        target: res("target"),
                        lower_bound: res("lower_bound"),
                        upper_bound: res("upper_bound"),
                    },
                )
            })
            .collect();
        let list = map_to_list(&raw, &config);
        results.insert(
            "order".into(),
            json!(
                list.iter()
                    .map(|c| c.container_name.clone())
                    .collect::<Vec<_>>()
            ),
        );
        let targets: Vec<Value> = list
            .iter()
            .filter(|c| c.uncapped_target == c.target)
            .map(|c| json!({"container": c.container_name, "cpu": c.target.cpu, "memory": c.target.memory}))
            .collect();
        results.insert("targets".into(), json!(targets));
        return results;
    }
    let e = &i["estimators"];
    let pair = |b: &str| [estimator(&e[b]["cpu"]), estimator(&e[b]["memory"])];
    let chains = BoundChains {
        target: pair("target"),
        lower_bound: pair("lower_bound"),
        upper_bound: pair("upper_bound"),
    };
    let config = RecommenderConfig {
        pod_min_cpu_millicores: i["pod_min_cpu_millicores"].as_f64().expect("min cpu"),
        pod_min_memory_mb: i["pod_min_memory_mb"].as_f64().expect("min mem"),
        ..Default::default()
    };
    let containers = i["containers"].as_object().expect("containers");
    let min = config.min_resources(containers.len());
    let agg = AggregateContainerState::new(&AggregationsConfig::default(), 0);
    for (name, c) in containers {
        let controlled = match c.get("controlled_resources").and_then(Value::as_array) {
            None => (true, true),
            Some(l) => (
                l.iter().any(|x| x == "cpu"),
                l.iter().any(|x| x == "memory"),
            ),
        };
        let r = estimate_with(&chains, &agg, min, controlled);
        results.insert(
            name.clone(),
            json!({
                "target": resources_json(&r.target), "lower_bound": resources_json(&r.lower_bound),
                "upper_bound": resources_json(&r.upper_bound), "target_keys": keys(&r.target),
                "lower_bound_keys": keys(&r.lower_bound), "upper_bound_keys": keys(&r.upper_bound),
            }),
        );
    }
    results
}

// ---------------------------------------------------------------------------------------------------------
// Container windows and OOM

#[derive(Default)]
struct Recorder {
    calls: Vec<Value>,
}

impl SampleSink for Recorder {
    fn add_cpu(&mut self, millicores: i64, t: Nanos) {
        self.calls.push(json!({"histogram": "cpu", "call": "add", "value": units::cores_from_cpu_amount(millicores), "weight": 0.1, "time": fmt_t(t)}));
    }
    fn add_memory(&mut self, bytes: i64, t: Nanos) {
        self.calls.push(json!({"histogram": "memory", "call": "add", "value": bytes as f64, "weight": 1.0, "time": fmt_t(t)}));
    }
    fn subtract_memory(&mut self, bytes: i64, t: Nanos) {
        self.calls.push(json!({"histogram": "memory", "call": "subtract", "value": bytes as f64, "weight": 1.0, "time": fmt_t(t)}));
    }
}

fn agg_config(i: &Value) -> AggregationsConfig {
    AggregationsConfig {
        memory_aggregation_interval: secs(&i["memory_aggregation_interval_s"]),
        memory_aggregation_interval_count: i["memory_aggregation_interval_count"]
            .as_i64()
            .expect("count"),
        oom_bump_up_ratio: i["oom_bump_up_ratio"].as_f64().unwrap_or(1.2),
        oom_min_bump_up_bytes: i["oom_min_bump_up_bytes"].as_f64().unwrap_or(104857600.0),
        ..Default::default()
    }
}

fn run_container_ops(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let config = agg_config(i);
    let mut c = ContainerState::default();
    let mut rec = Recorder::default();
    let mut results = Vec::new();
    for op in i["ops"].as_array().expect("ops") {
        let time = t(op["time"].as_str().expect("time"));
        match op["op"].as_str().expect("op") {
            "sample" => {
                let usage = op["usage"].as_i64().expect("usage");
                let r = match op["resource"].as_str() {
                    Some("cpu") => c.add_cpu_sample(time, usage, &mut rec),
                    _ => c.add_memory_sample(time, usage, &config, &mut rec),
                };
                results.push(json!(r.is_ok()));
            }
            "oom" => {
                let r = c.record_oom(
                    time,
                    op["request_bytes"].as_i64().expect("request"),
                    &config,
                    &mut rec,
                );
                results.push(json!(if r.is_ok() { "ok" } else { "error" }));
            }
            other => panic!("unknown op {other}"),
        }
    }
    BTreeMap::from([
        ("results".to_string(), json!(results)),
        ("histogram_calls".to_string(), json!(rec.calls)),
    ])
}

// ---------------------------------------------------------------------------------------------------------
// Aggregates, GC, aggregation, checkpoints

fn run_expiry(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let config = agg_config(i);
    let mut agg =
        AggregateContainerState::new(&config, ts(&i["creation_time"]).unwrap_or(ZERO_TIME));
    agg.total_samples_count = i["total_samples_count"].as_u64().expect("count");
    agg.last_sample_start = ts(&i["last_sample_start"]).unwrap_or(ZERO_TIME);
    BTreeMap::from([(
        "expired".to_string(),
        json!(agg.is_expired(t(i["now"].as_str().expect("now")), &config)),
    )])
}

fn labels(v: &Value) -> Labels {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, x)| (k.clone(), x.as_str().unwrap_or_default().to_string()))
        .collect()
}

fn phase(s: Option<&str>) -> PodPhase {
    match s {
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Pending") => PodPhase::Pending,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Running,
    }
}

const C: ContainerId<'static> = ContainerId {
    namespace: "ns",
    pod: "pod",
    container: "c",
};

fn run_gc(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    if let Some(seq) = i.get("sequence").and_then(Value::as_array) {
        let mut cluster =
            ClusterState::new(AggregationsConfig::default(), secs(&i["gc_interval_s"]));
        cluster.set_last_gc(t(i["last_gc_initial"].as_str().expect("last gc")));
        let first_add = seq.iter().find_map(|a| ts(&a["time"])).unwrap_or(0);
        cluster.set_now(first_add);
        cluster.add_or_update_pod(C.namespace, C.pod, &Labels::new(), PodPhase::Running);
        cluster.add_or_update_container(C).expect("container");
        let mut after = Vec::new();
        for a in seq {
            match a["action"].as_str() {
                Some("gc") => {
                    cluster.rate_limited_garbage_collect(t(a["now"].as_str().expect("now")));
                }
                Some("add_cpu_sample") => {
                    let time = t(a["time"].as_str().expect("time"));
                    cluster.set_now(time);
                    cluster
                        .add_sample(
                            C,
                            Sample {
                                time,
                                resource: Resource::Cpu,
                                usage: 1000,
                            },
                        )
                        .expect("sample");
                }
                other => panic!("unknown action {other:?}"),
            }
            after.push(json!({"aggregate_present": cluster.aggregate_count() > 0}));
        }
        return BTreeMap::from([("after_each".to_string(), json!(after))]);
    }
    let config = agg_config(i);
    let a = &i["aggregate"];
    let mut cluster = ClusterState::new(config, 3_600_000_000_000);
    cluster.set_now(ts(&a["creation_time"]).unwrap_or(0));
    let mut vpa = VpaState::new(
        C.namespace,
        "vpa",
        if i["pod_matched_by_vpa"] == json!(true) {
            Selector::everything()
        } else {
            Selector::Nothing
        },
    );
    vpa.controller_exists = i["controller_exists"].as_bool().unwrap_or(true);
    cluster.add_vpa(vpa);
    cluster.add_or_update_pod(
        C.namespace,
        C.pod,
        &Labels::new(),
        phase(i["pod_phase"].as_str()),
    );
    cluster.add_or_update_container(C).expect("container");
    if let Some(last) = ts(&a["last_sample_start"]) {
        for _ in 0..a["total_samples_count"].as_u64().unwrap_or(0) {
            let _ = cluster.add_sample(
                C,
                Sample {
                    time: last,
                    resource: Resource::Cpu,
                    usage: 1000,
                },
            );
        }
    }
    let deleted = cluster.garbage_collect(t(i["now"].as_str().expect("now"))) > 0;
    BTreeMap::from([("deleted".to_string(), json!(deleted))])
}

fn split_pod(id: &str) -> (&str, &str) {
    id.split_once('/').expect("namespace/pod")
}

fn run_aggregation(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let mut results = BTreeMap::new();
    let build = |vpa_first: bool| {
        let mut cluster = ClusterState::new(AggregationsConfig::default(), 3_600_000_000_000);
        let sample_time = ts(&i["sample_time"]);
        let add_vpa = |cluster: &mut ClusterState| {
            let spec = if let Some(vs) = i.get("vpa") {
                let sel =
                    Selector::parse(vs["selector"].as_str().unwrap_or_default()).expect("selector");
                VpaState::new(vs["namespace"].as_str().expect("namespace"), "vpa", sel)
            } else {
                VpaState::new("namespace-1", "vpa", Selector::everything())
            };
            let mut spec = spec;
            for name in i["checkpointed_containers"]
                .as_array()
                .into_iter()
                .flatten()
            {
                spec.initial_states.insert(
                    name.as_str().unwrap_or_default().into(),
                    AggregateContainerState::new(&AggregationsConfig::default(), 0),
                );
            }
            cluster.add_vpa(spec)
        };
        let mut vpa = None;
        if vpa_first {
            vpa = Some(add_vpa(&mut cluster));
        }
        for p in i["pods"].as_array().into_iter().flatten() {
            let (ns, name) = split_pod(p["id"].as_str().expect("id"));
            cluster.add_or_update_pod(ns, name, &labels(&p["labels"]), phase(p["phase"].as_str()));
            let containers: Vec<(String, Option<&Value>)> = match &p["containers"] {
                Value::Array(a) => a
                    .iter()
                    .map(|c| (c.as_str().unwrap_or_default().to_string(), None))
                    .collect(),
                Value::Object(m) => m.iter().map(|(k, c)| (k.clone(), Some(c))).collect(),
                _ => Vec::new(),
            };
            for (cname, usage) in containers {
                let id = ContainerId {
                    namespace: ns,
                    pod: name,
                    container: &cname,
                };
                cluster.add_or_update_container(id).expect("container");
                if let (Some(u), Some(st)) = (usage, sample_time) {
                    let cpu = units::cpu_amount_from_cores(u["cpu_cores"].as_f64().expect("cpu"));
                    let mem =
                        units::memory_amount_from_bytes(u["memory_bytes"].as_f64().expect("mem"));
                    cluster
                        .add_sample(
                            id,
                            Sample {
                                time: st,
                                resource: Resource::Cpu,
                                usage: cpu,
                            },
                        )
                        .expect("cpu");
                    cluster
                        .add_sample(
                            id,
                            Sample {
                                time: st,
                                resource: Resource::Memory,
                                usage: mem,
                            },
                        )
                        .expect("mem");
                }
            }
        }
        if !vpa_first {
            vpa = Some(add_vpa(&mut cluster));
        }
        (cluster, vpa.unwrap_or(0))
    };
    let orders: Vec<bool> = match i.get("order").and_then(Value::as_array) {
        Some(o) => o.iter().map(|x| x == "vpa_first").collect(),
        None => vec![false],
    };
    let mut pod_counts = Vec::new();
    let sample_time = ts(&i["sample_time"]);
    for vpa_first in orders {
        let (cluster, vpa) = build(vpa_first);
        pod_counts.push(cluster.matching_pods(vpa).count());
        results.insert("aggregate_count".into(), json!(cluster.aggregate_count()));
        results.insert(
            "distinct_label_sets".into(),
            json!(cluster.label_set_count()),
        );
        let mut pods: Vec<String> = cluster
            .matching_pods(vpa)
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect();
        pods.sort();
        results.insert("matching_pods".into(), json!(pods));
        results.insert(
            "vpa_uses_aggregates_of".into(),
            json!(cluster.vpa_container_ids(vpa)),
        );
        let merged = cluster.aggregate_state_by_container_name(vpa);
        results.insert(
            "container_names".into(),
            json!(merged.keys().collect::<Vec<_>>()),
        );
        results.insert(
            "merged_container_names".into(),
            json!(merged.keys().collect::<Vec<_>>()),
        );
        results.insert(
            "total_samples_count".into(),
            json!(
                merged
                    .iter()
                    .map(|(k, a)| (k.clone(), a.total_samples_count))
                    .collect::<BTreeMap<_, _>>()
            ),
        );
        // "<name>.cpu_histogram_equals" / ".memory_histogram_equals": the merged histograms equal fresh ones fed
        // every instance's sample directly (CPU at the sample time, memory peaks at the window end).
        if let Some(st) = sample_time {
            let config = AggregationsConfig::default();
            for (name, agg) in &merged {
                let mut cpu = DecayingHistogram::new(
                    HistogramOptions::vpa_cpu(),
                    config.cpu_histogram_decay_half_life,
                );
                let mut mem = DecayingHistogram::new(
                    HistogramOptions::vpa_memory(),
                    config.memory_histogram_decay_half_life,
                );
                for p in i["pods"].as_array().into_iter().flatten() {
                    if let Some(u) = p["containers"].get(name) {
                        cpu.add_sample(
                            units::cpu_amount_from_cores(u["cpu_cores"].as_f64().unwrap_or(0.0))
                                as f64
                                / 1000.0,
                            0.1,
                            st,
                        );
                        mem.add_sample(
                            u["memory_bytes"].as_f64().unwrap_or(0.0),
                            1.0,
                            st + config.memory_aggregation_interval,
                        );
                    }
                }
                results.insert(
                    format!("{name}.cpu_histogram_equals"),
                    json!(agg.cpu.equals(&cpu)),
                );
                results.insert(
                    format!("{name}.memory_histogram_equals"),
                    json!(agg.memory.equals(&mem)),
                );
            }
        }
    }
    if pod_counts.windows(2).all(|w| w[0] == w[1]) {
        results.insert(
            "pod_count".into(),
            json!(pod_counts.first().copied().unwrap_or(0)),
        );
    }
    results
}

fn histogram_cp_from_status(v: &Value) -> HistogramCheckpoint {
    cp_from_json(v).unwrap_or_default()
}

fn run_checkpoint(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    if i.get("histograms").is_some() {
        return run_histogram_ops(v);
    }
    let mut results = BTreeMap::new();
    let config = AggregationsConfig::default();
    if let Some(a) = i.get("aggregate") {
        let mut agg = AggregateContainerState::new(&config, 0);
        for s in a["cpu_histogram_adds"].as_array().into_iter().flatten() {
            agg.cpu.add_sample(
                s["value"].as_f64().expect("v"),
                s["weight"].as_f64().expect("w"),
                t(s["time"].as_str().expect("t")),
            );
        }
        for s in a["memory_histogram_adds"].as_array().into_iter().flatten() {
            agg.memory.add_sample(
                s["value"].as_f64().expect("v"),
                s["weight"].as_f64().expect("w"),
                t(s["time"].as_str().expect("t")),
            );
        }
        agg.first_sample_start = ts(&a["first_sample_start"]).unwrap_or(ZERO_TIME);
        agg.last_sample_start = ts(&a["last_sample_start"]).unwrap_or(ZERO_TIME);
        agg.total_samples_count = a["total_samples_count"].as_u64().unwrap_or(0);
        let cp = agg.save_to_checkpoint();
        results.insert("version".into(), json!(cp.version));
        results.insert(
            "first_sample_start".into(),
            json!(cp.first_sample_start.map(fmt_t)),
        );
        results.insert(
            "last_sample_start".into(),
            json!(cp.last_sample_start.map(fmt_t)),
        );
        results.insert("total_samples_count".into(), json!(cp.total_samples_count));
        results.insert("last_update_time".into(), json!("~now"));
        results.insert(
            "cpu_histogram.bucket_count".into(),
            json!(cp.cpu_histogram.bucket_weights.len()),
        );
        results.insert(
            "memory_histogram.bucket_count".into(),
            json!(cp.memory_histogram.bucket_weights.len()),
        );
        results.insert("cpu_histogram".into(), cp_json(&cp.cpu_histogram));
        results.insert("memory_histogram".into(), cp_json(&cp.memory_histogram));
        return results;
    }
    if let Some(s) = i.get("checkpoint_status") {
        let cp = AggregateCheckpoint {
            version: s["version"].as_str().unwrap_or_default().into(),
            first_sample_start: ts(&s["first_sample_start"]),
            last_sample_start: ts(&s["last_sample_start"]),
            total_samples_count: s["total_samples_count"].as_u64().unwrap_or(0),
            cpu_histogram: histogram_cp_from_status(&s["cpu_histogram"]),
            memory_histogram: histogram_cp_from_status(&s["memory_histogram"]),
        };
        let mut agg = AggregateContainerState::new(&config, 0);
        let r = agg.load_from_checkpoint(&cp);
        results.insert("error".into(), json!(r.is_err()));
        results.insert("cpu_histogram.is_empty".into(), json!(agg.cpu.is_empty()));
        results.insert(
            "memory_histogram.is_empty".into(),
            json!(agg.memory.is_empty()),
        );
        results.insert(
            "first_sample_start".into(),
            json!(fmt_t(agg.first_sample_start)),
        );
        results.insert(
            "last_sample_start".into(),
            json!(fmt_t(agg.last_sample_start)),
        );
        results.insert("total_samples_count".into(), json!(agg.total_samples_count));
        return results;
    }
    if let Some(times) = i.get("build_checkpoint_at").and_then(Value::as_array) {
        let mut cluster = ClusterState::new(config, 3_600_000_000_000);
        let sel = if i["vpa_matches_container"] == json!(true) {
            Selector::everything()
        } else {
            Selector::Nothing
        };
        let vpa = cluster.add_vpa(VpaState::new(C.namespace, "vpa", sel));
        cluster.add_or_update_pod(C.namespace, C.pod, &Labels::new(), PodPhase::Running);
        cluster.add_or_update_container(C).expect("container");
        for s in i["container_memory_samples"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let time = t(s["time"].as_str().expect("time"));
            cluster
                .add_sample(
                    C,
                    Sample {
                        time,
                        resource: Resource::Memory,
                        usage: s["usage"].as_i64().expect("usage"),
                    },
                )
                .expect("sample");
        }
        let empties: Vec<bool> = times
            .iter()
            .map(|x| {
                let content = cluster.checkpoint_states(vpa, t(x.as_str().expect("time")));
                content
                    .states
                    .get(C.container)
                    .is_none_or(|a| a.memory.is_empty())
            })
            .collect();
        results.insert("memory_histogram_is_empty".into(), json!(empties));
        return results;
    }
    panic!("unknown checkpoint vector shape");
}

// ---------------------------------------------------------------------------------------------------------
// Post-processing, conversions, rounding

fn rec_list(v: &Value) -> Vec<ContainerRecommendation> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let res = |k: &str| Resources {
                cpu: r[k]["cpu"].as_i64(),
                memory: r[k]["memory"].as_i64(),
            };
            ContainerRecommendation {
                container_name: r["container"].as_str().unwrap_or_default().into(),
                target: res("target"),
                lower_bound: res("lower_bound"),
                upper_bound: res("upper_bound"),
                uncapped_target: res("uncapped_target"),
            }
        })
        .collect()
}

fn run_cpu_integer(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let mut results = BTreeMap::new();
    if let Some(r) = i.get("recommendation") {
        let mut recs = rec_list(r);
        let ann: BTreeMap<String, String> = labels(&i["vpa_annotations"]);
        apply_integer_cpu(&mut recs, &ann);
        let out: Vec<Value> = recs
            .iter()
            .map(|c| {
                json!({"container": c.container_name, "target": resources_json(&c.target), "lower_bound": resources_json(&c.lower_bound),
                       "upper_bound": resources_json(&c.upper_bound), "uncapped_target": resources_json(&c.uncapped_target)})
            })
            .collect();
        results.insert("recommendation".into(), json!(out));
    }
    if let Some(r) = i.get("resource_list") {
        let mut res = Resources {
            cpu: r["cpu"].as_i64(),
            memory: r["memory"].as_i64(),
        };
        integer_cpu(&mut res);
        results.insert("resource_list".into(), resources_json(&res));
    }
    if let Some(k) = i.get("key") {
        let name = extract_container_name(
            k.as_str().unwrap_or_default(),
            i["prefix"].as_str().unwrap_or_default(),
            i["suffix"].as_str().unwrap_or_default(),
        );
        results.insert("container_name".into(), json!(name));
    }
    results
}

fn run_conversion(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let a = |n: usize| i["args"][n].as_f64().expect("arg");
    let r = match i["fn"].as_str().expect("fn") {
        "cpu_amount_from_cores" => json!(units::cpu_amount_from_cores(a(0))),
        "cores_from_cpu_amount" => json!(units::cores_from_cpu_amount(a(0) as i64)),
        "memory_amount_from_bytes" => json!(units::memory_amount_from_bytes(a(0))),
        "scale_resource" => json!(units::scale_resource(a(0) as i64, a(1))),
        "resource_amount_from_float" => json!(units::resource_amount_from_float(a(0))),
        other => panic!("unknown fn {other}"),
    };
    BTreeMap::from([("result".to_string(), r)])
}

fn run_rounding(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let mut results = BTreeMap::new();
    match i["fn"].as_str().expect("fn") {
        "round_up_to_scale" => {
            let (r, e) = round_up_to_scale(
                i["value"].as_i64().expect("value"),
                i["scale"].as_i64().expect("scale"),
            );
            results.insert("result".into(), json!(r));
            results.insert("error".into(), json!(e));
        }
        "humanize_memory" => {
            results.insert(
                "result".into(),
                json!(humanize_memory(i["bytes"].as_f64().expect("bytes"))),
            );
        }
        "resources_as_resource_list" => {
            let config = RecommenderConfig {
                humanize_memory: i["humanize_memory"].as_bool().unwrap_or(false),
                round_cpu_millicores: i["round_cpu_millicores"].as_i64().unwrap_or(1),
                round_memory_bytes: i["round_memory_bytes"].as_i64().unwrap_or(1),
                ..Default::default()
            };
            let cpu = tailor_engine::estimate::format_resources(
                Resources {
                    cpu: i["cpu_millicores"].as_i64(),
                    memory: None,
                },
                &config,
            );
            results.insert("cpu_millicores".into(), json!(cpu.cpu));
            let q = memory_quantity(i["memory_bytes"].as_i64().expect("bytes"), &config);
            // Memory is compared by quantity value: report both the exact milli-value and (if whole) the bytes.
            let milli = parse_milli(&q).expect("own quantity parses");
            let e = &v["expected"]["memory"];
            let mut m = serde_json::Map::new();
            if e.get("bytes").is_some() {
                m.insert(
                    "bytes".into(),
                    if milli % 1000 == 0 {
                        json!((milli / 1000) as i64)
                    } else {
                        json!(milli as f64 / 1000.0)
                    },
                );
            }
            if let Some(eq) = e.get("quantity").and_then(Value::as_str) {
                let same = parse_milli(eq).is_ok_and(|x| x == milli);
                m.insert("quantity".into(), if same { json!(eq) } else { json!(q) });
            }
            results.insert("memory".into(), Value::Object(m));
        }
        other => panic!("unknown fn {other}"),
    }
    results
}

// ---------------------------------------------------------------------------------------------------------
// Loop pieces

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(String::from))
        .collect()
}

/// A target lookup answering what the vector says the cluster answered.
struct VectorLookup {
    selector: Result<Option<String>, String>,
    topmost: Result<Option<TargetKey>, String>,
}

impl TargetLookup for VectorLookup {
    fn selector(&self, _: Option<&TargetKey>) -> Result<Option<Selector>, String> {
        self.selector
            .clone()
            .map(|s| s.map(|s| Selector::parse(&s).expect("selector")))
    }

    fn topmost(&self, _: &TargetKey) -> Result<Option<TargetKey>, String> {
        self.topmost.clone()
    }
}

fn run_status(v: &Value) -> BTreeMap<String, Value> {
    let i = &v["input"];
    let mut results = BTreeMap::new();
    match v["kind"].as_str().unwrap_or_default() {
        "vpa_conditions" => {
            let has_recommendation = i["has_recommendation"].as_bool().unwrap_or(false);
            let recommendation = if has_recommendation {
                to_api_recommendation(&[ContainerRecommendation {
                    container_name: "c".into(),
                    ..Default::default()
                }])
            } else {
                None
            };
            let findings = Findings {
                recommendation,
                pods_matched: i["pods_matched"].as_bool().unwrap_or(false),
                ..Default::default()
            };
            let now = tailor_recommender::time::to_time_secs(0).expect("time");
            let status = plan_status(&[], &findings, &now);
            let conds: Vec<Value> = status
                .conditions
                .iter()
                .flatten()
                .map(|c| {
                    json!({"type": c.type_, "status": c.status,
                           "reason": c.reason.clone().unwrap_or_default(),
                           "message": c.message.clone().unwrap_or_default()})
                })
                .collect();
            let present: Vec<&str> = conds.iter().filter_map(|c| c["type"].as_str()).collect();
            let absent: Vec<&str> = ["NoPodsMatched", "RecommendationProvided"]
                .into_iter()
                .filter(|t| !present.contains(t))
                .collect();
            results.insert("absent".into(), json!(absent));
            results.insert("conditions".into(), Value::Array(conds));
        }
        "recommendation_missing_tracking" => {
            let r = selection::track_missing_recommendation(
                i["vpa"].as_str().unwrap_or_default(),
                i["has_recommendation"].as_bool().unwrap_or(false),
                ts(&i["last_logged"]),
                t(i["now"].as_str().expect("now")),
                secs(&i["recommendation_missing_max_duration_s"]),
            );
            results.insert("tracked_as_empty".into(), json!(r.tracked));
            results.insert("last_logged_after".into(), json!(r.last_logged.map(fmt_t)));
            results.insert("error".into(), json!(r.log));
        }
        "recommender_selection" => {
            let sel = selection::is_selected(
                i["recommender_name"].as_str().unwrap_or_default(),
                &strings(&i["vpa_recommenders"]),
                i["vpa_namespace"].as_str().unwrap_or_default(),
                i["vpa_object_namespace"].as_str().unwrap_or_default(),
                &strings(&i["ignored_namespaces"]),
            );
            results.insert("selected".into(), json!(sel));
        }
        "memory_saver" => {
            let selectors: Vec<Selector> = strings(&i["vpa_selectors"])
                .iter()
                .map(|s| Selector::parse(s).expect("selector"))
                .collect();
            let vpa_ns = i["vpa_namespace"].as_str().unwrap_or_default();
            let pod_ns = i["pod_namespace"].as_str().unwrap_or_default();
            let pods: Vec<Labels> = i["pod_labels"]
                .as_array()
                .into_iter()
                .flatten()
                .map(labels)
                .collect();
            let tracked = |memory_saver: bool| {
                let filter = PodFilter::new(memory_saver, selectors.iter().map(|s| (vpa_ns, s)));
                pods.iter().filter(|l| filter.tracks(pod_ns, l)).count()
            };
            results.insert("tracked_pods_default".into(), json!(tracked(false)));
            results.insert("tracked_pods_memory_saver".into(), json!(tracked(true)));
        }
        "vpa_target_validation" => {
            let key = |x: &Value, ns: &str| TargetKey {
                api_version: x["apiVersion"].as_str().unwrap_or_default().into(),
                kind: x["kind"].as_str().unwrap_or_default().into(),
                name: x["name"].as_str().unwrap_or_default().into(),
                namespace: x["namespace"].as_str().unwrap_or(ns).into(),
            };
            let ns = i["vpa_namespace"].as_str().unwrap_or_default();
            let target = (!i["target_ref"].is_null()).then(|| key(&i["target_ref"], ns));
            let sf = &i["selector_fetch"];
            let fetched = match sf["error"].as_str() {
                Some(e) => Err(e.to_string()),
                None => Ok(sf["selector"].as_str().map(String::from)),
            };
            let tc = &i["topmost_controller"];
            let topmost = match tc["error"].as_str() {
                Some(e) => Err(e.to_string()),
                None => Ok((!tc["key"].is_null()).then(|| key(&tc["key"], ns))),
            };
            let lookup = VectorLookup {
                selector: fetched.clone(),
                topmost,
            };
            let r = target::resolve(target.as_ref(), &lookup);
            let selector = match fetched {
                _ if r.selector == Selector::Nothing => "<nothing>".to_string(),
                Ok(Some(s)) if Selector::parse(&s).ok() == Some(r.selector.clone()) => s,
                _ => format!("{:?}", r.selector),
            };
            results.insert("selector".into(), json!(selector));
            results.insert("config_unsupported_message".into(), json!(r.unsupported));
            results.insert("config_deprecated_present".into(), json!(false));
        }
        "checkpoint_writer" => {
            if let Some(vpas) = i["vpas"].as_array() {
                let candidates = vpas
                    .iter()
                    .map(|x| CheckpointCandidate {
                        key: x["name"].as_str().unwrap_or_default().to_string(),
                        last_written: ts(&x["checkpoint_written"]),
                        fetching_history: false,
                    })
                    .collect();
                results.insert("order".into(), json!(checkpoint_plan(candidates)));
            } else if i.get("concurrent_workers").is_some() {
                let workers = i["concurrent_workers"].as_u64().unwrap_or(0) as usize;
                let containers = i["containers_per_vpa"].as_u64().unwrap_or(0) as usize;
                let past_deadline = i["context_already_cancelled"].as_bool().unwrap_or(false);
                let plan = checkpoint_plan(
                    (0..i["vpas"].as_u64().unwrap_or(0))
                        .map(|key| CheckpointCandidate {
                            key,
                            last_written: None,
                            fetching_history: false,
                        })
                        .collect(),
                );
                // The writer's loop: start VPAs while `may_start` allows; each writes all its containers.
                let mut started = 0;
                for _ in plan {
                    if !may_start(started, workers, past_deadline) {
                        break;
                    }
                    started += 1;
                }
                results.insert("checkpoints_written".into(), json!(started * containers));
            } else {
                let status = i["fetching_history_condition_status"].as_str().map(|s| {
                    VerticalPodAutoscalerStatus {
                        conditions: Some(vec![VerticalPodAutoscalerCondition {
                            type_: "FetchingHistory".into(),
                            status: s.into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }
                });
                let fetching = fetching_history(
                    status
                        .as_ref()
                        .and_then(|s| s.conditions.as_deref())
                        .unwrap_or_default(),
                );
                let plan = checkpoint_plan(vec![CheckpointCandidate {
                    key: "vpa",
                    last_written: None,
                    fetching_history: fetching,
                }]);
                results.insert("is_fetching_history".into(), json!(fetching));
                results.insert("skipped_for_checkpointing".into(), json!(plan.is_empty()));
            }
        }
        other => panic!("not a status kind: {other}"),
    }
    results
}

/// The input fields each kind's runner reads; any other field fails the vector (it would be ignored).
const INPUT_FIELDS: &[(&str, &[&str])] = &[
    (
        "aggregate_expiry",
        &[
            "creation_time",
            "last_sample_start",
            "memory_aggregation_interval_count",
            "memory_aggregation_interval_s",
            "now",
            "total_samples_count",
        ],
    ),
    (
        "aggregate_gc",
        &[
            "aggregate",
            "controller_exists",
            "gc_interval_s",
            "last_gc_initial",
            "memory_aggregation_interval_count",
            "memory_aggregation_interval_s",
            "now",
            "pod_matched_by_vpa",
            "pod_phase",
            "sequence",
        ],
    ),
    (
        "aggregation",
        &[
            "checkpointed_containers",
            "live_aggregates_by_container",
            "order",
            "pods",
            "sample_time",
            "vpa",
        ],
    ),
    (
        "checkpoint",
        &[
            "aggregate",
            "build_checkpoint_at",
            "checkpoint_status",
            "container_memory_samples",
            "histograms",
            "ops",
            "vpa_matches_container",
        ],
    ),
    (
        "checkpoint_writer",
        &[
            "concurrent_workers",
            "containers_per_vpa",
            "context_already_cancelled",
            "fetching_history_condition_status",
            "vpas",
        ],
    ),
    (
        "confidence",
        &[
            "confidence_interval_s",
            "first_sample_start",
            "last_sample_start",
            "total_samples_count",
        ],
    ),
    (
        "cpu_integer",
        &[
            "key",
            "prefix",
            "recommendation",
            "resource_list",
            "suffix",
            "vpa_annotations",
        ],
    ),
    ("decaying_histogram", &["histograms", "ops"]),
    ("estimator", &["aggregate", "estimator"]),
    ("histogram_options", &["options"]),
    ("histogram_percentile", &["histograms", "ops"]),
    (
        "memory_peaks",
        &[
            "memory_aggregation_interval_count",
            "memory_aggregation_interval_s",
            "oom_bump_up_ratio",
            "oom_min_bump_up_bytes",
            "ops",
        ],
    ),
    (
        "memory_saver",
        &[
            "pod_labels",
            "pod_namespace",
            "vpa_namespace",
            "vpa_selectors",
        ],
    ),
    (
        "oom_bump",
        &[
            "memory_aggregation_interval_count",
            "memory_aggregation_interval_s",
            "oom_bump_up_ratio",
            "oom_min_bump_up_bytes",
            "ops",
        ],
    ),
    (
        "pod_recommendation",
        &[
            "containers",
            "estimators",
            "format",
            "map_to_list",
            "pod_min_cpu_millicores",
            "pod_min_memory_mb",
        ],
    ),
    (
        "recommendation_missing_tracking",
        &[
            "has_recommendation",
            "last_logged",
            "now",
            "recommendation_missing_max_duration_s",
            "vpa",
        ],
    ),
    (
        "recommender_selection",
        &[
            "ignored_namespaces",
            "recommender_name",
            "vpa_namespace",
            "vpa_object_namespace",
            "vpa_recommenders",
        ],
    ),
    ("resource_conversion", &["args", "fn"]),
    (
        "rounding",
        &[
            "bytes",
            "cpu_millicores",
            "fn",
            "humanize_memory",
            "memory_bytes",
            "round_cpu_millicores",
            "round_memory_bytes",
            "scale",
            "value",
        ],
    ),
    ("vpa_conditions", &["has_recommendation", "pods_matched"]),
    (
        "vpa_target_validation",
        &[
            "selector_fetch",
            "target_ref",
            "topmost_controller",
            "vpa_namespace",
        ],
    ),
];

/// The fields of a vector (the file's layout).
const CASE_FIELDS: [&str; 8] = [
    "id",
    "kind",
    "input",
    "expected",
    "expected_derived",
    "source",
    "note",
    "tolerance",
];

/// A field of the vector or of its input that its kind's runner does not read (it would be ignored):
/// unknown fields, and `live_aggregates_by_container` other than empty (the aggregation runner builds
/// the live aggregates from `pods`).
fn unread_field(v: &Value) -> Option<String> {
    let kind = v["kind"].as_str().unwrap_or_default();
    let Some((_, fields)) = INPUT_FIELDS.iter().find(|(k, _)| *k == kind) else {
        return Some(format!("no field list for kind {kind}"));
    };
    if let Some(k) = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !CASE_FIELDS.contains(&k.as_str()))
    {
        return Some(format!("{k}: unknown vector field"));
    }
    let input = &v["input"];
    if let Some(k) = input
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !fields.contains(&k.as_str()))
    {
        return Some(format!("input.{k}: not read by the {kind} runner"));
    }
    if input["live_aggregates_by_container"]
        .as_object()
        .is_some_and(|m| !m.is_empty())
    {
        return Some("input.live_aggregates_by_container: only an empty map is modelled".into());
    }
    None
}

fn run(v: &Value) -> Option<BTreeMap<String, Value>> {
    Some(match v["kind"].as_str().unwrap_or_default() {
        "histogram_options" => run_histogram_options(v),
        "histogram_percentile" | "decaying_histogram" => run_histogram_ops(v),
        "checkpoint" => run_checkpoint(v),
        "estimator" => run_estimator(v),
        "confidence" => run_confidence(v),
        "pod_recommendation" => run_pod_recommendation(v),
        "memory_peaks" | "oom_bump" => run_container_ops(v),
        "aggregate_expiry" => run_expiry(v),
        "aggregate_gc" => run_gc(v),
        "aggregation" => run_aggregation(v),
        "cpu_integer" => run_cpu_integer(v),
        "resource_conversion" => run_conversion(v),
        "rounding" => run_rounding(v),
        "vpa_conditions"
        | "recommendation_missing_tracking"
        | "recommender_selection"
        | "memory_saver"
        | "vpa_target_validation"
        | "checkpoint_writer" => run_status(v),
        _ => return None,
    })
}

#[test]
fn unit_vectors_conformance() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/recommender/unit-vectors.json"
    );
    let text = std::fs::read_to_string(path).expect("vectors present");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("valid json");
    let mut out = Outcome {
        failures: Vec::new(),
    };
    let (mut total, mut passed, mut elsewhere) = (0, 0, 0);
    let mut unknown = Vec::new();
    for v in &vectors {
        let kind = v["kind"].as_str().unwrap_or_default();
        let id = v["id"].as_str().unwrap_or_default();
        if OWNED_ELSEWHERE.contains(&kind) {
            elsewhere += 1;
            continue;
        }
        if EXCLUDED.contains(&id) {
            continue;
        }
        if let Some(why) = unread_field(v) {
            total += 1;
            out.failures.push(format!("{id}: {why}"));
            continue;
        }
        let Some(results) = run(v) else {
            unknown.push(format!("{id} ({kind})"));
            continue;
        };
        total += 1;
        let before = out.failures.len();
        check_results(v, &results, &mut out);
        if out.failures.len() == before {
            passed += 1;
        }
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} (unit vectors; {elsewhere} of kinds owned by crds/admission not run here)"
    ));
    assert!(unknown.is_empty(), "vectors of unknown kinds: {unknown:?}");
    assert!(
        out.failures.is_empty(),
        "failures:\n{}",
        out.failures.join("\n")
    );
}

/// Every kind run here: a vector or input field its runner does not read fails the vector instead of
/// being ignored.
#[test]
fn an_unread_field_fails_every_kind() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/recommender/unit-vectors.json"
    );
    let vectors: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vectors present"))
            .expect("json");
    for (kind, _) in INPUT_FIELDS {
        let mut v = vectors
            .iter()
            .find(|v| v["kind"] == *kind)
            .unwrap_or_else(|| panic!("no {kind} vector"))
            .clone();
        assert_eq!(unread_field(&v), None, "{}", v["id"]);
        v["input"]["bogus"] = json!(1);
        assert_eq!(
            unread_field(&v),
            Some(format!("input.bogus: not read by the {kind} runner"))
        );
        v["input"].as_object_mut().expect("input").remove("bogus");
        v["tolerancee"] = json!({});
        assert_eq!(
            unread_field(&v),
            Some("tolerancee: unknown vector field".into())
        );
    }
    let mut v = vectors
        .iter()
        .find(|v| v["input"].get("live_aggregates_by_container").is_some())
        .expect("an aggregation vector with live aggregates")
        .clone();
    v["input"]["live_aggregates_by_container"] = json!({"test": {}});
    assert!(unread_field(&v).is_some_and(|e| e.contains("live_aggregates_by_container")));
}
