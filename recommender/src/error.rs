//! Errors of the recommender controller: one variant per failure, naming the object it concerns.
//! [`Error::metric_label`] is the `kind` label of `tailor_recommender_errors_total`.

use tailor_engine::model::CheckpointError;

/// Errors of the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `/scale` subresource of a VPA target could not be read.
    #[error("scale subresource of {target}: {message}")]
    Scale {
        /// `kind namespace/name` of the target.
        target: String,
        /// Why.
        message: String,
    },
    /// The metrics API could not be listed.
    #[error("metrics API: {0}")]
    MetricsApi(#[from] crate::views::metrics_api::SourceError),
    /// PodMetrics items that could not be read were skipped.
    #[error("metrics API: {count} malformed PodMetrics item(s) skipped")]
    MalformedMetrics {
        /// How many.
        count: usize,
    },
    /// A stored checkpoint could not be loaded into the model.
    #[error("checkpoint {namespace}/{checkpoint}: cannot load: {source}")]
    CheckpointLoad {
        /// Namespace.
        namespace: String,
        /// Checkpoint name.
        checkpoint: String,
        /// Why.
        #[source]
        source: CheckpointError,
    },
    /// A stored checkpoint that cannot be decoded (a value its schema did not refuse, such as a negative
    /// bucket weight): skipped, so only its own container starts without history.
    #[error("checkpoint {namespace}/{checkpoint}: skipped, cannot be decoded: {message}")]
    CheckpointInvalid {
        /// Namespace.
        namespace: String,
        /// Checkpoint name.
        checkpoint: String,
        /// Why (the decoder's message, cut to a bounded length).
        message: String,
    },
    /// The checkpoints due a restore could not be read from the API server.
    #[error("checkpoints: cannot read them to restore (tried again next loop): {source}")]
    CheckpointRead {
        /// The API error.
        source: kube::Error,
    },
    /// A checkpoint object could not be built.
    #[error("checkpoint {namespace}/{checkpoint}: cannot build the object: {source}")]
    CheckpointBuild {
        /// Namespace.
        namespace: String,
        /// Checkpoint name.
        checkpoint: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Applying a checkpoint failed.
    #[error("checkpoint {namespace}/{checkpoint}: apply failed: {source}")]
    CheckpointWrite {
        /// Namespace.
        namespace: String,
        /// Checkpoint name.
        checkpoint: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Deleting a checkpoint whose VPA is gone failed.
    #[error("checkpoint {namespace}/{checkpoint}: delete failed: {source}")]
    CheckpointDelete {
        /// Namespace.
        namespace: String,
        /// Checkpoint name.
        checkpoint: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Patching the status of a VPA failed.
    #[error("VPA {namespace}/{vpa}: status patch failed: {source}")]
    StatusWrite {
        /// Namespace.
        namespace: String,
        /// VPA name.
        vpa: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A watch failed (it is retried with backoff).
    #[error("watch of {kind}: {message}")]
    Watch {
        /// Kind watched (`Pod`, `Event`, `VerticalPodAutoscaler`, …).
        kind: &'static str,
        /// The watch error.
        message: String,
    },
    /// Another replica holds the leader lease.
    #[error("leader election: lease {namespace}/{lease} taken by another replica")]
    LeaseTaken {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
    },
    /// The leader lease could not be renewed within the renew deadline.
    #[error("leader election: lease {namespace}/{lease} not renewed within the deadline: {source}")]
    LeaseRenewal {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
        /// The last renewal failure.
        #[source]
        source: Box<tailor_kube::leader::LeaseError>,
    },
    /// A write was not sent: this replica does not hold the leader lease (any more).
    #[error("{what}: not written, this replica does not hold the leader lease")]
    NotLeader {
        /// What would have been written (`VPA ns/name status`, `checkpoint ns/name`, …).
        what: String,
    },
}

impl Error {
    /// A short label for the `errors_total` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Scale { .. } => "scale",
            Error::MetricsApi(_) => "metrics_api",
            Error::MalformedMetrics { .. } => "metrics_malformed",
            Error::CheckpointRead { .. } => "checkpoint_load",
            Error::CheckpointLoad { .. } | Error::CheckpointInvalid { .. } => "checkpoint_invalid",
            Error::CheckpointBuild { .. } | Error::CheckpointWrite { .. } => "checkpoint",
            Error::CheckpointDelete { .. } => "checkpoint_gc",
            Error::StatusWrite { .. } => "status",
            Error::LeaseTaken { .. } | Error::LeaseRenewal { .. } => "lease",
            Error::NotLeader { .. } => "not_leader",
            Error::Watch { .. } => "watch",
        }
    }
}

impl From<tailor_kube::leader::LeaseLost> for Error {
    fn from(lost: tailor_kube::leader::LeaseLost) -> Self {
        use tailor_kube::leader::LeaseLost;
        match lost {
            LeaseLost::Taken { namespace, lease } => Error::LeaseTaken { namespace, lease },
            LeaseLost::Renewal {
                namespace,
                lease,
                source,
            } => Error::LeaseRenewal {
                namespace,
                lease,
                source: Box::new(source),
            },
        }
    }
}
