//! The standard proxy variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, upper or lower case, as
//! curl reads them) for the Prometheus client: a destination the variables send through a proxy is reached
//! through an HTTP `CONNECT` tunnel (with the proxy URL's user and password as `Proxy-Authorization`), so TLS
//! and request signing stay end to end; the others are connected directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Boxed connection error.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects directly or through the proxy the environment names for the destination.
#[derive(Clone)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    matcher: Arc<Matcher>,
}

impl ProxyConnector {
    /// A connector reading the proxy variables now.
    pub(crate) fn from_env(http: HttpConnector) -> Self {
        ProxyConnector {
            http,
            matcher: Arc::new(Matcher::from_env()),
        }
    }
}

impl tower::Service<Uri> for ProxyConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        match self.matcher.intercept(&dst) {
            None => Box::pin(async move { http.call(dst).await.map_err(Into::into) }),
            Some(proxy) => {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Box::pin(async move {
                    tower::Service::<Uri>::call(&mut tunnel, dst)
                        .await
                        .map_err(|e| -> BoxError { format!("through the proxy: {e}").into() })
                })
            }
        }
    }
}
