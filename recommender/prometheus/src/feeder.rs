//! The pure core of a history load: series in, samples out. No I/O and no clock, so every rule is unit-tested
//! here rather than through HTTP fakes.
//!
//! - Series arrive as **raw samples** with their real timestamps, one series per label set (several per
//!   container when a restart gave it a new cgroup `id`). Each series keeps its own state ([`SeriesKey`]).
//! - CPU from a counter: a point is the counter's increase between two raw samples divided by their real time
//!   distance, whatever the scrape interval or downsampling; a drop is a counter reset (the counter restarted
//!   from zero). The step only bounds the resolution: raw samples closer than a step are summed into one point
//!   spanning at least about a step. A rate series (server-side `rate()`) passes through.
//! - Memory: the largest raw sample of each step (at its own time), so peaks are kept at any resolution.
//! - Every container keeps a watermark per resource (and one for OOM kills): a point at or before the
//!   watermark was fed already, so a retried query or a resumed load never feeds a point twice. A container
//!   with several series has its points held until the window is done ([`Feeder::flush_held`]), then merged
//!   in time order.
//! - OOM kills go out with the memory points they fall among, in time order; kills of containers that have no
//!   memory points are flushed when a window is done ([`Feeder::ooms_until`]).
//! - [`oom_kills`] turns kube-state-metrics' restart counter and last-termination reason into kill times.

use std::collections::{BTreeSet, HashMap};

/// Where history samples go. Points are (unix ms, value), in time order, never older than what the same
/// container already received for the same resource.
pub trait HistorySink {
    /// CPU usage in cores.
    fn cpu(&mut self, container: usize, points: &[(i64, f64)]);
    /// Memory working set in bytes, and the container's OOM kills in the same time span (unix ms,
    /// memory request if known), to be merged in time order.
    fn memory(&mut self, container: usize, points: &[(i64, f64)], ooms: &[(i64, Option<f64>)]);
    /// Every query of the window ending at `end_ms` has been fed.
    fn window_done(&mut self, _end_ms: i64) {}
}

/// A point: (unix ms, value).
pub type Point = (i64, f64);

/// An OOM kill: (unix ms, memory request in bytes if known).
pub type Oom = (i64, Option<f64>);

/// Identity of one series of a container (a hash of its full label set).
pub type SeriesKey = u64;

/// How CPU series arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuSeries {
    /// Raw samples of the usage counter (core-seconds), differenced by the feeder.
    #[default]
    Counter,
    /// Already a rate (cores) at step times, e.g. from a server-side `rate()`.
    Rate,
}

/// What one series has been read up to.
#[derive(Debug, Clone, Copy, Default)]
struct SeriesState {
    /// Last raw sample read.
    last: Option<Point>,
    /// CPU: start of the point being summed (the raw sample the last point ended at).
    base: Option<i64>,
    /// CPU: counter increase since `base`.
    acc: f64,
}

/// Per-container watermarks and per-series state; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Feeder {
    cpu_series: CpuSeries,
    step_ms: i64,
    wm_cpu: Vec<i64>,
    wm_mem: Vec<i64>,
    wm_oom: Vec<i64>,
    /// Containers with several series: their points are held until the window is done.
    several: Vec<bool>,
    cpu_state: HashMap<(usize, SeriesKey), SeriesState>,
    mem_state: HashMap<(usize, SeriesKey), SeriesState>,
    /// Held points of containers with several series: (cpu, memory).
    held: HashMap<usize, (Vec<Point>, Vec<Point>)>,
    /// Scratch buffer for computed points.
    buf: Vec<Point>,
}

/// The points of `points` (in time order) after the watermark, and the watermark moved past them.
fn after<'a>(wm: &mut i64, points: &'a [Point]) -> &'a [Point] {
    let from = points.partition_point(|p| p.0 <= *wm);
    let new = &points[from..];
    if let Some(last) = new.last() {
        *wm = last.0;
    }
    new
}

/// The OOM kills of `ooms` (in time order) after the watermark and at or before `until`, and the watermark
/// moved past them.
fn ooms_after<'a>(wm: &mut i64, ooms: &'a [Oom], until: i64) -> &'a [Oom] {
    let lo = ooms.partition_point(|o| o.0 <= *wm);
    let hi = ooms.partition_point(|o| o.0 <= until).max(lo);
    if hi > lo {
        *wm = ooms[hi - 1].0;
    }
    &ooms[lo..hi]
}

