//! A client for the Prometheus HTTP API (`/api/v1/query_range`, `/api/v1/query`, `/api/v1/series`), for
//! Prometheus and every compatible store (VictoriaMetrics, Thanos, Mimir, Amazon Managed Prometheus).
//! HTTP/1.1 and HTTP/2 over rustls (ring), bearer-token, basic-auth, custom-header and AWS SigV4
//! ([`crate::sigv4`]) authentication, gzip responses, the standard proxy variables (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `NO_PROXY`, through a `CONNECT` tunnel), a timeout per query and per read, retries with
//! exponential backoff.
//!
//! Responses are parsed incrementally ([`crate::stream`]): each series is handed to the caller as
//! soon as it has arrived, so a response is never held whole. A retried query hands out its series again:
//! callers must be idempotent (the history loader skips points it already has).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::stream::{RawSeries, Splitter, StreamError};
use crate::sigv4::{SigV4Config, Signer};

/// Error bodies are read up to this many bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How to authenticate.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic …`.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
        }
    }
}

/// Whether responses are asked for gzip-compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "flags", derive(clap::ValueEnum))]
pub enum Compression {
    /// gzip unless the server is on a loopback address (there compressing costs both sides CPU and saves
    /// nothing).
    #[default]
    Auto,
    /// Always gzip.
    Gzip,
    /// Never.
    None,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL (`http://prometheus:9090`, `https://host/prefix`); the API paths are appended.
    pub url: String,
    /// Credentials.
    pub auth: Auth,
    /// Extra headers sent with every request (e.g. `X-Scope-OrgID`).
    pub headers: Vec<(String, String)>,
    /// Limit for a whole query, response included.
    pub query_timeout: Duration,
    /// Limit for connecting and for each wait on response bytes (a stalled stream fails after this).
    pub read_timeout: Duration,
    /// Attempts after the first for a query that failed in a retryable way.
    pub retries: u32,
    /// First backoff; doubled after each failed attempt (capped at 30 s).
    pub backoff: Duration,
    /// Skip TLS certificate verification.
    pub insecure: bool,
    /// Sign every request with AWS SigV4 (Amazon Managed Prometheus).
    pub sigv4: Option<SigV4Config>,
    /// Response compression.
    pub compression: Compression,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            url: "http://localhost:9090".into(),
            auth: Auth::None,
            headers: Vec::new(),
            query_timeout: Duration::from_secs(300),
            read_timeout: Duration::from_secs(60),
            retries: 3,
            backoff: Duration::from_millis(500),
            insecure: false,
            sigv4: None,
            compression: Compression::Auto,
        }
    }
}

/// A failed request. `query` is the PromQL (or the series matchers) the request carried.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PromError {
    /// The configuration cannot be used (bad URL or header).
    #[error("{0}")]
    Config(String),
    /// Connecting or sending failed.
    #[error("{url}: {message} (query {query})")]
    Connect {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// Cause.
        message: String,
    },
    /// The query or one read exceeded its time limit.
    #[error("{url}: timed out after {after:?} (query {query})")]
    Timeout {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// Limit hit.
        after: Duration,
    },
    /// A non-success HTTP status.
    #[error("{url}: HTTP {status}: {message} (query {query})")]
    Http {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// Status code.
        status: u16,
        /// Error text of the API or start of the body.
        message: String,
    },
    /// Reading the body failed.
    #[error("{url}: reading the response failed: {message} (query {query})")]
    Body {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// Cause.
        message: String,
    },
    /// The response is not what the API returns.
    #[error("{url}: malformed response: {message} (query {query})")]
    Malformed {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// What is wrong.
        message: String,
    },
    /// The API answered `status: error`.
    #[error("{url}: {error_type}: {message} (query {query})")]
    Api {
        /// Endpoint.
        url: String,
        /// Query.
        query: String,
        /// `errorType`.
        error_type: String,
        /// `error`.
        message: String,
    },
    /// The consumer of the series stopped the query.
    #[error("{0}")]
    Consumer(String),
    /// The request could not be signed (no AWS credentials or region).
    #[error("{url}: {source}")]
    SigV4 {
        /// Endpoint.
        url: String,
        /// Why.
        source: crate::sigv4::SigV4Error,
    },
}

