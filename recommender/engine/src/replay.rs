//! Replays a usage trace (docs/design/trace-format.md §1) through the model exactly as upstream's reference
//! program does, and produces the docs/design/trace-format.md §1.4 output shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tailor_crds::PodResourcePolicy;

use crate::estimate::{
    ContainerExplain, ContainerRecommendation, RecommenderConfig, VpaInput, recommend,
};
use crate::model::{
    AggregationsConfig, ClusterState, ContainerId, Labels, ModelError, PodPhase, Sample, Selector,
    VpaState,
};
use crate::policy::{self, PolicyError, Resources};
use crate::units::{
    Nanos, Resource, cpu_amount_from_cores, duration_from_secs, memory_amount_from_bytes,
    nanos_from_unix_seconds,
};

/// Namespace every trace pod lives in.
pub const NAMESPACE: &str = "default";
/// Interval between aggregate GC passes (upstream's `aggregateContainerStateGCInterval`).
pub const GC_INTERVAL: i64 = 3600 * 1_000_000_000;

/// Per-trace overrides of recommender flags (docs/design/trace-format.md §1.3). Absent fields keep the base
/// configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TraceOptions {
    pub target_cpu_percentile: Option<f64>,
    pub lower_bound_cpu_percentile: Option<f64>,
    pub upper_bound_cpu_percentile: Option<f64>,
    pub target_memory_percentile: Option<f64>,
    pub lower_bound_memory_percentile: Option<f64>,
    pub upper_bound_memory_percentile: Option<f64>,
    pub safety_margin_fraction: Option<f64>,
    pub pod_min_cpu_millicores: Option<f64>,
    pub pod_min_memory_mb: Option<f64>,
    pub memory_aggregation_interval_seconds: Option<f64>,
    pub memory_aggregation_interval_count: Option<i64>,
    pub cpu_histogram_decay_half_life_seconds: Option<f64>,
    pub memory_histogram_decay_half_life_seconds: Option<f64>,
    pub oom_bump_up_ratio: Option<f64>,
    pub oom_min_bump_up_bytes: Option<f64>,
    pub cpu_integer_post_processor_enabled: Option<bool>,
    pub humanize_memory: Option<bool>,
    pub round_cpu_millicores: Option<i64>,
    pub round_memory_bytes: Option<i64>,
    pub confidence_interval_cpu_seconds: Option<f64>,
    pub confidence_interval_memory_seconds: Option<f64>,
}

/// A pod declaration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TracePod {
    /// Pod name.
    pub name: String,
    /// Labels (default `{"app": "workload"}`).
    #[serde(default)]
    pub labels: Option<Labels>,
}

/// One container instance and its samples.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TraceContainer {
    /// Container name.
    pub name: String,
    /// Pod name (default `pod-0`).
    #[serde(default)]
    pub pod: Option<String>,
    /// CPU request (stored, unused by the algorithm).
    #[serde(default)]
    pub cpu_request_cores: Option<f64>,
    /// Memory request; the default OOM value.
    #[serde(default)]
    pub memory_request_bytes: Option<f64>,
    /// `[unix_seconds, cores]`.
    #[serde(default, deserialize_with = "crate::samples::cpu_samples")]
    pub cpu_samples: Vec<[f64; 2]>,
    /// `[unix_seconds, bytes]`.
    #[serde(default, deserialize_with = "crate::samples::memory_samples")]
    pub memory_samples: Vec<[f64; 2]>,
    /// `[unix_seconds, bytes|null, observed_at?]`.
    #[serde(default)]
    pub ooms: Vec<Vec<Option<f64>>>,
}

/// A usage trace (docs/design/trace-format.md §1.1).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// Identifier echoed in the output.
    pub id: String,
    /// Unix seconds of the final GC; none = no final GC.
    #[serde(default)]
    pub now: Option<f64>,
    /// Flag overrides.
    #[serde(default)]
    pub options: Option<TraceOptions>,
    /// Pod declarations.
    #[serde(default)]
    pub pods: Option<Vec<TracePod>>,
    /// Containers.
    #[serde(default)]
    pub containers: Vec<TraceContainer>,
    /// VPA `spec.resourcePolicy`.
    #[serde(default)]
    pub policy: Option<PodResourcePolicy>,
    /// VPA update mode (no effect on recommendations).
    #[serde(default)]
    pub update_mode: Option<String>,
    /// VPA annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Counts of events the model rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discarded {
    /// CPU samples.
    pub cpu: u64,
    /// Memory samples.
    pub memory: u64,
    /// OOMs.
    pub oom: u64,
}

