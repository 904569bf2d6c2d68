//! The running recommender: reflectors over VPAs, checkpoints, pods and workloads; the OOM observer; the
//! loop that feeds the engine and writes VPA status; checkpoints; the leader lease; metrics and health.
//!
//! Time enters the loop only as a parameter ([`Recommender::run_once`]), so every step can be driven by a
//! test with fixed clocks and a mocked API server.

pub mod checkpoint;
pub mod config;
pub mod history;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod oom;
pub mod ratelimit;
pub mod recommender;
pub mod slim;
pub mod status;
pub mod stores;
pub mod target;
pub mod time;

pub use config::ControllerConfig;
pub use metrics::Metrics;
pub use recommender::{LoopReport, Recommender};
pub use stores::{Stores, Writers};

/// Errors of the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The metrics API returned something unusable.
    #[error("metrics API: {0}")]
    MetricsApi(#[from] crate::source::metrics_api::SourceError),
    /// A checkpoint could not be converted.
    #[error("checkpoint {name}: {message}")]
    Checkpoint {
        /// `namespace/name` of the checkpoint.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The leader lease was lost or could not be held.
    #[error("leader election: {0}")]
    Lease(String),
    /// Serialising a request body failed.
    #[error("serialising: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// A short label for the `errors_total` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::MetricsApi(_) => "metrics_api",
            Error::Checkpoint { .. } => "checkpoint",
            Error::Lease(_) => "lease",
            Error::Json(_) => "json",
        }
    }
}
