//! The Kubernetes client flag groups (`--kubeconfig`; `--kube-api-qps`, `--kube-api-burst` as upstream, for
//! the binaries that honour them) and the client it builds.

use std::path::PathBuf;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Client;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// The largest read buffer of one API server connection. hyper's default (about 400 KiB) stays allocated
/// for as long as a pooled connection lives once one large list has passed through it, so a process kept
/// up to that per connection (2.3 MB of 20 MB of heap in the recommender at 10,000 pods, BENCHMARKS.md).
/// Reads of 64 KiB still take several TLS records each.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// How many times a request is sent again when the server answers 429, 503 or 504, backing off from 100 ms
/// to 2 s, or waiting the server's `Retry-After`. kube's own policy (`RetryPolicy::server_retry`) sends it
/// 15 more times up to 1,000 s apart: while metrics-server was down (the aggregated API answers 503), one
/// PodMetrics list held the recommender's loop, and with it every status and checkpoint write, for minutes.
/// Each caller retries on its own schedule (the next loop, the next review) instead.
pub const SERVER_RETRIES: u32 = 3;

/// The retry policy of [`SERVER_RETRIES`] (`None` only if its constant delays were invalid).
fn server_retry_policy() -> Option<RetryPolicy> {
    RetryPolicy::new(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(2),
        SERVER_RETRIES,
        true,
    )
    .ok()
}

/// Why no Kubernetes client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--kubeconfig` cannot be read or parsed.
    #[error("reading kubeconfig {path}: {source}")]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: kube::config::KubeconfigError,
    },
    /// `--kubeconfig` holds no usable context.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: kube::config::KubeconfigError,
    },
    /// Neither the in-cluster configuration nor `$KUBECONFIG` / `~/.kube/config` is usable.
    #[error("no Kubernetes configuration found: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration does not make a client (e.g. bad TLS material).
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// How to reach the API server.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientFlags {
    /// Kubeconfig file (default: in-cluster configuration, then $KUBECONFIG / ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// The client-side limit of API writes (`--kube-api-qps`, `--kube-api-burst`, upstream's names), flattened
/// only by a binary that honours it: the recommender, whose VPA status writes and checkpoint writes and
/// deletions take a token each. Unlike upstream's, it does not pace reads and watches: a watch or list never
/// waits behind a loop's writes, and neither does the leader lease. The updater's writes are bounded by its
/// eviction and in-place rate limits, and the webhook makes too few calls to need one, so neither accepts
/// these flags.
#[derive(Clone, Debug, clap::Args)]
pub struct ApiRateFlags {
    /// API writes per second: each VPA status write and checkpoint write or deletion takes a token (reads
    /// and watches are not paced); 0 = no limit.
    #[arg(long, default_value_t = 50.0)]
    pub kube_api_qps: f64,
    /// Writes allowed at once above --kube-api-qps.
    #[arg(long, default_value_t = 100)]
    pub kube_api_burst: u32,
}

impl ClientFlags {
    /// A client from `--kubeconfig`, else the inferred configuration.
    pub async fn client(&self) -> Result<Client, ClientError> {
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                    ClientError::ReadKubeconfig {
                        path: path.clone(),
                        source,
                    }
                })?;
                kube::Config::from_custom_kubeconfig(
                    kubeconfig,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
            }
            None => kube::Config::infer().await?,
        };
        tracing::info!(cluster = %config.cluster_url, "connecting");
        Ok(build_client(config)?)
    }
}

/// The client kube's `Client::try_from(config)` builds, with connection read buffers of at most
/// [`READ_BUFFER_BYTES`] and at most [`SERVER_RETRIES`] retries of a request the server asks to retry: the
/// same TLS, timeouts, authentication and headers, without kube's debug-level request spans. Through a
/// proxy, kube's own client (which handles proxies) without its retries.
pub fn build_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        config.default_retry = false;
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let connections = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER_BYTES)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(server_retry_policy)
                .flatten()
                .map(RetryLayer::new),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(connections);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain-HTTP server answering every request with a response whose head holds `header_bytes` of one
    /// header and whose body is a JSON string of `body_bytes`.
    async fn server(header_bytes: usize, body_bytes: usize) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = format!("\"{}\"", "b".repeat(body_bytes));
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nx-filler: {}\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{body}",
                        "a".repeat(header_bytes),
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        addr
    }

    fn get() -> http::Request<Vec<u8>> {
        http::Request::get("/version").body(Vec::new()).unwrap()
    }

    #[tokio::test]
    async fn a_server_answering_503_is_asked_again_a_bounded_number_of_times() {
        // An aggregated API whose backend is down: every answer is 503.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let mut head = Vec::new();
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                        while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                            head.drain(..end + 4);
                            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let body = "service unavailable";
                            let response = format!(
                                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if conn.write_all(response.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        assert!(server_retry_policy().is_some());
        let result = build_client(config).unwrap().request_text(get()).await;
        assert!(result.is_err(), "{result:?}");
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            SERVER_RETRIES + 1
        );
    }

    #[tokio::test]
    async fn large_bodies_pass_through_the_bounded_read_buffer() {
        let addr = server(10, 3 * READ_BUFFER_BYTES).await;
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let text = build_client(config)
            .unwrap()
            .request_text(get())
            .await
            .unwrap();
        assert_eq!(text.len(), 3 * READ_BUFFER_BYTES + 2);
    }

    #[tokio::test]
    async fn the_read_buffer_is_bounded_where_kubes_default_is_not() {
        // A response head larger than the bound cannot be buffered whole: refused by this client, read by
        // kube's default one (whose buffer grows to about 400 KiB).
        let addr = server(2 * READ_BUFFER_BYTES, 1).await;
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let bounded = build_client(config.clone()).unwrap();
        assert!(bounded.request_text(get()).await.is_err());
        let default = Client::try_from(config).unwrap();
        assert_eq!(default.request_text(get()).await.unwrap(), "\"b\"");
    }
}
