//! Errors of the recommender controller.

/// Errors of the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The metrics API returned something unusable.
    #[error("metrics API: {0}")]
    MetricsApi(#[from] crate::metrics_api::SourceError),
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
