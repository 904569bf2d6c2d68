//! The one admin server of the three daemons: `/healthz` (liveness), `/readyz` (readiness) and `/metrics`
//! over plain HTTP, answered from a daemon's [`Probes`]. Which routes exist, the body of a passing probe and
//! the content type of `/metrics` are each daemon's own ([`Routes`]), so that every daemon answers exactly as
//! its chart's probes and its scrapers expect.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Content type of OpenMetrics text (the recommender's and the webhook's `/metrics`).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of plain text (the updater's `/metrics`, as upstream's updater serves it).
pub const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// What a daemon answers its probes and scrapers with.
pub trait Probes: Send + Sync + 'static {
    /// Liveness: `Err(why)` answers `/healthz` 500 with `why`.
    fn live(&self) -> Result<(), String>;
    /// Readiness: `Err(why)` answers `/readyz` 503 with `why`. Ready unless overridden.
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
    /// The `/metrics` body, encoded from the daemon's registry.
    fn metrics(&self) -> String;
}

/// Which routes a daemon serves and how a passing answer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routes {
    /// Body of a passing `/healthz` or `/readyz` (200).
    pub ok: &'static str,
    /// `/health-check` answers as `/healthz` (upstream's path).
    pub health_check: bool,
    /// `/readyz` is served.
    pub readyz: bool,
    /// Content type of `/metrics` ([`OPENMETRICS`] or [`PLAIN_TEXT`]).
    pub metrics_content_type: &'static str,
}

impl Routes {
    /// The paths served, for the log line.
    fn served(&self) -> &'static str {
        match self.readyz {
            true => "serving /metrics, /healthz and /readyz",
            false => "serving /metrics and /healthz",
        }
    }
}

/// The admin endpoints could not listen.
#[derive(Debug, thiserror::Error)]
#[error("listen on {addr}")]
pub struct ListenError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why binding failed.
    pub source: std::io::Error,
}

/// One daemon's admin endpoints.
#[derive(Clone)]
pub struct AdminServer {
    probes: Arc<dyn Probes>,
    routes: Routes,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// The endpoints of `routes`, answered by `probes`.
    pub fn new(probes: Arc<dyn Probes>, routes: Routes) -> Self {
        AdminServer { probes, routes }
    }

    /// The router, for a daemon that runs it on a listener of its own.
    pub fn router(&self) -> Router {
        let mut router = Router::new()
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics));
        if self.routes.health_check {
            router = router.route("/health-check", get(healthz));
        }
        if self.routes.readyz {
            router = router.route("/readyz", get(readyz));
        }
        router.with_state(self.clone())
    }

    /// Binds `addr` and serves the endpoints in the background; returns the bound address (with port 0 the
    /// system picks one).
    pub async fn serve(self, addr: SocketAddr) -> Result<SocketAddr, ListenError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ListenError { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        let served = self.routes.served();
        let app = self.router();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
        tracing::info!(addr = %bound, "{served}");
        Ok(bound)
    }

    /// A probe's answer: 200 with [`Routes::ok`], or `failed` with the reason.
    fn answer(&self, verdict: Result<(), String>, failed: StatusCode) -> Response {
        match verdict {
            Ok(()) => self.routes.ok.into_response(),
            Err(why) => (failed, why).into_response(),
        }
    }
}

async fn healthz(State(s): State<AdminServer>) -> Response {
    s.answer(s.probes.live(), StatusCode::INTERNAL_SERVER_ERROR)
}

async fn readyz(State(s): State<AdminServer>) -> Response {
    s.answer(s.probes.ready(), StatusCode::SERVICE_UNAVAILABLE)
}

async fn metrics(State(s): State<AdminServer>) -> Response {
    let content_type = s.routes.metrics_content_type;
    ([(header::CONTENT_TYPE, content_type)], s.probes.metrics()).into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tower::ServiceExt;

    use super::*;

    #[derive(Default)]
    struct Fake {
        dead: AtomicBool,
        unready: AtomicBool,
    }

    impl Probes for Fake {
        fn live(&self) -> Result<(), String> {
            match self.dead.load(Ordering::Relaxed) {
                true => Err("dead".into()),
                false => Ok(()),
            }
        }
        fn ready(&self) -> Result<(), String> {
            match self.unready.load(Ordering::Relaxed) {
                true => Err("not yet".into()),
                false => Ok(()),
            }
        }
        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
    }

    async fn get(app: &Router, path: &str) -> (StatusCode, Option<String>, String) {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("request");
        let r = app.clone().oneshot(req).await.expect("answer");
        let status = r.status();
        let content_type = (r.headers().get(header::CONTENT_TYPE))
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        let body = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .expect("body");
        (
            status,
            content_type,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    const ROUTES: Routes = Routes {
        ok: "OK",
        health_check: true,
        readyz: true,
        metrics_content_type: PLAIN_TEXT,
    };

    #[tokio::test]
    async fn probes_answer_with_the_daemons_texts_and_codes() {
        let fake = Arc::new(Fake::default());
        let app = AdminServer::new(fake.clone(), ROUTES).router();
        let text = Some(PLAIN_TEXT.to_owned());
        assert_eq!(
            get(&app, "/healthz").await,
            (StatusCode::OK, text.clone(), "OK".into())
        );
        assert_eq!(get(&app, "/health-check").await.0, StatusCode::OK);
        fake.dead.store(true, Ordering::Relaxed);
        fake.unready.store(true, Ordering::Relaxed);
        assert_eq!(
            get(&app, "/health-check").await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                text.clone(),
                "dead".into()
            )
        );
        assert_eq!(
            get(&app, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, text, "not yet".into())
        );
    }

    #[tokio::test]
    async fn routes_left_out_are_not_found_and_metrics_keep_their_content_type() {
        let routes = Routes {
            ok: "ok",
            health_check: false,
            readyz: false,
            metrics_content_type: OPENMETRICS,
        };
        let app = AdminServer::new(Arc::new(Fake::default()), routes).router();
        assert_eq!(get(&app, "/health-check").await.0, StatusCode::NOT_FOUND);
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::NOT_FOUND);
        assert_eq!(get(&app, "/healthz").await.2, "ok");
        let (status, content_type, body) = get(&app, "/metrics").await;
        assert_eq!(
            (status, content_type.as_deref(), body.as_str()),
            (StatusCode::OK, Some(OPENMETRICS), "# EOF\n")
        );
    }

    #[tokio::test]
    async fn serve_binds_and_reports_a_taken_address() {
        let server = AdminServer::new(Arc::new(Fake::default()), ROUTES);
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let bound = server.clone().serve(any).await.expect("bound");
        assert_ne!(bound.port(), 0);
        let err = server.serve(bound).await.expect_err("taken");
        assert_eq!(err.addr, bound);
    }
}