impl PromError {
    /// Whether trying again may help (network, timeouts, 5xx, 429).
    pub fn is_retryable(&self) -> bool {
        match self {
            PromError::Connect { .. } | PromError::Timeout { .. } | PromError::Body { .. } => true,
            PromError::Http { status, .. } => *status >= 500 || *status == 429,
            // A truncated stream shows up as a response that ended early.
            PromError::Malformed { message, .. } => message.contains("ended early"),
            _ => false,
        }
    }
}

impl From<StreamError> for PromError {
    fn from(e: StreamError) -> Self {
        PromError::Malformed {
            url: String::new(),
            query: String::new(),
            message: e.0,
        }
    }
}

type Https = hyper_rustls::HttpsConnector<crate::proxy::ProxyConnector>;

/// A series of a query result: labels and points (unix milliseconds, value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Labels, `__name__` included when the server sends it.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Points in time order.
    pub points: Vec<(i64, f64)>,
}

/// A Prometheus HTTP API client. Cheap to clone (shared connection pool and counters).
#[derive(Clone)]
pub struct PromClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    base: String,
    /// `Host` of the base URL (signed requests carry it explicitly).
    host: String,
    /// Ask for gzip.
    gzip: bool,
    signer: Option<Signer>,
    http: HyperClient<Https, Full<Bytes>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl std::fmt::Debug for PromClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromClient")
            .field("url", &self.inner.base)
            .finish()
    }
}

/// Accepts any server certificate (`--prometheus-insecure`).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        for (j, s) in [k, v].into_iter().enumerate() {
            if j == 1 {
                out.push('=');
            }
            for b in s.bytes() {
                match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        out.push(b as char)
                    }
                    b' ' => out.push('+'),
                    _ => out.push_str(&format!("%{b:02X}")),
                }
            }
        }
    }
    out
}

/// Formats unix milliseconds as the API's seconds.
fn secs(ms: i64) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        format!("{:.3}", ms as f64 / 1000.0)
    }
}

