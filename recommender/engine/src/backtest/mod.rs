//! Backtesting: replay a trace in time order, recommend every `every` from the past only, apply each
//! recommendation as an actuation model would, and score the requests against the usage that followed.
//!
//! Decisions are made at `first sample + k·every` (k ≥ 1) from the events strictly before that time, so the
//! `upstream` strategy's decision at `d` equals `tailor recommend` on the trace cut before `d`. Samples from
//! `first sample + warmup` on are scored; a sample stands for its container's median sampling interval.

pub mod actuation;
pub mod jobs;
pub mod krr;
pub mod score;
pub mod strategy;

use std::collections::BTreeMap;

use serde::Serialize;

pub use actuation::{Actuation, Applied, Rec};
pub use jobs::{JobConfig, JobHandling};
pub use score::Score;
pub use strategy::Strategy;

use crate::estimate::RecommenderConfig;
use crate::policy::{self, Resources};
use crate::replay::{
    Event, Fed, Kind, OutputRecommendation, ReplayConfig, Trace, TraceCluster, TraceError,
    apply_options, trace_events,
};
use crate::units::Nanos;

const SECOND: Nanos = 1_000_000_000;
/// Most decision points per trace (a year of hourly decisions).
pub const MAX_DECISIONS: i64 = 366 * 24;

/// How to run a backtest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BacktestConfig {
    /// Time between decisions (ns, > 0).
    pub every: Nanos,
    /// Time from the first sample before scoring starts (ns, ≥ 0).
    pub warmup: Nanos,
    /// How recommendations reach containers.
    pub actuation: Actuation,
    /// Memory limit as a multiple of the memory request (proportional limits), ≥ 1.
    pub memory_limit_ratio: f64,
    /// Keep usage and request series per container (for plots).
    pub keep_series: bool,
    /// Keep every decision's recommendations.
    pub keep_decisions: bool,
}

impl Default for BacktestConfig {
    fn default() -> Self {
        BacktestConfig {
            every: 3600 * SECOND,
            warmup: 86_400 * SECOND,
            actuation: Actuation::Inplace,
            memory_limit_ratio: 1.0,
            keep_series: false,
            keep_decisions: false,
        }
    }
}

/// A backtest that cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BacktestError {
    /// The trace itself is invalid.
    #[error("trace {id:?}: {source}")]
    Trace {
        /// Trace id.
        id: String,
        /// Cause.
        source: TraceError,
    },
    /// A setting out of its domain.
    #[error("{0}")]
    Config(String),
}

/// One point of a plotted series: time (unix seconds), usage, request, limit (absent = none set).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Unix seconds.
    pub t: f64,
    /// Usage (cores or bytes).
    pub usage: f64,
    /// Request in effect (cores or bytes).
    pub request: Option<f64>,
    /// Limit in effect (memory only).
    pub limit: Option<f64>,
}

/// Usage and requests over time of one container name (all its pods).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// CPU in cores.
    pub cpu: Vec<Point>,
    /// Memory in bytes.
    pub memory: Vec<Point>,
    /// Unix seconds of the OOMs in the data.
    pub ooms: Vec<f64>,
}

/// One container name's score under one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerResult {
    /// `trace id/container name`.
    pub name: String,
    /// Its score.
    #[serde(flatten)]
    pub score: Score,
    /// Series for plots (when asked for).
    #[serde(skip)]
    pub series: Option<Series>,
}

/// One decision: the recommendations made at `at` (unix ns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Decision time (ns).
    pub at: Nanos,
    /// Per container name.
    pub recommendations: Vec<OutputRecommendation>,
}

/// One strategy's result on one trace.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyResult {
    /// Strategy name (with `+jobs` when run under Tailor's Job handling).
    pub name: String,
    /// Per container name.
    pub containers: Vec<ContainerResult>,
    /// Decisions (when asked for).
    pub decisions: Vec<Decision>,
}

