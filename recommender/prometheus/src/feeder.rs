//! The pure core of a history load: series in, samples out. No I/O and no clock, so every rule is unit-tested
//! here rather than through HTTP fakes.
//!
//! - CPU arrives either as a counter (differenced here: each point becomes the average cores over the step
//!   before it, a drop is a counter reset) or already as a rate.
//! - Every container keeps a watermark per resource (and one for OOM kills): a point at or before the
//!   watermark was fed already, so a retried query or a resumed load never feeds a point twice.
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

/// How CPU series arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuSeries {
    /// The usage counter itself (core-seconds), differenced by the feeder.
    #[default]
    Counter,
    /// Already a rate (cores), e.g. from a server-side `rate()`.
    Rate,
}

/// Per-container watermarks and counter bases; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Feeder {
    cpu_series: CpuSeries,
    wm_cpu: Vec<i64>,
    wm_mem: Vec<i64>,
    wm_oom: Vec<i64>,
    /// Last counter point read per container: the base of the next difference.
    cpu_base: Vec<Option<Point>>,
    /// Scratch buffer for differenced points.
    rates: Vec<Point>,
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

impl Feeder {
    /// A feeder for `containers` containers (indices `0..containers`), nothing fed yet.
    pub fn new(containers: usize, cpu_series: CpuSeries) -> Self {
        Feeder {
            cpu_series,
            wm_cpu: vec![i64::MIN; containers],
            wm_mem: vec![i64::MIN; containers],
            wm_oom: vec![i64::MIN; containers],
            cpu_base: vec![None; containers],
            rates: Vec::new(),
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

    /// Feeds one CPU series of `container` (points in time order). Returns how many points were new (read
    /// for the first time); with a counter, the first one only becomes the base of the next difference.
    pub fn cpu(&mut self, container: usize, points: &[Point], sink: &mut dyn HistorySink) -> usize {
        let Some(wm) = self.wm_cpu.get_mut(container) else {
            return 0;
        };
        let new = after(wm, points);
        if new.is_empty() {
            return 0;
        }
        match self.cpu_series {
            CpuSeries::Rate => sink.cpu(container, new),
            CpuSeries::Counter => {
                let mut base = self.cpu_base[container];
                self.rates.clear();
                for &(t, v) in new {
                    if let Some((bt, bv)) = base
                        && t > bt
                    {
                        // A drop is a counter reset: the counter restarted from zero.
                        let inc = if v >= bv { v - bv } else { v };
                        self.rates.push((t, inc * 1000.0 / (t - bt) as f64));
                    }
                    base = Some((t, v));
                }
                self.cpu_base[container] = base;
                if !self.rates.is_empty() {
                    sink.cpu(container, &self.rates);
                }
            }
        }
        new.len()
    }

    /// Feeds one memory series of `container` (points in time order) with the container's OOM kills up to its
    /// last new point (`ooms`: all of the container's kills, in time order). Returns how many points were new.
    pub fn memory(
        &mut self,
        container: usize,
        points: &[Point],
        ooms: &[Oom],
        sink: &mut dyn HistorySink,
    ) -> usize {
        let (Some(wm), Some(wm_oom)) = (
            self.wm_mem.get_mut(container),
            self.wm_oom.get_mut(container),
        ) else {
            return 0;
        };
        let new = after(wm, points);
        let Some(last) = new.last() else {
            return 0;
        };
        let kills = ooms_after(wm_oom, ooms, last.0);
        sink.memory(container, new, kills);
        new.len()
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

    #[test]
    fn counter_is_differenced_per_step() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        // 30 core-seconds per minute = 0.5 cores; then 60 per minute = 1 core.
        let n = f.cpu(0, &[(0, 100.0), (M, 130.0), (2 * M, 190.0)], &mut r);
        assert_eq!(n, 3);
        assert_eq!(r.cpu, vec![(0, (M, 0.5)), (0, (2 * M, 1.0))]);
    }

    #[test]
    fn counter_reset_counts_from_zero() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        f.cpu(0, &[(0, 500.0), (M, 6.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 0.1))]);
    }