impl PromClient {
    /// A client for `config.url`.
    pub fn new(config: ClientConfig) -> Result<Self, PromError> {
        let base = config.url.trim_end_matches('/').to_string();
        let uri: http::Uri = base
            .parse()
            .map_err(|e| PromError::Config(format!("invalid Prometheus URL {base:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) || uri.host().is_none() {
            return Err(PromError::Config(format!(
                "invalid Prometheus URL {base:?}: expected http(s)://host[:port][/prefix]"
            )));
        }
        let mut headers = Vec::new();
        match &config.auth {
            Auth::None => {}
            Auth::Bearer(t) => headers.push((
                http::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {}", t.trim())).map_err(|_| {
                    PromError::Config("the bearer token is not a valid header".into())
                })?,
            )),
            Auth::Basic { username, password } => {
                let enc = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                headers.push((
                    http::header::AUTHORIZATION,
                    HeaderValue::from_str(&format!("Basic {enc}"))
                        .map_err(|_| PromError::Config("invalid basic-auth credentials".into()))?,
                ));
            }
        }
        for (k, v) in &config.headers {
            let name = HeaderName::from_bytes(k.trim().as_bytes())
                .map_err(|_| PromError::Config(format!("invalid header name {k:?}")))?;
            let value = HeaderValue::from_str(v.trim())
                .map_err(|_| PromError::Config(format!("invalid value for header {k:?}")))?;
            headers.push((name, value));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| PromError::Config(format!("TLS: {e}")))?;
        let tls = if config.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                .with_no_client_auth()
        } else {
            let mut roots = rustls::RootCertStore::empty();
            let native = rustls_native_certs();
            for c in native {
                let _ = roots.add(c);
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.read_timeout));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(crate::proxy::ProxyConnector::from_env(http));
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let gzip = match config.compression {
            Compression::Gzip => true,
            Compression::None => false,
            Compression::Auto => !is_loopback(uri.host().unwrap_or_default()),
        };
        let signer = config.sigv4.clone().map(Signer::new);
        Ok(PromClient {
            inner: Arc::new(Inner {
                config,
                base,
                host,
                gzip,
                signer,
                http: client,
                headers,
                requests: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            }),
        })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.inner.base
    }

    /// HTTP requests sent so far (retries included).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Response body bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.inner.bytes.load(Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Range query; every series goes to `on_series` as soon as it has arrived. Retries re-deliver series.
    pub async fn query_range(
        &self,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step: Duration,
        on_series: &mut (dyn FnMut(Series) -> Result<(), PromError> + Send),
    ) -> Result<(), PromError> {
        let mut retry = Retry::new(self, query);
        loop {
            let r = self
                .timed(query, async {
                    let mut st = self.open_range(query, start_ms, end_ms, step).await?;
                    while let Some(s) = st.next_series().await? {
                        on_series(s)?;
                    }
                    Ok(())
                })
                .await;
            match r {
                Ok(()) => return Ok(()),
                Err(e) => retry.wait(e).await?,
            }
        }
    }

    /// Sends a range query and returns the response as a stream of series (no retries; see [`Self::retrying`]).
    pub async fn open_range(
        &self,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step: Duration,
    ) -> Result<ResponseStream, PromError> {
        let (s, e, st) = (
            secs(start_ms),
            secs(end_ms),
            format!("{}", step.as_secs_f64()),
        );
        let body = form_encode(&[("query", query), ("start", &s), ("end", &e), ("step", &st)]);
        self.open(
            query,
            "/api/v1/query_range",
            &body,
            &["data", "result"],
            "matrix",
        )
        .await
    }

    /// Sends an instant query of a range selector (`metric{…}[span]`) at `time_ms` and returns the response, its
    /// raw samples, as a stream of series (no retries; see [`Self::retrying`]).
    pub async fn open_instant(
        &self,
        query: &str,
        time_ms: i64,
    ) -> Result<ResponseStream, PromError> {
        let t = secs(time_ms);
        let body = form_encode(&[("query", query), ("time", &t)]);
        self.open(query, "/api/v1/query", &body, &["data", "result"], "matrix")
            .await
    }

    /// Instant query at `time_ms`; returns the whole (small) result: vector elements carry one point.
    pub async fn query(&self, query: &str, time_ms: i64) -> Result<Vec<Series>, PromError> {
        let t = secs(time_ms);
        let body = form_encode(&[("query", query), ("time", &t)]);
        let mut retry = Retry::new(self, query);
        loop {
            let r = self
                .timed(query, async {
                    let mut st = self
                        .open(query, "/api/v1/query", &body, &["data", "result"], "")
                        .await?;
                    let mut out = Vec::new();
                    while let Some(s) = st.next_series().await? {
                        out.push(s);
                    }
                    Ok(out)
                })
                .await;
            match r {
                Ok(v) => return Ok(v),
                Err(e) => retry.wait(e).await?,
            }
        }
    }

    /// `/api/v1/series`: the label sets of the series matching any of `matchers` in [start, end].
    pub async fn series(
        &self,
        matchers: &[String],
        start_ms: i64,
        end_ms: i64,
        on_labels: &mut (dyn FnMut(Labels) -> Result<(), PromError> + Send),
    ) -> Result<(), PromError> {
        let (s, e) = (secs(start_ms), secs(end_ms));
        let mut pairs: Vec<(&str, &str)> =
            matchers.iter().map(|m| ("match[]", m.as_str())).collect();
        pairs.push(("start", &s));
        pairs.push(("end", &e));
        let body = form_encode(&pairs);
        let label = matchers.join(" or ");
        let mut retry = Retry::new(self, &label);
        loop {
            let r = self
                .timed(&label, async {
                    let mut st = self
                        .open(&label, "/api/v1/series", &body, &["data"], "")
                        .await?;
                    while let Some(el) = st.next_element().await? {
                        let m: Labels = serde_json::from_slice(&el)
                            .map_err(|e| st.malformed(format!("invalid label set: {e}")))?;
                        on_labels(m)?;
                    }
                    Ok(())
                })
                .await;
            match r {
                Ok(()) => return Ok(()),
                Err(e) => retry.wait(e).await?,
            }
        }
    }

    /// Runs `attempt` until it succeeds, fails in a way retrying cannot help, or the retries are used up;
    /// each attempt is limited to the query timeout. Waits between attempts double from the configured backoff.
    pub async fn retrying<T, F, Fut>(&self, query: &str, mut attempt: F) -> Result<T, PromError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, PromError>>,
    {
        let mut retry = Retry::new(self, query);
        loop {
            match self.timed(query, attempt()).await {
                Ok(v) => return Ok(v),
                Err(e) => retry.wait(e).await?,
            }
        }
    }

    /// `fut` limited to the query timeout.
    pub async fn timed<T>(
        &self,
        query: &str,
        fut: impl std::future::Future<Output = Result<T, PromError>>,
    ) -> Result<T, PromError> {
        let after = self.inner.config.query_timeout;
        tokio::time::timeout(after, fut).await.unwrap_or_else(|_| {
            Err(PromError::Timeout {
                url: self.inner.base.clone(),
                query: query.into(),
                after,
            })
        })
    }

    async fn open(
        &self,
        query: &str,
        path: &str,
        body: &str,
        array: &'static [&'static str],
        want: &'static str,
    ) -> Result<ResponseStream, PromError> {
        let url = format!("{}{path}", self.inner.base);
        let cfg = &self.inner.config;
        let mut req = Request::post(&url)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "tailor");
        if self.inner.gzip {
            req = req.header(http::header::ACCEPT_ENCODING, "gzip");
        }
        for (k, v) in &self.inner.headers {
            req = req.header(k, v);
        }
        if self.inner.signer.is_some() {
            req = req.header(http::header::HOST, &self.inner.host);
        }
        let mut req = req
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| PromError::Config(format!("{url}: {e}")))?;
        if let Some(signer) = &self.inner.signer {
            signer
                .sign(&mut req, body.as_bytes())
                .await
                .map_err(|source| PromError::SigV4 {
                    url: url.clone(),
                    source,
                })?;
        }
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        let resp = match tokio::time::timeout(cfg.read_timeout, self.inner.http.request(req)).await
        {
            Err(_) => {
                return Err(PromError::Timeout {
                    url,
                    query: query.into(),
                    after: cfg.read_timeout,
                });
            }
            Ok(Err(e)) => {
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(": ");
                    msg.push_str(&s.to_string());
                    src = s.source();
                }
                return Err(PromError::Connect {
                    url,
                    query: query.into(),
                    message: msg,
                });
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let gzip = resp
            .headers()
            .get(http::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let mut st = ResponseStream {
            client: self.clone(),
            url,
            query: query.into(),
            body: resp.into_body(),
            splitter: Some(Splitter::new(array)),
            pending: std::collections::VecDeque::new(),
            want,
            ended: false,
            gunzip: gzip.then(|| flate2::write::GzDecoder::new(Vec::new())),
        };
        if status != StatusCode::OK {
            let mut buf = Vec::new();
            while buf.len() < MAX_ERROR_BODY {
                match st.chunk().await {
                    Ok(Some(d)) => buf.extend_from_slice(&d),
                    _ => break,
                }
            }
            let message = match serde_json::from_slice::<serde_json::Value>(&buf) {
                Ok(v) if v.get("error").is_some() => format!(
                    "{}: {}",
                    v["errorType"].as_str().unwrap_or("error"),
                    v["error"].as_str().unwrap_or("")
                ),
                _ => String::from_utf8_lossy(&buf[..buf.len().min(300)])
                    .trim()
                    .to_string(),
            };
            let message = if self.inner.signer.is_some() && matches!(status.as_u16(), 401 | 403) {
                format!(
                    "{message} (SigV4: check the AWS credentials, --prometheus-sigv4-region and \
                     --prometheus-sigv4-service)"
                )
            } else {
                message
            };
            return Err(PromError::Http {
                url: st.url,
                query: st.query,
                status: status.as_u16(),
                message,
            });
        }
        Ok(st)
    }
}

