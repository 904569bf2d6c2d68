//! The `tailor-recommender` daemon, built from validated [`DaemonSettings`]: it serves `/metrics` and
//! `/healthz`, waits for the leader lease (when asked to), then leads — caches, the loop, and final
//! checkpoints after SIGTERM — and gives the lease up on every way out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tailor_kube::client::{ApiRateFlags, ClientError, ClientFlags};
use tailor_kube::leader::{Fence, LeaderElector, LeaseSettings};
use tailor_kube::shelf::CacheStopped;
use tailor_kube::shutdown::Shutdown;
use tokio::task::JoinHandle;

use crate::dashboard::DashboardState;
use crate::fleet::{FleetConfig, FleetController, FleetView, sources, writer::ApiWriter};
use crate::process::config::ControllerConfig;
use crate::process::http::{self, Health};
use crate::process::metrics::Metrics;
use crate::run_loop::{LoopReport, Recommender, Stopped, wall_now};
use crate::views::cluster_view::{self, ClusterView, ViewConfig, new_view, spawn_view_watchers};
use crate::views::history::HistoryBootstrap;
use crate::views::oom::OomQueue;
use crate::views::stores::{Stores, new_stores, spawn_watchers, wait_until_ready};
use crate::writers::ratelimit::RateLimiter;
use tailor_dashboard::money::Prices;

/// Everything the recommender binary runs with, checked.
pub struct DaemonSettings {
    /// Print the writes instead of sending them (no lease, no fleet onboarding: both are `None` then).
    pub dry_run: bool,
    /// The loop's settings.
    pub controller: ControllerConfig,
    /// Node fit and HPA coherence.
    pub view: ViewConfig,
    /// Where `/metrics` and `/healthz` are served.
    pub address: SocketAddr,
    /// The Prometheus history of new VPAs, when asked for.
    pub history: Option<HistoryBootstrap>,
    /// Run peaks of finished Job pods from Prometheus, when asked for (the worker starts with the loop).
    pub job_runs: Option<crate::views::job_runs::JobRunOptions>,
    /// Leader election (`None`: not asked for).
    pub lease: Option<LeaseSettings>,
    /// How the Kubernetes client is made.
    pub client: ClientFlags,
    /// The status and checkpoint writes' token bucket.
    pub rate: ApiRateFlags,
    /// After SIGTERM, everything ends within this long.
    pub shutdown_timeout: Duration,
    /// Fleet onboarding (`None`: off).
    pub fleet: Option<FleetConfig>,
    /// The dashboard's address and prices (`None`: off).
    pub dashboard: Option<(SocketAddr, Prices)>,
    /// `tailor_vpa_recommendation`'s cap on series (`None`: not exported).
    pub recommendation_metrics: Option<usize>,
}

/// Why the recommender stopped other than by SIGTERM.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The endpoints could not listen.
    #[error("binding {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The Kubernetes client could not be made.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A store stopped before its first list.
    #[error("stores")]
    Stores(#[source] CacheStopped),
    /// The lease was lost while the caches were listing.
    #[error("leader lease lost before the caches were ready")]
    LeaseLostBeforeReady,
    /// The lease was lost: the loop was abandoned.
    #[error("leader lease lost")]
    LeaseLost,
}

/// The recommender as its binary runs it.
pub struct Daemon {
    settings: DaemonSettings,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    dashboard: Option<Arc<DashboardState>>,
}

impl Daemon {
    /// Binds the endpoints and serves them from now on (as on standby until the lease is held).
    pub async fn start(settings: DaemonSettings) -> Result<Daemon, DaemonError> {
        let mut metrics = Metrics::new();
        if settings.fleet.is_some() {
            metrics = metrics.with_fleet();
        }
        if let Some(max) = settings.recommendation_metrics {
            metrics = metrics.with_recommendations(max);
        }
        let metrics = Arc::new(metrics);
        let interval = settings.controller.interval;
        let health = Arc::new(match settings.lease {
            Some(_) => Health::standby(interval),
            None => Health::new(interval),
        });
        // Logs the bound address (with port 0 the OS picks one; tests and operators read it there).
        http::admin(health.clone(), metrics.clone())
            .serve(settings.address)
            .await
            .map_err(|e| DaemonError::Bind {
                addr: e.addr,
                source: e.source,
            })?;
        let dashboard = match settings.dashboard.clone() {
            Some((addr, prices)) => {
                Some(serve_dashboard(addr, prices, settings.lease.as_ref()).await?)
            }
            None => None,
        };
        Ok(Daemon {
            settings,
            metrics,
            health,
            dashboard,
        })
    }

