//! Prometheus metrics of the recommender (`tailor_recommender_*`), served on `/metrics`.

use crate::error::Error;
use crate::fleet::metrics::FleetMetrics;
use crate::process::recommendation_metrics::RecommendationMetrics;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// Every metric, registered in one registry.
pub struct Metrics {
    registry: Registry,
    /// Duration of each loop step, by `step`.
    pub step_duration: Family<Labels, Histogram>,
    /// VPA objects this recommender handles.
    pub vpas: Gauge,
    /// Pods in the model.
    pub pods: Gauge,
    /// Live aggregates in the model.
    pub aggregates: Gauge,
    /// Allocated model slots by `table` (`pods`, `aggregates`, `label_sets`, `vpas`): live entries plus
    /// freed ones kept for reuse, i.e. what the model's memory grows with.
    pub model_slots: Family<Labels, Gauge>,
    /// Usage samples by `resource` and `result` (`accepted`, `rejected`).
    pub samples: Family<Labels, Counter>,
    /// OOMs by `source` and `result` (`recorded`, `rejected`, `unknown_container`, `dropped`).
    pub ooms: Family<Labels, Counter>,
    /// Status patches by `result`.
    pub status_writes: Family<Labels, Counter>,
    /// Checkpoint writes by `op` (`apply`, `delete`) and `result`.
    pub checkpoint_writes: Family<Labels, Counter>,
    /// Errors by `kind`.
    pub errors: Family<Labels, Counter>,
    /// VPAs whose last planned status was changed by sizing within the cluster, by `reason`
    /// (`node_capped`, `no_node_fits`, `left_to_hpa`): what the `CappedToNodeSize` and `ResourcesLeftToHPA`
    /// conditions say, countable for alerts.
    pub sized_within_cluster: Family<Labels, Gauge>,
    /// Finished Job runs' peaks (`--job-run-peaks`) by `result`: `queued`, `fed` (samples fed), `empty` (the
    /// store had no sample), `rejected` (the model refused a sample: pod gone, out of order), `failed` (the
    /// query failed: the run is skipped), `dropped` (the queue was full: the oldest run is skipped).
    pub job_run_peaks: Family<Labels, Counter>,
    /// Finished Job runs waiting for their peak query.
    pub job_run_peaks_pending: Gauge,
    /// Unix time of the last finished loop.
    pub last_loop_timestamp: Gauge,
    /// Fleet onboarding (`tailor_fleet_*`; registered only when the feature is on).
    pub fleet: FleetMetrics,
    /// Each VPA's recommendation (`tailor_vpa_recommendation`; registered only when asked for).
    pub recommendations: Option<RecommendationMetrics>,
}

/// One loop's count of VPAs changed by sizing within the cluster, per reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SizedWithinCluster {
    /// Targets lowered to fit the largest node or NodePool instance.
    pub node_capped: usize,
    /// Pods that fit no node whatever the target.
    pub no_node_fits: usize,
    /// A resource left to an HPA.
    pub left_to_hpa: usize,
}

fn step_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("tailor_recommender");
        let m = Metrics {
            step_duration: Family::new_with_constructor(step_histogram),
            vpas: Gauge::default(),
            pods: Gauge::default(),
            aggregates: Gauge::default(),
            model_slots: Family::default(),
            samples: Family::default(),
            ooms: Family::default(),
            status_writes: Family::default(),
            checkpoint_writes: Family::default(),
            errors: Family::default(),
            sized_within_cluster: Family::default(),
            job_run_peaks: Family::default(),
            job_run_peaks_pending: Gauge::default(),
            last_loop_timestamp: Gauge::default(),
            fleet: FleetMetrics::default(),
            recommendations: None,
            registry: Registry::default(),
        };
        registry.register(
            "step_duration_seconds",
            "Duration of each step of the recommender loop (step=total for the whole loop)",
            m.step_duration.clone(),
        );
        registry.register(
            "vpa_objects",
            "VPA objects handled by this recommender",
            m.vpas.clone(),
        );
        registry.register("pods", "Pods in the model", m.pods.clone());
        registry.register(
            "aggregate_container_states",
            "Live aggregates in the model",
            m.aggregates.clone(),
        );
        registry.register(
            "model_slots",
            "Allocated slots of the model's tables (live plus freed for reuse), by table",
            m.model_slots.clone(),
        );
        registry.register(
            "samples",
            "Usage samples fed to the model",
            m.samples.clone(),
        );
        registry.register("ooms", "OOM records by source and result", m.ooms.clone());
        registry.register(
            "status_writes",
            "VPA status patches",
            m.status_writes.clone(),
        );
        registry.register(
            "checkpoint_writes",
            "Checkpoint writes",
            m.checkpoint_writes.clone(),
        );
        registry.register("errors", "Errors by kind", m.errors.clone());
        registry.register(
            "vpas_sized_within_cluster",
            "VPAs whose recommendation node fit capped (node_capped), that fit no node (no_node_fits) or that leave a resource to an HPA (left_to_hpa), as of the last loop",
            m.sized_within_cluster.clone(),
        );
        m.register_job_run_peaks(registry);
        registry.register(
            "last_loop_timestamp_seconds",
            "Unix time the last loop finished",
            m.last_loop_timestamp.clone(),
        );
        Metrics {
            registry: root,
            ..m
        }
    }

    /// The run peaks' metrics (`--job-run-peaks`).
    fn register_job_run_peaks(&self, registry: &mut Registry) {
        registry.register(
            "job_run_peaks",
            "Finished Job runs' peaks read from the history store, by result",
            self.job_run_peaks.clone(),
        );
        registry.register(
            "job_run_peaks_pending",
            "Finished Job runs waiting for their peak query",
            self.job_run_peaks_pending.clone(),
        );
    }

    /// The fleet's metrics (`tailor_fleet_*`) registered too.
    pub fn with_fleet(mut self) -> Self {
        self.fleet
            .register(self.registry.sub_registry_with_prefix("tailor_fleet"));
        self
    }

    /// `tailor_vpa_recommendation` registered too, capped at `max_series` series.
    pub fn with_recommendations(mut self, max_series: usize) -> Self {
        let r = RecommendationMetrics::new(max_series);
        r.register(self.registry.sub_registry_with_prefix("tailor_vpa"));
        self.recommendations = Some(r);
        self
    }

    /// Counts an error under its [`Error::metric_label`] (the caller logs it).
    pub fn record(&self, e: &Error) {
        self.errors
            .get_or_create(&vec![("kind", e.metric_label())])
            .inc();
    }

    /// Sets [`Metrics::sized_within_cluster`] from one loop's count per reason.
    pub fn sized_within_cluster(&self, counts: &SizedWithinCluster) {
        for (reason, n) in [
            ("node_capped", counts.node_capped),
            ("no_node_fits", counts.no_node_fits),
            ("left_to_hpa", counts.left_to_hpa),
        ] {
            self.sized_within_cluster
                .get_or_create(&vec![("reason", reason)])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Records a step duration.
    pub fn step(&self, step: &'static str, seconds: f64) {
        self.step_duration
            .get_or_create(&vec![("step", step)])
            .observe(seconds);
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The process's resident memory in bytes (`VmRSS` of `/proc/self/status`); 0 where that cannot be read
/// (not Linux). Read a few times per loop for the loop's log line.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib.saturating_mul(1024))
}