/// Backtests `trace` under each strategy with `base` as upstream's flags.
pub fn run(
    trace: &Trace,
    base: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
) -> Result<Vec<StrategyResult>, BacktestError> {
    let (config, events, plan) = prepare(trace, base, strategies, cfg)?;
    let runners: Vec<Runner<'_>> = strategies
        .iter()
        .map(|s| Runner::new(trace, &config, *s, &plan, cfg))
        .collect();
    replay_all(trace, &config, &plan, cfg, &events, runners).map_err(|source| {
        BacktestError::Trace {
            id: trace.id.clone(),
            source,
        }
    })
}

/// Backtests `trace` as the runs of a Job or CronJob (every trace container one run, a pod of its own)
/// under each strategy, with `jobs` saying what the recommender observes of a run and how a run
/// OOM-killed is retried ([`jobs`]).
pub fn run_jobs(
    trace: &Trace,
    base: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
    jobs: &JobConfig,
) -> Result<Vec<StrategyResult>, BacktestError> {
    if jobs.scrape <= 0 || jobs.history_step < 0 {
        return Err(BacktestError::Config(
            "the scrape interval must be greater than zero and the history step not negative"
                .into(),
        ));
    }
    let (config, events, plan) = prepare(trace, base, strategies, cfg)?;
    jobs::replay(trace, &config, strategies, &plan, cfg, jobs, &events).map_err(|source| {
        BacktestError::Trace {
            id: trace.id.clone(),
            source,
        }
    })
}

/// Checks the settings and the trace; the trace's configuration, its events in replay order and the plan.
fn prepare(
    trace: &Trace,
    base: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
) -> Result<(ReplayConfig, Vec<Event>, Plan), BacktestError> {
    if cfg.every <= 0 {
        return Err(BacktestError::Config(
            "--every must be greater than zero".into(),
        ));
    }
    if cfg.warmup < 0 {
        return Err(BacktestError::Config(
            "--warmup must not be negative".into(),
        ));
    }
    if !(cfg.memory_limit_ratio.is_finite() && cfg.memory_limit_ratio >= 1.0) {
        return Err(BacktestError::Config(
            "--memory-limit-ratio must be a number ≥ 1".into(),
        ));
    }
    if strategies.len() > strategy::MAX_STRATEGIES {
        return Err(BacktestError::Config(format!(
            "at most {} strategies",
            strategy::MAX_STRATEGIES
        )));
    }
    let err = |source| BacktestError::Trace {
        id: trace.id.clone(),
        source,
    };
    let config = match &trace.options {
        Some(o) => apply_options(base, o).map_err(err)?,
        None => base.clone(),
    };
    if let Some(p) = &trace.policy {
        policy::validate(p).map_err(|e| err(e.into()))?;
    }
    let events = trace_events(trace).map_err(err)?;
    let plan = Plan::new(trace, &events, cfg)?;
    Ok((config, events, plan))
}

/// Replays the events once for every strategy: the model strategies share one model (fed once; they differ
/// only in estimation settings, and the hourly histograms some of them read change nothing for the others),
/// decisions come at the same times for all, each runner scores and applies its own recommendations.
fn replay_all<'t>(
    trace: &'t Trace,
    config: &ReplayConfig,
    plan: &'t Plan,
    cfg: &'t BacktestConfig,
    events: &[Event],
    mut runners: Vec<Runner<'t>>,
) -> Result<Vec<StrategyResult>, TraceError> {
    let mut model = None;
    if runners.iter().any(|r| matches!(r.engine, Engine::Model(_))) {
        let latest = events.iter().map(|e| e.at.max(e.ts)).fold(0, Nanos::max);
        let mut aggregations = config.aggregations;
        aggregations.cpu_time_of_day |= runners
            .iter()
            .any(|r| matches!(&r.engine, Engine::Model(rc) if rc.cpu_time_of_day.is_some()));
        model = Some(TraceCluster::build(trace, aggregations, latest)?);
    }
    let mut fed = Fed::default();
    let mut next = plan.first.saturating_add(cfg.every);
    for e in events {
        while e.at >= next {
            let aggregates = model.as_ref().map(|m| (m, m.aggregates_now()));
            for r in &mut runners {
                r.decide(next, aggregates.as_ref().map(|(m, a)| (*m, a)))?;
            }
            next = next.saturating_add(cfg.every);
        }
        for r in &mut runners {
            r.score(e);
            r.feed(e);
        }
        if let Some(m) = &mut model {
            m.feed_one(trace, e, &mut fed);
        }
    }
    Ok(runners.into_iter().map(Runner::finish).collect())
}

