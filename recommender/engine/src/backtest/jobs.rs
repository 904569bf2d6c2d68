//! Job and CronJob runs in a backtest ([`super::run_jobs`]). Every trace container is one run of the Job: a
//! pod of its own, admitted with the recommendation of the time and never resized. What the recommender
//! observes of a run depends on the [`JobHandling`]:
//!
//! - **upstream**: a metrics scrape every [`JobConfig::scrape`] (metrics-server's 60 s) reads the latest
//!   sample of each running attempt; a run shorter than that, or a peak between two scrapes, goes unseen. An
//!   OOM kill is recorded as upstream records it (a sample of the request, bumped). A retry is admitted with
//!   the recommendation as it stands.
//! - **tailor**: the same, plus each finished attempt's peak of CPU and memory from the history source
//!   (`max_over_time` at [`JobConfig::history_step`]); a retry after an OOM kill gets
//!   max(prev × ratio, prev + min bump) of memory (upstream's OOM bump constants), per retry, at most the
//!   policy's `maxAllowed`.
//!
//! An attempt whose memory goes above its limit is killed at that sample; the retry replays the run from its
//! start after the Job controller's back-off, up to [`JobConfig::backoff_limit`] retries. Each strategy has
//! its own model here: which runs it sees and which OOM depend on its own requests.

use std::collections::BTreeMap;

use tailor_core::policy::container_policy;

use super::{
    Aggregates, BacktestConfig, ContainerResult, Decision, Engine, Plan, Rec, SECOND, Score,
    Strategy, StrategyResult, decision, engine_for, merge, recommendations,
};
use crate::policy::Resources;
use crate::replay::{Event, Fed, Kind, ReplayConfig, Trace, TraceCluster, TraceError};
use crate::units::Nanos;

/// How Job runs are observed and retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "flags", derive(clap::ValueEnum))]
pub enum JobHandling {
    /// Upstream's: scrapes and OOMs reach the model; a retry gets the recommendation as it stands.
    Upstream,
    /// Tailor's: also each attempt's peak from the history source; a retry after an OOM gets bumped memory.
    Tailor,
}

/// Job settings of a backtest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobConfig {
    /// What is observed and how retries are sized.
    pub handling: JobHandling,
    /// Metrics scrape interval (ns, > 0): what both recommenders sample.
    pub scrape: Nanos,
    /// Scrape interval of the history source the run's peaks are read from (ns): memory the largest scraped
    /// working set, CPU the largest rate between two scrapes; 0 = every sample of the trace.
    pub history_step: Nanos,
    /// Window of the CPU rate whose peak is read (ns, `rate(...[window])`): the highest mean CPU over a
    /// full window of the run, or the run's mean when the run is shorter.
    pub rate_window: Nanos,
    /// Retries of an OOM-killed run before the Job fails (a Job's default `backoffLimit` is 6).
    pub backoff_limit: u32,
}

impl JobConfig {
    /// `handling` with metrics-server's 60 s scrape, a history source scraping every 15 s, a one-minute rate
    /// window and a Job's default back-off limit.
    pub fn new(handling: JobHandling) -> Self {
        JobConfig {
            handling,
            scrape: 60 * SECOND,
            history_step: 15 * SECOND,
            rate_window: 60 * SECOND,
            backoff_limit: 6,
        }
    }
}

/// The Job controller's delay before the first retry; it doubles per retry up to [`MAX_BACKOFF`].
pub const BACKOFF: Nanos = 10 * SECOND;
/// The longest retry delay.
pub const MAX_BACKOFF: Nanos = 360 * SECOND;

/// Memory (bytes) of the retry of an attempt OOM-killed at `prev` bytes: max(prev × `ratio`, prev +
/// `min_bump`), at most `max_allowed` (never below `prev`).
pub fn retry_memory(prev: i64, ratio: f64, min_bump: f64, max_allowed: Option<i64>) -> i64 {
    let scaled = (prev as f64 * ratio).ceil();
    let scaled = if scaled.is_finite() && scaled < i64::MAX as f64 {
        scaled as i64
    } else {
        i64::MAX
    };
    let bumped = scaled.max(prev.saturating_add(min_bump.max(0.0) as i64));
    match max_allowed {
        Some(m) => bumped.min(m).max(prev),
        None => bumped,
    }
}

