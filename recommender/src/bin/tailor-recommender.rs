//! `tailor-recommender`: the in-cluster recommender. Watches Tailor VPAs, pods and workloads, samples
//! `metrics.k8s.io`, writes recommendations into VPA status and keeps checkpoints. Flags ([`Args`]) →
//! validated [`DaemonSettings`] → [`Daemon`] → run.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use tailor_engine::estimate_flags::EstimationFlags;
use tailor_engine::model::AggregationsConfig;
use tailor_kube::leader::LeaderFlags;
use tailor_kube::{
    client::{ApiRateFlags, ClientFlags},
    listen::ListenFlags,
    log::LogFlags,
    shutdown::Shutdown,
};
use tailor_prometheus::client::PromClient;
use tailor_prometheus::flags::PrometheusFlags;
use tailor_recommender::cluster_view::ViewConfig;
use tailor_recommender::config::ControllerConfig;
use tailor_recommender::daemon::{Daemon, DaemonSettings};
use tailor_recommender::dashboard::DashboardFlags;
use tailor_recommender::fleet::FleetFlags;
use tailor_recommender::history::{HistoryBootstrap, HistoryOptions};
use tailor_recommender::karpenter::InstanceTable;

/// mimalloc, with `MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0` as the image and the chart set them:
/// chosen on measured RSS (BENCHMARKS.md, docs/decisions/recommender-memory.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn duration(s: &str) -> Result<Duration, String> {
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
struct Args {
    /// `--address` of the metrics and health endpoints.
    #[command(flatten)]
    listen: ListenFlags,
    /// Name matched against `spec.recommenders` of each VPA.
    #[arg(long, default_value = "default")]
    recommender_name: String,
    /// Period of the main loop.
    #[arg(long, value_parser = duration, default_value = "1m")]
    recommender_interval: Duration,
    /// Deadline of the checkpoint step (and, separately, of checkpoint garbage collection) in each loop.
    #[arg(long, value_parser = duration, default_value = "1m")]
    checkpoints_timeout: Duration,
    /// How often checkpoints of deleted VPAs are removed.
    #[arg(long, value_parser = duration, default_value = "10m")]
    checkpoints_gc_interval: Duration,
    /// Rewrite a VPA's checkpoints before `--checkpoints-max-age` only when some histogram moved at least
    /// this share of its weight since the last write (0 to 1; 0 = every loop, as upstream).
    #[arg(long, default_value_t = 0.05)]
    checkpoints_min_change: f64,
    /// Rewrite a VPA's checkpoints at least this often, moved or not (after a restart, counted from the
    /// restored checkpoints' `lastUpdateTime`).
    #[arg(long, value_parser = duration, default_value = "10m")]
    checkpoints_max_age: Duration,
    /// Deprecated upstream; accepted and ignored.
    #[arg(long, default_value_t = 10)]
    min_checkpoints: u32,
    /// Parallel status and checkpoint writes.
    #[arg(long, default_value_t = 10)]
    update_worker_count: usize,
    /// Threads of the async runtime. 1 (the default) runs the loop, the watches and the API client on one
    /// thread: no wake-ups between threads per request, one allocator heap (about 20% less CPU per loop and
    /// 5-8 MiB less memory than two threads, BENCHMARKS.md); 0 = one per CPU; at most 256.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(0..=256))]
    runtime_threads: u16,
    /// `--kubeconfig`.
    #[command(flatten)]
    client: ClientFlags,
    /// `--kube-api-qps`, `--kube-api-burst`: the status and checkpoint writes' token bucket.
    #[command(flatten)]
    rate: ApiRateFlags,
    /// Only track pods some VPA selects (Tailor's default: on; `--memory-saver=false` tracks all pods).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    memory_saver: bool,
    /// Size pods that declare pod-level resources (`spec.resources`): keep a pod-level aggregate of each
    /// such pod's summed container usage, checkpointed like a container's, and publish its envelope in the
    /// VPA's status as the recommendation of the reserved container name `tailor.dev/pod` (no container can
    /// have it). Run the webhook and the updater with the same flag to apply it (docs/pod-level-resources.md).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pod_level_resources: bool,
    /// After a restart, continue the memory-peak windows each checkpoint saved in its
    /// `tailor.dev/open-memory-windows` annotation (Tailor's default). `false` drops them as upstream does,
    /// losing each container's current memory peak: the numbers then follow upstream's across restarts too.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    restore_open_memory_windows: bool,
    /// `prometheus`: no checkpoints are read or written, history comes from Prometheus only (at
    /// `--prometheus-address`, default `http://prometheus.monitoring.svc`); anything else means checkpoints
    /// (plus Prometheus history for new VPAs when `--prometheus-address` is given).
    #[arg(long, default_value = "")]
    storage: String,
    /// Tailor profile for VPAs without a `tailor.dev/profile` annotation (`upstream` keeps the flags' numbers;
    /// see docs/profiles.md).
    #[arg(long, default_value = "upstream")]
    profile: String,
    /// Keep CPU histograms per hour of the day for every container (about 24 more CPU histograms each), so
    /// that profiles which follow the daily curve (`diurnal`) can use them for VPAs in `InPlace` or
    /// `InPlaceOrRecreate` mode. On by itself when `--profile` is such a profile; set it when only
    /// annotations select one.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    cpu_time_of_day_histograms: bool,
    /// Feature gates, `Name=bool` separated by commas: `PerVPAConfig` applies a container policy's
    /// `oomBumpUpRatio` and `oomMinBumpUp` to its OOMs (upstream's alpha gate; its
    /// `memoryAggregationInterval*` are not applied). The webhook's other gates are accepted and change
    /// nothing here.
    #[arg(long, default_value = "")]
    feature_gates: String,
    /// The dashboard: `--dashboard-address`, `--price-*`.
    #[command(flatten)]
    dashboard: DashboardFlags,
    /// Export each VPA's recommendation as `tailor_vpa_recommendation{namespace,vpa,container,resource,bound}`
    /// (CPU in cores, memory in bytes). Off by default: the series grow with VPAs × containers × 8.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    recommendation_metrics: bool,
    /// Most `tailor_vpa_recommendation` series exported; VPAs past it are left out (in namespace and name
    /// order) and counted in `tailor_vpa_recommendation_series_dropped`.
    #[arg(long, default_value_t = 10_000)]
    recommendation_metrics_max_series: usize,
    /// Fleet onboarding: `--fleet-*`.
    #[command(flatten)]
    fleet: FleetFlags,
    /// Only handle VPAs (and watch objects) in this namespace.
    #[arg(long, default_value = "")]
    vpa_object_namespace: String,
    /// Comma-separated namespaces whose VPAs are ignored.
    #[arg(long, default_value = "", value_delimiter = ',')]
    ignored_vpa_object_namespaces: Vec<String>,
    /// `--leader-elect` and the lease flags.
    #[command(flatten)]
    leader: LeaderFlags,
    /// After SIGTERM, everything (the loop in progress is abandoned; final checkpoints; releasing the
    /// leader lease) ends within this long. Keep the pod's `terminationGracePeriodSeconds` above it.
    #[arg(long, value_parser = duration, default_value = "20s")]
    shutdown_timeout: Duration,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    log: LogFlags,
    /// Upstream's model and estimation flags (shared with `tailor recommend`).
    #[command(flatten)]
    estimation: EstimationFlags,