/// Retry bookkeeping of one query: [`Retry::wait`] sleeps before the next attempt or gives the error back.
pub struct Retry<'a> {
    query: &'a str,
    attempts: u32,
    max: u32,
    backoff: Duration,
}

impl<'a> Retry<'a> {
    /// Bookkeeping with the client's retry count and backoff.
    pub fn new(client: &PromClient, query: &'a str) -> Self {
        let c = &client.inner.config;
        Retry {
            query,
            attempts: 0,
            max: c.retries,
            backoff: c.backoff,
        }
    }

    /// Sleeps before the next attempt, or gives the error back when retrying cannot help or is used up.
    pub async fn wait(&mut self, e: PromError) -> Result<(), PromError> {
        if !e.is_retryable() || self.attempts >= self.max {
            return Err(e);
        }
        self.attempts += 1;
        tracing::warn!(error = %e, attempt = self.attempts, query = self.query, "Prometheus query failed; retrying");
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
        Ok(())
    }
}

/// Label set of a series.
pub type Labels = std::collections::BTreeMap<String, String>;

/// A response being read: result elements come out one at a time as their bytes arrive.
pub struct ResponseStream {
    client: PromClient,
    url: String,
    query: String,
    body: hyper::body::Incoming,
    splitter: Option<Splitter>,
    pending: std::collections::VecDeque<Vec<u8>>,
    want: &'static str,
    ended: bool,
    /// Decompresses a gzip response as it arrives.
    gunzip: Option<flate2::write::GzDecoder<Vec<u8>>>,
}