/// One container's recommendation in the docs/design/trace-format.md §1.4 shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputRecommendation {
    /// Container name.
    pub container_name: String,
    /// Target.
    pub target: Resources,
    /// Lower bound.
    pub lower_bound: Resources,
    /// Upper bound.
    pub upper_bound: Resources,
    /// Target before capping.
    pub uncapped_target: Resources,
}

impl From<&ContainerRecommendation> for OutputRecommendation {
    fn from(c: &ContainerRecommendation) -> Self {
        OutputRecommendation {
            container_name: c.container_name.clone(),
            target: c.target,
            lower_bound: c.lower_bound,
            upper_bound: c.upper_bound,
            uncapped_target: c.uncapped_target,
        }
    }
}

/// Explain details for one container name (`--explain`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceExplain {
    /// Estimator details.
    #[serde(flatten)]
    pub detail: ContainerExplain,
    /// Memory samples accepted for this container name.
    pub memory_samples: u64,
    /// OOMs accepted, with the bumped peak they recorded (bytes).
    pub oom_bumps: Vec<i64>,
}

/// Replay result (docs/design/trace-format.md §1.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayOutput {
    /// Trace id.
    pub id: String,
    /// Per container name, sorted.
    pub recommendations: Vec<OutputRecommendation>,
    /// Rejected events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<Discarded>,
    /// Why the trace could not be run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `--explain` details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<TraceExplain>>,
}

/// Base configuration a trace's options override.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayConfig {
    /// Model parameters.
    pub aggregations: AggregationsConfig,
    /// Estimation parameters.
    pub recommender: RecommenderConfig,
}

/// A trace that cannot be replayed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// An option out of its domain.
    #[error("option {option}: {message}")]
    Option {
        /// Option name.
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A timestamp that is not a finite number in range.
    #[error("container {container:?}: {field}[{index}]: invalid timestamp")]
    Timestamp {
        /// Container name.
        container: String,
        /// Field.
        field: &'static str,
        /// Index in the list.
        index: usize,
    },
    /// A malformed OOM entry.
    #[error(
        "container {container:?}: ooms[{index}]: expected [unix_seconds, bytes|null, observed_at?]"
    )]
    Oom {
        /// Container name.
        container: String,
        /// Index.
        index: usize,
    },
    /// Duplicate (pod, container).
    #[error("container {container:?} in pod {pod:?} is listed twice")]
    DuplicateContainer {
        /// Pod.
        pod: String,
        /// Container.
        container: String,
    },
    /// A resource policy that does not parse or apply.
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
    /// The model refused the trace's pods or containers.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// `now` not a finite number.
    #[error("now: invalid timestamp")]
    Now,
}

fn positive_duration(option: &'static str, secs: f64) -> Result<i64, TraceError> {
    if !(secs.is_finite() && secs > 0.0) {
        return Err(TraceError::Option {
            option,
            message: format!("must be a positive number of seconds, got {secs}"),
        });
    }
    Ok(duration_from_secs(secs))
}

fn fraction(option: &'static str, v: f64) -> Result<f64, TraceError> {
    if !v.is_finite() {
        return Err(TraceError::Option {
            option,
            message: "must be a finite number".into(),
        });
    }
    Ok(v)
}

