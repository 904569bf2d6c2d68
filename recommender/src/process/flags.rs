//! The recommender's flags, as `tailor-recommender --help` lists them; [`crate::process::settings`] validates them into
//! the daemon's settings. Names and defaults follow the upstream VPA recommender.

use std::time::Duration;

use clap::Parser;
use tailor_engine::estimate_flags::EstimationFlags;
use tailor_kube::client::{ApiRateFlags, ClientFlags};
use tailor_kube::leader::LeaderFlags;
use tailor_kube::listen::ListenFlags;
use tailor_kube::log::LogFlags;
use tailor_prometheus::flags::PrometheusFlags;

use crate::dashboard::DashboardFlags;
use crate::fleet::FleetFlags;

/// A rate above zero (queries a second).
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a rate above 0")),
    }
}

/// A duration flag's value (`90s`, `10m`, `1h30m`).
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Tailor's recommender. Flag names and defaults follow the upstream VPA recommender.
#[derive(Debug, Parser)]
#[command(name = "tailor-recommender", version, about)]
// This binary's wording of four of the shared estimation flags' help (the shared struct carries `tailor recommend`'s).
#[command(
    mut_arg("pod_recommendation_min_cpu_millicores", |a| a.help("Minimum CPU recommendation for a pod, in millicores")),
    mut_arg("pod_recommendation_min_memory_mb", |a| a.help("Minimum memory recommendation for a pod, in MiB")),
    mut_arg("confidence_interval_cpu", |a| a.help("Time unit of the confidence of CPU bounds")),
    mut_arg("confidence_interval_memory", |a| a.help("Time unit of the confidence of memory bounds")),
    mut_arg("address", |a| a.default_value(":8942")
        .help("Address of the HTTP server for `/metrics` and `/healthz` (`:8942` = all interfaces)")),
)]
pub struct Flags {
    /// `--address` of the metrics and health endpoints.
    #[command(flatten)]
    pub listen: ListenFlags,
    /// Name matched against `spec.recommenders` of each VPA.
    #[arg(long, default_value = "default")]
    pub recommender_name: String,
    /// Period of the main loop.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub recommender_interval: Duration,
    /// Deadline of the checkpoint step (and, separately, of checkpoint garbage collection) in each loop.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub checkpoints_timeout: Duration,
    /// How often checkpoints of deleted VPAs are removed.
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub checkpoints_gc_interval: Duration,
    /// Rewrite a VPA's checkpoints before `--checkpoints-max-age` only when some histogram moved at least
    /// this share of its weight since the last write (0 to 1; 0 = every loop, as upstream).
    #[arg(long, default_value_t = 0.05)]
    pub checkpoints_min_change: f64,
    /// Rewrite a VPA's checkpoints at least this often, moved or not (after a restart, counted from the
    /// restored checkpoints' `lastUpdateTime`).
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub checkpoints_max_age: Duration,
    /// Deprecated upstream; accepted and ignored.
    #[arg(long, default_value_t = 10)]
    pub min_checkpoints: u32,
    /// Parallel status and checkpoint writes.
    #[arg(long, default_value_t = 10)]
    pub update_worker_count: usize,
    /// Threads of the async runtime. 1 (the default) runs the loop, the watches and the API client on one
    /// thread: no wake-ups between threads per request, one allocator heap (about 20% less CPU per loop and
    /// 5-8 MiB less memory than two threads, BENCHMARKS.md); 0 = one per CPU; at most 256.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub runtime_threads: u16,
    /// `--kubeconfig`.
    #[command(flatten)]
    pub client: ClientFlags,
    /// `--kube-api-qps`, `--kube-api-burst`: the status and checkpoint writes' token bucket.
    #[command(flatten)]
    pub rate: ApiRateFlags,
    /// Only track pods some VPA selects (Tailor's default: on; `--memory-saver=false` tracks all pods).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub memory_saver: bool,
    /// Size pods that declare pod-level resources (`spec.resources`): keep a pod-level aggregate of each
    /// such pod's summed container usage, checkpointed like a container's, and publish its envelope in the
    /// VPA's status as the recommendation of the reserved container name `tailor.dev/pod` (no container can
    /// have it). Run the webhook and the updater with the same flag to apply it (docs/pod-level-resources.md).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pod_level_resources: bool,
    /// Memory target percentile for VPAs whose target is a Job or a CronJob (0 < p <= 1), instead of
    /// --target-memory-percentile or the profile's when higher: every run is one more draw of the same
    /// process, a metrics scrape catches a run's short peak only now and then, and an OOM kill costs the
    /// whole run (docs/jobs.md). Unset: upstream's percentile for them too.
    #[arg(long, value_parser = percentile)]
    pub job_target_memory_percentile: Option<f64>,
    /// After a restart, continue the memory-peak windows each checkpoint saved in its
    /// `tailor.dev/open-memory-windows` annotation (Tailor's default). `false` drops them as upstream does,
    /// losing each container's current memory peak: the numbers then follow upstream's across restarts too.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub restore_open_memory_windows: bool,
    /// `prometheus`: no checkpoints are read or written, history comes from Prometheus only (at
    /// `--prometheus-address`, default `http://prometheus.monitoring.svc`); anything else means checkpoints
    /// (plus Prometheus history for new VPAs when `--prometheus-address` is given).
    #[arg(long, default_value = "")]
    pub storage: String,
    /// Tailor profile for VPAs without a `tailor.dev/profile` annotation (`upstream` keeps the flags' numbers;
    /// see docs/profiles.md).
    #[arg(long, default_value = "upstream")]
    pub profile: String,
    /// Keep CPU histograms per hour of the day for every container (about 24 more CPU histograms each), so
    /// that profiles which follow the daily curve (`diurnal`) can use them for VPAs in `InPlace` or
    /// `InPlaceOrRecreate` mode. On by itself when `--profile` is such a profile; set it when only
    /// annotations select one.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub cpu_time_of_day_histograms: bool,
    /// Feature gates, `Name=bool` separated by commas: `PerVPAConfig` applies a container policy's
    /// `oomBumpUpRatio` and `oomMinBumpUp` to its OOMs (upstream's alpha gate; its
    /// `memoryAggregationInterval*` are not applied). The webhook's other gates are accepted and change
    /// nothing here.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// The dashboard: `--dashboard-address`, `--price-*`.
    #[command(flatten)]
    pub dashboard: DashboardFlags,
    /// Export each VPA's recommendation as `tailor_vpa_recommendation{namespace,vpa,container,resource,bound}`
    /// (CPU in cores, memory in bytes). Off by default: the series grow with VPAs × containers × 8.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub recommendation_metrics: bool,
    /// Most `tailor_vpa_recommendation` series exported; VPAs past it are left out (in namespace and name
    /// order) and counted in `tailor_vpa_recommendation_series_dropped`.
    #[arg(long, default_value_t = 10_000)]
    pub recommendation_metrics_max_series: usize,
    /// Fleet onboarding: `--fleet-*`.
    #[command(flatten)]
    pub fleet: FleetFlags,
    /// Only handle VPAs (and watch objects) in this namespace.
    #[arg(long, default_value = "")]
    pub vpa_object_namespace: String,
    /// Comma-separated namespaces whose VPAs are ignored.
    #[arg(long, default_value = "", value_delimiter = ',')]
    pub ignored_vpa_object_namespaces: Vec<String>,
    /// `--leader-elect` and the lease flags.
    #[command(flatten)]
    pub leader: LeaderFlags,
    /// Run the loop without writing: every write it would make (status patches, checkpoint applies and
    /// deletes, Events) is printed as one JSON line on stdout instead. No leader lease is taken (whatever
    /// `--leader-elect` says) and fleet onboarding stays off; reads still go to the API server.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub dry_run: bool,
    /// After SIGTERM, everything (the loop in progress is abandoned; final checkpoints; releasing the
    /// leader lease) ends within this long. Keep the pod's `terminationGracePeriodSeconds` above it.
    #[arg(long, value_parser = duration, default_value = "20s")]
    pub shutdown_timeout: Duration,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    pub log: LogFlags,
    /// Upstream's model and estimation flags (shared with `tailor recommend`).
    #[command(flatten)]
    pub estimation: EstimationFlags,

