//! Prometheus metrics of the updater (`tailor_updater_*`, docs/design/upstream-updater.md §7 with Tailor's prefix),
//! served on `/metrics`.

use std::collections::BTreeMap;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod handles;

use handles::CounterHandles;

/// Label pairs of one series.
pub type Labels = Vec<(&'static str, String)>;

/// Highest `vpa_size_log2` bucket.
pub const MAX_SIZE_LOG2: u32 = 20;

/// Execution-time buckets, in seconds (docs/design/upstream-updater.md §7).
const LATENCY_BUCKETS: [f64; 23] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0,
    90.0, 100.0, 120.0, 150.0, 240.0, 300.0,
];

/// `vpa_size_log2`: 0 for 0 pods, else ⌊log2(size)⌋ capped at 20.
pub fn size_log2(size: usize) -> u32 {
    if size == 0 {
        0
    } else {
        usize::BITS - 1 - size.leading_zeros()
    }
    .min(MAX_SIZE_LOG2)
}

fn size_mode(size: usize, mode: &str) -> Labels {
    vec![
        ("vpa_size_log2", size_log2(size).to_string()),
        ("update_mode", mode.to_owned()),
    ]
}

fn size_only(size: usize) -> Labels {
    vec![("vpa_size_log2", size_log2(size).to_string())]
}

/// One VPA as the per-VPA counters label it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VpaLabel<'a> {
    /// Live pods of the VPA.
    pub size: usize,
    /// VPA name.
    pub name: &'a str,
    /// VPA namespace.
    pub namespace: &'a str,
    /// Effective update mode.
    pub mode: &'a str,
}

impl VpaLabel<'_> {
    fn with_mode(&self, reason: Option<&str>) -> Labels {
        let mut l = size_mode(self.size, self.mode);
        if let Some(r) = reason {
            l.push(("reason", r.to_owned()));
        }
        l.push(("vpa_name", self.name.to_owned()));
        l.push(("vpa_namespace", self.namespace.to_owned()));
        l
    }

    fn without_mode(&self, reason: Option<&str>) -> Labels {
        let mut l = size_only(self.size);
        if let Some(r) = reason {
            l.push(("reason", r.to_owned()));
        }
        l.push(("vpa_name", self.name.to_owned()));
        l.push(("vpa_namespace", self.namespace.to_owned()));
        l
    }
}