/// Applies a trace's options to a base configuration.
pub fn apply_options(base: &ReplayConfig, o: &TraceOptions) -> Result<ReplayConfig, TraceError> {
    let mut c = base.clone();
    let r = &mut c.recommender;
    let a = &mut c.aggregations;
    macro_rules! frac {
        ($field:ident, $dst:expr) => {
            if let Some(v) = o.$field {
                $dst = fraction(stringify!($field), v)?;
            }
        };
    }
    frac!(target_cpu_percentile, r.target_cpu_percentile);
    frac!(lower_bound_cpu_percentile, r.lower_bound_cpu_percentile);
    frac!(upper_bound_cpu_percentile, r.upper_bound_cpu_percentile);
    frac!(target_memory_percentile, r.target_memory_percentile);
    frac!(
        lower_bound_memory_percentile,
        r.lower_bound_memory_percentile
    );
    frac!(
        upper_bound_memory_percentile,
        r.upper_bound_memory_percentile
    );
    frac!(safety_margin_fraction, r.safety_margin_fraction);
    frac!(pod_min_cpu_millicores, r.pod_min_cpu_millicores);
    frac!(pod_min_memory_mb, r.pod_min_memory_mb);
    frac!(oom_bump_up_ratio, a.oom_bump_up_ratio);
    frac!(oom_min_bump_up_bytes, a.oom_min_bump_up_bytes);
    if let Some(v) = o.memory_aggregation_interval_seconds {
        a.memory_aggregation_interval =
            positive_duration("memory_aggregation_interval_seconds", v)?;
    }
    if let Some(v) = o.memory_aggregation_interval_count {
        if v <= 0 {
            return Err(TraceError::Option {
                option: "memory_aggregation_interval_count",
                message: "must be > 0".into(),
            });
        }
        a.memory_aggregation_interval_count = v;
    }
    if let Some(v) = o.cpu_histogram_decay_half_life_seconds {
        a.cpu_histogram_decay_half_life =
            positive_duration("cpu_histogram_decay_half_life_seconds", v)?;
    }
    if let Some(v) = o.memory_histogram_decay_half_life_seconds {
        a.memory_histogram_decay_half_life =
            positive_duration("memory_histogram_decay_half_life_seconds", v)?;
    }
    if let Some(v) = o.confidence_interval_cpu_seconds {
        r.confidence_interval_cpu = positive_duration("confidence_interval_cpu_seconds", v)?;
    }
    if let Some(v) = o.confidence_interval_memory_seconds {
        r.confidence_interval_memory = positive_duration("confidence_interval_memory_seconds", v)?;
    }
    if let Some(v) = o.cpu_integer_post_processor_enabled {
        r.cpu_integer_post_processor_enabled = v;
    }
    if o.humanize_memory == Some(true) {
        return Err(TraceError::Option {
            option: "humanize_memory",
            message: "is not supported for traces: the output holds integer bytes (the flag is deprecated upstream)".into(),
        });
    }
    if let Some(v) = o.round_cpu_millicores {
        r.round_cpu_millicores = v;
    }
    if let Some(v) = o.round_memory_bytes {
        r.round_memory_bytes = v;
    }
    Ok(c)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Cpu,
    Memory,
    Oom,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub(crate) at: Nanos,
    pub(crate) kind: Kind,
    pub(crate) container: usize,
    pub(crate) ts: Nanos,
    pub(crate) value: Option<f64>,
}

fn ts(container: &str, field: &'static str, index: usize, t: f64) -> Result<Nanos, TraceError> {
    nanos_from_unix_seconds(t).ok_or_else(|| TraceError::Timestamp {
        container: container.into(),
        field,
        index,
    })
}

/// Replays `trace` with `base` as the flag configuration. Semantic problems (bad options) come back as an
/// output with `error` set, like upstream's reference program.
pub fn replay(trace: &Trace, base: &ReplayConfig, explain: bool) -> ReplayOutput {
    match try_replay(trace, base, explain) {
        Ok(o) => o,
        Err(e) => ReplayOutput {
            id: trace.id.clone(),
            error: Some(e.to_string()),
            ..Default::default()
        },
    }
}

/// Like [`replay`], but returns the error. The steps: check the trace's options and policy, turn every sample
/// and OOM into a time-ordered `Event`, build the one-VPA cluster of the trace's pods and containers, feed the
/// events through it, and recommend.
pub fn try_replay(
    trace: &Trace,
    base: &ReplayConfig,
    explain: bool,
) -> Result<ReplayOutput, TraceError> {
    let cfg = match &trace.options {
        Some(o) => apply_options(base, o)?,
        None => base.clone(),
    };
    if let Some(p) = &trace.policy {
        policy::validate(p)?;
    }
    let events = EventLists::new(trace)?;
    let now = match trace.now {
        Some(n) => Some(nanos_from_unix_seconds(n).ok_or(TraceError::Now)?),
        None => None,
    };
    // The latest time of the trace is the stand-in wall clock.
    let latest = now.into_iter().fold(events.latest, Nanos::max);
    let mut run = TraceCluster::build(trace, cfg.aggregations, latest)?;
    let fed = run.feed(trace, events.merge(trace));
    if let Some(n) = now {
        run.cluster.rate_limited_garbage_collect(n);
    }
    run.recommend(trace, &cfg.recommender, fed, explain)
}