    #[test]
    fn gap_averages_over_the_gap() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        // Two steps missing: the difference spreads over three minutes.
        f.cpu(0, &[(0, 0.0), (3 * M, 90.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (3 * M, 0.5))]);
    }

    #[test]
    fn base_carries_over_windows() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        f.cpu(0, &[(0, 0.0), (M, 60.0)], &mut r);
        // The next window starts one step early (its base) and repeats the last point: not fed twice.
        f.cpu(0, &[(M, 60.0), (2 * M, 90.0)], &mut r);
        assert_eq!(r.cpu, vec![(0, (M, 1.0)), (0, (2 * M, 0.5))]);
    }

    #[test]
    fn rate_series_pass_through() {
        let mut f = Feeder::new(2, CpuSeries::Rate);
        let mut r = Recorder::default();
        assert_eq!(f.cpu(1, &[(M, 0.25), (2 * M, 0.5)], &mut r), 2);
        assert_eq!(r.cpu, vec![(1, (M, 0.25)), (1, (2 * M, 0.5))]);
    }

    #[test]
    fn retried_window_feeds_every_point_once() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        let cpu = [(0, 0.0), (M, 30.0), (2 * M, 60.0), (3 * M, 90.0)];
        let mem = [(M, 1.0), (2 * M, 2.0), (3 * M, 3.0)];
        // A query failed half-way, then its retry returned the whole window.
        f.cpu(0, &cpu[..2], &mut r);
        f.memory(0, &mem[..1], &[], &mut r);
        assert_eq!(f.cpu(0, &cpu, &mut r), 2);
        assert_eq!(f.memory(0, &mem, &[], &mut r), 2);
        // And a resumed load re-reads it once more: nothing new.
        assert_eq!(f.cpu(0, &cpu, &mut r), 0);
        assert_eq!(f.memory(0, &mem, &[], &mut r), 0);
        let times = |v: &[(usize, Point)]| v.iter().map(|p| p.1.0).collect::<Vec<_>>();
        assert_eq!(times(&r.cpu), vec![M, 2 * M, 3 * M]);
        assert!(r.cpu.iter().all(|p| p.1.1 == 0.5), "{:?}", r.cpu);
        assert_eq!(times(&r.memory), vec![M, 2 * M, 3 * M]);
    }

    #[test]
    fn ooms_go_with_memory_once() {
        let mut f = Feeder::new(2, CpuSeries::Counter);
        let mut r = Recorder::default();
        let ooms = [(M + 1, Some(5.0)), (5 * M, None)];
        f.memory(0, &[(M, 1.0), (2 * M, 2.0)], &ooms, &mut r);
        assert_eq!(r.ooms, vec![(0, (M + 1, Some(5.0)))]);
        // The second kill comes after the last memory point: flushed when its window is done, once.
        let all: HashMap<usize, Vec<Oom>> = [(0, ooms.to_vec()), (1, vec![(3 * M, None)])].into();
        f.ooms_until(4 * M, &all, &mut r);
        assert_eq!(r.ooms.len(), 2, "{:?}", r.ooms);
        assert!(r.ooms.contains(&(1, (3 * M, None))));
        f.ooms_until(10 * M, &all, &mut r);
        f.ooms_until(10 * M, &all, &mut r);
        f.memory(0, &[(6 * M, 3.0)], &ooms, &mut r);
        assert_eq!(r.ooms.len(), 3, "{:?}", r.ooms);
        assert_eq!(r.ooms[2], (0, (5 * M, None)));
    }

    #[test]
    fn unknown_containers_are_ignored() {
        let mut f = Feeder::new(1, CpuSeries::Counter);
        let mut r = Recorder::default();
        assert_eq!(f.cpu(7, &[(0, 1.0), (M, 2.0)], &mut r), 0);
        assert_eq!(f.memory(7, &[(0, 1.0)], &[], &mut r), 0);
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