/// The raw samples of `points` after the series' last one; moves `last` past them.
fn new_raw<'a>(st: &mut SeriesState, points: &'a [Point]) -> &'a [Point] {
    let from = st
        .last
        .map_or(0, |(lt, _)| points.partition_point(|p| p.0 <= lt));
    &points[from..]
}

/// Sorts held points by time, keeping the largest of equal times.
fn merge_held(points: &mut Vec<Point>) {
    points.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    points.dedup_by_key(|p| p.0);
}

impl Feeder {
    /// A feeder for `containers` containers (indices `0..containers`), nothing fed yet; `step` bounds the
    /// resolution of the points it makes (ms, at least 1).
    pub fn new(containers: usize, cpu_series: CpuSeries, step_ms: i64) -> Self {
        Feeder {
            cpu_series,
            step_ms: step_ms.max(1),
            wm_cpu: vec![i64::MIN; containers],
            wm_mem: vec![i64::MIN; containers],
            wm_oom: vec![i64::MIN; containers],
            several: vec![false; containers],
            ..Default::default()
        }
    }

    /// Marks a container as having several series (its points are then held until [`Self::flush_held`]).
    pub fn set_several_series(&mut self, container: usize) {
        if let Some(s) = self.several.get_mut(container) {
            *s = true;
        }
    }

    /// Feeds no point at or before `ms` (the history's start: raw reads may hold samples before it).
    pub fn skip_until(&mut self, ms: i64) {
        for wm in self.wm_cpu.iter_mut().chain(self.wm_mem.iter_mut()) {
            *wm = (*wm).max(ms);
        }
    }

    /// Number of containers it tracks.
    pub fn len(&self) -> usize {
        self.wm_cpu.len()
    }

    /// Whether it tracks no container.
    pub fn is_empty(&self) -> bool {
        self.wm_cpu.is_empty()
    }

    /// Feeds raw samples (in time order) of one CPU series of `container`. Returns how many samples were
    /// new (read for the first time); with a counter the first one only becomes the base of the next point.
    pub fn cpu(
        &mut self,
        container: usize,
        key: SeriesKey,
        points: &[Point],
        sink: &mut dyn HistorySink,
    ) -> usize {
        if container >= self.wm_cpu.len() {
            return 0;
        }
        let st = self.cpu_state.entry((container, key)).or_default();
        let new = new_raw(st, points);
        if new.is_empty() {
            return 0;
        }
        self.buf.clear();
        match self.cpu_series {
            CpuSeries::Rate => self.buf.extend_from_slice(new),
            CpuSeries::Counter => {
                for &(t, v) in new {
                    let Some((lt, lv)) = st.last else {
                        st.last = Some((t, v));
                        st.base = Some(t);
                        continue;
                    };
                    // A drop is a counter reset: the counter restarted from zero.
                    st.acc += if v >= lv { v - lv } else { v };
                    st.last = Some((t, v));
                    let base = st.base.unwrap_or(lt);
                    // Close the point once it spans a step (half a sample interval early, for jitter).
                    if t - base >= self.step_ms - (t - lt) / 2 && t > base {
                        self.buf.push((t, st.acc * 1000.0 / (t - base) as f64));
                        st.base = Some(t);
                        st.acc = 0.0;
                    }
                }
            }
        }
        if let Some(&last) = new.last() {
            st.last = Some(last);
        }
        self.emit_cpu(container);
        if !self.buf.is_empty() {
            let wm = &mut self.wm_cpu[container];
            let pts = after(wm, &self.buf);
            if !pts.is_empty() {
                sink.cpu(container, pts);
            }
        }
        new.len()
    }

    /// Moves computed CPU points of a container with several series into its held buffer.
    fn emit_cpu(&mut self, container: usize) {
        if self.several.get(container).copied().unwrap_or(false) {
            let held = self.held.entry(container).or_default();
            held.0.append(&mut self.buf);
        }
    }

