//! The loop: one iteration ([`Recommender::run_once`]) runs the steps in order — VPAs and pods into the
//! model ([`crate::ingest`]), usage from the metrics API and OOMs from the observer, recommendations into
//! VPA status ([`crate::writers::status_writer`]), checkpoints and their GC ([`crate::writers::checkpoint_writer`]) and the
//! model's GC — each timed and counted. [`Recommender::run`] repeats it on a ticker. Time enters only as a
//! parameter of `run_once`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::views::watched_vpa::WatchedVpa;
use kube::Client;
use tailor_kube::leader::Fence;
use tokio::time::Instant;

use crate::error::Error;
use crate::process::config::ControllerConfig;
use crate::process::metrics::Metrics;
use crate::time::from_timestamp;
use crate::tracked::{PodEntry, VpaEntry, VpaKey, key_of};
use crate::views::history::HistoryBootstrap;
use crate::views::metrics_api::MetricsApiSource;
use crate::views::oom::OomQueue;
use crate::views::stores::Stores;
use crate::views::target::ScaleLookups;
use crate::writers::ratelimit::RateLimiter;
use tailor_engine::model::ClusterState;
use tailor_engine::units::Nanos;

/// The field manager named in every write.
pub const FIELD_MANAGER: &str = "tailor-recommender";

/// What one loop did (also exported as metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopReport {
    /// VPAs this recommender handles.
    pub vpas: usize,
    /// Pods in the model.
    pub pods: usize,
    /// Samples accepted by the model.
    pub samples_accepted: u64,
    /// Samples rejected (out of order, unknown container, negative).
    pub samples_rejected: u64,
    /// OOMs recorded.
    pub ooms_recorded: u64,
    /// OOMs not recorded (too old, unknown pod or container, queue overflow).
    pub ooms_rejected: u64,
    /// Whether the metrics API answered.
    pub metrics_ok: bool,
    /// Status patches sent successfully.
    pub status_writes: u64,
    /// Status patches that failed.
    pub status_errors: u64,
    /// Checkpoints written (server-side applied).
    pub checkpoints_written: u64,
    /// Checkpoint writes that failed.
    pub checkpoint_errors: u64,
    /// VPAs whose checkpoints were not rewritten: histograms moved less than `--checkpoints-min-change`
    /// since a write younger than `--checkpoints-max-age`.
    pub checkpoints_unchanged: u64,
    /// Checkpoints deleted by GC.
    pub checkpoints_deleted: u64,
    /// Checkpoints restored into the model.
    pub checkpoints_restored: u64,
    /// Checkpoints skipped at restore because they cannot be decoded or loaded (each costs only its own
    /// container's history; counted in `errors_total{kind="checkpoint_invalid"}`).
    pub checkpoints_skipped: u64,
    /// Aggregates removed by the model's GC.
    pub aggregates_collected: usize,
    /// How long each phase of the loop took, and the process's resident memory after it.
    pub phases: Phases,
}

/// Wall time of each phase of one loop (seconds) and the process's resident memory (bytes, from
/// `/proc/self/status`; 0 where it cannot be read) right after it. Logged with every loop, so a benchmark
/// running the binary can tell where time and memory go.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Listing the PodMetrics, with each pod's samples fed into the model (in batches) as its object arrives.
    pub list_seconds: f64,
    /// VPAs, pods, checkpoint restores and OOMs into the model (samples: in `list_seconds`).
    pub ingest_seconds: f64,
    /// Estimating recommendations and planning the status writes.
    pub recommend_seconds: f64,
    /// Sending the status writes.
    pub status_seconds: f64,
    /// Writing and collecting checkpoints.
    pub checkpoint_seconds: f64,
    /// Building and publishing the dashboard's fleet (after `total_seconds`; 0 without a dashboard).
    pub dashboard_seconds: f64,
    /// The whole loop (including the model's GC and bookkeeping).
    pub total_seconds: f64,
    /// Resident memory after the PodMetrics list (and its samples).
    pub rss_after_list: u64,
    /// Resident memory after ingest.
    pub rss_after_ingest: u64,
    /// Resident memory after recommendations and status writes.
    pub rss_after_status: u64,
    /// Resident memory after checkpoints.
    pub rss_after_checkpoints: u64,
}

