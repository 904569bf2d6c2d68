//! The HTTPS webhook listener (hyper over rustls) and the plain-HTTP operations listener (`/healthz`,
//! `/readyz`, `/metrics`: the admin server of [`tailor_kube::admin`], on a port and a runtime of its own).
//!
//! Request rules (docs/design/upstream-admission.md §2.2): every path on the webhook port is the webhook and
//! dispatch depends on the review's resource only; the body must be `application/json` (parameters such as
//! `; charset=utf-8` are accepted) or the answer is 415; bodies over 5 MiB get 413 `request payload too large`;
//! anything that is not a decodable review gets a well-formed `allowed: true` review.
//!
//! Connections: HTTP/1.1 with keep-alive, or HTTP/2 (ALPN `h2`); the TLS handshake has a deadline and runs on the
//! connection's own task, so a slow client never holds up the accept loop. [`connections`] bounds how many are
//! open and closes idle ones. Each connection is served from accept to close on one of a few single-threaded
//! runtimes ([`workers`], one per core by default), so that a review wakes one thread. Reviews of small bodies (every pod the API server sends, in practice) run inline;
//! a body over [`LARGE_BODY_BYTES`] needs one of a few slots and is reviewed on the blocking pool, so large
//! requests can neither starve the small ones nor pile up in memory (the binary's allocator, mimalloc, hands
//! freed pages back to the system within milliseconds, where glibc's arenas would keep the peak). The
//! operations listener runs on a runtime of its own, so probes answer while the webhook port is under load. Shutdown: readiness turns false, the
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
    http::{HeaderValue, Method, StatusCode, header},
};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{
        conn::auto,
        graceful::{GracefulShutdown, Watcher},
    },
};
use tailor_kube::admin::{AdminServer, Probes, Routes};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{
    metrics::{ConnectionClose, Metrics, OPENMETRICS_CONTENT_TYPE, Rejection},
    review::{self, MAX_BODY_BYTES, Reviewer},
};

pub mod connections;
pub mod workers;

use connections::Registry;
pub use connections::{ConnectionLimits, DEFAULT_HANDSHAKES_PER_SECOND, DEFAULT_MAX_CONNECTIONS};

/// Bodies larger than this (or of unknown length) are large reviews: they need a [`LargeReviews`] slot. Pods
/// as the API server sends them are a few KiB.
pub const LARGE_BODY_BYTES: usize = 64 * 1024;

/// Body of the 413 answer (as upstream).
pub const TOO_LARGE_MESSAGE: &str = "request payload too large";
/// Body of the 503 answer when every large-review slot stays busy.
pub const BUSY_MESSAGE: &str = "webhook busy with large requests; retry";

/// Budget of large reviews: slots (how many at once), how long a large request may wait for one, and bytes
/// per second. Past the byte rate a large request is answered 503 at once and its connection closed, so that
/// an attacker's megabytes cost neither decryption nor parsing.
#[derive(Debug, Clone)]
pub struct LargeReviews {
    slots: Arc<tokio::sync::Semaphore>,
    wait: Duration,
    bytes: Arc<governor::DefaultDirectRateLimiter>,
}

/// Large-request bytes accepted per second (and the burst): 8 MiB, some 125 pods of 64 KiB each (the API server
/// sends a few KiB per pod; only pods with very large specs pass 64 KiB).
pub const LARGE_BYTES_PER_SECOND: u32 = 8 << 20;

impl LargeReviews {
    /// `slots` large reviews at once (at least one); a request waits at most `wait` for a slot; at most
    /// `bytes_per_second` of large bodies (at least [`MAX_BODY_BYTES`], so one largest body always fits).
    pub fn new(slots: usize, wait: Duration, bytes_per_second: u32) -> Self {
        let floor = u32::try_from(MAX_BODY_BYTES).unwrap_or(u32::MAX);
        let rate = std::num::NonZeroU32::new(bytes_per_second.max(floor))
            .unwrap_or(std::num::NonZeroU32::MIN);
        LargeReviews {
            slots: Arc::new(tokio::sync::Semaphore::new(slots.max(1))),
            wait,
            bytes: Arc::new(governor::RateLimiter::direct(governor::Quota::per_second(
                rate,
            ))),
        }
    }