/// Back-off before retry `k` (0 = the first).
fn backoff(k: u32) -> Nanos {
    BACKOFF.saturating_mul(1 << k.min(16)).min(MAX_BACKOFF)
}

/// The highest mean of `samples` (time, value) over a full `window` ending at a sample, or their mean when
/// they span less than the window.
pub fn rate_peak(samples: &[(Nanos, f64)], window: Nanos) -> Option<f64> {
    let (first, last) = (samples.first()?.0, samples.last()?.0);
    let mean = |s: &[(Nanos, f64)]| s.iter().map(|x| x.1).sum::<f64>() / s.len().max(1) as f64;
    if last.saturating_sub(first) < window {
        return Some(mean(samples));
    }
    let (mut lo, mut sum, mut best) = (0usize, 0.0, f64::NEG_INFINITY);
    for (j, &(t, v)) in samples.iter().enumerate() {
        sum += v;
        while samples[lo].0 <= t.saturating_sub(window) {
            sum -= samples[lo].1;
            lo += 1;
        }
        if t.saturating_sub(first) >= window {
            best = best.max(sum / (j + 1 - lo) as f64);
        }
    }
    best.is_finite().then_some(best)
}

/// The largest CPU rate a store scraping the usage counter every `step` (> 0) reads: the counter (CPU
/// `samples` integrated, each standing for `sample_secs`) at each tick in the run, and the highest rate between
/// two ticks at most `window` apart, the later one as far as possible from the earlier. With fewer than two
/// ticks (no rate), the run's mean as the recommender's query reads it: the counter at the last tick over the
/// time since the run's first sample (at least a second); none without a tick.
pub fn scraped_rate_peak(
    samples: &[(Nanos, f64)],
    sample_secs: f64,
    step: Nanos,
    window: Nanos,
) -> Option<f64> {
    let mut obs = Observer::new(step, samples.first()?.0);
    let mut points: Vec<(Nanos, f64)> = Vec::new();
    let mut counter = 0.0;
    for &(t, v) in samples {
        obs.sample(t, counter, &mut |at, c| points.push((at, c)));
        counter += v * sample_secs;
    }
    obs.last = Some(counter);
    obs.until(samples.last()?.0, &mut |at, c| points.push((at, c)));
    let mut best: Option<f64> = None;
    let mut lo = 0usize;
    for (j, &(t, c)) in points.iter().enumerate() {
        while t.saturating_sub(points[lo].0) >= window && lo < j {
            lo += 1;
        }
        if lo < j {
            let rate = (c - points[lo].1) / ((t - points[lo].0) as f64 / SECOND as f64);
            best = Some(best.map_or(rate, |b: f64| b.max(rate)));
        }
    }
    best.or_else(|| {
        let start = samples.first()?.0;
        let &(t, c) = points.last()?;
        Some(c / (t.saturating_sub(start) as f64 / SECOND as f64).max(1.0))
    })
}

/// One run: its trace container and its samples in time order.
struct Run {
    container: usize,
    start: Nanos,
    samples: Vec<(Nanos, Kind, f64)>,
}

fn runs(n: usize, events: &[Event]) -> Vec<Run> {
    let mut runs: Vec<Run> = (0..n)
        .map(|container| Run {
            container,
            start: Nanos::MAX,
            samples: Vec::new(),
        })
        .collect();
    for e in events {
        let (Some(r), Some(v)) = (runs.get_mut(e.container), e.value) else {
            continue;
        };
        if e.kind != Kind::Oom && v.is_finite() {
            r.start = r.start.min(e.ts);
            r.samples.push((e.ts, e.kind, v));
        }
    }
    runs.retain(|r| !r.samples.is_empty());
    for r in &mut runs {
        r.samples.sort_by_key(|s| (s.0, s.1));
    }
    runs.sort_by_key(|r| (r.start, r.container));
    runs
}

/// Reads one series at a fixed step (ticks at multiples of `step` from the epoch, each the latest sample at
/// or before it), or every sample with step 0.
struct Observer {
    step: Nanos,
    tick: Nanos,
    last: Option<f64>,
}

impl Observer {
    fn new(step: Nanos, from: Nanos) -> Self {
        let tick = if step > 0 {
            from.div_euclid(step)
                .saturating_add(i64::from(from.rem_euclid(step) != 0))
                * step
        } else {
            from
        };
        Observer {
            step,
            tick,
            last: None,
        }
    }

