//! What the controller tracks per VPA and per pod besides the model: the state the loop's steps share.

use crate::views::watched_vpa::WatchedVpa;
use tailor_engine::units::Nanos;

/// `(namespace, name)` of a VPA.
pub type VpaKey = (String, String);

/// What the loop remembers about a VPA it handles, besides the model's [`VpaState`].
#[derive(Debug)]
pub(crate) struct VpaEntry {
    /// Index of the VPA in the model.
    pub(crate) index: usize,
    /// `metadata.uid` (a new uid is a new VPA).
    pub(crate) uid: String,
    /// Kind and name of its `targetRef` (another one is another workload).
    pub(crate) target: Option<(String, String)>,
    /// Its checkpoints are still to be restored.
    pub(crate) restore_pending: bool,
    /// When its checkpoints were last written without error.
    pub(crate) last_checkpoint: Option<Nanos>,
    /// The histograms that write stored.
    pub(crate) checkpoint_shapes: Option<crate::writers::written::WrittenShapes>,
    /// Digests of the stored status the last write was based on, and of what was written.
    pub(crate) last_written: Option<crate::writers::written::LastWrite>,
    /// `ConfigUnsupported` message of the target resolution.
    pub(crate) unsupported: Option<String>,
    /// When a missing recommendation was last logged.
    pub(crate) missing_logged: Option<Nanos>,
    /// The oldest `lastUpdateTime` of the checkpoints restored into it: an OOM before it is in them already.
    pub(crate) restored_at: Option<Nanos>,
    /// When a checkpoint of this VPA was skipped at restore, and the `CheckpointSkipped` message naming it.
    pub(crate) skipped_checkpoint: Option<(Nanos, String)>,
}

impl VpaEntry {
    pub(crate) fn new(index: usize, uid: String, target: Option<(String, String)>) -> Self {
        VpaEntry {
            index,
            uid,
            target,
            restore_pending: true,
            last_checkpoint: None,
            checkpoint_shapes: None,
            last_written: None,
            unsupported: None,
            missing_logged: None,
            skipped_checkpoint: None,
            restored_at: None,
        }
    }
}

/// What the loop remembers about a pod in the model: the stored copy it read (shared with the store, to
/// skip unchanged pods and init containers) and the loop that last saw it.
#[derive(Debug)]
pub(crate) struct PodEntry {
    pub(crate) pod: std::sync::Arc<crate::views::pod_store::StoredPod>,
    pub(crate) seen: u64,
}

/// `(namespace, name)` of a VPA object.
pub fn key_of(v: &WatchedVpa) -> VpaKey {
    (
        v.metadata.namespace.clone().unwrap_or_default(),
        v.metadata.name.clone().unwrap_or_default(),
    )
}