    /// Takes `len` bytes from the budget; false when over it.
    fn take_bytes(&self, len: u64) -> bool {
        let n = u32::try_from(len.max(1)).unwrap_or(u32::MAX);
        std::num::NonZeroU32::new(n).is_some_and(|n| matches!(self.bytes.check_n(n), Ok(Ok(()))))
    }
}

impl Default for LargeReviews {
    /// Half the cores (at least one), so that small reviews always keep a core; one second of waiting;
    /// [`LARGE_BYTES_PER_SECOND`].
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        LargeReviews::new(cores / 2, Duration::from_secs(1), LARGE_BYTES_PER_SECOND)
    }
}

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

/// Readiness of the webhook: false until the caches have synced, and again once shutdown starts. It also
/// remembers when a cache's watch last failed, which holds back the status Lease
/// ([`Readiness::may_renew_lease`]).
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    synced: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
    watch_failed: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
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

    /// A cache's watch failed just now (it is retried with backoff; its cache may be going stale).
    pub fn record_watch_error(&self) {
        if let Ok(mut at) = self.watch_failed.lock() {
            *at = Some(tokio::time::Instant::now());
        }
    }

    /// Whether the status Lease may be renewed: ready (caches synced, not shutting down) and no watch
    /// failed within `quiet` (one renewal interval), so the updater stops trusting a webhook whose caches
    /// are lost.
    pub fn may_renew_lease(&self, quiet: Duration) -> bool {
        let failed = self.watch_failed.lock().ok().and_then(|at| *at);
        self.is_ready() && failed.is_none_or(|at| at.elapsed() >= quiet)
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
    /// Slots for large reviews.
    pub large_reviews: LargeReviews,
    /// Limits on the webhook's connections.
    pub connections: ConnectionLimits,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("readiness", &self.readiness)
            .field("body_timeout", &self.body_timeout)
            .finish_non_exhaustive()
    }
}

/// The operations endpoints' routes: `/healthz`, `/readyz`, and `/metrics` as OpenMetrics.
const OPS_ROUTES: Routes = Routes {
    ok: "ok",
    health_check: false,
    readyz: true,
    metrics_content_type: OPENMETRICS_CONTENT_TYPE,
};

/// What the operations endpoints read: live while the process answers, ready per [`Readiness`].
struct OpsProbes {
    readiness: Readiness,
    metrics: Arc<Metrics>,
}

impl Probes for OpsProbes {
    fn live(&self) -> Result<(), String> {
        Ok(())
    }