    /// A sample at `t`; `out` gets (tick, value) for every tick before `t` that the previous one stands at.
    fn sample(&mut self, t: Nanos, v: f64, out: &mut impl FnMut(Nanos, f64)) {
        self.until(t.saturating_sub(1), out);
        if self.step == 0 {
            out(t, v);
        }
        self.last = Some(v);
    }

    /// Every tick up to and including `end`.
    fn until(&mut self, end: Nanos, out: &mut impl FnMut(Nanos, f64)) {
        if self.step == 0 {
            return;
        }
        while self.tick <= end {
            if let Some(v) = self.last {
                out(self.tick, v);
            }
            self.tick = self.tick.saturating_add(self.step);
        }
    }
}

/// What an attempt left: its end (the kill or its last sample) and whether it was OOM-killed.
struct Attempt {
    end: Nanos,
    killed: bool,
}

/// Replays the runs of `trace` under every strategy, each with its own model.
pub(super) fn replay(
    trace: &Trace,
    config: &ReplayConfig,
    strategies: &[Strategy],
    plan: &Plan,
    cfg: &BacktestConfig,
    jobs: &JobConfig,
    events: &[Event],
) -> Result<Vec<StrategyResult>, TraceError> {
    let runs = runs(trace.containers.len(), events);
    let model_trace = model_trace(trace, jobs.backoff_limit);
    let latest = events.iter().map(|e| e.at.max(e.ts)).fold(0, Nanos::max);
    let latest = latest.saturating_add(3600 * SECOND);
    let mut out = Vec::with_capacity(strategies.len());
    for s in strategies {
        let engine = engine_for(*s, config, cfg);
        let model = match engine {
            Engine::Model(_) => Some(TraceCluster::build(
                &model_trace,
                config.aggregations,
                latest,
            )?),
            Engine::Krr(_) => None,
        };
        let mut r = JobRunner {
            trace,
            model_trace: &model_trace,
            plan,
            cfg,
            jobs,
            bump: (
                config.aggregations.oom_bump_up_ratio,
                config.aggregations.oom_min_bump_up_bytes,
            ),
            engine,
            model,
            fed: Fed::default(),
            pending: Vec::new(),
            latest: BTreeMap::new(),
            scores: vec![Score::default(); plan.names.len()],
            decisions: Vec::new(),
            next: plan.first.saturating_add(cfg.every),
        };
        for run in &runs {
            r.run(run)?;
        }
        out.push(r.finish(*s));
    }
    Ok(out)
}

/// The trace's pods and containers without samples, plus `retries` pods per run for its retries (a retry
/// is a new pod, with a memory-peak window of its own): container `n + run × retries + k - 1` is retry `k`.
fn model_trace(trace: &Trace, retries: u32) -> Trace {
    let strip = |c: &crate::replay::TraceContainer| crate::replay::TraceContainer {
        name: c.name.clone(),
        pod: c.pod.clone(),
        cpu_request_cores: c.cpu_request_cores,
        memory_request_bytes: c.memory_request_bytes,
        ..Default::default()
    };
    let mut containers: Vec<_> = trace.containers.iter().map(strip).collect();
    for (i, c) in trace.containers.iter().enumerate() {
        for k in 1..=retries {
            let mut r = strip(c);
            let pod = c.pod.clone().unwrap_or_else(|| format!("run-{i}"));
            r.pod = Some(format!("{pod}-retry-{k}"));
            containers.push(r);
        }
    }
    Trace {
        id: trace.id.clone(),
        pods: trace.pods.clone(),
        policy: trace.policy.clone(),
        annotations: trace.annotations.clone(),
        containers,
        ..Default::default()
    }
}

struct JobRunner<'t> {
    trace: &'t Trace,
    model_trace: &'t Trace,
    plan: &'t Plan,
    cfg: &'t BacktestConfig,
    jobs: &'t JobConfig,
    /// Upstream's OOM bump: ratio and minimum (bytes).
    bump: (f64, f64),
    engine: Engine,
    model: Option<TraceCluster>,
    fed: Fed<'t>,
    /// Observations not yet fed, fed in time order before the next decision.
    pending: Vec<Event>,
    latest: BTreeMap<usize, Rec>,
    scores: Vec<Score>,
    decisions: Vec<Decision>,
    next: Nanos,
}

