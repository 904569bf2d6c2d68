//! The recommender's probes, served by the admin server of [`tailor_kube::admin`]: `/healthz` and upstream's
//! `/health-check` (fail when no loop finished within five intervals) and `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_kube::admin::{AdminServer, OPENMETRICS, Probes, Routes};

use crate::process::metrics::Metrics;

/// The recommender's routes: `/health-check` as upstream, no `/readyz`, `/metrics` as OpenMetrics.
const ROUTES: Routes = Routes {
    ok: "ok",
    health_check: true,
    readyz: false,
    metrics_content_type: OPENMETRICS,
};

/// Liveness: when the process started and when the last loop finished.
#[derive(Debug)]
pub struct Health {
    started: Mutex<Option<Instant>>,
    last_loop: Mutex<Option<Instant>>,
    timeout: Duration,
}

impl Health {
    /// Health that fails once nothing finished for `5 × interval` (counting from start).
    pub fn new(interval: Duration) -> Self {
        let h = Health::standby(interval);
        h.activate();
        h
    }

    /// Health of a replica waiting for the leader lease: healthy until [`Health::activate`].
    pub fn standby(interval: Duration) -> Self {
        Health {
            started: Mutex::new(None),
            last_loop: Mutex::new(None),
            timeout: interval.saturating_mul(5),
        }
    }

    /// Starts checking (the replica now runs the loop).
    pub fn activate(&self) {
        if let Ok(mut g) = self.started.lock() {
            *g = Some(Instant::now());
        }
    }

    /// Records a finished loop.
    pub fn loop_finished(&self) {
        if let Ok(mut g) = self.last_loop.lock() {
            *g = Some(Instant::now());
        }
    }

    /// Whether a loop finished recently enough (or checking started less than the timeout ago, or has not
    /// started: a standby replica is healthy).
    pub fn healthy(&self) -> bool {
        let Some(started) = self.started.lock().ok().and_then(|g| *g) else {
            return true;
        };
        let last = self
            .last_loop
            .lock()
            .ok()
            .and_then(|g| *g)
            .unwrap_or(started);
        last.elapsed() <= self.timeout
    }
}

/// What the admin endpoints read.
struct RecommenderProbes {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

impl Probes for RecommenderProbes {
    fn live(&self) -> Result<(), String> {
        match self.health.healthy() {
            true => Ok(()),
            false => Err("no recommender loop finished recently".into()),
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// The admin server of `/healthz`, `/health-check` (upstream's path) and `/metrics`.
pub fn admin(health: Arc<Health>, metrics: Arc<Metrics>) -> AdminServer {
    AdminServer::new(Arc::new(RecommenderProbes { health, metrics }), ROUTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_is_healthy_and_a_stale_loop_is_not() {
        let h = Health::standby(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(10));
        assert!(h.healthy());
        h.activate();
        assert!(h.healthy());
        std::thread::sleep(Duration::from_millis(10));
        assert!(!h.healthy());
        h.loop_finished();
        assert!(h.healthy());
    }

    #[tokio::test]
    async fn serves_metrics_and_health() {
        use axum::http::StatusCode;
        use tower::ServiceExt;
        let app = admin(
            Arc::new(Health::new(Duration::from_secs(60))),
            Arc::new(Metrics::new()),
        )
        .router();
        let req = |p: &str| {
            axum::http::Request::get(p)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let r = app.clone().oneshot(req("/healthz")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let r = app.clone().oneshot(req("/health-check")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let r = app.oneshot(req("/metrics")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[axum::http::header::CONTENT_TYPE],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("# EOF"));
    }
}