impl ResponseStream {
    fn malformed(&self, message: String) -> PromError {
        PromError::Malformed {
            url: self.url.clone(),
            query: self.query.clone(),
            message,
        }
    }

    async fn chunk(&mut self) -> Result<Option<Bytes>, PromError> {
        let read_timeout = self.client.inner.config.read_timeout;
        loop {
            match tokio::time::timeout(read_timeout, self.body.frame()).await {
                Err(_) => {
                    return Err(PromError::Timeout {
                        url: self.url.clone(),
                        query: self.query.clone(),
                        after: read_timeout,
                    });
                }
                Ok(None) => {
                    let Some(mut gz) = self.gunzip.take() else {
                        return Ok(None);
                    };
                    let tail = gz
                        .try_finish()
                        .map(|()| std::mem::take(gz.get_mut()))
                        .map_err(|e| self.malformed(format!("gzip: {e}")))?;
                    if tail.is_empty() {
                        return Ok(None);
                    }
                    return Ok(Some(Bytes::from(tail)));
                }
                Ok(Some(Err(e))) => {
                    return Err(PromError::Body {
                        url: self.url.clone(),
                        query: self.query.clone(),
                        message: e.to_string(),
                    });
                }
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.client
                            .inner
                            .bytes
                            .fetch_add(d.len() as u64, Ordering::Relaxed);
                        let Some(gz) = self.gunzip.as_mut() else {
                            return Ok(Some(d));
                        };
                        use std::io::Write;
                        if let Err(e) = gz.write_all(&d) {
                            return Err(self.malformed(format!("gzip: {e}")));
                        }
                        let out = std::mem::take(gz.get_mut());
                        if !out.is_empty() {
                            return Ok(Some(Bytes::from(out)));
                        }
                    }
                }
            }
        }
    }

    /// The bytes of the next result element, or `None` after a complete, successful response.
    pub async fn next_element(&mut self) -> Result<Option<Vec<u8>>, PromError> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(Some(e));
            }
            if self.ended {
                return Ok(None);
            }
            match self.chunk().await? {
                Some(d) => {
                    let Some(sp) = self.splitter.as_mut() else {
                        return Ok(None);
                    };
                    let pending = &mut self.pending;
                    sp.feed::<StreamError>(&d, &mut |el| {
                        pending.push_back(el.to_vec());
                        Ok(())
                    })
                    .map_err(|e| PromError::Malformed {
                        url: self.url.clone(),
                        query: self.query.clone(),
                        message: e.0,
                    })?;
                }
                None => {
                    self.ended = true;
                    let Some(sp) = self.splitter.take() else {
                        return Ok(None);
                    };
                    let env = sp.finish().map_err(|e| self.malformed(e.0))?;
                    match env.get("status").and_then(|s| s.as_str()) {
                        Some("success") => {}
                        Some("error") => {
                            return Err(PromError::Api {
                                url: self.url.clone(),
                                query: self.query.clone(),
                                error_type: env["errorType"].as_str().unwrap_or("error").into(),
                                message: env["error"].as_str().unwrap_or("").into(),
                            });
                        }
                        _ => {
                            return Err(
                                self.malformed("no \"status\": \"success\" in the response".into())
                            );
                        }
                    }
                    if !self.want.is_empty()
                        && let Some(t) = env["data"]["resultType"].as_str()
                        && t != self.want
                    {
                        return Err(
                            self.malformed(format!("expected a {} result, got {t}", self.want))
                        );
                    }
                }
            }
        }
    }

    /// The next series of a query result (non-finite points dropped, points sorted by time).
    pub async fn next_series(&mut self) -> Result<Option<Series>, PromError> {
        match self.next_element().await? {
            None => Ok(None),
            Some(el) => parse_series(&el).map(Some).map_err(|m| self.malformed(m)),
        }
    }
}

