//! The updater's probes, served by the admin server of [`tailor_kube::admin`]: `/metrics`, `/healthz` (and
//! upstream's `/health-check`: an iteration within five intervals) and `/readyz` (the VPA and pod caches
//! have listed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tailor_kube::admin::{AdminServer, ListenError, PLAIN_TEXT, Probes, Routes};

use crate::process::metrics::Metrics;

/// The updater's routes: `/health-check` as upstream, `/readyz`, and `/metrics` as plain text.
const ROUTES: Routes = Routes {
    ok: "OK",
    health_check: true,
    readyz: true,
    metrics_content_type: PLAIN_TEXT,
};

/// What the endpoints read; cheap to clone.
#[derive(Clone)]
pub struct Health {
    metrics: Arc<Metrics>,
    /// Set once the VPA and pod caches have listed.
    synced: Arc<AtomicBool>,
    last_iteration: Arc<AtomicI64>,
    started: Arc<AtomicI64>,
    interval: Duration,
}

fn unix_now() -> i64 {
    Timestamp::now().as_second()
}

impl Health {
    /// Health of an updater started now whose loop runs every `interval`.
    pub fn new(metrics: Arc<Metrics>, interval: Duration) -> Self {
        Health {
            metrics,
            synced: Arc::new(AtomicBool::new(false)),
            last_iteration: Arc::new(AtomicI64::new(0)),
            started: Arc::new(AtomicI64::new(unix_now())),
            interval,
        }
    }

    /// The flag `/readyz` reads, set once the caches have listed.
    pub fn synced(&self) -> Arc<AtomicBool> {
        self.synced.clone()
    }

    /// Records that an iteration ended now.
    pub fn iteration_done(&self) {
        self.last_iteration.store(unix_now(), Ordering::Relaxed);
    }

    /// Binds `addr` and serves the endpoints in the background; returns the bound address.
    pub async fn serve(&self, addr: SocketAddr) -> Result<SocketAddr, ListenError> {
        AdminServer::new(Arc::new(self.clone()), ROUTES)
            .serve(addr)
            .await
    }
}

impl Probes for Health {
    /// Live while an iteration ended (or the updater started) within five intervals and a second.
    fn live(&self) -> Result<(), String> {
        let last =
            (self.last_iteration.load(Ordering::Relaxed)).max(self.started.load(Ordering::Relaxed));
        let limit = 5 * self.interval.as_secs() as i64 + 1;
        let age = unix_now() - last;
        if age > limit {
            return Err(format!("Error: last activity more than {age}s ago"));
        }
        Ok(())
    }

    /// Ready once the caches have listed.
    fn ready(&self) -> Result<(), String> {
        match self.synced.load(Ordering::Relaxed) {
            true => Ok(()),
            false => Err("caches not synced yet".into()),
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}