    /// Prometheus-compatible API to load each new VPA's usage history from (in the background; the VPA shows
    /// `FetchingHistory` meanwhile).
    #[arg(long, alias = "prometheus", help_heading = "History from Prometheus")]
    prometheus_address: Option<String>,
    /// History length to load from Prometheus.
    #[arg(
        long,
        alias = "history",
        default_value = "8d",
        help_heading = "History from Prometheus"
    )]
    history_length: String,
    /// Query step of the Prometheus history (one CPU and one memory sample per container and step).
    #[arg(
        long,
        alias = "step",
        default_value = "1h",
        help_heading = "History from Prometheus"
    )]
    history_resolution: String,
    /// Histories loaded from Prometheus at once; the other new VPAs wait for a slot.
    #[arg(
        long,
        default_value_t = tailor_recommender::history::DEFAULT_CONCURRENCY as u64,
        value_parser = clap::value_parser!(u64).range(1..=256),
        help_heading = "History from Prometheus"
    )]
    history_fetch_concurrency: u64,
    /// Prometheus connection and query flags (shared with `tailor recommend`).
    #[command(flatten)]
    prometheus: PrometheusFlags,

    /// Cap each VPA's target so that its pods fit the largest node they can schedule on (node selector,
    /// required node affinity, tolerations); watches Nodes. `false` keeps upstream's uncapped targets.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    node_fit: bool,
    /// With `--node-fit`, count the largest instance each Karpenter NodePool may launch as a node
    /// (watches `karpenter.sh/v1` NodePools once the API serves them).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    node_fit_karpenter: bool,
    /// Instance types NodePools launch: a YAML or JSON list of `{name, cpu, memory, labels}` with
    /// allocatable CPU and memory (default: a built-in table of common AWS types).
    #[arg(long, help_heading = "Sizing within the cluster")]
    node_fit_instance_types: Option<std::path::PathBuf>,
    /// Leave CPU or memory to an HPA that scales the same workload on its utilization: no target for it
    /// is published; the VPA says so in its `ResourcesLeftToHPA` condition. Watches HPAs.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within the cluster")]
    hpa_coherence: bool,
}

