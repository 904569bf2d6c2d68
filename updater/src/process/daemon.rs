//! The `tailor-updater` daemon, built from validated [`Settings`]: it serves its endpoints, waits for the
//! leader lease (when asked to), starts the caches and runs an iteration every interval until SIGTERM or a
//! lost lease, then gives the lease up.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use tailor_core::text::capped;
use tailor_kube::admin::ListenError;
use tailor_kube::leader::{Fence, LeaderElector};
use tailor_kube::shutdown::Shutdown;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::decisions::resize_check::ResizeRules;
use crate::iteration::UpdaterState;
use crate::process::health::Health;
use crate::process::metrics::Metrics;
use crate::process::settings::Settings;
use crate::run_loop::{Outcome, StatusCheck, Updater, pods_in_key_order, vpas_in_key_order};
use crate::views::cache_view::CacheView;
use crate::views::caches::{CacheSettings, Caches};
use crate::writers::api_actuator::ApiActuator;

/// Most per-VPA debug lines an iteration writes.
const MAX_SKIP_LINES: usize = 50;

/// Why the daemon stopped other than by SIGTERM.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The endpoints could not listen.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// Another replica took the leader lease: this one stopped acting.
    #[error("leader lease lost")]
    LeaseLost,
}

/// The updater as its binary runs it.
pub struct Daemon {
    settings: Settings,
    client: Client,
    metrics: Arc<Metrics>,
    health: Health,
}

impl Daemon {
    /// Binds the endpoints (`/metrics`, `/healthz`, `/readyz`) and serves them from now on.
    pub async fn start(settings: Settings, client: Client) -> Result<Daemon, DaemonError> {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(metrics.clone(), settings.interval);
        health.serve(settings.address).await?;
        Ok(Daemon {
            settings,
            client,
            metrics,
            health,
        })
    }

    /// Leads (after the lease, when asked for) until `shutdown`; an error when the lease was lost. The
    /// lease is released on every way out, within `--shutdown-timeout`.
    pub async fn run(self, shutdown: Shutdown) -> Result<(), DaemonError> {
        let budget = self.settings.shutdown_timeout;
        let elector = (self.settings.lease.clone())
            .map(|settings| Arc::new(LeaderElector::new(self.client.clone(), settings)));
        let mut holder = None;
        if let Some(e) = &elector {
            match acquire(e, &shutdown, budget).await {
                Some(h) => holder = Some(h),
                None => return Ok(()),
            }
        }
        let fence = (elector.as_ref())
            .map(|e| e.fence())
            .unwrap_or_else(Fence::unfenced);
        let origin = Instant::now();
        let (interval, health) = (self.settings.interval, self.health.clone());
        let mut updater = self.updater(origin).await;
        let lease_lost = iterate(&mut updater, &health, origin, interval, &shutdown, &fence).await;
        if let Some(h) = holder {
            h.abort();
        }
        if let Some(e) = &elector {
            e.release_within(budget).await;
        }
        if lease_lost {
            return Err(DaemonError::LeaseLost);
        }
        Ok(())
    }

    /// The caches, the view over them, the API actuator and the webhook's status check.
    async fn updater(self, origin: Instant) -> Updater {
        let s = self.settings;
        let cache_settings = CacheSettings {
            namespace: &s.namespace,
            quota_fit: s.quota_fit,
            namespace_labels: s.namespace_labels,
            replica_period: s.interval,
        };
        let caches = Caches::start(&self.client, &cache_settings, self.health.synced());
        let mut view = CacheView::new(
            caches.index,
            caches.replicas,
            s.restriction,
            s.gates,
            Timestamp::now(),
        );
        view.floor = s.floor;
        view.namespaces = caches.namespaces;
        view.upstream = Some(caches.upstream);
        view.resize_rules = resize_rules(&self.client).await;
        let status = s.status.map(|lease| StatusCheck {
            api: Api::namespaced(self.client.clone(), &lease.namespace),
            name: lease.name,
            timeout: lease.timeout,
        });
        let (vpas, pods) = (caches.vpas, caches.pods);
        Updater {
            config: s.iteration,
            state: UpdaterState::default(),
            view,
            actuator: ApiActuator::new(self.client, s.rate, origin),
            status,
            // In namespace/name order, as tailor plan hands them over: ties fall the same way in both.
            vpas: Box::new(move || vpas_in_key_order(vpas.state())),
            pods: Box::new(move || pods_in_key_order(pods.state())),
            metrics: self.metrics,
        }
    }
}