/// What every strategy shares: times and per-container facts.
struct Plan {
    first: Nanos,
    score_from: Nanos,
    /// Per trace container: (median CPU interval, median memory interval) in minutes.
    minutes: Vec<(f64, f64)>,
    /// Per trace container: the index of its name in `names`.
    name_of: Vec<usize>,
    /// Per trace container: its last event (ns); later decisions do not reach it.
    last_at: Vec<Nanos>,
    names: Vec<String>,
}

fn median_minutes(samples: &[[f64; 2]]) -> f64 {
    let mut gaps: Vec<f64> = samples
        .windows(2)
        .map(|w| w[1][0] - w[0][0])
        .filter(|g| g.is_finite() && *g > 0.0)
        .collect();
    if gaps.is_empty() {
        return 1.0;
    }
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2] / 60.0
}

impl Plan {
    fn new(trace: &Trace, events: &[Event], cfg: &BacktestConfig) -> Result<Self, BacktestError> {
        let first = events.iter().map(|e| e.at).min().unwrap_or(0);
        let last = events.iter().map(|e| e.at).max().unwrap_or(0);
        if (last.saturating_sub(first)) / cfg.every > MAX_DECISIONS {
            return Err(BacktestError::Config(format!(
                "trace {:?}: more than {MAX_DECISIONS} decisions; raise --every",
                trace.id
            )));
        }
        let mut names: Vec<String> = trace.containers.iter().map(|c| c.name.clone()).collect();
        names.sort();
        names.dedup();
        let name_of = trace
            .containers
            .iter()
            .map(|c| names.binary_search(&c.name).unwrap_or(0))
            .collect();
        let mut last_at = vec![Nanos::MIN; trace.containers.len()];
        for e in events {
            if let Some(l) = last_at.get_mut(e.container) {
                *l = (*l).max(e.at);
            }
        }
        Ok(Plan {
            last_at,
            first,
            score_from: first.saturating_add(cfg.warmup),
            minutes: trace
                .containers
                .iter()
                .map(|c| {
                    (
                        median_minutes(&c.cpu_samples),
                        median_minutes(&c.memory_samples),
                    )
                })
                .collect(),
            name_of,
            names,
        })
    }
}

/// The shared model's aggregates at a decision, by container name.
type Aggregates = BTreeMap<String, crate::model::AggregateContainerState>;

/// The recommender behind a strategy: the shared model with these estimation settings, or KRR's.
enum Engine {
    Model(Box<RecommenderConfig>),
    Krr(krr::KrrSimple),
}

/// The recommender behind `strategy`, with `config` as upstream's flags.
fn engine_for(strategy: Strategy, config: &ReplayConfig, cfg: &BacktestConfig) -> Engine {
    match strategy {
        Strategy::KrrSimple => Engine::Krr(krr::KrrSimple::default()),
        Strategy::Upstream | Strategy::Profile(_) => {
            let mut rc = match strategy {
                Strategy::Profile(p) => p.apply(&config.recommender),
                _ => config.recommender.clone(),
            };
            // Following the daily curve needs resizes of running pods; at admission only, a pod
            // started at night would keep its night request through the afternoon.
            if cfg.actuation == Actuation::Admission {
                rc.cpu_time_of_day = None;
            }
            Engine::Model(Box::new(rc))
        }
    }
}

