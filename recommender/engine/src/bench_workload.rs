//! Benchmark workload W1 (`docs/design/bench-workload.md`): deterministic CPU and memory usage for N containers
//! at a one-minute resolution, shared by the benchmarks, the heap measurement and the sanity test.

use crate::model::{
    AggregationsConfig, ClusterState, ContainerId, ContainerRef, FEED_SAMPLES, Labels, PodPhase,
    Sample, Selector, VpaState,
};
use crate::units::{Resource, cpu_amount_from_cores, memory_amount_from_bytes};

/// Unix seconds of tick 0.
pub const T0: i64 = 1_717_200_000;
/// Ticks per day (one per minute).
pub const TICKS_PER_DAY: usize = 1440;

/// The W1 generator: noise table and per-container bases.
#[derive(Debug, Clone)]
pub struct W1 {
    noise: Vec<f64>,
    base_cpu: Vec<f64>,
    base_mem: Vec<f64>,
}

impl Default for W1 {
    fn default() -> Self {
        Self::new()
    }
}

impl W1 {
    /// Builds the 65536-entry splitmix64 noise table (seed 42) and the 160 CPU and memory bases.
    pub fn new() -> Self {
        let mut state: u64 = 42;
        let noise = (0..65536)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 11) as f64 * 2f64.powi(-53)
            })
            .collect();
        let pow = |i: usize| crate::units::go_pow(1.05, i as f64);
        W1 {
            noise,
            base_cpu: (0..160).map(|i| 0.01 * pow(i)).collect(),
            base_mem: (0..160).map(|i| 10.0 * 1_048_576.0 * pow(i)).collect(),
        }
    }

    /// Sample time of tick `k`, in ns since the epoch.
    #[inline]
    pub fn time(k: usize) -> i64 {
        (T0 + 60 * k as i64) * 1_000_000_000
    }

    /// The diurnal factor of tick `k`.
    #[inline]
    pub fn diurnal(k: usize) -> f64 {
        1.0 + 0.5 * (2.0 * std::f64::consts::PI * k as f64 / 1440.0).sin()
    }

    /// CPU usage (cores) of container `i` at tick `k`, given `diurnal(k)`.
    #[inline]
    pub fn cpu(&self, i: usize, k: usize, diurnal: f64) -> f64 {
        self.base_cpu[i % 160] * diurnal * (0.8 + 0.4 * self.noise[(i * 7919 + k) % 65536])
    }

    /// Memory usage (bytes) of container `i` at tick `k`.
    #[inline]
    pub fn mem(&self, i: usize, k: usize) -> f64 {
        self.base_mem[i % 160] * (0.9 + 0.2 * self.noise[(i * 104_729 + 3 * k + 1) % 65536])
    }
}

/// Pod `(namespace, name)` pairs of W1's cluster path: pod `i` is `pod-i` in namespace `ns-(i/100)`.
pub fn pod_names(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("ns-{}", i / 100), format!("pod-{i}")))
        .collect()
}

/// W1's cluster-path model: one VPA per namespace selecting everything, and every pod of `names` Running
/// with labels `{app: app-i}` and one container `c` (garbage collection every hour).
pub fn cluster(names: &[(String, String)], config: AggregationsConfig) -> ClusterState {
    let mut cluster = ClusterState::new(config, 3_600_000_000_000);
    for ns in 0..names.len().div_ceil(100) {
        cluster.add_vpa(VpaState::new(
            &format!("ns-{ns}"),
            "vpa",
            Selector::everything(),
        ));
    }
    for (i, (ns, pod)) in names.iter().enumerate() {
        let labels: Labels = [("app".to_string(), format!("app-{i}"))]
            .into_iter()
            .collect();
        cluster.add_or_update_pod(ns, pod, &labels, PodPhase::Running);
        let _ = cluster.add_or_update_container(container_id(ns, pod));
    }
    cluster
}

fn container_id<'a>(namespace: &'a str, pod: &'a str) -> ContainerId<'a> {
    ContainerId {
        namespace,
        pod,
        container: "c",
    }
}

impl W1 {
    /// Folds tick `k` into a model built by [`cluster`]: one CPU and one memory sample per pod of `names`,
    /// through `ClusterState::add_sample` (the recommender's real entry point).
    pub fn add_tick(&self, cluster: &mut ClusterState, names: &[(String, String)], k: usize) {
        let (time, d) = (W1::time(k), W1::diurnal(k));
        for (i, (ns, pod)) in names.iter().enumerate() {
            let id = container_id(ns, pod);
            let cpu = cpu_amount_from_cores(self.cpu(i, k, d));
            let _ = cluster.add_sample(
                id,
                Sample {
                    time,
                    resource: Resource::Cpu,
                    usage: cpu,
                },
            );
            let mem = memory_amount_from_bytes(self.mem(i, k));
            let _ = cluster.add_sample(
                id,
                Sample {
                    time,
                    resource: Resource::Memory,
                    usage: mem,
                },
            );
        }
    }
}

/// The containers of `names` in a model built by [`cluster`], resolved once (as the recommender resolves a
/// pod's containers once per poll), for [`W1::add_tick_by_ref`].
pub fn container_refs(cluster: &ClusterState, names: &[(String, String)]) -> Vec<ContainerRef> {
    names
        .iter()
        .filter_map(|(ns, pod)| cluster.container_ref(container_id(ns, pod)).ok())
        .collect()
}

impl W1 {
    /// [`W1::add_tick`] through `ClusterState::add_samples_to`, the containers resolved by [`container_refs`]:
    /// the CPU and memory samples of [`FEED_SAMPLES`] / 2 containers at a time go in as one batch, as the
    /// recommender feeds a poll.
    pub fn add_tick_by_ref(&self, cluster: &mut ClusterState, refs: &[ContainerRef], k: usize) {
        let (time, d) = (W1::time(k), W1::diurnal(k));
        let per_batch = FEED_SAMPLES / 2;
        let mut batch = Vec::with_capacity(FEED_SAMPLES);
        for (g, group) in refs.chunks(per_batch).enumerate() {
            batch.clear();
            for (j, &c) in group.iter().enumerate() {
                let i = g * per_batch + j;
                let cpu = cpu_amount_from_cores(self.cpu(i, k, d));
                let mem = memory_amount_from_bytes(self.mem(i, k));
                batch.push((
                    c,
                    Sample {
                        time,
                        resource: Resource::Cpu,
                        usage: cpu,
                    },
                ));
                batch.push((
                    c,
                    Sample {
                        time,
                        resource: Resource::Memory,
                        usage: mem,
                    },
                ));
            }
            cluster.add_samples_to(&batch, |_, _| {});
        }
    }
}