    /// Waits for the lease (when asked for), leads until `shutdown` or a lost lease, then releases the
    /// lease: also after an error or a loss (a no-op unless this replica still holds it, e.g. when
    /// renewals timed out but the API server is back).
    pub async fn run(self, shutdown: Shutdown) -> Result<(), DaemonError> {
        let client = self.settings.client.client().await?;
        let elector = (self.settings.lease.clone())
            .map(|settings| Arc::new(LeaderElector::new(client.clone(), settings)));
        let release = release_budget(self.settings.shutdown_timeout, elector.as_deref());
        let mut holder = None;
        if let Some(e) = &elector {
            match self.acquire(e, &shutdown, release).await {
                Some(h) => holder = Some(h),
                None => return Ok(()),
            }
        }
        let fence = (elector.as_ref())
            .map(|e| e.fence())
            .unwrap_or_else(Fence::unfenced);
        let result = self.lead(client, fence, &shutdown, release).await;
        if let Some(h) = holder {
            h.abort();
        }
        if let Some(e) = &elector {
            e.release_within(release).await;
        }
        result
    }

    /// Waits for the lease, then holds it in the background (a loss recorded in the metrics); `None` when
    /// SIGTERM came first (the lease then given up: an attempt cut off may still have succeeded).
    async fn acquire(
        &self,
        e: &Arc<LeaderElector>,
        shutdown: &Shutdown,
        release: Duration,
    ) -> Option<JoinHandle<()>> {
        let lease = e.settings();
        tracing::info!(lease = %lease.name, namespace = %lease.namespace, "waiting for the leader lease");
        if !e.acquire_or_release(shutdown, release).await {
            return None;
        }
        self.health.activate();
        if let Some(d) = &self.dashboard {
            d.lead();
        }
        let (e, metrics) = (e.clone(), self.metrics.clone());
        Some(tokio::spawn(async move {
            let err: crate::Error = e.hold().await.into();
            metrics.record(&err);
            tracing::error!(error = %err, "leader lease lost: no more writes");
        }))
    }