/// The controller state across loops: the model and what the loop remembers about the objects in it.
pub struct Recommender {
    pub(crate) cfg: ControllerConfig,
    /// The reads that are not watches: checkpoints to restore, `/scale` selectors.
    pub(crate) reads: crate::views::api_reads::ApiReads,
    /// Where status and checkpoint writes and Events go: the API server, unless replaced
    /// ([`Recommender::set_writes`]).
    pub(crate) writes: Arc<dyn crate::writers::edge::Writes>,
    pub(crate) stores: Stores,
    pub(crate) ooms: OomQueue,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) limiter: RateLimiter,
    pub(crate) source: MetricsApiSource,
    pub(crate) model: ClusterState,
    pub(crate) vpas: BTreeMap<VpaKey, VpaEntry>,
    pub(crate) pods: HashMap<Arc<str>, HashMap<Box<str>, PodEntry>>,
    pub(crate) scale: ScaleLookups,
    pub(crate) written_checkpoints: HashSet<(String, String)>,
    /// VPAs whose target changed: their stored checkpoints are deleted in the next checkpoint step.
    pub(crate) retargeted: std::collections::BTreeSet<VpaKey>,
    pub(crate) last_checkpoint_gc: Option<Nanos>,
    pub(crate) loops: u64,
    pub(crate) vpas_changed: bool,
    pub(crate) history: Option<HistoryBootstrap>,
    /// Run peaks of finished Job pods from the history store (`--job-run-peaks`).
    pub(crate) job_runs: Option<crate::views::job_runs::JobRunPeaks>,
    pub(crate) fence: Fence,
    /// Time of the latest sample the model accepted (0 before the first).
    pub(crate) newest_sample: Nanos,
    /// Nodes, NodePools and HPAs (node fit and HPA coherence; empty = off).
    pub(crate) view: crate::views::cluster_view::ClusterView,
    /// Where the fleet is published after each loop, when the dashboard is on.
    pub(crate) dashboard: Option<Arc<crate::dashboard::DashboardState>>,
}

/// How long after the latest accepted sample the model's GC clock may run (see [`gc_clock`]).
pub const GC_CLOCK_SLACK: Nanos = 3_600_000_000_000;

/// The time the model's GC expires aggregates against: `now`, but no later than [`GC_CLOCK_SLACK`] after the
/// latest sample the model accepted. A forward jump of this process's clock (or days without samples) does
/// not expire aggregates whose pods still run; their next checkpoint would save the loss. Aggregates of pods
/// that are gone still expire, measured from the samples that keep coming for the others.
pub fn gc_clock(now: Nanos, newest_sample: Nanos) -> Nanos {
    if newest_sample <= 0 {
        return now;
    }
    now.min(newest_sample.saturating_add(GC_CLOCK_SLACK))
}

/// Why [`Recommender::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown future resolved (SIGTERM); the loop in progress, if any, was abandoned.
    Shutdown,
    /// The leader lease was lost: no write may go out any more, final checkpoints included.
    LeaseLost,
}

impl Recommender {
    /// A recommender over `stores`; `client` makes its reads that are not watches (the metrics API,
    /// checkpoints, `/scale`) and its writes, paced by `limiter`. The loop keeps no client of its own.
    pub fn new(
        cfg: ControllerConfig,
        client: Client,
        stores: Stores,
        ooms: OomQueue,
        metrics: Arc<Metrics>,
        limiter: RateLimiter,
    ) -> Self {
        let gc = i64::try_from(cfg.aggregate_gc_interval.as_nanos()).unwrap_or(i64::MAX);
        Recommender {
            model: ClusterState::new(cfg.aggregations, gc),
            source: MetricsApiSource::new(client.clone(), &cfg.vpa_object_namespace),
            writes: Arc::new(crate::writers::edge::ApiWrites::new(
                client.clone(),
                FIELD_MANAGER,
            )),
            reads: crate::views::api_reads::ApiReads::new(client, &cfg.vpa_object_namespace),
            cfg,
            stores,
            ooms,
            metrics,
            limiter,
            vpas: BTreeMap::new(),
            pods: HashMap::new(),
            scale: ScaleLookups::default(),
            written_checkpoints: HashSet::new(),
            retargeted: std::collections::BTreeSet::new(),
            last_checkpoint_gc: None,
            loops: 0,
            vpas_changed: true,
            history: None,
            job_runs: None,
            fence: Fence::unfenced(),
            newest_sample: 0,
            view: crate::views::cluster_view::ClusterView::default(),
            dashboard: None,
        }
    }