/// `engine`'s recommendations at `at` by index into `names` (the model's `aggregates` for a model strategy).
fn recommendations(
    engine: &mut Engine,
    names: &[String],
    at: Nanos,
    model: Option<(&TraceCluster, &Aggregates)>,
) -> Result<Vec<(usize, Rec)>, TraceError> {
    Ok(match engine {
        Engine::Model(rc) => model
            .map(|(m, aggregates)| m.recommend_from(rc, aggregates))
            .transpose()?
            .unwrap_or_default()
            .containers
            .iter()
            .filter_map(|c| {
                let i = names.binary_search(&c.container_name).ok()?;
                Some((
                    i,
                    Rec {
                        target: c.target,
                        lower: c.lower_bound,
                        upper: c.upper_bound,
                    },
                ))
            })
            .collect(),
        Engine::Krr(k) => k
            .recommend(at)
            .into_iter()
            .filter_map(|(n, target)| {
                let i = names.binary_search(&n).ok()?;
                Some((
                    i,
                    Rec {
                        target,
                        ..Rec::default()
                    },
                ))
            })
            .collect(),
    })
}

/// The decision record of `recs` at `at`.
fn decision(names: &[String], at: Nanos, recs: &[(usize, Rec)]) -> Decision {
    Decision {
        at,
        recommendations: recs
            .iter()
            .map(|(i, r)| OutputRecommendation {
                container_name: names[*i].clone(),
                target: r.target,
                lower_bound: r.lower,
                upper_bound: r.upper,
                uncapped_target: Resources::default(),
            })
            .collect(),
    }
}

/// One container instance's state.
#[derive(Clone, Copy, Default)]
struct Instance {
    applied: Option<Applied>,
    started: bool,
    /// First and last scored sample (ns).
    scored: Option<(Nanos, Nanos)>,
}

struct Runner<'t> {
    trace: &'t Trace,
    strategy: Strategy,
    plan: &'t Plan,
    cfg: &'t BacktestConfig,
    engine: Engine,
    latest: BTreeMap<usize, Rec>,
    instances: Vec<Instance>,
    scores: Vec<Score>,
    series: Vec<Series>,
    decisions: Vec<Decision>,
}

impl<'t> Runner<'t> {
    fn new(
        trace: &'t Trace,
        config: &ReplayConfig,
        strategy: Strategy,
        plan: &'t Plan,
        cfg: &'t BacktestConfig,
    ) -> Self {
        let engine = engine_for(strategy, config, cfg);
        Runner {
            trace,
            strategy,
            plan,
            cfg,
            engine,
            latest: BTreeMap::new(),
            instances: vec![Instance::default(); trace.containers.len()],
            scores: vec![Score::default(); plan.names.len()],
            series: vec![Series::default(); plan.names.len()],
            decisions: Vec::new(),
        }
    }

    /// The strategy's result once every event was replayed.
    fn finish(mut self) -> StrategyResult {
        for (i, inst) in self.instances.iter().enumerate() {
            if let Some((a, b)) = inst.scored {
                let step = self.plan.minutes[i].0.min(self.plan.minutes[i].1);
                let days = (b - a) as f64 / (86_400.0 * SECOND as f64) + step / 1440.0;
                self.scores[self.plan.name_of[i]].pod_days += days;
            }
        }
        let keep = self.cfg.keep_series;
        let containers = self
            .plan
            .names
            .iter()
            .zip(self.scores)
            .zip(self.series)
            .map(|((n, score), series)| ContainerResult {
                name: format!("{}/{n}", self.trace.id),
                score,
                series: keep.then_some(series),
            })
            .collect();
        StrategyResult {
            name: self.strategy.name().to_string(),
            containers,
            decisions: self.decisions,
        }
    }

    /// Recommends from the events before `at` and applies the result to running containers.
    fn decide(
        &mut self,
        at: Nanos,
        model: Option<(&TraceCluster, &Aggregates)>,
    ) -> Result<(), TraceError> {
        let recs = recommendations(&mut self.engine, &self.plan.names, at, model)?;
        if self.cfg.keep_decisions {
            self.decisions.push(decision(&self.plan.names, at, &recs));
        }
        self.latest = recs.into_iter().collect();
        for (ci, inst) in self.instances.iter_mut().enumerate() {
            let (Some(applied), Some(rec)) = (
                inst.applied.as_mut(),
                self.latest.get(&self.plan.name_of[ci]),
            ) else {
                continue;
            };
            let running = inst.started && self.plan.last_at[ci] >= at;
            if running && actuation::takes(self.cfg.actuation, applied, rec, at) {
                *applied = Applied {
                    requests: merge(rec.target, applied.requests),
                    since: at,
                };
                if at >= self.plan.score_from {
                    self.scores[self.plan.name_of[ci]].changes += 1;
                }
            }
        }
        Ok(())
    }