impl<'t> JobRunner<'t> {
    /// Decides up to the run's start, then admits it and its retries.
    fn run(&mut self, run: &Run) -> Result<(), TraceError> {
        while self.next <= run.start {
            self.feed_before(self.next);
            self.decide(self.next)?;
            self.next = self.next.saturating_add(self.cfg.every);
        }
        let ni = self.plan.name_of[run.container];
        let c = &self.trace.containers[run.container];
        let data = Resources {
            cpu: c.cpu_request_cores.map(|v| (v * 1000.0).ceil() as i64),
            memory: c.memory_request_bytes.map(|v| v.ceil() as i64),
        };
        let admitted = |latest: &BTreeMap<usize, Rec>| match latest.get(&ni) {
            Some(r) => merge(r.target, data),
            None => data,
        };
        let mut requests = admitted(&self.latest);
        let scored = run.start >= self.plan.score_from;
        if scored {
            self.scores[ni].runs += 1;
        }
        let retries = self.jobs.backoff_limit;
        let n = self.trace.containers.len();
        let mut start = run.start;
        for k in 0..=retries {
            let model_ci = match k {
                0 => run.container,
                _ => n + run.container * retries as usize + k as usize - 1,
            };
            let a = self.attempt(run, start.saturating_sub(run.start), requests, model_ci);
            if !a.killed {
                return Ok(());
            }
            if a.end >= self.plan.score_from {
                self.scores[ni].oom_kills += 1;
            }
            if k == retries {
                if scored {
                    self.scores[ni].failed_runs += 1;
                }
                break;
            }
            start = a.end.saturating_add(backoff(k));
            let prev = requests.memory;
            requests = admitted(&self.latest);
            if let (JobHandling::Tailor, Some(p)) = (self.jobs.handling, prev) {
                let cap = self.max_allowed_memory(ni);
                let bumped = retry_memory(p, self.bump.0, self.bump.1, cap);
                requests.memory = Some(requests.memory.map_or(bumped, |m| m.max(bumped)));
            }
        }
        Ok(())
    }

    /// The policy's `maxAllowed` memory (bytes) for container name `ni`.
    fn max_allowed_memory(&self, ni: usize) -> Option<i64> {
        let p = container_policy(self.trace.policy.as_ref(), &self.plan.names[ni])?;
        let q = p.max_allowed.as_ref()?.get("memory")?;
        tailor_core::quantity::value(q).ok().filter(|v| *v > 0)
    }

    /// Replays `run` shifted by `shift` against `requests`: scores its samples up to an OOM kill, and queues
    /// what the recommender observes of it as container `model_ci`.
    fn attempt(
        &mut self,
        run: &Run,
        shift: Nanos,
        requests: Resources,
        model_ci: usize,
    ) -> Attempt {
        let limit = requests
            .memory
            .map(|m| m as f64 * self.cfg.memory_limit_ratio);
        let from = run.start.saturating_add(shift);
        let history = self.jobs.handling == JobHandling::Tailor;
        let mut scrape = [
            Observer::new(self.jobs.scrape, from),
            Observer::new(self.jobs.scrape, from),
        ];
        let mut hist = Observer::new(self.jobs.history_step, from);
        let mut peak: Option<f64> = None;
        let mut cpu: Vec<(Nanos, f64)> = Vec::new();
        let mut seen: Vec<Event> = Vec::new();
        let mut end = from;
        let mut killed = false;
        for &(ts, kind, v) in &run.samples {
            let t = ts.saturating_add(shift);
            let i = usize::from(kind == Kind::Memory);
            let scoring = t >= self.plan.score_from;
            if scoring {
                self.score(run.container, kind, v, requests, limit);
            }
            if kind == Kind::Memory && limit.is_some_and(|l| v > l) {
                end = t;
                killed = true;
                break;
            }
            let mut observe = |at: Nanos, value: f64| seen.push(event(at, kind, model_ci, value));
            scrape[i].sample(t, v, &mut observe);
            match (history, kind) {
                (true, Kind::Memory) => hist.sample(t, v, &mut |_, value| {
                    peak = Some(peak.map_or(value, |p: f64| p.max(value)))
                }),
                (true, _) => cpu.push((t, v)),
                _ => {}
            }
            end = t;
        }
        let last = if killed { end.saturating_sub(1) } else { end };
        for (i, kind) in [(0, Kind::Cpu), (1, Kind::Memory)] {
            scrape[i].until(last, &mut |at, value| {
                seen.push(event(at, kind, model_ci, value))
            });
        }
        hist.until(last, &mut |_, value| {
            peak = Some(peak.map_or(value, |p: f64| p.max(value)))
        });
        if history {
            let done = end.saturating_add(SECOND);
            let cpu_peak = match self.jobs.history_step {
                0 => rate_peak(&cpu, self.jobs.rate_window),
                step => {
                    let secs = self.plan.minutes[run.container].0 * 60.0;
                    scraped_rate_peak(&cpu, secs, step, self.jobs.rate_window)
                }
            };
            let peaks = [(Kind::Cpu, cpu_peak), (Kind::Memory, peak)];
            for (kind, p) in peaks {
                if let Some(p) = p {
                    seen.push(event(done, kind, model_ci, p));
                }
            }
        }
        if killed && let Some(r) = requests.memory {
            seen.push(event(end, Kind::Oom, model_ci, r as f64));
        }
        self.pending.extend(seen);
        Attempt { end, killed }
    }

