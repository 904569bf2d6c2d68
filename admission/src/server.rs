//! The HTTPS webhook listener (axum on hyper over rustls) and the plain-HTTP operations listener (`/healthz`,
//! `/readyz`, `/metrics`).
//!
//! Request rules (spec/upstream-admission.md §2.2): every path on the webhook port is the webhook and dispatch
//! depends on the review's resource only; the body must be `application/json` (parameters such as
//! `; charset=utf-8` are accepted) or the answer is 415; bodies over 5 MiB get 413 `request payload too large`;
//! anything that is not a decodable review gets a well-formed `allowed: true` review.
//!
//! Connections: HTTP/1.1 with keep-alive, or HTTP/2 (ALPN `h2`); the TLS handshake has a deadline and runs on the
//! connection's own task, so a slow client never holds up the accept loop. Shutdown: readiness turns false, the
//! listener keeps accepting for `shutdown_delay` (so the API server's endpoints catch up), then stops accepting,
//! and in-flight requests finish (bounded by `drain_timeout`).

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use http_body_util::{BodyExt, Limited};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{
    metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, Rejection},
    review::{self, MAX_BODY_BYTES, Reviewer},
};

/// Body of the 413 answer (as upstream).
pub const TOO_LARGE_MESSAGE: &str = "request payload too large";
/// Deadline of a TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding a listener failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The operations listener failed.
    #[error("serving {what}: {source}")]
    Serve {
        /// Which listener.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
}

/// Readiness of the webhook: false until the caches have synced, and again once shutdown starts.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    synced: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl Readiness {
    /// Not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ready from the start (standalone mode: everything is loaded before serving).
    pub fn ready() -> Self {
        let r = Self::default();
        r.set_synced();
        r
    }

    /// The caches have synced.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Shutdown has started.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Whether shutdown has started.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Acquire) && !self.stopping.load(Ordering::Acquire)
    }
}

/// Shared state of the handlers.
pub struct AppState {
    /// The admission handlers.
    pub reviewer: Arc<dyn Reviewer>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness.
    pub readiness: Readiness,
    /// Deadline for receiving one request body.
    pub body_timeout: Duration,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("readiness", &self.readiness)
            .field("body_timeout", &self.body_timeout)
            .finish_non_exhaustive()
    }
}

/// The webhook router: every path and method reaches [`webhook`].
pub fn webhook_router(state: Arc<AppState>) -> Router {
    Router::new().fallback(webhook).with_state(state)
}

/// The operations router: `/healthz`, `/readyz`, `/metrics`.
pub fn ops_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.readiness.is_ready() {
        "ok".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches not synced or shutting down",
        )
            .into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// Whether a `Content-Type` is JSON: `application/json`, case-insensitive, parameters allowed.
