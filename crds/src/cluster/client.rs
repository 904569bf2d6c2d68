//! The Kubernetes client flag group (`--kubeconfig`, `--kube-api-qps`, `--kube-api-burst`, as upstream)
//! and the client it builds.

use std::path::PathBuf;

use kube::Client;

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
    /// Client-side limit of API requests per second (the recommender's status and checkpoint writes; the
    /// webhook makes too few calls to need it).
    #[arg(long, default_value_t = 50.0)]
    pub kube_api_qps: f64,
    /// Client-side burst of API requests (with --kube-api-qps).
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
        tracing::info!(qps = self.kube_api_qps, burst = self.kube_api_burst, cluster = %config.cluster_url, "connecting");
        Ok(Client::try_from(config)?)
    }
}
