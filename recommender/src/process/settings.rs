//! The recommender's flags ([`Flags`]) validated into the daemon's settings ([`DaemonSettings`]): the loop's
//! configuration, the cluster views' rules, the history bootstrap (its Prometheus client made here), the
//! dashboard's and fleet onboarding's settings. Every error names the flag at fault.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tailor_engine::model::AggregationsConfig;
use tailor_prometheus::client::PromClient;

use crate::process::config::ControllerConfig;
use crate::process::daemon::DaemonSettings;
use crate::process::flags::{Flags, duration};
use crate::views::cluster_view::ViewConfig;
use crate::views::history::{HistoryBootstrap, HistoryOptions};
use crate::views::job_runs::JobRunOptions;
use tailor_cluster_fit::karpenter::InstanceTable;

impl Flags {
    /// The validated settings of the daemon (the Prometheus client, when asked for, made here).
    pub fn daemon_settings(&self) -> anyhow::Result<DaemonSettings> {
        let controller = self.controller_config()?;
        let view = self.view_config()?;
        let address = self.listen.socket_addr().context("--address")?;
        let history = history_bootstrap(self, controller.aggregations)?;
        let job_runs = job_run_options(self)?;
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
        if self.dry_run && (self.leader.leader_elect || fleet.is_some()) {
            tracing::warn!(
                "--dry-run: no leader lease is taken and fleet onboarding is off, whatever the flags ask"
            );
        }
        Ok(DaemonSettings {
            dry_run: self.dry_run,
            recommendation_metrics: self
                .recommendation_metrics
                .then_some(self.recommendation_metrics_max_series),
            dashboard,
            fleet: fleet.filter(|_| !self.dry_run),
            lease: self.leader.validated()?.filter(|_| !self.dry_run),
            controller,
            view,
            address,
            history,
            job_runs,
            client: self.client.clone(),
            rate: self.rate.clone(),
            shutdown_timeout: self.shutdown_timeout,
        })
    }

    pub fn view_config(&self) -> anyhow::Result<ViewConfig> {
        let instance_types = match &self.node_fit_instance_types {
            None => InstanceTable::builtin(),
            Some(path) => InstanceTable::read_file(path)
                .with_context(|| format!("--node-fit-instance-types {}", path.display()))?,
        };
        Ok(ViewConfig {
            node_fit: self.node_fit,
            karpenter: self.node_fit_karpenter,
            hpa_coherence: self.hpa_coherence,
            instance_types: Arc::new(instance_types),
            ..ViewConfig::default()
        })
    }

    pub fn controller_config(&self) -> anyhow::Result<ControllerConfig> {
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
            job_target_memory_percentile: self.job_target_memory_percentile,
            ..ControllerConfig::default()
        })
    }
}

/// The Prometheus API, when `--prometheus-address` is given or `--storage=prometheus`.
fn prometheus_url(args: &Flags) -> Option<String> {
    match (&args.prometheus_address, args.storage.as_str()) {
        (Some(u), _) => Some(u.clone()),
        (None, "prometheus") => Some("http://prometheus.monitoring.svc".to_string()),
        (None, _) => None,
    }
}

/// The run peaks' settings, when `--job-run-peaks` is on and there is a Prometheus API: its own client,
/// without retries (a failed run is skipped).
fn job_run_options(args: &Flags) -> anyhow::Result<Option<JobRunOptions>> {
    let Some(url) = prometheus_url(args).filter(|_| args.job_run_peaks) else {
        return Ok(None);
    };
    let mut config = args.prometheus.client_config(&url)?;
    config.retries = 0;
    let step = duration(&args.history_resolution)
        .map_err(|e| anyhow::anyhow!("--history-resolution {:?}: {e}", args.history_resolution))?;
    Ok(Some(JobRunOptions {
        client: PromClient::new(config)?,
        query: args.prometheus.history_config(step),
        max_pending: usize::try_from(args.job_run_peaks_queue).unwrap_or(usize::MAX),
        qps: args.job_run_peaks_qps,
        concurrency: args.prometheus.prometheus_concurrency.max(1),
    }))
}

/// The history bootstrap, when `--prometheus-address` is given or `--storage=prometheus`.
fn history_bootstrap(
    args: &Flags,
    aggregations: AggregationsConfig,
) -> anyhow::Result<Option<HistoryBootstrap>> {
    let Some(url) = prometheus_url(args) else {
        return Ok(None);
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn config(args: &[&str]) -> ControllerConfig {
        let all = std::iter::once("tailor-recommender").chain(args.iter().copied());
        Flags::try_parse_from(all)
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