    /// Feeds raw samples (in time order) of one memory series of `container`, the largest of each step,
    /// with the container's OOM kills up to its last point (`ooms`: all of the container's kills, in time
    /// order). The samples of one call end at a step boundary (one window). Returns how many were new.
    pub fn memory(
        &mut self,
        container: usize,
        key: SeriesKey,
        points: &[Point],
        ooms: &[Oom],
        sink: &mut dyn HistorySink,
    ) -> usize {
        if container >= self.wm_mem.len() {
            return 0;
        }
        let st = self.mem_state.entry((container, key)).or_default();
        let new = new_raw(st, points);
        let Some(&last) = new.last() else {
            return 0;
        };
        st.last = Some(last);
        let step = self.step_ms;
        // Step k covers (k−1)·step, k·step]: windows end at step boundaries, so no step spans two calls.
        let bucket = |t: i64| t.div_euclid(step) + i64::from(t.rem_euclid(step) != 0);
        self.buf.clear();
        for &(t, v) in new {
            match self.buf.last_mut() {
                Some(p) if bucket(p.0) == bucket(t) => {
                    if v > p.1 {
                        *p = (t, v);
                    }
                }
                _ => self.buf.push((t, v)),
            }
        }
        if self.several.get(container).copied().unwrap_or(false) {
            let held = self.held.entry(container).or_default();
            held.1.append(&mut self.buf);
            return new.len();
        }
        self.feed_memory(container, ooms, sink);
        new.len()
    }

    /// Feeds the memory points in `buf` (time order) past the watermark, with the OOM kills among them.
    fn feed_memory(&mut self, container: usize, ooms: &[Oom], sink: &mut dyn HistorySink) {
        let (Some(wm), Some(wm_oom)) = (
            self.wm_mem.get_mut(container),
            self.wm_oom.get_mut(container),
        ) else {
            return;
        };
        let pts = after(wm, &self.buf);
        let Some(last) = pts.last() else {
            return;
        };
        let kills = ooms_after(wm_oom, ooms, last.0);
        sink.memory(container, pts, kills);
    }

    /// Feeds, merged in time order, the points held for these containers (those with several series) once
    /// a window's CPU (`cpu`) or memory queries are done.
    pub fn flush_held(
        &mut self,
        containers: &[usize],
        cpu: bool,
        ooms: &HashMap<usize, Vec<Oom>>,
        sink: &mut dyn HistorySink,
    ) {
        for &c in containers {
            let Some(held) = self.held.get_mut(&c) else {
                continue;
            };
            let mut pts = std::mem::take(if cpu { &mut held.0 } else { &mut held.1 });
            if pts.is_empty() {
                continue;
            }
            merge_held(&mut pts);
            if cpu {
                if let Some(wm) = self.wm_cpu.get_mut(c) {
                    let new = after(wm, &pts);
                    if !new.is_empty() {
                        sink.cpu(c, new);
                    }
                }
            } else {
                self.buf = pts;
                let list = ooms.get(&c).map_or(&[][..], Vec::as_slice);
                self.feed_memory(c, list, sink);
            }
        }
    }

    /// Feeds every OOM kill at or before `until` not fed yet (the kills of containers whose memory series
    /// ended earlier, or never came). `ooms`: kills per container, each in time order.
    pub fn ooms_until(
        &mut self,
        until: i64,
        ooms: &HashMap<usize, Vec<Oom>>,
        sink: &mut dyn HistorySink,
    ) {
        for (&i, list) in ooms {
            let Some(wm) = self.wm_oom.get_mut(i) else {
                continue;
            };
            let kills = ooms_after(wm, list, until);
            if !kills.is_empty() {
                sink.memory(i, &[], kills);
            }
        }
    }
}

