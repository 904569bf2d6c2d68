//! The updater's HTTP endpoints: `/metrics`, `/healthz` (and upstream's `/health-check`: an iteration
//! within five intervals) and `/readyz` (the VPA and pod caches have listed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::jiff::Timestamp;

use crate::metrics::Metrics;

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

/// The endpoints could not listen.
#[derive(Debug, thiserror::Error)]
#[error("listen on {addr}")]
pub struct ListenError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why binding failed.
    pub source: std::io::Error,
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
        let app = Router::new()
            .route("/healthz", get(healthz))
            .route("/health-check", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(serve_metrics))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ListenError { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
        tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
        Ok(bound)
    }
}

async fn healthz(State(h): State<Health>) -> (StatusCode, String) {
    let last = h
        .last_iteration
        .load(Ordering::Relaxed)
        .max(h.started.load(Ordering::Relaxed));
    let limit = 5 * h.interval.as_secs() as i64 + 1;
    let age = unix_now() - last;
    if age > limit {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Error: last activity more than {age}s ago"),
        )
    } else {
        (StatusCode::OK, "OK".into())
    }
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.synced.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

async fn serve_metrics(State(h): State<Health>) -> String {
    h.metrics.encode()
}