impl Args {
    /// The validated settings of the daemon (the Prometheus client, when asked for, made here).
    fn daemon_settings(&self) -> anyhow::Result<DaemonSettings> {
        let controller = self.controller_config()?;
        let view = self.view_config()?;
        let address = self.listen.socket_addr().context("--address")?;
        let history = history_bootstrap(self, controller.aggregations)?;
        if self.storage == "prometheus" {
            tracing::warn!("--storage=prometheus: checkpoints are neither read nor written");
        }
        let _ = self.min_checkpoints;
        let profiles = std::iter::once(tailor_engine::profile::UPSTREAM)
            .chain(tailor_engine::profile::PROFILES.iter().map(|p| p.name))
            .map(str::to_owned)
            .collect();
        let own_namespace = std::env::var("NAMESPACE").ok();
        let fleet = (self.fleet)
            .config(own_namespace.as_deref(), profiles)
            .map_err(anyhow::Error::msg)?;
        let dashboard = self.dashboard.settings().map_err(anyhow::Error::msg)?;
        // Every VPA the fleet creates gets its first status from the loop, out of --kube-api-qps.
        if let Some(f) = &fleet
            && self.rate.kube_api_qps > 0.0
            && f.qps > self.rate.kube_api_qps / 2.0
        {
            tracing::warn!(
                fleet_qps = f.qps,
                kube_api_qps = self.rate.kube_api_qps,
                "--fleet-qps is above half of --kube-api-qps: each created VPA's first status write comes out of \
                 the loop's budget, so other VPAs' status writes wait behind them while a namespace is onboarded"
            );
        }
        Ok(DaemonSettings {
            recommendation_metrics: self
                .recommendation_metrics
                .then_some(self.recommendation_metrics_max_series),
            dashboard,
            fleet,
            lease: self.leader.validated()?,
            controller,
            view,
            address,
            history,
            client: self.client.clone(),
            rate: self.rate.clone(),
            shutdown_timeout: self.shutdown_timeout,
        })
    }

    fn view_config(&self) -> anyhow::Result<ViewConfig> {
        let instance_types = match &self.node_fit_instance_types {
            None => InstanceTable::builtin(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--node-fit-instance-types {}", path.display()))?;
                InstanceTable::parse(&text)
                    .with_context(|| format!("--node-fit-instance-types {}", path.display()))?
            }
        };
        Ok(ViewConfig {
            node_fit: self.node_fit,
            karpenter: self.node_fit_karpenter,
            hpa_coherence: self.hpa_coherence,
            instance_types: Arc::new(instance_types),
            ..ViewConfig::default()
        })
    }