/// Every metric, registered in one registry.
pub struct Metrics {
    registry: Registry,
    controlled_pods: Family<Labels, Gauge>,
    evictable_pods: Family<Labels, Gauge>,
    vpas_with_evictable_pods: Family<Labels, Gauge>,
    vpas_with_evicted_pods: Family<Labels, Gauge>,
    in_place_updatable_pods: Family<Labels, Gauge>,
    vpas_with_in_place_updatable_pods: Family<Labels, Gauge>,
    vpas_with_in_place_updated_pods: Family<Labels, Gauge>,
    evicted_pods: Family<Labels, Counter>,
    failed_evictions: Family<Labels, Counter>,
    in_place_updated_pods: Family<Labels, Counter>,
    failed_in_place_updates: Family<Labels, Counter>,
    infeasible_skips: Family<Labels, Counter>,
    unsized_replacements: Family<Labels, Counter>,
    execution_latency: Family<Labels, Histogram>,
    /// Unix time of the last finished iteration.
    pub last_iteration_timestamp: Gauge,
    /// Whether the webhook's status lease was valid at the last iteration (1) or not (0).
    pub admission_alive: Gauge,
    /// Workloads whose evictions are paused because a replacement came back unsized.
    pub evictions_paused_workloads: Gauge,
    /// Each VPA's two counters, kept across iterations.
    handles: CounterHandles,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tailor_updater");
        let mut m = Metrics {
            registry: Registry::default(),
            controlled_pods: Family::default(),
            evictable_pods: Family::default(),
            vpas_with_evictable_pods: Family::default(),
            vpas_with_evicted_pods: Family::default(),
            in_place_updatable_pods: Family::default(),
            vpas_with_in_place_updatable_pods: Family::default(),
            vpas_with_in_place_updated_pods: Family::default(),
            evicted_pods: Family::default(),
            failed_evictions: Family::default(),
            in_place_updated_pods: Family::default(),
            failed_in_place_updates: Family::default(),
            infeasible_skips: Family::default(),
            unsized_replacements: Family::default(),
            execution_latency: Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS)),
            last_iteration_timestamp: Gauge::default(),
            admission_alive: Gauge::default(),
            evictions_paused_workloads: Gauge::default(),
            handles: CounterHandles::default(),
        };
        let gauges: [(&str, &str, &Family<Labels, Gauge>); 7] = [
            (
                "controlled_pods_total",
                "Live pods per matched VPA, by size and mode",
                &m.controlled_pods,
            ),
            (
                "evictable_pods_total",
                "Pods on the eviction path after budgets, priority and admission",
                &m.evictable_pods,
            ),
            (
                "vpas_with_evictable_pods_total",
                "VPAs with at least one evictable pod",
                &m.vpas_with_evictable_pods,
            ),
            (
                "vpas_with_evicted_pods_total",
                "VPAs with at least one eviction this iteration",
                &m.vpas_with_evicted_pods,
            ),
            (
                "in_place_updatable_pods_total",
                "Pods on the in-place path",
                &m.in_place_updatable_pods,
            ),
            (
                "vpas_with_in_place_updatable_pods_total",
                "VPAs with at least one pod on the in-place path",
                &m.vpas_with_in_place_updatable_pods,
            ),
            (
                "vpas_with_in_place_updated_pods_total",
                "VPAs with at least one successful resize this iteration",
                &m.vpas_with_in_place_updated_pods,
            ),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
        let counters: [(&str, &str, &Family<Labels, Counter>); 6] = [
            ("evicted_pods", "Successful evictions", &m.evicted_pods),
            (
                "failed_eviction_attempts",
                "Failed evictions, by reason",
                &m.failed_evictions,
            ),
            (
                "in_place_updated_pods",
                "Successful in-place resizes (un-boosts included)",
                &m.in_place_updated_pods,
            ),
            (
                "failed_in_place_update_attempts",
                "Failed in-place resizes, by reason",
                &m.failed_in_place_updates,
            ),
            (
                "in_place_infeasible_skip_pods",
                "Pods skipped because their last resize was infeasible",
                &m.infeasible_skips,
            ),
            (
                "unsized_replacements",
                "Replacements of evicted pods admitted without Tailor's webhook (evictions of the workload pause)",
                &m.unsized_replacements,
            ),
        ];
        for (name, help, family) in counters {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "execution_latency_seconds",
            "Duration of iteration steps",
            m.execution_latency.clone(),
        );
        registry.register(
            "last_iteration_timestamp_seconds",
            "Unix time of the last finished iteration",
            m.last_iteration_timestamp.clone(),
        );
        registry.register(
            "admission_alive",
            "Whether the webhook's status lease was valid at the last iteration",
            m.admission_alive.clone(),
        );
        registry.register(
            "evictions_paused_workloads",
            "Workloads whose evictions pause because a replacement came back without Tailor's webhook",
            m.evictions_paused_workloads.clone(),
        );
        m.registry = registry;
        m
    }

    /// Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Sets a processed VPA's counters to 0 so they are exported before the first event.
    pub fn init_counters(&self, vpa: &VpaLabel<'_>) {
        let _ = self.vpa_counters(vpa);
    }

    /// The evicted and in-place-updated counters of a VPA (created at 0 if new): an iteration counts
    /// a VPA's updates on them once the VPA is processed, without looking the series up again.
    pub fn vpa_counters(&self, vpa: &VpaLabel<'_>) -> (Counter, Counter) {
        self.handles.get_or_insert(vpa, || {
            (
                self.evicted_pods
                    .get_or_create(&vpa.with_mode(None))
                    .clone(),
                self.in_place_updated_pods
                    .get_or_create(&vpa.without_mode(None))
                    .clone(),
            )
        })
    }

    /// One successful eviction.
    pub fn add_evicted_pod(&self, vpa: &VpaLabel<'_>) {
        self.add_evicted_pods(vpa, 1);
    }

    /// `n` successful evictions (none: nothing to do).
    pub fn add_evicted_pods(&self, vpa: &VpaLabel<'_>, n: u64) {
        if n > 0 {
            self.evicted_pods
                .get_or_create(&vpa.with_mode(None))
                .inc_by(n);
        }
    }

    /// A replacement of an evicted pod of `vpa` admitted without Tailor's webhook.
    pub fn record_unsized_replacement(&self, vpa: &VpaLabel<'_>) {
        self.unsized_replacements
            .get_or_create(&vpa.without_mode(None))
            .inc();
    }

    /// One failed eviction.
    pub fn record_failed_eviction(&self, vpa: &VpaLabel<'_>, reason: &str) {
        self.failed_evictions
            .get_or_create(&vpa.with_mode(Some(reason)))
            .inc();
    }

    /// One successful resize.
    pub fn add_in_place_updated_pod(&self, vpa: &VpaLabel<'_>) {
        self.add_in_place_updated_pods(vpa, 1);
    }

    /// `n` successful resizes (none: nothing to do).
    pub fn add_in_place_updated_pods(&self, vpa: &VpaLabel<'_>, n: u64) {
        if n > 0 {
            self.in_place_updated_pods
                .get_or_create(&vpa.without_mode(None))
                .inc_by(n);
        }
    }

    /// One failed resize.
    pub fn record_failed_in_place_update(&self, vpa: &VpaLabel<'_>, reason: &str) {
        self.failed_in_place_updates
            .get_or_create(&vpa.without_mode(Some(reason)))
            .inc();
    }

    /// One pod skipped as infeasible (cached).
    pub fn record_infeasible_cached(&self, vpa: &VpaLabel<'_>) {
        self.infeasible_skips
            .get_or_create(&vpa.without_mode(None))
            .inc();
    }

    /// Records the duration of an iteration step (`ListVPAs`, `ListPods`, `FilterPods`, `AdmissionInit`,
    /// `EvictPods`, `total`).
    pub fn observe_step(&self, step: &'static str, seconds: f64) {
        self.execution_latency
            .get_or_create(&vec![("step", step.to_owned())])
            .observe(seconds);
    }

    /// Replaces the per-iteration gauges with `gauges` (docs/design/upstream-updater.md §7: rebuilt each
    /// iteration).
    pub fn publish(&self, gauges: &IterationGauges) {
        for (family, values) in [
            (&self.controlled_pods, &gauges.controlled_pods),
            (&self.evictable_pods, &gauges.evictable_pods),
            (
                &self.vpas_with_evictable_pods,
                &gauges.vpas_with_evictable_pods,
            ),
            (&self.vpas_with_evicted_pods, &gauges.vpas_with_evicted_pods),
        ] {
            family.clear();
            for ((size, mode), value) in values {
                family
                    .get_or_create(&vec![
                        ("vpa_size_log2", size.to_string()),
                        ("update_mode", mode.clone()),
                    ])
                    .set(*value);
            }
        }
        for (family, values) in [
            (
                &self.in_place_updatable_pods,
                &gauges.in_place_updatable_pods,
            ),
            (
                &self.vpas_with_in_place_updatable_pods,
                &gauges.vpas_with_in_place_updatable_pods,
            ),
            (
                &self.vpas_with_in_place_updated_pods,
                &gauges.vpas_with_in_place_updated_pods,
            ),
        ] {
            family.clear();
            for size in 0..=MAX_SIZE_LOG2 {
                family
                    .get_or_create(&vec![("vpa_size_log2", size.to_string())])
                    .set(values.get(&size).copied().unwrap_or(0));
            }
        }
    }
}