    /// Scores one sample of trace container `ci` against `requests` and the memory `limit`.
    fn score(&mut self, ci: usize, kind: Kind, v: f64, requests: Resources, limit: Option<f64>) {
        let (cpu_min, mem_min) = self.plan.minutes[ci];
        let score = &mut self.scores[self.plan.name_of[ci]];
        match (kind, requests.cpu, requests.memory, limit) {
            (Kind::Cpu, Some(r), _, _) => score.cpu_sample(v, cpu_min, r),
            (Kind::Memory, _, Some(r), Some(l)) => {
                score.memory_sample(v, mem_min, r, l);
                score.pod_days += mem_min / 1440.0;
            }
            _ => {}
        }
    }

    /// Feeds the queued observations from before `at`, in time order.
    fn feed_before(&mut self, at: Nanos) {
        self.pending.sort_by_key(|e| (e.at, e.kind, e.container));
        let n = self.pending.partition_point(|e| e.at < at);
        let ready: Vec<Event> = self.pending.drain(..n).collect();
        for e in &ready {
            match (&mut self.model, &mut self.engine) {
                (Some(m), _) => m.feed_one(self.model_trace, e, &mut self.fed),
                (None, Engine::Krr(k)) => {
                    let name = &self.model_trace.containers[e.container].name;
                    match (e.kind, e.value) {
                        (Kind::Cpu, Some(v)) => k.cpu(name, e.ts, v),
                        (Kind::Memory, Some(v)) => k.memory(name, e.ts, v),
                        _ => {}
                    }
                }
                (None, Engine::Model(_)) => {}
            }
        }
    }

    fn decide(&mut self, at: Nanos) -> Result<(), TraceError> {
        let aggregates: Option<Aggregates> = self.model.as_ref().map(TraceCluster::aggregates_now);
        let model = self.model.as_ref().zip(aggregates.as_ref());
        let recs = recommendations(&mut self.engine, &self.plan.names, at, model)?;
        if self.cfg.keep_decisions {
            self.decisions.push(decision(&self.plan.names, at, &recs));
        }
        self.latest = recs.into_iter().collect();
        Ok(())
    }

    fn finish(self, s: Strategy) -> StrategyResult {
        let suffix = match self.jobs.handling {
            JobHandling::Upstream => "",
            JobHandling::Tailor => "+jobs",
        };
        StrategyResult {
            name: format!("{}{suffix}", s.name()),
            containers: self
                .plan
                .names
                .iter()
                .zip(self.scores)
                .map(|(n, score)| ContainerResult {
                    name: format!("{}/{n}", self.trace.id),
                    score,
                    series: None,
                })
                .collect(),
            decisions: self.decisions,
        }
    }
}