/// OOM kill times of one container: a step where the restart counter grows while the last termination
/// reason is `OOMKilled`. `restarts`: the restart counter in time order; `oom_reason_at`: the steps where
/// the reason series is positive.
pub fn oom_kills(restarts: &[Point], oom_reason_at: &BTreeSet<i64>) -> Vec<i64> {
    restarts
        .windows(2)
        .filter(|w| w[1].1 > w[0].1 && oom_reason_at.contains(&w[1].0))
        .map(|w| w[1].0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything the sink received, in order.
    #[derive(Debug, Default)]
    struct Recorder {
        cpu: Vec<(usize, Point)>,
        memory: Vec<(usize, Point)>,
        ooms: Vec<(usize, Oom)>,
    }

    impl HistorySink for Recorder {
        fn cpu(&mut self, container: usize, points: &[Point]) {
            self.cpu.extend(points.iter().map(|&p| (container, p)));
        }
        fn memory(&mut self, container: usize, points: &[Point], ooms: &[Oom]) {
            self.memory.extend(points.iter().map(|&p| (container, p)));
            self.ooms.extend(ooms.iter().map(|&o| (container, o)));
        }
    }

    const M: i64 = 60_000;

    fn counter() -> Feeder {
        Feeder::new(1, CpuSeries::Counter, M)
    }

    #[test]
    fn counter_is_differenced_per_step() {
        let mut f = counter();
        let mut r = Recorder::default();
        // 30 core-seconds per minute = 0.5 cores; then 60 per minute = 1 core.
        let n = f.cpu(0, 1, &[(0, 100.0), (M, 130.0), (2 * M, 190.0)], &mut r);
        assert_eq!(n, 3);
        assert_eq!(r.cpu, vec![(0, (M, 0.5)), (0, (2 * M, 1.0))]);
    }

    #[test]
    fn counter_reset_counts_from_zero() {
        let mut f = counter();
        let mut r = Recorder::default();
        f.cpu(0, 1, &[(0, 500.0), (M, 6.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 0.1))]);
    }

    #[test]
    fn sparse_samples_span_their_real_distance() {
        // Samples every 6 minutes (slow scrape, downsampling): one point per interval, not a stair-step.
        let mut f = counter();
        let mut r = Recorder::default();
        f.cpu(0, 1, &[(0, 0.0), (6 * M, 180.0), (12 * M, 216.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (6 * M, 0.5)), (0, (12 * M, 0.1))]);
        // Hourly downsampled data, a reset in between.
        let mut f = counter();
        let mut r = Recorder::default();
        let h = 60 * M;
        f.cpu(0, 1, &[(0, 0.0), (h, 1800.0), (2 * h, 360.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (h, 0.5)), (0, (2 * h, 0.1))]);
    }

    #[test]
    fn dense_samples_are_summed_up_to_a_step() {
        // 15-second samples with a little jitter, 1-minute step: one point per minute.
        let mut f = counter();
        let mut r = Recorder::default();
        let pts: Vec<Point> = (0..=8)
            .map(|i| {
                (
                    i * 15_000 + if i % 2 == 1 { 200 } else { 0 },
                    i as f64 * 7.5,
                )
            })
            .collect();
        f.cpu(0, 1, &pts, &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 0.5)), (0, (2 * M, 0.5))]);
        // A reset among the summed samples: the restarted counter's value is its increase.
        let mut f = counter();
        let mut r = Recorder::default();
        f.cpu(0, 1, &[(0, 90.0), (30_000, 105.0), (M, 15.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 0.5))]);
    }

    #[test]
    fn gap_averages_over_the_gap() {
        let mut f = counter();
        let mut r = Recorder::default();
        // Two steps missing: the difference spreads over three minutes.
        f.cpu(0, 1, &[(0, 0.0), (3 * M, 90.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (3 * M, 0.5))]);
    }

    #[test]
    fn base_carries_over_windows() {
        let mut f = counter();
        let mut r = Recorder::default();
        f.cpu(0, 1, &[(0, 0.0), (M, 60.0)], &mut r);
        // The next window starts one step early and repeats the last sample: not read twice.
        f.cpu(0, 1, &[(M, 60.0), (2 * M, 90.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 1.0)), (0, (2 * M, 0.5))]);
    }

    #[test]
    fn rate_series_pass_through() {
        let mut f = Feeder::new(2, CpuSeries::Rate, M);
        let mut r = Recorder::default();
        assert_eq!(f.cpu(1, 1, &[(M, 0.25), (2 * M, 0.5)], &mut r), 2);
        assert_eq!(r.cpu, vec![(1, (M, 0.25)), (1, (2 * M, 0.5))]);
    }

    #[test]
    fn memory_keeps_the_peak_of_each_step() {
        let mut f = counter();
        let mut r = Recorder::default();
        let pts = [
            (15_000, 1.0),
            (30_000, 5.0),
            (M, 2.0),
            (M + 15_000, 3.0),
            (7 * M, 4.0),
        ];
        assert_eq!(f.memory(0, 1, &pts, &[], &mut r), 5);
        assert_eq!(
            r.memory,
            vec![
                (0, (30_000, 5.0)),
                (0, (M + 15_000, 3.0)),
                (0, (7 * M, 4.0))
            ]
        );
    }

    #[test]
    fn several_series_are_merged_when_the_window_is_done() {
        // A restart gave the container a second series (new cgroup id); the newer one arrives first.
        let mut f = counter();
        f.set_several_series(0);
        let mut r = Recorder::default();
        f.cpu(0, 2, &[(3 * M, 0.0), (4 * M, 30.0)], &mut r);
        f.cpu(0, 1, &[(0, 0.0), (M, 60.0), (2 * M, 120.0)], &mut r);
        f.memory(0, 2, &[(4 * M, 9.0)], &[], &mut r);
        f.memory(0, 1, &[(M, 1.0), (2 * M, 2.0)], &[], &mut r);
        assert!(r.cpu.is_empty() && r.memory.is_empty());
        let none = HashMap::new();
        f.flush_held(&[0], true, &none, &mut r);
        f.flush_held(&[0], false, &none, &mut r);
        assert_eq!(
            r.cpu,
            vec![(0, (M, 1.0)), (0, (2 * M, 1.0)), (0, (4 * M, 0.5))]
        );
        assert_eq!(
            r.memory,
            vec![(0, (M, 1.0)), (0, (2 * M, 2.0)), (0, (4 * M, 9.0))]
        );
    }

    #[test]
    fn retried_window_feeds_every_point_once() {
        let mut f = counter();
        let mut r = Recorder::default();
        let cpu = [(0, 0.0), (M, 30.0), (2 * M, 60.0), (3 * M, 90.0)];
        let mem = [(M, 1.0), (2 * M, 2.0), (3 * M, 3.0)];
        // A query failed half-way, then its retry returned the whole window.
        f.cpu(0, 1, &cpu[..2], &mut r);
        f.memory(0, 1, &mem[..1], &[], &mut r);
        assert_eq!(f.cpu(0, 1, &cpu, &mut r), 2);
        assert_eq!(f.memory(0, 1, &mem, &[], &mut r), 2);
        // And a resumed load re-reads it once more: nothing new.
        assert_eq!(f.cpu(0, 1, &cpu, &mut r), 0);
        assert_eq!(f.memory(0, 1, &mem, &[], &mut r), 0);
        let times = |v: &[(usize, Point)]| v.iter().map(|p| p.1.0).collect::<Vec<_>>();
        assert_eq!(times(&r.cpu), vec![M, 2 * M, 3 * M]);
        assert!(r.cpu.iter().all(|p| p.1.1 == 0.5), "{:?}", r.cpu);
        assert_eq!(times(&r.memory), vec![M, 2 * M, 3 * M]);
    }

    #[test]
    fn ooms_go_with_memory_once() {
        let mut f = Feeder::new(2, CpuSeries::Counter, M);
        let mut r = Recorder::default();
        let ooms = [(M + 1, Some(5.0)), (5 * M, None)];
        f.memory(0, 1, &[(M, 1.0), (2 * M, 2.0)], &ooms, &mut r);
        assert_eq!(r.ooms, vec![(0, (M + 1, Some(5.0)))]);
        // The second kill comes after the last memory point: flushed when its window is done, once.
        let all: HashMap<usize, Vec<Oom>> = [(0, ooms.to_vec()), (1, vec![(3 * M, None)])].into();
        f.ooms_until(4 * M, &all, &mut r);
        assert_eq!(r.ooms.len(), 2, "{:?}", r.ooms);
        assert!(r.ooms.contains(&(1, (3 * M, None))));
        f.ooms_until(10 * M, &all, &mut r);
        f.ooms_until(10 * M, &all, &mut r);
        f.memory(0, 1, &[(6 * M, 3.0)], &ooms, &mut r);
        assert_eq!(r.ooms.len(), 3, "{:?}", r.ooms);
        assert_eq!(r.ooms[2], (0, (5 * M, None)));
    }

    #[test]
    fn unknown_containers_are_ignored() {
        let mut f = counter();
        let mut r = Recorder::default();
        assert_eq!(f.cpu(7, 1, &[(0, 1.0), (M, 2.0)], &mut r), 0);
        assert_eq!(f.memory(7, 1, &[(0, 1.0)], &[], &mut r), 0);
        f.ooms_until(M, &[(7, vec![(0, None)])].into(), &mut r);
        assert!(r.cpu.is_empty() && r.memory.is_empty() && r.ooms.is_empty());
    }

    #[test]
    fn oom_kills_need_a_restart_and_the_reason() {
        let restarts = [(0, 0.0), (M, 0.0), (2 * M, 1.0), (3 * M, 1.0), (4 * M, 2.0)];
        // The second restart was not an OOM kill (the reason series is absent at 4m).
        let reason: BTreeSet<i64> = [2 * M, 3 * M].into();
        assert_eq!(oom_kills(&restarts, &reason), vec![2 * M]);
        assert!(oom_kills(&restarts, &BTreeSet::new()).is_empty());
        assert!(oom_kills(&[], &reason).is_empty());
    }
}