    /// The leader's work: caches, the loop, and final checkpoints after SIGTERM (within
    /// `--shutdown-timeout` minus the `release` budget). An error when the lease was lost.
    async fn lead(
        self,
        client: Client,
        fence: Fence,
        shutdown: &Shutdown,
        release: Duration,
    ) -> Result<(), DaemonError> {
        let s = self.settings;
        let ooms = OomQueue::default();
        let caches = Caches::start(&client, &s, ooms.clone(), &self.metrics);
        if !caches.wait_until_ready(shutdown, &fence).await? {
            return Ok(());
        }
        let fleet = (s.fleet.clone()).map(|config| {
            let namespace = s.controller.vpa_object_namespace.clone();
            let parts = FleetParts {
                client: &client,
                stores: &caches.stores,
                fence: &fence,
                metrics: &self.metrics,
            };
            start_fleet(parts, config, namespace, shutdown)
        });
        let actions = (self.dashboard.as_ref()).map(|d| {
            let namespace = &s.controller.vpa_object_namespace;
            let metrics = self.metrics.clone();
            crate::dashboard::actions::spawn_watch(&client, namespace, d.actions().clone(), metrics)
        });
        let cfg = s.controller;
        tracing::info!(recommender = %cfg.recommender_name, interval = ?cfg.interval, "caches ready; starting the loop");
        let limiter = RateLimiter::new(s.rate.kube_api_qps, s.rate.kube_api_burst);
        let mut rec = Recommender::new(
            cfg,
            client,
            caches.stores.clone(),
            ooms,
            self.metrics,
            limiter,
        )
        .with_fence(fence)
        .with_cluster_view(caches.view.clone());
        if let Some(h) = s.history {
            rec = rec.with_history(h);
        }
        rec.set_job_runs(s.job_runs.map(crate::views::job_runs::JobRunPeaks::new));
        if let Some(d) = &self.dashboard {
            rec = rec.with_dashboard(d.clone());
        }
        if s.dry_run {
            tracing::info!("dry run: writes are printed on stdout, not sent");
            rec.set_writes(Arc::new(crate::writers::edge::PrintedWrites));
        }
        let health = self.health;
        let stopped = rec
            .run(shutdown.wait(), move |r| {
                health.loop_finished();
                log_loop(r);
            })
            .await;
        caches.abort();
        for task in fleet.into_iter().flatten().chain(actions) {
            task.abort();
        }
        match stopped {
            Stopped::LeaseLost => {
                if let Some(d) = &self.dashboard {
                    d.stand_by();
                }
                // Said in the log as well as on exit: the holder task that also says it may be cut off first.
                tracing::error!("leader lease lost: loop abandoned, no final checkpoints; exiting");
                Err(DaemonError::LeaseLost)
            }
            Stopped::Shutdown => {
                let budget = s.shutdown_timeout.saturating_sub(release);
                final_checkpoints(&mut rec, budget).await;
                Ok(())
            }
        }
    }
}

/// Binds the dashboard's address and serves it (a standby's pages say so until it leads).
async fn serve_dashboard(
    addr: SocketAddr,
    prices: Prices,
    lease: Option<&LeaseSettings>,
) -> Result<Arc<DashboardState>, DaemonError> {
    let lease = lease.map(|l| format!("Lease {}/{}", l.namespace, l.name));
    let state = Arc::new(DashboardState::new(prices, lease));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let app = crate::dashboard::server::router(state.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "dashboard server failed");
        }
    });
    tracing::info!(addr = %bound, "serving the dashboard");
    Ok(state)
}

/// What the fleet shares with the loop.
struct FleetParts<'a> {
    client: &'a Client,
    stores: &'a Stores,
    fence: &'a Fence,
    metrics: &'a Arc<Metrics>,
}

/// Starts fleet onboarding on the leader: its watches, the upstream VPA reader and its controller
/// (stopped by `shutdown` or a lost lease); the tasks, for aborting.
fn start_fleet(
    p: FleetParts<'_>,
    config: FleetConfig,
    namespace: String,
    shutdown: &Shutdown,
) -> Vec<JoinHandle<()>> {
    let view = FleetView::new(&config.kinds);
    let mut tasks = sources::spawn_watches(p.client, &config.kinds, &view);
    let upstream = tailor_kube::upstream_vpa::UpstreamVpas::start(p.client, &namespace);
    tracing::info!(
        kinds = config.kinds.len(),
        qps = config.qps,
        "fleet onboarding on"
    );
    let controller = FleetController::new(
        config,
        view,
        p.stores.vpas.clone(),
        upstream,
        Some(namespace),
        ApiWriter::new(p.client.clone()),
        p.fence.clone(),
        Arc::new(p.metrics.fleet.clone()),
    );
    tasks.push(tokio::spawn(controller.run(shutdown.wait())));
    tasks
}

/// The leader's caches: the stores the loop reads and the cluster view, with their watch tasks.
struct Caches {
    stores: Stores,
    view: ClusterView,
    watchers: Vec<JoinHandle<()>>,
}