/// Waits for the leader lease, then holds it in the background; `None` when SIGTERM came first (the
/// lease then given up).
async fn acquire(
    e: &Arc<LeaderElector>,
    shutdown: &Shutdown,
    budget: Duration,
) -> Option<JoinHandle<()>> {
    if !e.acquire_or_release(shutdown, budget).await {
        return None;
    }
    let e = e.clone();
    Some(tokio::spawn(async move {
        let lost = e.hold().await;
        tracing::error!(error = %lost, "leader lease lost; stopping");
    }))
}

/// What the API server accepts of an in-place resize depends on its version (docs/decisions/resize-precheck.md).
async fn resize_rules(client: &Client) -> ResizeRules {
    match client.apiserver_version().await {
        Ok(info) => match ResizeRules::for_version(&info.minor) {
            Some(rules) => return rules,
            None => {
                tracing::warn!(minor = %capped(&info.minor), "unreadable server version; resize rules of Kubernetes 1.34")
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "server version unknown; resize rules of Kubernetes 1.34")
        }
    }
    ResizeRules::default()
}

/// Runs an iteration every `interval`, the first one an interval after `origin` (as upstream's), until
/// SIGTERM or a lost lease; returns whether the lease was lost. An iteration in progress is abandoned at
/// once on either: no eviction or resize goes out after them.
async fn iterate(
    updater: &mut Updater,
    health: &Health,
    origin: Instant,
    interval: Duration,
    shutdown: &Shutdown,
    fence: &Fence,
) -> bool {
    let lost = fence.lost();
    tokio::pin!(lost);
    let mut ticker = tokio::time::interval_at(origin + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait() => return false,
            _ = &mut lost => return true,
            _ = ticker.tick() => {}
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            biased;
            _ = shutdown.wait() => return false,
            _ = &mut lost => return true,
            o = updater.iterate(Timestamp::now(), started + interval) => o,
        };
        log_outcome(&outcome);
        health.iteration_done();
    }
}

/// Logs what an iteration did: its totals at info level, why VPAs were left out at debug level and
/// bounded (a cluster can hold thousands).
fn log_outcome(outcome: &Outcome) {
    let report = match outcome {
        Outcome::AdmissionNotAlive(why) => {
            tracing::error!(reason = %why, "the webhook is not known to be alive: no pod is updated this iteration");
            return;
        }
        Outcome::Ran(report) => report,
    };
    for vpa in &report.deprecated {
        tracing::warn!(%vpa, "updateMode Auto is deprecated; use Recreate or InPlaceOrRecreate");
    }
    if let Some(reason) = &report.aborted {
        tracing::warn!(%reason, "iteration stopped early");
    }
    for (namespace, name, reason) in report.skipped_vpas.iter().take(MAX_SKIP_LINES) {
        tracing::debug!(vpa = %format!("{}/{}", capped(namespace), capped(name)),
            reason = %capped(reason), "VPA skipped");
    }
    for vpa in report.vpas.iter().take(MAX_SKIP_LINES) {
        tracing::debug!(vpa = %format!("{}/{}", capped(&vpa.namespace), capped(&vpa.name)),
            mode = %vpa.mode, pods = vpa.pods.len(), "VPA considered");
    }
    tracing::info!(
        evictions = report.evictions,
        resizes = report.resizes,
        vpas = report.vpas.len(),
        skipped_vpas = report.skipped_vpas.len(),
        pods = report.vpas.iter().map(|v| v.pods.len()).sum::<usize>(),
        "iteration done"
    );
}
