//! KRR's `simple` strategy as its documentation states it: CPU request at the 95th percentile of usage over
//! the history window (14 days), no CPU limit; memory at the window's maximum plus 15 %; minimums 10m and
//! 100 MB. Percentiles are nearest-rank over whole millicores, merged across a workload's pods.

use std::collections::{BTreeMap, VecDeque};

use crate::policy::Resources;

/// KRR's default history window.
pub const WINDOW_NS: i64 = 14 * 86_400 * 1_000_000_000;
const CPU_PERCENTILE: f64 = 0.95;
const MEMORY_BUFFER: f64 = 0.15;
const MIN_CPU_MILLIS: i64 = 10;
const MIN_MEMORY_BYTES: i64 = 100 * 1_000_000;
/// Millicore buckets of the CPU counter; usage above the last counts in the last (262 cores).
const CPU_BUCKETS: usize = 1 << 18;

/// Count of samples per millicore value, as a Fenwick tree (prefix sums in O(log n)).
#[derive(Debug)]
struct Counter {
    tree: Vec<u32>,
    total: u64,
}

impl Counter {
    fn new() -> Self {
        Counter {
            tree: vec![0; CPU_BUCKETS + 1],
            total: 0,
        }
    }

    fn update(&mut self, bucket: usize, add: bool) {
        let mut i = bucket + 1;
        while i < self.tree.len() {
            self.tree[i] = if add {
                self.tree[i].saturating_add(1)
            } else {
                self.tree[i].saturating_sub(1)
            };
            i += i & i.wrapping_neg();
        }
        if add {
            self.total += 1;
        } else {
            self.total = self.total.saturating_sub(1);
        }
    }

    /// The smallest bucket whose prefix count reaches `rank` (1-based).
    fn find(&self, rank: u64) -> usize {
        let mut pos = 0usize;
        let mut rem = rank;
        let mut step = CPU_BUCKETS.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next < self.tree.len() && u64::from(self.tree[next]) < rem {
                pos = next;
                rem -= u64::from(self.tree[next]);
            }
            step >>= 1;
        }
        pos
    }
}

/// One container name's window.
#[derive(Debug)]
struct Window {
    cpu: VecDeque<(i64, usize)>,
    counter: Counter,
    memory: VecDeque<(i64, f64)>,
    /// Indices into `memory` kept as a decreasing deque of maxima.
    maxima: VecDeque<(i64, f64)>,
}

/// KRR's simple strategy over a trace, fed in time order.
#[derive(Debug, Default)]
pub struct KrrSimple {
    windows: BTreeMap<String, Window>,
}

impl KrrSimple {
    /// Records a CPU sample (cores) of container `name` at `t` (ns).
    pub fn cpu(&mut self, name: &str, t: i64, cores: f64) {
        if !(cores.is_finite() && cores >= 0.0) {
            return;
        }
        let bucket = ((cores * 1000.0).ceil() as usize).min(CPU_BUCKETS - 1);
        let w = self.window(name);
        w.cpu.push_back((t, bucket));
        w.counter.update(bucket, true);
    }

    /// Records a memory sample (bytes) of container `name` at `t` (ns).
    pub fn memory(&mut self, name: &str, t: i64, bytes: f64) {
        if !(bytes.is_finite() && bytes >= 0.0) {
            return;
        }
        let w = self.window(name);
        w.memory.push_back((t, bytes));
        while w.maxima.back().is_some_and(|&(_, v)| v <= bytes) {
            w.maxima.pop_back();
        }
        w.maxima.push_back((t, bytes));
    }

    fn window(&mut self, name: &str) -> &mut Window {
        self.windows
            .entry(name.to_string())
            .or_insert_with(|| Window {
                cpu: VecDeque::new(),
                counter: Counter::new(),
                memory: VecDeque::new(),
                maxima: VecDeque::new(),
            })
    }

    /// Targets per container name at `now` from the samples of the last 14 days.
    pub fn recommend(&mut self, now: i64) -> BTreeMap<String, Resources> {
        let from = now.saturating_sub(WINDOW_NS);
        let mut out = BTreeMap::new();
        for (name, w) in &mut self.windows {
            while let Some(&(t, b)) = w.cpu.front() {
                if t >= from {
                    break;
                }
                w.cpu.pop_front();
                w.counter.update(b, false);
            }
            while w.memory.front().is_some_and(|&(t, _)| t < from) {
                w.memory.pop_front();
            }
            while w.maxima.front().is_some_and(|&(t, _)| t < from) {
                w.maxima.pop_front();
            }
            let cpu = (w.counter.total > 0).then(|| {
                let rank = ((CPU_PERCENTILE * w.counter.total as f64).ceil() as u64).max(1);
                (w.counter.find(rank) as i64).max(MIN_CPU_MILLIS)
            });
            let memory = w
                .maxima
                .front()
                .map(|&(_, m)| ((m * (1.0 + MEMORY_BUFFER)).ceil() as i64).max(MIN_MEMORY_BYTES));
            out.insert(name.clone(), Resources { cpu, memory });
        }
        out
    }
}