    /// Scores a sample or OOM against the requests in effect; a container's first event admits it.
    fn score(&mut self, e: &Event) {
        let ci = e.container;
        let c = &self.trace.containers[ci];
        let ni = self.plan.name_of[ci];
        let inst = &mut self.instances[ci];
        if !inst.started {
            inst.started = true;
            let data = Resources {
                cpu: c.cpu_request_cores.map(|v| (v * 1000.0).ceil() as i64),
                memory: c.memory_request_bytes.map(|v| v.ceil() as i64),
            };
            let requests = match self.latest.get(&ni) {
                Some(r) => merge(r.target, data),
                None => data,
            };
            inst.applied = Some(Applied {
                requests,
                since: e.at,
            });
        }
        let requests = inst.applied.map(|a| a.requests).unwrap_or_default();
        let limit = requests
            .memory
            .map(|m| m as f64 * self.cfg.memory_limit_ratio);
        let keep = self.cfg.keep_series;
        let t = e.ts as f64 / SECOND as f64;
        let scoring = e.ts >= self.plan.score_from;
        if e.kind == Kind::Oom {
            if keep {
                self.series[ni].ooms.push(t);
            }
            let bytes = e.value.or(c.memory_request_bytes);
            if let (true, Some(b), Some(l)) = (scoring, bytes, limit)
                && l <= b
            {
                self.scores[ni].uncovered_ooms += 1;
            }
            return;
        }
        let Some(v) = e.value.filter(|v| v.is_finite()) else {
            return;
        };
        let (cpu_min, mem_min) = self.plan.minutes[ci];
        let score = &mut self.scores[ni];
        match e.kind {
            Kind::Cpu => {
                if keep {
                    self.series[ni].cpu.push(Point {
                        t,
                        usage: v,
                        request: requests.cpu.map(|m| m as f64 / 1000.0),
                        limit: None,
                    });
                }
                if let (true, Some(r)) = (scoring, requests.cpu) {
                    score.cpu_sample(v, cpu_min, r);
                } else {
                    return;
                }
            }
            Kind::Memory => {
                if keep {
                    self.series[ni].memory.push(Point {
                        t,
                        usage: v,
                        request: requests.memory.map(|m| m as f64),
                        limit,
                    });
                }
                if let (true, Some(r), Some(l)) = (scoring, requests.memory, limit) {
                    score.memory_sample(v, mem_min, r, l);
                } else {
                    return;
                }
            }
            Kind::Oom => return,
        }
        inst.scored = Some(match inst.scored {
            Some((a, _)) => (a, e.ts),
            None => (e.ts, e.ts),
        });
    }

    /// Feeds KRR's own state (the model is fed once for all strategies).
    fn feed(&mut self, e: &Event) {
        match &mut self.engine {
            Engine::Model(_) => {}
            Engine::Krr(k) => {
                let name = &self.trace.containers[e.container].name;
                match (e.kind, e.value) {
                    (Kind::Cpu, Some(v)) => k.cpu(name, e.ts, v),
                    (Kind::Memory, Some(v)) => k.memory(name, e.ts, v),
                    _ => {}
                }
            }
        }
    }
}

/// `rec`'s resources, falling back to `current` for those it leaves unset.
fn merge(rec: Resources, current: Resources) -> Resources {
    Resources {
        cpu: rec.cpu.or(current.cpu),
        memory: rec.memory.or(current.memory),
    }
}

/// Totals over containers.
pub fn total<'a>(containers: impl IntoIterator<Item = &'a ContainerResult>) -> Score {
    let mut s = Score::default();
    for c in containers {
        s.add(&c.score);
    }
    s
}
