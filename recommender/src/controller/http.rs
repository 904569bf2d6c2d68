//! The HTTP side: `/healthz` (fails when no loop finished within five intervals) and `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

/// Liveness: when the process started and when the last loop finished.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    last_loop: Mutex<Option<Instant>>,
    timeout: Duration,
}

impl Health {
    /// Health that fails once nothing finished for `5 × interval` (counting from start).
    pub fn new(interval: Duration) -> Self {
        Health {
            started: Instant::now(),
            last_loop: Mutex::new(None),
            timeout: interval.saturating_mul(5),
        }
    }

    /// Records a finished loop.
    pub fn loop_finished(&self) {
        if let Ok(mut g) = self.last_loop.lock() {
            *g = Some(Instant::now());
        }
    }

    /// Whether a loop finished recently enough (or the process is younger than the timeout).
    pub fn healthy(&self) -> bool {
        let last = self
            .last_loop
            .lock()
            .ok()
            .and_then(|g| *g)
            .unwrap_or(self.started);
        last.elapsed() <= self.timeout
    }
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.healthy() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "no recommender loop finished recently",
        )
    }
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// The router serving `/healthz`, `/health-check` (upstream's path) and `/metrics`.
pub fn router(health: Arc<Health>, metrics_: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/health-check", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(AppState {
            health,
            metrics: metrics_,
        })
}