/// Every sample and OOM of the trace as an event, validated, in replay order (the backtest walks it
/// several times).
pub(crate) fn trace_events(trace: &Trace) -> Result<Vec<Event>, TraceError> {
    let lists = EventLists::new(trace)?;
    Ok(lists.merge(trace).collect())
}

/// The event `index` of one container's list of one kind.
fn event_at(c: &TraceContainer, ci: usize, kind: Kind, index: usize) -> Result<Event, TraceError> {
    let sample = |field: &'static str, list: &[[f64; 2]]| -> Result<Event, TraceError> {
        let s = list.get(index).copied().unwrap_or([f64::NAN, 0.0]);
        let t = ts(&c.name, field, index, s[0])?;
        Ok(Event {
            at: t,
            kind,
            container: ci,
            ts: t,
            value: Some(s[1]),
        })
    };
    match kind {
        Kind::Cpu => sample("cpu_samples", &c.cpu_samples),
        Kind::Memory => sample("memory_samples", &c.memory_samples),
        Kind::Oom => oom_event(
            c,
            ci,
            index,
            c.ooms.get(index).map_or(&[][..], Vec::as_slice),
        ),
    }
}

/// One container's events of one kind, in replay order: the list itself when it is in time order, else its
/// indices stably sorted by time.
struct EventList {
    container: usize,
    kind: Kind,
    len: usize,
    order: Option<Vec<usize>>,
}

impl EventList {
    fn index(&self, pos: usize) -> usize {
        self.order
            .as_ref()
            .map_or(pos, |o| o.get(pos).copied().unwrap_or(pos))
    }
}

/// Every sample and OOM of the trace, validated, in replay order without being copied: the replay order is
/// `(at, kind, container, index)`, which a merge of the per-container, per-kind lists (each in `(at, index)`
/// order) reproduces exactly. Memory: nothing per sample unless a list is out of time order.
struct EventLists {
    lists: Vec<EventList>,
    /// The latest event or sample time.
    latest: Nanos,
}

/// A merge cursor: the next event's sort key and its list.
type Head = std::cmp::Reverse<(Nanos, Kind, usize, usize, usize)>;

impl EventLists {
    fn new(trace: &Trace) -> Result<Self, TraceError> {
        let mut lists = Vec::new();
        let mut latest = 0;
        for (ci, c) in trace.containers.iter().enumerate() {
            for (kind, len) in [
                (Kind::Cpu, c.cpu_samples.len()),
                (Kind::Memory, c.memory_samples.len()),
                (Kind::Oom, c.ooms.len()),
            ] {
                let mut sorted = true;
                let mut prev = Nanos::MIN;
                for i in 0..len {
                    let e = event_at(c, ci, kind, i)?;
                    latest = latest.max(e.at.max(e.ts));
                    sorted &= e.at >= prev;
                    prev = e.at;
                }
                let order = if sorted {
                    None
                } else {
                    let mut at = Vec::with_capacity(len);
                    for i in 0..len {
                        at.push(event_at(c, ci, kind, i)?.at);
                    }
                    let mut order: Vec<usize> = (0..len).collect();
                    // Stable: equal times keep their index order.
                    order.sort_by_key(|&i| at.get(i).copied().unwrap_or(Nanos::MAX));
                    Some(order)
                };
                if len > 0 {
                    lists.push(EventList {
                        container: ci,
                        kind,
                        len,
                        order,
                    });
                }
            }
        }
        Ok(EventLists { lists, latest })
    }

    /// The events in replay order.
    fn merge<'a>(&'a self, trace: &'a Trace) -> impl Iterator<Item = Event> + 'a {
        // The next event of each list, and a heap of their sort keys.
        let head = |li: usize, pos: usize| -> Option<Event> {
            let l = self.lists.get(li)?;
            if pos >= l.len {
                return None;
            }
            let c = trace.containers.get(l.container)?;
            // Validated in `new`: every event converts.
            event_at(c, l.container, l.kind, l.index(pos)).ok()
        };
        let mut next: Vec<Option<Event>> = (0..self.lists.len()).map(|li| head(li, 0)).collect();
        let mut heap: std::collections::BinaryHeap<Head> = next
            .iter()
            .enumerate()
            .filter_map(|(li, e)| {
                let e = e.as_ref()?;
                let i = self.lists.get(li)?.index(0);
                Some(std::cmp::Reverse((e.at, e.kind, e.container, i, li)))
            })
            .collect();
        let mut pos = vec![0usize; self.lists.len()];
        std::iter::from_fn(move || {
            let std::cmp::Reverse((_, _, _, _, li)) = heap.pop()?;
            let e = next.get_mut(li)?.take()?;
            let p = pos.get_mut(li)?;
            *p += 1;
            if let Some(n) = head(li, *p) {
                let i = self.lists.get(li).map_or(*p, |l| l.index(*p));
                heap.push(std::cmp::Reverse((n.at, n.kind, n.container, i, li)));
                next[li] = Some(n);
            }
            Some(e)
        })
    }
}