impl Caches {
    /// Starts every watch (in `--vpa-object-namespace`); watch errors are counted in `metrics`.
    fn start(
        client: &Client,
        s: &DaemonSettings,
        ooms: OomQueue,
        metrics: &Arc<Metrics>,
    ) -> Caches {
        let namespace = &s.controller.vpa_object_namespace;
        let (stores, writers) = new_stores(ooms.clone());
        let mut watchers = spawn_watchers(client, namespace, writers, ooms, metrics.clone());
        let (view, view_writers) = new_view(&s.view);
        let m = metrics.clone();
        watchers.extend(spawn_view_watchers(
            client,
            namespace,
            view_writers,
            &s.view,
            Arc::new(move |e| {
                m.record(&crate::Error::Watch {
                    kind: "cluster view",
                    message: e.to_string(),
                })
            }),
        ));
        Caches {
            stores,
            view,
            watchers,
        }
    }

    /// Waits until the stores and the view have listed (`true`); stops the watches when SIGTERM (`false`)
    /// or a lost lease (an error) comes first, or a store stops (an error).
    async fn wait_until_ready(
        &self,
        shutdown: &Shutdown,
        fence: &Fence,
    ) -> Result<bool, DaemonError> {
        tokio::select! {
            r = async {
                let r = wait_until_ready(&self.stores).await;
                cluster_view::wait_until_ready(&self.view).await;
                r
            } => {
                if let Err(e) = r {
                    self.abort();
                    return Err(DaemonError::Stores(e));
                }
                Ok(true)
            }
            _ = shutdown.wait() => {
                self.abort();
                Ok(false)
            }
            _ = fence.lost() => {
                self.abort();
                Err(DaemonError::LeaseLostBeforeReady)
            }
        }
    }

    fn abort(&self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

/// How the SIGTERM budget (`--shutdown-timeout`) is split: the part left for releasing the lease (two calls
/// under their own timeouts, at most half the budget), the rest for final checkpoints.
fn release_budget(shutdown_timeout: Duration, elector: Option<&LeaderElector>) -> Duration {
    elector
        .map(|e| (e.settings().call_timeout() * 2).min(shutdown_timeout / 2))
        .unwrap_or_default()
}

/// Writes the final checkpoints within `budget`.
async fn final_checkpoints(rec: &mut Recommender, budget: Duration) {
    match tokio::time::timeout(budget, rec.final_checkpoints(wall_now())).await {
        Ok(r) => tracing::info!(
            written = r.checkpoints_written,
            errors = r.checkpoint_errors,
            "final checkpoints written"
        ),
        Err(_) => {
            tracing::warn!(?budget, "final checkpoints cut off by --shutdown-timeout")
        }
    }
}

/// One loop's report, at info level.
fn log_loop(r: &LoopReport) {
    tracing::info!(
        vpas = r.vpas,
        pods = r.pods,
        samples = r.samples_accepted,
        ooms = r.ooms_recorded,
        status_writes = r.status_writes,
        checkpoints = r.checkpoints_written,
        checkpoints_unchanged = r.checkpoints_unchanged,
        metrics_ok = r.metrics_ok,
        list_s = r.phases.list_seconds,
        ingest_s = r.phases.ingest_seconds,
        recommend_s = r.phases.recommend_seconds,
        status_s = r.phases.status_seconds,
        checkpoint_s = r.phases.checkpoint_seconds,
        total_s = r.phases.total_seconds,
        dashboard_s = r.phases.dashboard_seconds,
        rss_after_list = r.phases.rss_after_list,
        rss_after_ingest = r.phases.rss_after_ingest,
        rss_after_status = r.phases.rss_after_status,
        rss_after_checkpoints = r.phases.rss_after_checkpoints,
        "loop finished"
    );
}

/// The async runtime of `--runtime-threads` threads (1: the current thread only; 0: one per CPU).
pub fn runtime(threads: u16) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if n > 1 {
                b.worker_threads(usize::from(n));
            }
            b
        }
    };
    (builder.enable_all().build()).map_err(|e| anyhow::anyhow!("starting the async runtime: {e}"))
}

/// Flags → validated settings → the daemon → run until SIGTERM or a lost lease.
pub async fn run(flags: crate::process::flags::Flags) -> anyhow::Result<()> {
    flags.log.init();
    let settings = flags.daemon_settings()?;
    let daemon = Daemon::start(settings).await?;
    daemon.run(Shutdown::on_signal()).await?;
    Ok(())
}