/// The per-iteration gauges, accumulated while the iteration runs and published at its end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IterationGauges {
    /// (size bucket, mode) → live pods of matched VPAs.
    pub controlled_pods: BTreeMap<(u32, String), i64>,
    /// (size bucket, mode) → evictable pods.
    pub evictable_pods: BTreeMap<(u32, String), i64>,
    /// (size bucket, mode) → VPAs with evictable pods.
    pub vpas_with_evictable_pods: BTreeMap<(u32, String), i64>,
    /// (size bucket, mode) → VPAs with evicted pods.
    pub vpas_with_evicted_pods: BTreeMap<(u32, String), i64>,
    /// size bucket → pods on the in-place path.
    pub in_place_updatable_pods: BTreeMap<u32, i64>,
    /// size bucket → VPAs with pods on the in-place path.
    pub vpas_with_in_place_updatable_pods: BTreeMap<u32, i64>,
    /// size bucket → VPAs with a successful resize.
    pub vpas_with_in_place_updated_pods: BTreeMap<u32, i64>,
}

/// Which per-iteration gauge to add to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaugeKind {
    /// `controlled_pods_total`.
    ControlledPods,
    /// `evictable_pods_total`.
    EvictablePods,
    /// `vpas_with_evictable_pods_total`.
    VpasWithEvictablePods,
    /// `vpas_with_evicted_pods_total`.
    VpasWithEvictedPods,
    /// `in_place_updatable_pods_total`.
    InPlaceUpdatablePods,
    /// `vpas_with_in_place_updatable_pods_total`.
    VpasWithInPlaceUpdatablePods,
    /// `vpas_with_in_place_updated_pods_total`.
    VpasWithInPlaceUpdatedPods,
}