/// Parses one result element into a [`Series`]; points with non-finite values are dropped.
pub fn parse_series(el: &[u8]) -> Result<Series, String> {
    let raw: RawSeries = serde_json::from_slice(el).map_err(|e| format!("invalid series: {e}"))?;
    let mut points: Vec<(i64, f64)> = raw
        .values
        .iter()
        .chain(raw.value.iter())
        .filter(|p| p.1.is_finite())
        .map(|p| (p.0, p.1))
        .collect();
    if !points.is_sorted_by_key(|p| p.0) {
        points.sort_by_key(|p| p.0);
    }
    Ok(Series {
        labels: raw.metric,
        points,
    })
}

/// Whether `host` (a URL's host: name, IPv4 or bracketed IPv6) is this machine.
fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The system's trust anchors (certificates that fail to load are skipped).
fn rustls_native_certs() -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding() {
        assert_eq!(
            form_encode(&[("query", "rate(a{b=~\"x|y\"}[1m])"), ("step", "60")]),
            "query=rate%28a%7Bb%3D~%22x%7Cy%22%7D%5B1m%5D%29&step=60"
        );
        assert_eq!(secs(1500), "1.500");
        assert_eq!(secs(2000), "2");
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback("127.0.0.1") && is_loopback("[::1]") && is_loopback("localhost"));
        assert!(!is_loopback("prometheus.monitoring.svc") && !is_loopback("10.0.0.1"));
    }

    #[test]
    fn retryable() {
        let e = PromError::Http {
            url: "u".into(),
            query: "q".into(),
            status: 503,
            message: String::new(),
        };
        assert!(e.is_retryable());
        let e = PromError::Http {
            url: "u".into(),
            query: "q".into(),
            status: 400,
            message: String::new(),
        };
        assert!(!e.is_retryable());
    }
}