    fn ready(&self) -> Result<(), String> {
        match self.readiness.is_ready() {
            true => Ok(()),
            false => Err("not ready: caches not synced or shutting down".into()),
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// The operations endpoints (`/healthz`, `/readyz`, `/metrics`), served by the admin server of
/// [`tailor_kube::admin`].
pub fn ops_admin(state: &AppState) -> AdminServer {
    let probes = OpsProbes {
        readiness: state.readiness.clone(),
        metrics: state.metrics.clone(),
    };
    AdminServer::new(Arc::new(probes), OPS_ROUTES)
}

/// Whether a `Content-Type` is JSON: `application/json`, case-insensitive, parameters allowed.
pub fn is_json_content_type(value: Option<&HeaderValue>) -> bool {
    let Some(v) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = v.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// A webhook answer: its body is always whole when it is sent.
type Answer = hyper::Response<Full<Bytes>>;

fn plain(status: StatusCode, text: &'static str) -> Answer {
    let mut answer = hyper::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// The webhook handler: checks method, content type and size, then reviews. `_busy` keeps the connection
/// marked busy until the answer is ready.
async fn webhook(
    state: Arc<AppState>,
    req: hyper::Request<Incoming>,
    _busy: RequestGuard,
) -> Answer {
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
    let large = declared.is_none_or(|n| n > LARGE_BODY_BYTES as u64);
    let busy = |state: &AppState, close: bool| {
        state.metrics.rejected(Rejection::Busy);
        let mut busy = plain(StatusCode::SERVICE_UNAVAILABLE, BUSY_MESSAGE);
        busy.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        if close {
            // The body is left unread: closing is cheaper than decrypting it.
            busy.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        busy
    };
    let _slot = if large {
        if !state
            .large_reviews
            .take_bytes(declared.unwrap_or(MAX_BODY_BYTES as u64))
        {
            return busy(&state, true);
        }
        let slots = state.large_reviews.slots.clone();
        match tokio::time::timeout(state.large_reviews.wait, slots.acquire_owned()).await {
            Ok(Ok(permit)) => Some(permit),
            _ => return busy(&state, false),
        }
    } else {
        None
    };
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(state.body_timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            state.metrics.rejected(Rejection::TooLarge);
            return plain(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE_MESSAGE);
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %tailor_core::text::capped(&e.to_string()), "reading the request body failed");
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
    let handled = if large {
        // Off the async workers: decoding megabytes must not hold up the small reviews behind it.
        let reviewer = state.reviewer.clone();
        let handled = tokio::task::spawn_blocking(move || {
            let handled = review::handle(&bytes, reviewer.as_ref());
            drop(bytes);
            handled
        })
        .await;
        handled.unwrap_or_else(|_| review::Handled {
            body: review::encode(&review::allowed_response("")),
            resource: review::ResourceKind::Other,
            result: review::ReviewResult::Error,
            uid: String::new(),
        })
    } else {
        review::handle(&bytes, state.reviewer.as_ref())
    };
    state.metrics.in_flight().dec();
    state
        .metrics
        .review(handled.resource, handled.result, started.elapsed());
    tracing::debug!(uid = %tailor_core::text::capped(&handled.uid), resource = handled.resource.as_str(), result = handled.result.as_str(),
        "admission review answered");
    let mut response = hyper::Response::new(Full::new(Bytes::from(handled.body)));
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

/// Serves the webhook handler with `state` over TLS on `listener` (every path and method reaches it) until `shutdown`
/// resolves, then drains in-flight connections for at most `drain`. Connections are bounded by `limits` (see
/// [`connections`]).
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let registry = Registry::new(limits);
    let workers = start_workers(limits.threads);
    let mut last_accept_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_failed(&e, &registry, &mut last_accept_warning).await;
                    continue;
                }
            },
        };
        let registered = match registry.register() {
            Ok(registered) => registered,
            Err(refusal) => {
                // Closed before any TLS work: at the limit with every connection busy, or a reconnect storm.
                metrics.connection_closed(match refusal {
                    connections::Refusal::Full => ConnectionClose::Refused,
                    connections::Refusal::TooFast => ConnectionClose::TooFast,
                });
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        // Taken off this runtime's reactor: the connection's worker registers it with its own, so that its
        // readiness wakes that worker directly instead of this runtime's driver thread, which would then have
        // to wake the worker (an extra thread switch per review).
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot hand the connection over");
                continue;
            }
        };
        let connection = Connection {
            acceptor: acceptor.clone(),
            state: state.clone(),
            watcher: graceful.watcher(),
            registry: registry.clone(),
            metrics: metrics.clone(),
            limits,
        }
        .serve(tcp, peer, registered);
        match &workers {
            Some(workers) => workers.spawn(connection),
            None => drop(tokio::spawn(connection)),
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight connections did not finish within {drain:?}; closing them");
    }
}

/// The single-threaded runtimes connections are served on (see [`workers`]); none, so that they are served on
/// the caller's runtime, when `threads` is 0 or the threads cannot be started.
fn start_workers(threads: usize) -> Option<workers::Workers> {
    (threads > 0)
        .then(|| workers::Workers::start(threads, "tailor-conn"))
        .and_then(|started| {
            started
                .inspect_err(|e| tracing::warn!(error = %e, "cannot start connection threads; serving on the main runtime"))
                .ok()
        })
}

/// A failed `accept` (typically EMFILE): backs off briefly instead of spinning, and warns at most once a second.
async fn accept_failed(
    e: &std::io::Error,
    registry: &Registry,
    last_warning: &mut Option<Instant>,
) {
    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
        tracing::warn!(error = %e, open = registry.len(), "accept failed");
        *last_warning = Some(Instant::now());
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// What the task of one accepted connection takes from the accept loop.
struct Connection {
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
    watcher: Watcher,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    limits: ConnectionLimits,
}

impl Connection {
    /// Serves the registered connection `tcp` from its TLS handshake to its close, counted in the open
    /// connections meanwhile.
    async fn serve(
        self,
        tcp: std::net::TcpStream,
        peer: SocketAddr,
        registered: connections::Registered,
    ) {
        self.metrics.connections_open().inc();
        let state = registered.state.clone();
        let tcp = match tokio::net::TcpStream::from_std(tcp) {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot register the connection");
                drop(registered);
                self.metrics.connections_open().dec();
                return;
            }
        };
        if let Some(stream) = self.handshake(tcp, peer, &state).await {
            let conn_state = state.clone();
            let app = self.state.clone();
            // The handler itself, without a router: every path reaches it, and a router's matching, extension
            // and response mapping were a tenth of a review's own CPU at a steady rate. Neither is the request
            // boxed into a framework's body type, nor the guard carried in its extensions (a map allocated per
            // request).
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let guard = RequestGuard::new(conn_state.request());
                let app = app.clone();
                async move { Ok::<_, std::convert::Infallible>(webhook(app, req, guard).await) }
            });
            let builder = http_builder();
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::select! {
                result = self.watcher.watch(conn) => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                why = self.registry.closed(&state) => {
                    tracing::debug!(%peer, reason = ?why, "closing connection");
                    self.metrics.connection_closed(why);
                }
            }
        }
        drop(registered);
        self.metrics.connections_open().dec();
    }

    /// The TLS handshake of `tcp` within the handshake deadline; none (counted as a closed connection) when it
    /// fails, times out, or the registry closes the connection first.
    async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        state: &connections::ConnState,
    ) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        let handshake =
            tokio::time::timeout(self.limits.handshake_timeout, self.acceptor.accept(tcp));
        tokio::select! {
            handshake = handshake => match handshake {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    self.metrics.connection_closed(ConnectionClose::Handshake);
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    self.metrics.connection_closed(ConnectionClose::Handshake);
                    None
                }
            },
            why = self.registry.closed(state) => {
                self.metrics.connection_closed(why);
                None
            }
        }
    }
}