pub fn is_json_content_type(value: Option<&HeaderValue>) -> bool {
    let Some(v) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = v.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// The webhook handler: checks method, content type and size, then reviews.
pub async fn webhook(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let started = Instant::now();
    if req.method() != Method::POST {
        state.metrics.rejected(Rejection::Method);
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "admission reviews are POSTed",
        );
    }
    if !is_json_content_type(req.headers().get(header::CONTENT_TYPE)) {
        state.metrics.rejected(Rejection::ContentType);
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        state.metrics.rejected(Rejection::TooLarge);
        return plain(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE_MESSAGE);
    }
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(state.body_timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            state.metrics.rejected(Rejection::TooLarge);
            return plain(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE_MESSAGE);
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading the request body failed");
            state.metrics.rejected(Rejection::BodyRead);
            return plain(StatusCode::BAD_REQUEST, "cannot read the request body");
        }
        Err(_) => {
            state.metrics.rejected(Rejection::BodyRead);
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time",
            );
        }
    };
    state.metrics.in_flight().inc();
    let handled = review::handle(&bytes, state.reviewer.as_ref());
    state.metrics.in_flight().dec();
    state
        .metrics
        .review(handled.resource, handled.result, started.elapsed());
    tracing::debug!(uid = %tailor_crds::text::capped(&handled.uid), resource = handled.resource.as_str(), result = handled.result.as_str(),
        "admission review answered");
    let mut response = Response::new(Body::from(handled.body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if state.readiness.is_stopping() {
        // Shutting down: move the API server's kept-alive HTTP/1.1 connections to other replicas now (the
        // endpoint removal only affects new connections). HTTP/2 gets GOAWAY when draining starts.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Timing of a graceful shutdown.
#[derive(Clone, Copy, Debug)]
pub struct ShutdownTiming {
    /// How long to keep serving (while not ready) after the signal, so endpoints stop routing to this pod.
    pub delay: Duration,
    /// Longest wait for in-flight connections to finish after accepting stops.
    pub drain: Duration,
}

impl Default for ShutdownTiming {
    fn default() -> Self {
        ShutdownTiming {
            delay: Duration::from_secs(5),
            drain: Duration::from_secs(20),
        }
    }
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves, then drains in-flight connections for at
/// most `drain`.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Typically EMFILE: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                // Also bounds idle keep-alive connections: longer than the API server's 90 s idle timeout,
                // so the client closes first and never races a POST against our close.
                .header_read_timeout(Duration::from_secs(120))
                .keep_alive(true);
            builder.http2().timer(TokioTimer::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight connections did not finish within {drain:?}; closing them");
    }
}

/// Everything needed to run the webhook.
pub struct Server {
    webhook: TcpListener,
    ops: Option<TcpListener>,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<AppState>,
    timing: ShutdownTiming,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("webhook", &self.webhook.local_addr().ok())
            .field("ops", &self.ops.as_ref().and_then(|l| l.local_addr().ok()))
            .finish_non_exhaustive()
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })
}

impl Server {
    /// Binds the webhook listener (and the operations listener when `ops` is given).
    pub async fn bind(
        webhook: SocketAddr,
        ops: Option<SocketAddr>,
        tls: Arc<rustls::ServerConfig>,
        state: Arc<AppState>,
        timing: ShutdownTiming,
    ) -> Result<Self, ServerError> {
        let webhook = bind(webhook).await?;
        let ops = match ops {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        Ok(Server {
            webhook,
            ops,
            tls,
            state,
            timing,
        })
    }

    /// Address of the HTTPS webhook listener.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook.local_addr().ok()
    }

    /// Address of the operations listener.
    pub fn ops_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully: not ready, keep serving for the delay, stop
    /// accepting, drain.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let readiness = self.state.readiness.clone();
        let delay = self.timing.delay;
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutdown requested: reporting not ready for {delay:?}, then draining");
            readiness.set_stopping();
            tokio::time::sleep(delay).await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let ops = self.ops.map(|listener| {
            let router = ops_router(self.state.clone());
            let rx = stop_rx.clone();
            tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(stopped(rx))
                    .await
                    .map_err(|source| ServerError::Serve {
                        what: "operations",
                        source,
                    })
            })
        });
        serve_tls(
            self.webhook,
            self.tls,
            webhook_router(self.state.clone()),
            stopped(stop_rx),
            self.timing.drain,
        )
        .await;
        if let Some(ops) = ops {
            match ops.await {
                Ok(r) => r?,
                Err(e) => tracing::warn!(error = %e, "operations listener task failed"),
            }
        }
        tracing::info!("server stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let ok = |s: &'static str| is_json_content_type(Some(&HeaderValue::from_static(s)));
        assert!(ok("application/json"));
        assert!(ok("application/json; charset=utf-8"));
        assert!(ok("Application/JSON"));
        assert!(!ok("application/yaml"));
        assert!(!ok("text/plain"));
        assert!(!ok("application/jsonx"));
        assert!(!is_json_content_type(None));
    }

    #[test]
    fn readiness() {
        let r = Readiness::new();
        assert!(!r.is_ready());
        r.set_synced();
        assert!(r.is_ready());
        r.set_stopping();
        assert!(!r.is_ready());
    }
}