impl GaugeKind {
    /// The kind of the gauge named `name` (without the `tailor_updater_` prefix).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "controlled_pods_total" => GaugeKind::ControlledPods,
            "evictable_pods_total" => GaugeKind::EvictablePods,
            "vpas_with_evictable_pods_total" => GaugeKind::VpasWithEvictablePods,
            "vpas_with_evicted_pods_total" => GaugeKind::VpasWithEvictedPods,
            "in_place_updatable_pods_total" => GaugeKind::InPlaceUpdatablePods,
            "vpas_with_in_place_updatable_pods_total" => GaugeKind::VpasWithInPlaceUpdatablePods,
            "vpas_with_in_place_updated_pods_total" => GaugeKind::VpasWithInPlaceUpdatedPods,
            _ => return None,
        })
    }
}

impl IterationGauges {
    /// Adds `value` for a VPA of `size` live pods in `mode` (mode ignored by the size-only gauges).
    pub fn add(&mut self, kind: GaugeKind, size: usize, mode: &str, value: i64) {
        let bucket = size_log2(size);
        let keyed = |m: &mut BTreeMap<(u32, String), i64>| {
            *m.entry((bucket, mode.to_owned())).or_default() += value
        };
        match kind {
            GaugeKind::ControlledPods => keyed(&mut self.controlled_pods),
            GaugeKind::EvictablePods => keyed(&mut self.evictable_pods),
            GaugeKind::VpasWithEvictablePods => keyed(&mut self.vpas_with_evictable_pods),
            GaugeKind::VpasWithEvictedPods => keyed(&mut self.vpas_with_evicted_pods),
            GaugeKind::InPlaceUpdatablePods => {
                *self.in_place_updatable_pods.entry(bucket).or_default() += value
            }
            GaugeKind::VpasWithInPlaceUpdatablePods => {
                *self
                    .vpas_with_in_place_updatable_pods
                    .entry(bucket)
                    .or_default() += value
            }
            GaugeKind::VpasWithInPlaceUpdatedPods => {
                *self
                    .vpas_with_in_place_updated_pods
                    .entry(bucket)
                    .or_default() += value
            }
        }
    }
}