/// An OOM entry `[time, bytes?, observed_at?]` as an event at the time it was observed.
fn oom_event(
    c: &TraceContainer,
    ci: usize,
    i: usize,
    o: &[Option<f64>],
) -> Result<Event, TraceError> {
    let bad = || TraceError::Oom {
        container: c.name.clone(),
        index: i,
    };
    let t = o.first().copied().flatten().ok_or_else(bad)?;
    if o.len() > 3 {
        return Err(bad());
    }
    let t = ts(&c.name, "ooms", i, t)?;
    let at = match o.get(2).copied().flatten() {
        Some(x) => ts(&c.name, "ooms", i, x)?,
        None => t,
    };
    Ok(Event {
        at,
        kind: Kind::Oom,
        container: ci,
        ts: t,
        value: o.get(1).copied().flatten(),
    })
}

/// What feeding the events left behind, besides the model: discarded counts and, for `--explain`, accepted
/// memory samples and OOM bumps per container name.
#[derive(Default)]
pub(crate) struct Fed<'t> {
    discarded: Discarded,
    memory_accepted: BTreeMap<&'t str, u64>,
    oom_bumps: BTreeMap<&'t str, Vec<i64>>,
}

/// The model of one trace: a cluster holding the trace's pods and containers and one VPA selecting them all.
pub(crate) struct TraceCluster {
    pub(crate) cluster: ClusterState,
    vpa: usize,
    /// Pod name of each trace container, by container index.
    pod_names: Vec<String>,
}

impl TraceCluster {
    /// Declared pods first (with their labels), then the pods containers name; aggregates are created at
    /// the wall-clock time of the run, one second after `latest`.
    pub(crate) fn build(
        trace: &Trace,
        aggregations: AggregationsConfig,
        latest: Nanos,
    ) -> Result<Self, TraceError> {
        let default_labels: Labels = [("app".to_string(), "workload".to_string())]
            .into_iter()
            .collect();
        let mut cluster = ClusterState::new(aggregations, GC_INTERVAL);
        cluster.set_now(latest.saturating_add(1_000_000_000));
        let mut vpa = VpaState::new(NAMESPACE, "vpa", Selector::everything());
        vpa.policy = trace.policy.clone();
        vpa.annotations = trace.annotations.clone().unwrap_or_default();
        let vpa = cluster.add_vpa(vpa);

        let mut declared: Vec<String> = Vec::new();
        for p in trace.pods.iter().flatten() {
            let labels = p.labels.as_ref().unwrap_or(&default_labels);
            cluster.add_or_update_pod(NAMESPACE, &p.name, labels, PodPhase::Running);
            declared.push(p.name.clone());
        }
        let pod_names: Vec<String> = trace
            .containers
            .iter()
            .map(|c| c.pod.clone().unwrap_or_else(|| "pod-0".into()))
            .collect();
        for p in &pod_names {
            if !declared.contains(p) {
                cluster.add_or_update_pod(NAMESPACE, p, &default_labels, PodPhase::Running);
                declared.push(p.clone());
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (c, pod) in trace.containers.iter().zip(&pod_names) {
            if !seen.insert((pod.as_str(), c.name.as_str())) {
                return Err(TraceError::DuplicateContainer {
                    pod: pod.clone(),
                    container: c.name.clone(),
                });
            }
            let id = ContainerId {
                namespace: NAMESPACE,
                pod,
                container: &c.name,
            };
            cluster.add_or_update_container(id)?;
        }
        Ok(Self {
            cluster,
            vpa,
            pod_names,
        })
    }

    /// Feeds the events in order, garbage-collecting at each event's time as upstream's loop would.
    fn feed<'t>(&mut self, trace: &'t Trace, events: impl Iterator<Item = Event>) -> Fed<'t> {
        let mut fed = Fed::default();
        for e in events {
            self.feed_one(trace, &e, &mut fed);
        }
        fed
    }

