//! The recommender's reads that are not watches, each one request through the client: a checkpoint by
//! name, a page of checkpoints, a workload's `/scale` selector. The loop paces them (`--kube-api-qps`) before
//! each call; the client stays here, so the loop holds no client of its own, only views and the writes.

use kube::Client;
use kube::api::{Api, ListParams, ObjectList};
use tailor_kube::scale::{ScaleError, scale_selector};

use crate::views::stored_checkpoint::StoredCheckpoint;

/// Reads through one client, within one namespace or all of them.
#[derive(Clone)]
pub struct ApiReads {
    client: Client,
    /// `--vpa-object-namespace`: empty for all namespaces.
    namespace: String,
}

impl ApiReads {
    /// Reads through `client`; checkpoint pages within `namespace` (empty: all namespaces).
    pub fn new(client: Client, namespace: &str) -> Self {
        ApiReads {
            client,
            namespace: namespace.to_owned(),
        }
    }

    /// Checkpoint `namespace/name`, `None` when it does not exist.
    pub async fn checkpoint(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredCheckpoint>, kube::Error> {
        let api: Api<StoredCheckpoint> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name).await
    }

    /// One page of the checkpoints (`params` carries the limit and the continue token).
    pub async fn checkpoint_page(
        &self,
        params: &ListParams,
    ) -> Result<ObjectList<StoredCheckpoint>, kube::Error> {
        let api: Api<StoredCheckpoint> = if self.namespace.is_empty() {
            Api::all(self.client.clone())
        } else {
            Api::namespaced(self.client.clone(), &self.namespace)
        };
        api.list(params).await
    }

    /// `status.selector` of the `/scale` subresource of `kind` `namespace/name` in `api_version`.
    pub async fn scale_selector(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<String, ScaleError> {
        scale_selector(&self.client, api_version, kind, namespace, name).await
    }
}