    fn controller_config(&self) -> anyhow::Result<ControllerConfig> {
        if self.recommender_interval.is_zero() {
            bail!("--recommender-interval must be greater than zero");
        }
        self.estimation.validate()?;
        if !(0.0..=1.0).contains(&self.checkpoints_min_change) {
            bail!(
                "--checkpoints-min-change must be between 0 and 1, not {}",
                self.checkpoints_min_change
            );
        }
        let ignored: Vec<String> = self
            .ignored_vpa_object_namespaces
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !self.vpa_object_namespace.is_empty() && !ignored.is_empty() {
            bail!(
                "--vpa-object-namespace and --ignored-vpa-object-namespaces are mutually exclusive"
            );
        }
        let gates = tailor_core::validation::FeatureGates::parse(&self.feature_gates)?;
        let mut engine = self.estimation.engine_config(false)?;
        let profile = tailor_engine::profile::by_name(&self.profile)
            .map_err(|e| anyhow::anyhow!("--profile: {e}"))?;
        engine.aggregations.cpu_time_of_day =
            self.cpu_time_of_day_histograms || profile.is_some_and(|p| p.cpu_time_of_day.is_some());
        Ok(ControllerConfig {
            profile,
            recommender_name: self.recommender_name.clone(),
            interval: self.recommender_interval,
            checkpoints_timeout: self.checkpoints_timeout,
            checkpoints_gc_interval: self.checkpoints_gc_interval,
            checkpoints_min_change: self.checkpoints_min_change,
            checkpoints_max_age: self.checkpoints_max_age,
            update_worker_count: self.update_worker_count.max(1),
            memory_saver: self.memory_saver,
            vpa_object_namespace: self.vpa_object_namespace.clone(),
            ignored_namespaces: ignored,
            checkpoints_enabled: self.storage != "prometheus",
            restore_open_windows: self.restore_open_memory_windows,
            aggregations: engine.aggregations,
            recommender: engine.recommender,
            per_vpa_config: gates.per_vpa_config,
            pod_level_resources: self.pod_level_resources,
            ..ControllerConfig::default()
        })
    }
}

/// The history bootstrap, when `--prometheus-address` is given or `--storage=prometheus`.
fn history_bootstrap(
    args: &Args,
    aggregations: AggregationsConfig,
) -> anyhow::Result<Option<HistoryBootstrap>> {
    let url = match (&args.prometheus_address, args.storage.as_str()) {
        (Some(u), _) => u.clone(),
        (None, "prometheus") => "http://prometheus.monitoring.svc".to_string(),
        (None, _) => return Ok(None),
    };
    let length = duration(&args.history_length)
        .map_err(|e| anyhow::anyhow!("--history-length {:?}: {e}", args.history_length))?;
    let step = duration(&args.history_resolution)
        .map_err(|e| anyhow::anyhow!("--history-resolution {:?}: {e}", args.history_resolution))?;
    let client = PromClient::new(args.prometheus.client_config(&url)?)?;
    let query = args.prometheus.history_config(step);
    tracing::info!(prometheus = %url, history_length = %args.history_length, history_resolution = %args.history_resolution, "loading each new VPA's usage history from Prometheus");
    Ok(Some(HistoryBootstrap::new(
        HistoryOptions {
            client,
            query,
            length,
            retry_after: Duration::from_secs(60),
            concurrency: usize::try_from(args.history_fetch_concurrency).unwrap_or(1),
        },
        aggregations,
    )))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = match args.runtime_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if n > 1 {
                b.worker_threads(usize::from(n));
            }
            b
        }
    }
    .enable_all()
    .build()
    .context("starting the async runtime")?;
    // Everything runs in a spawned task, like the connection tasks of the API client: with more than one
    // thread, a request's future and its connection then usually share a worker instead of waking the main
    // thread (parked in `block_on`) and a worker for every request (BENCHMARKS.md, docs/decisions/recommender-memory.md).
    runtime.block_on(async {
        tokio::spawn(run(args))
            .await
            .context("the recommender's main task")?
    })
}

/// Flags → validated settings → the daemon → run until SIGTERM or a lost lease.
async fn run(args: Args) -> anyhow::Result<()> {
    args.log.init();
    let settings = args.daemon_settings()?;
    let daemon = Daemon::start(settings).await?;
    daemon.run(Shutdown::on_signal()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> ControllerConfig {
        let all = std::iter::once("tailor-recommender").chain(args.iter().copied());
        Args::try_parse_from(all)
            .expect("flags parse")
            .controller_config()
            .expect("a valid configuration")
    }

    /// The hourly CPU histograms are kept when the global profile needs them or the flag asks, not otherwise.
    #[test]
    fn hourly_histograms_follow_the_profile_or_the_flag() {
        assert!(!config(&[]).aggregations.cpu_time_of_day);
        assert!(
            !config(&["--profile", "balanced"])
                .aggregations
                .cpu_time_of_day
        );
        assert!(
            config(&["--profile", "diurnal"])
                .aggregations
                .cpu_time_of_day
        );
        assert!(
            config(&["--cpu-time-of-day-histograms"])
                .aggregations
                .cpu_time_of_day
        );
        // The profile cannot work without them: it turns them on even against the flag.
        assert!(
            config(&["--profile", "diurnal", "--cpu-time-of-day-histograms=false"])
                .aggregations
                .cpu_time_of_day
        );
    }
}