    /// Prometheus-compatible API to load each new VPA's usage history from (in the background; the VPA shows
    /// `FetchingHistory` meanwhile).
    #[arg(long, alias = "prometheus", help_heading = "History from Prometheus")]
    pub prometheus_address: Option<String>,
    /// History length to load from Prometheus.
    #[arg(
        long,
        alias = "history",
        default_value = "8d",
        help_heading = "History from Prometheus"
    )]
    pub history_length: String,
    /// Query step of the Prometheus history (one CPU and one memory sample per container and step).
    #[arg(
        long,
        alias = "step",
        default_value = "1h",
        help_heading = "History from Prometheus"
    )]
    pub history_resolution: String,
    /// Histories loaded from Prometheus at once; the other new VPAs wait for a slot.
    #[arg(
        long,
        default_value_t = crate::views::history::DEFAULT_CONCURRENCY as u64,
        value_parser = clap::value_parser!(u64).range(1..=256),
        help_heading = "History from Prometheus"
    )]
    pub history_fetch_concurrency: u64,
    /// Read each finished Job run's peak from the Prometheus history: once a pod of a Job whose VPA targets
    /// that Job or its CronJob has Succeeded or Failed, one query per container for its largest working set
    /// and CPU rate over the run, fed as samples at the run's end (a run shorter than a metrics-API scrape is
    /// otherwise unseen). Acts only with --prometheus-address and Job pods, so nothing else changes; `false`
    /// turns it off.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "History from Prometheus")]
    pub job_run_peaks: bool,
    /// Finished runs waiting for their peak query at most; beyond, the oldest is dropped (and counted in
    /// tailor_recommender_job_run_peaks_total{result="dropped"}).
    #[arg(
        long,
        default_value_t = crate::views::job_runs::DEFAULT_MAX_PENDING as u64,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000),
        help_heading = "History from Prometheus"
    )]
    pub job_run_peaks_queue: u64,
    /// Run-peak queries started per second at most; at most --prometheus-concurrency run at once, each
    /// limited by --prometheus-query-timeout and never retried (a failed run is skipped).
    #[arg(
        long,
        default_value_t = crate::views::job_runs::DEFAULT_QPS,
        value_parser = positive_rate,
        help_heading = "History from Prometheus"
    )]
    pub job_run_peaks_qps: f64,
    /// Prometheus connection and query flags (shared with `tailor recommend`).
    #[command(flatten)]
    pub prometheus: PrometheusFlags,

    /// Cap each VPA's target so that its pods fit the largest node they can schedule on (node selector,
    /// required node affinity, tolerations); watches Nodes. `false` keeps upstream's uncapped targets.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    pub node_fit: bool,
    /// With `--node-fit`, count the largest instance each Karpenter NodePool may launch as a node
    /// (watches `karpenter.sh/v1` NodePools once the API serves them).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    pub node_fit_karpenter: bool,
    /// Instance types NodePools launch: a YAML or JSON list of `{name, cpu, memory, labels}` with
    /// allocatable CPU and memory (default: a built-in table of common AWS types).
    #[arg(long, help_heading = "Sizing within the cluster")]
    pub node_fit_instance_types: Option<std::path::PathBuf>,
    /// Leave CPU or memory to an HPA that scales the same workload on its utilization: no target for it
    /// is published; the VPA says so in its `ResourcesLeftToHPA` condition. Watches HPAs.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    pub hpa_coherence: bool,
}

/// A percentile in (0, 1].
fn percentile(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err("must be a number above 0 and at most 1".into()),
    }
}