fn event(at: Nanos, kind: Kind, container: usize, value: f64) -> Event {
    Event {
        at,
        kind,
        container,
        ts: at,
        value: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1024 * 1024;

    #[test]
    fn the_retry_bump_grows_per_retry_and_stops_at_max_allowed() {
        // Upstream's constants: × 1.2, at least + 100 Mi.
        let (ratio, min) = (1.2, 100.0 * MI as f64);
        let mut m = 200 * MI;
        let mut seen = vec![m];
        for _ in 0..6 {
            m = retry_memory(m, ratio, min, Some(700 * MI));
            seen.push(m);
        }
        // 200 → 300 (+100 Mi beats × 1.2) → 400 → 500 → 600 (× 1.2 = 720 capped) → 700 → 700.
        let mib: Vec<i64> = seen.iter().map(|b| b / MI).collect();
        assert_eq!(mib, vec![200, 300, 400, 500, 600, 700, 700]);
        // Above 500 Mi the ratio wins.
        assert_eq!(retry_memory(1000 * MI, ratio, min, None), 1200 * MI);
        // A request already above maxAllowed is not lowered.
        assert_eq!(retry_memory(800 * MI, ratio, min, Some(700 * MI)), 800 * MI);
    }

    #[test]
    fn the_cpu_rate_peak_is_the_best_full_window() {
        let s: Vec<(Nanos, f64)> = (0..10).map(|i| (i * SECOND, i as f64)).collect();
        // Shorter than the window: the mean.
        assert_eq!(rate_peak(&s, 60 * SECOND), Some(4.5));
        // 3 s windows: the last one (7, 8, 9) is the highest.
        assert_eq!(rate_peak(&s, 3 * SECOND), Some(8.0));
        assert_eq!(rate_peak(&[], SECOND), None);
    }

    #[test]
    fn a_scraped_rate_needs_two_scrapes_and_reads_the_mean_between_them() {
        // 1 core for 10 s, then 3 cores for 10 s, then 1 core: one sample a second from t = 5 s.
        let s: Vec<(Nanos, f64)> = (5..45)
            .map(|i| (i * SECOND, if (15..25).contains(&i) { 3.0 } else { 1.0 }))
            .collect();
        // Ticks at 15, 30 and 45 s (45 is past the last sample): 15 → 30 covers 10 s at 3 and 5 s at 1.
        let r = scraped_rate_peak(&s, 1.0, 15 * SECOND, 60 * SECOND).unwrap();
        // The counter at 15 s holds samples 5-14 (10 core-s), at 30 s samples 5-29 (45 core-s).
        assert!((r - 35.0 / 15.0).abs() < 1e-9, "{r}");
        // A 10 s run between two ticks is never scraped: nothing.
        assert_eq!(
            scraped_rate_peak(&s[..10], 1.0, 15 * SECOND, 60 * SECOND),
            None
        );
        // A 15 s run (10-24 s) scraped once, at 15 s: no rate, its mean up to that tick instead (5 core-s
        // over 5 s).
        assert_eq!(
            scraped_rate_peak(&s[5..20], 1.0, 15 * SECOND, 60 * SECOND),
            Some(1.0)
        );
        assert_eq!(scraped_rate_peak(&[], 1.0, 15 * SECOND, 60 * SECOND), None);
    }

    #[test]
    fn backoff_doubles_up_to_six_minutes() {
        let d: Vec<i64> = (0..8).map(|k| backoff(k) / SECOND).collect();
        assert_eq!(d, vec![10, 20, 40, 80, 160, 320, 360, 360]);
    }

    #[test]
    fn a_scrape_reads_the_latest_sample_at_each_tick_and_misses_a_peak_between() {
        // A 40 s run from t = 5 s, one sample a second, a 3 s peak at 20-22 s; scrapes at 0, 60 s, … see
        // nothing of it; at 30 s ticks they see the sample of 30 s (level), never the peak.
        let samples: Vec<(Nanos, f64)> = (5..45)
            .map(|s| (s * SECOND, if (20..23).contains(&s) { 9.0 } else { 1.0 }))
            .collect();
        let read = |step: Nanos| {
            let mut o = Observer::new(step, 5 * SECOND);
            let mut seen = Vec::new();
            for &(t, v) in &samples {
                o.sample(t, v, &mut |at, v| seen.push((at / SECOND, v)));
            }
            o.until(44 * SECOND, &mut |at, v| seen.push((at / SECOND, v)));
            seen
        };
        assert!(read(60 * SECOND).is_empty());
        assert_eq!(read(30 * SECOND), vec![(30, 1.0)]);
        let every = read(0);
        assert_eq!(every.len(), 40);
        assert!(every.iter().any(|&(_, v)| v == 9.0));
    }
}