    /// Feeds one event, garbage-collecting at its time first.
    pub(crate) fn feed_one<'t>(&mut self, trace: &'t Trace, e: &Event, fed: &mut Fed<'t>) {
        {
            self.cluster.rate_limited_garbage_collect(e.at);
            let c = &trace.containers[e.container];
            let id = ContainerId {
                namespace: NAMESPACE,
                pod: &self.pod_names[e.container],
                container: &c.name,
            };
            match e.kind {
                Kind::Cpu => {
                    if !add_usage(&mut self.cluster, id, Resource::Cpu, e) {
                        fed.discarded.cpu += 1;
                    }
                }
                Kind::Memory => {
                    if add_usage(&mut self.cluster, id, Resource::Memory, e) {
                        *fed.memory_accepted.entry(&c.name).or_default() += 1;
                    } else {
                        fed.discarded.memory += 1;
                    }
                }
                Kind::Oom => {
                    let bytes = e.value.or(c.memory_request_bytes).unwrap_or(0.0);
                    let r = if bytes.is_nan() {
                        Err(ModelError::Rejected(crate::model::SampleRejected::Negative))
                    } else {
                        self.cluster
                            .record_oom(id, e.ts, memory_amount_from_bytes(bytes))
                    };
                    match r {
                        Ok(v) => fed.oom_bumps.entry(&c.name).or_default().push(v),
                        Err(_) => fed.discarded.oom += 1,
                    }
                }
            }
        }
    }

    /// The VPA's recommendation from what was fed so far.
    pub(crate) fn recommend_now(
        &self,
        config: &RecommenderConfig,
    ) -> Result<crate::estimate::PodRecommendation, PolicyError> {
        self.recommend_from(config, &self.aggregates_now())
    }

    /// The VPA's aggregates merged per container name from what was fed so far: one merge serves several
    /// estimations ([`TraceCluster::recommend_from`]).
    pub(crate) fn aggregates_now(&self) -> BTreeMap<String, crate::model::AggregateContainerState> {
        self.cluster.aggregate_state_by_container_name(self.vpa)
    }

    /// The VPA's recommendation with `config` from `aggregates` (of [`TraceCluster::aggregates_now`]).
    pub(crate) fn recommend_from(
        &self,
        config: &RecommenderConfig,
        aggregates: &BTreeMap<String, crate::model::AggregateContainerState>,
    ) -> Result<crate::estimate::PodRecommendation, PolicyError> {
        let v = &self.cluster.vpas()[self.vpa];
        let input = VpaInput {
            policy: v.policy.as_ref(),
            annotations: &v.annotations,
            explain: true,
        };
        recommend(config, aggregates, input)
    }

    /// The VPA's recommendation in the docs/design/trace-format.md §1.4 output shape, with the explanation when
    /// asked.
    fn recommend(
        &self,
        trace: &Trace,
        config: &RecommenderConfig,
        fed: Fed<'_>,
        explain: bool,
    ) -> Result<ReplayOutput, TraceError> {
        let rec = self.recommend_now(config)?;
        let recommendations = rec.containers.iter().map(Into::into).collect();
        let explain = explain.then(|| {
            rec.explain
                .into_iter()
                .map(|d| TraceExplain {
                    memory_samples: fed
                        .memory_accepted
                        .get(d.container.as_str())
                        .copied()
                        .unwrap_or(0),
                    oom_bumps: fed
                        .oom_bumps
                        .get(d.container.as_str())
                        .cloned()
                        .unwrap_or_default(),
                    detail: d,
                })
                .collect()
        });
        Ok(ReplayOutput {
            id: trace.id.clone(),
            recommendations,
            discarded: Some(fed.discarded),
            error: None,
            explain,
        })
    }
}

/// Adds a usage sample; false when the model rejects it. NaN converts to a negative amount upstream
/// (amd64) and is rejected too.
fn add_usage(
    cluster: &mut ClusterState,
    id: ContainerId<'_>,
    resource: Resource,
    e: &Event,
) -> bool {
    let Some(v) = e.value.filter(|v| !v.is_nan()) else {
        return false;
    };
    let usage = match resource {
        Resource::Cpu => cpu_amount_from_cores(v),
        Resource::Memory => memory_amount_from_bytes(v),
    };
    let sample = Sample {
        time: e.ts,
        resource,
        usage,
    };
    cluster.add_sample(id, sample).is_ok()
}
