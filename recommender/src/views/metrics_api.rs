//! Live usage from `metrics.k8s.io/v1beta1` PodMetrics (metrics-server): one CPU and one memory sample per
//! container per poll, stamped with the PodMetrics timestamp.
//!
//! The list is decoded while it arrives ([`crate::views::metrics_list`]) and each pod handed to a callback (the
//! loop feeds its samples straight into the model): neither the response text nor a list of objects is
//! ever held whole.

use futures::AsyncBufReadExt as _;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};

use crate::views::metrics_list::ListDecoder;
pub use crate::views::metrics_list::{ContainerUsage, PodMetrics};

/// Errors reading the metrics API.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The list call failed.
    #[error("listing PodMetrics: {0}")]
    Api(#[from] kube::Error),
    /// The list request could not be built.
    #[error("listing PodMetrics: building the request: {0}")]
    Request(#[from] kube::core::request::Error),
    /// The response body could not be read.
    #[error("listing PodMetrics: reading the response: {0}")]
    Read(#[from] std::io::Error),
    /// The response is not a list of objects.
    #[error("listing PodMetrics: decoding the response: {0}")]
    Decode(#[from] serde_json::Error),
}

/// The `pods` resource of `metrics.k8s.io/v1beta1`.
pub fn pod_metrics_resource() -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    }
}

/// Lists PodMetrics in one namespace or all of them.
pub struct MetricsApiSource {
    client: Client,
    url: String,
}

impl MetricsApiSource {
    /// A source over `client`; `namespace` empty means all namespaces.
    pub fn new(client: Client, namespace: &str) -> Self {
        let ar = pod_metrics_resource();
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(client.clone(), &ar)
        } else {
            Api::namespaced_with(client.clone(), namespace, &ar)
        };
        MetricsApiSource {
            url: api.resource_url().to_string(),
            client,
        }
    }

    /// Lists the PodMetrics, handing each pod's snapshot to `each` as soon as its object has arrived;
    /// returns how many objects could not be read. On an error, the pods handed on before it stay handed on.
    pub async fn poll(
        &self,
        each: &mut (dyn FnMut(PodMetrics) + Send),
    ) -> Result<usize, SourceError> {
        let req = kube::core::Request::new(&self.url).list(&ListParams::default())?;
        let mut body = self.client.request_stream(req).await?;
        let mut decoder = ListDecoder::new();
        loop {
            let chunk = body.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(decoder.finish(each)?.1);
            }
            let n = chunk.len();
            decoder.push(chunk, each)?;
            body.consume_unpin(n);
        }
    }
}