    /// The stored recommendation of every VPA this recommender handles, in (namespace, name) order.
    fn recommendations(&self) -> Vec<(&str, &str, tailor_crds::RecommendedPodResources)> {
        (self.vpas.keys())
            .filter_map(|(ns, name)| {
                let vpa = self
                    .stores
                    .vpas
                    .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))?;
                let rec = vpa.status.as_ref()?.recommendation()?;
                Some((ns.as_str(), name.as_str(), rec))
            })
            .collect()
    }

    /// Publishes the fleet to `dashboard` after each loop.
    pub fn with_dashboard(mut self, dashboard: Arc<crate::dashboard::DashboardState>) -> Self {
        self.dashboard = Some(dashboard);
        self
    }

    /// Publishes to `dashboard` from the next loop on, or stops publishing (`None`).
    pub fn set_dashboard(&mut self, dashboard: Option<Arc<crate::dashboard::DashboardState>>) {
        self.dashboard = dashboard;
    }

    /// Sizes within the cluster `view` shows: node fit and HPA coherence (see [`crate::views::cluster_view`]).
    pub fn with_cluster_view(mut self, view: crate::views::cluster_view::ClusterView) -> Self {
        self.view = view;
        self
    }

    /// Sends status and checkpoint writes and Events to `writes` instead of the API server: a record for a
    /// test ([`crate::writers::edge::RecordedWrites`]) or stdout for a dry run
    /// ([`crate::writers::edge::PrintedWrites`]). Reads stay on the API server.
    pub fn set_writes(&mut self, writes: Arc<dyn crate::writers::edge::Writes>) {
        self.writes = writes;
    }

    /// Writes only while `fence` allows (the leader lease is held): every status patch, checkpoint apply
    /// and checkpoint delete checks it right before it goes out.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Replaces the fence (see [`Recommender::with_fence`]).
    pub fn set_fence(&mut self, fence: Fence) {
        self.fence = fence;
    }

    /// The fence writes check.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Loads every new VPA's usage history in the background (see [`crate::views::history`]).
    pub fn with_history(mut self, history: HistoryBootstrap) -> Self {
        self.history = Some(history);
        self
    }

    /// Reads the peak of each finished Job run from the history store (see [`crate::views::job_runs`]); `None` stops.
    pub fn set_job_runs(&mut self, runs: Option<crate::views::job_runs::JobRunPeaks>) {
        self.job_runs = runs;
    }

    /// Starts the history of VPAs that have none yet (after checkpoints were restored, so history ends where
    /// they begin), and merges the histories that finished.
    async fn bootstrap_history(&mut self, owned: &[Arc<WatchedVpa>], now: Nanos) {
        let Some(h) = self.history.as_mut() else {
            return;
        };
        for v in owned {
            let key = key_of(v);
            let (Some(e), Some(t)) = (self.vpas.get(&key), v.spec.target_ref.as_ref()) else {
                continue;
            };
            if h.started(&key) || (e.restore_pending && self.cfg.checkpoints_enabled) {
                continue;
            }
            // Restored from checkpoints: the history is in them already (the process that wrote them
            // loaded it); fetching it again would hold back its checkpoints while Prometheus is down.
            let restored = self
                .model
                .vpas()
                .get(e.index)
                .is_some_and(|m| !m.initial_states.is_empty());
            if restored {
                h.skip(key);
                continue;
            }
            let end = self
                .model
                .vpas()
                .get(e.index)
                .map(|m| {
                    crate::views::history::history_end(&m.initial_states, now.div_euclid(1_000_000))
                })
                .unwrap_or(now.div_euclid(1_000_000));
            h.start(key, &t.kind, &t.name, end);
        }
        for (key, aggs) in h.poll().await {
            let Some(e) = self.vpas.get(&key) else {
                continue;
            };
            if let Some(m) = self.model.vpa_mut(e.index) {
                crate::views::history::merge_into(&mut m.initial_states, aggs);
            }
        }
        let gone: Vec<VpaKey> = self
            .vpas
            .keys()
            .filter(|k| !owned.iter().any(|v| &key_of(v) == *k))
            .cloned()
            .collect();
        for k in gone {
            h.forget(&k);
        }
    }

    /// The model (read-only), for inspection.
    pub fn model(&self) -> &ClusterState {
        &self.model
    }

    /// Metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Counts an error under its [`Error::metric_label`] and logs it.
    pub(crate) fn record_error(&self, e: &Error) {
        self.metrics.record(e);
        tracing::warn!(kind = e.metric_label(), "{e}");
    }

    /// One iteration at time `now`.
    pub async fn run_once(&mut self, now: Nanos) -> LoopReport {
        let start = Instant::now();
        let mut report = LoopReport::default();
        self.loops += 1;
        self.model.set_now(now);

        let ingest_start = Instant::now();
        let t = Instant::now();
        self.refresh_scale_cache(now).await;
        let owned = self.sync_vpas();
        self.metrics.step("load_vpas", t.elapsed().as_secs_f64());

        let t = Instant::now();
        let gone = self.sync_pods();
        if self.cfg.checkpoints_enabled {
            self.restore_checkpoints(now, &mut report).await;
        }
        self.metrics.step("load_pods", t.elapsed().as_secs_f64());

        self.bootstrap_history(&owned, now).await;

        let t = Instant::now();
        report.metrics_ok = match self.load_metrics(&mut report).await {
            Ok(()) => true,
            Err(e) => {
                self.record_error(&e);
                tracing::warn!("keeping the last recommendations");
                false
            }
        };
        self.record_ooms(&mut report);
        self.job_run_peaks(&owned, &mut report);
        self.delete_pods(gone);
        self.metrics.step("load_metrics", t.elapsed().as_secs_f64());
        report.phases.ingest_seconds =
            ingest_start.elapsed().as_secs_f64() - report.phases.list_seconds;
        report.phases.rss_after_ingest = crate::process::metrics::resident_bytes();

        let t = Instant::now();
        self.update_vpas(&owned, now, report.metrics_ok, &mut report)
            .await;
        self.metrics.step("update_vpas", t.elapsed().as_secs_f64());
        report.phases.rss_after_status = crate::process::metrics::resident_bytes();

        if self.cfg.checkpoints_enabled {
            let t = Instant::now();
            self.purge_retargeted(&mut report).await;
            self.maintain_checkpoints(&owned, now, false, &mut report)
                .await;
            self.metrics.step("checkpoints", t.elapsed().as_secs_f64());
            report.phases.checkpoint_seconds = t.elapsed().as_secs_f64();
            let t = Instant::now();
            self.collect_checkpoints(now, &mut report).await;
            self.metrics
                .step("checkpoint_gc", t.elapsed().as_secs_f64());
            report.phases.checkpoint_seconds += t.elapsed().as_secs_f64();
            report.phases.rss_after_checkpoints = crate::process::metrics::resident_bytes();
        }

        let t = Instant::now();
        report.aggregates_collected = self
            .model
            .rate_limited_garbage_collect(gc_clock(now, self.newest_sample));
        self.metrics.step("aggregate_gc", t.elapsed().as_secs_f64());

        report.vpas = owned.len();
        report.pods = self.pods.values().map(HashMap::len).sum();
        self.metrics.vpas.set(report.vpas as i64);
        self.metrics.pods.set(report.pods as i64);
        self.metrics
            .aggregates
            .set(self.model.aggregate_count() as i64);
        let slots = [
            ("pods", self.model.pod_slots()),
            ("aggregates", self.model.aggregate_slots()),
            ("label_sets", self.model.label_set_count()),
            ("vpas", self.model.vpas().len()),
        ];
        for (table, n) in slots {
            self.metrics
                .model_slots
                .get_or_create(&vec![("table", table)])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        report.phases.total_seconds = start.elapsed().as_secs_f64();
        self.metrics.step("total", report.phases.total_seconds);
        if let Some(r) = &self.metrics.recommendations {
            let t = Instant::now();
            r.update(self.recommendations());
            self.metrics
                .step("recommendation_metrics", t.elapsed().as_secs_f64());
        }
        if let Some(d) = &self.dashboard {
            let t = Instant::now();
            let inputs = crate::dashboard::snapshot::Inputs {
                model: &self.model,
                vpas: &self.vpas,
                stores: &self.stores,
                nodes: self.view.nodes.as_ref(),
                actions: d.actions(),
            };
            let workloads = crate::dashboard::snapshot::workloads(&inputs, now);
            d.publish(workloads, now);
            report.phases.dashboard_seconds = t.elapsed().as_secs_f64();
            self.metrics
                .step("dashboard", report.phases.dashboard_seconds);
        }
        self.metrics
            .last_loop_timestamp
            .set(now.div_euclid(1_000_000_000));
        report
    }

    /// Runs a loop every interval (the first one right away) until `shutdown` resolves or the fence reports
    /// the lease lost; a loop in progress is abandoned at once in either case (its writes are checked
    /// against the fence one by one). Writes no final checkpoints: the caller does that
    /// ([`Recommender::final_checkpoints`]) after a shutdown, within its grace period, and never after a lost
    /// lease. `on_loop` is called after each loop (health, logging).
    pub async fn run<F>(&mut self, shutdown: F, mut on_loop: impl FnMut(&LoopReport)) -> Stopped
    where
        F: std::future::Future<Output = ()>,
    {
        let mut ticker = tokio::time::interval(self.cfg.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let lost = self.fence.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                biased;
                _ = &mut lost => return Stopped::LeaseLost,
                _ = &mut shutdown => return Stopped::Shutdown,
                _ = ticker.tick() => {}
            }
            let now = wall_now();
            let report = tokio::select! {
                biased;
                _ = &mut lost => return Stopped::LeaseLost,
                _ = &mut shutdown => return Stopped::Shutdown,
                r = self.run_once(now) => r,
            };
            on_loop(&report);
        }
    }
}

/// The wall clock in engine time (only the binary's driver reads it; `run_once` takes time as a parameter).
pub fn wall_now() -> Nanos {
    from_timestamp(k8s_openapi::jiff::Timestamp::now()).unwrap_or(0)
}

#[allow(dead_code)]
fn _assert_send(r: &mut Recommender) -> impl std::future::Future<Output = LoopReport> + Send + '_ {
    r.run_once(0)
}