/// The HTTP/1.1 and HTTP/2 settings of a webhook connection: HTTP/1.1 keep-alive, HTTP/2 pings. HTTP/1.1 has no
/// header-read timer of hyper's: the registry's idle rule ([`connections`]) already closes a connection whose
/// head has not arrived within the idle timeout (no request has started on it), and hyper's timer was armed
/// and dropped again for every request.
fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().header_read_timeout(None).keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        // Pings find peers that vanished without closing.
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10));
    builder
}

/// Marks its connection busy while a request is being handled (the handler holds it until its answer is ready).
#[derive(Debug)]
struct RequestGuard {
    _in_flight: connections::InFlight,
}

impl RequestGuard {
    fn new(in_flight: connections::InFlight) -> Self {
        RequestGuard {
            _in_flight: in_flight,
        }
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
        let ops = match self.ops {
            Some(listener) => Some(spawn_ops(
                listener,
                ops_admin(&self.state).router(),
                stopped(stop_rx.clone()),
            )?),
            None => None,
        };
        serve_tls(
            self.webhook,
            self.tls,
            self.state.clone(),
            stopped(stop_rx),
            self.timing.drain,
            self.state.connections,
            self.state.metrics.clone(),
        )
        .await;
        if let Some(ops) = ops {
            match ops.await {
                Ok(r) => r?,
                Err(_) => tracing::warn!("operations listener thread ended without a result"),
            }
        }
        tracing::info!("server stopped");
        Ok(())
    }
}

/// Serves the operations router on a thread with its own single-threaded runtime: `/healthz` and `/readyz`
/// answer even while the webhook's workers are saturated. The result arrives when the listener stops.
fn spawn_ops(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), ServerError>>, ServerError> {
    let serve_error = |source| ServerError::Serve {
        what: "operations",
        source,
    };
    // A tokio listener belongs to the runtime that created it: move the socket across as a std listener.
    let listener = listener.into_std().map_err(serve_error)?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tailor-ops".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| {
                    runtime.block_on(async move {
                        let listener = TcpListener::from_std(listener)?;
                        axum::serve(listener, router)
                            .with_graceful_shutdown(shutdown)
                            .await
                    })
                })
                .map_err(serve_error);
            let _ = done_tx.send(result);
        })
        .map_err(serve_error)?;
    Ok(done_rx)
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
