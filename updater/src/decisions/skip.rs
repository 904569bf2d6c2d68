//! Why a pod is not updated in an iteration: what `tailor plan` prints and the logs say.

use std::fmt;

/// The reason a pod is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Requests are within the recommended range and change less than `--pod-update-threshold`.
    WithinRange,
    /// Within range and younger than the lifetime threshold.
    TooYoung,
    /// No `status.startTime` yet.
    NotStarted,
    /// A quick OOM, but nothing would change.
    NoChange,
    /// `InPlace`: the last attempt was infeasible and the recommendation is not lower.
    InfeasibleCached,
    /// `evictionRequirements` refuse this direction of change.
    EvictionRequirements,
    /// The VPA's mode does not update running pods.
    Mode(String),
    /// A start-up boost is still active on the pod.
    BoostActive,
    /// Its controller group has fewer live pods than `minReplicas` (or its controller is unknown).
    BelowMinReplicas,
    /// The group's eviction tolerance is used up this iteration.
    ToleranceExhausted,
    /// The pod is scheduled but not running yet.
    Pending,
    /// A resize is under way and its fallback timeout has not passed.
    ResizeInProgress,
    /// The kubelet deferred the resize; waiting.
    ResizeDeferred,
    /// The API refused the eviction (a PodDisruptionBudget, HTTP 429); retried next iteration.
    DisruptionBudget,
    /// The rate limiter's budget for this iteration is spent.
    RateLimited,
    /// The webhook's status lease is stale: nothing is updated.
    AdmissionNotAlive,
    /// The pod has no recommendation for any container.
    NoRecommendation,
    /// The API server would refuse the in-place resize (QoS class change, memory limit cut, pod-level
    /// resources): not sent.
    ResizeRefused(String),
    /// A Job's pod: an eviction would count against the Job's `backoffLimit` (`--evict-job-pods`).
    JobPod,
    /// The webhook never sizes this pod (excluded namespace, `objectSelector`): evicting it would bring
    /// it back unchanged (docs/decisions/webhook-scope.md).
    OutsideWebhook(String),
    /// The pod carries a mark of upstream VPA (the annotation named: `vpaUpdates`, `vpaInPlaceUpdated`,
    /// `vpaObservedContainers`): an upstream VPA covers the workload too, and an evicted pod would come
    /// back with upstream's numbers.
    SizedByUpstream(&'static str),
    /// Evictions are paused: a replacement of an evicted pod was admitted without Tailor's webhook
    /// ([`crate::decisions::replacements`]).
    ReplacementsUnsized,
    /// Quota fit (docs/decisions/quota-fit.md): the raise does not fit the namespace's ResourceQuota headroom
    /// in place, or the replacement of an evicted pod would get the requests it has now (the text says which
    /// quota).
    Quota(String),
    /// Another error (the message says which).
    Error(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::WithinRange => f.write_str("within range"),
            Skip::TooYoung => f.write_str("too young"),
            Skip::NotStarted => f.write_str("not started"),
            Skip::NoChange => f.write_str("no change"),
            Skip::InfeasibleCached => f.write_str("infeasible, not lower than last attempt"),
            Skip::EvictionRequirements => f.write_str("evictionRequirements"),
            Skip::Mode(mode) => write!(f, "mode {mode}"),
            Skip::BoostActive => f.write_str("start-up boost active"),
            Skip::BelowMinReplicas => f.write_str("below minReplicas"),
            Skip::ToleranceExhausted => f.write_str("tolerance exhausted"),
            Skip::Pending => f.write_str("pending"),
            Skip::ResizeInProgress => f.write_str("resize in progress"),
            Skip::ResizeDeferred => f.write_str("resize deferred"),
            Skip::DisruptionBudget => f.write_str("PDB"),
            Skip::RateLimited => f.write_str("rate limited"),
            Skip::AdmissionNotAlive => f.write_str("admission not alive"),
            Skip::NoRecommendation => f.write_str("no recommendation"),
            Skip::ResizeRefused(why) => write!(f, "resize not sent: {why}"),
            Skip::JobPod => f.write_str(
                "Job pod: an eviction counts against its backoffLimit (--evict-job-pods)",
            ),
            Skip::OutsideWebhook(why) => write!(f, "not sized by the webhook: {why}"),
            Skip::SizedByUpstream(mark) => write!(f, "sized by upstream VPA ({mark})"),
            Skip::ReplacementsUnsized => f.write_str(
                "evictions paused: a replacement came back without the webhook's sizing",
            ),
            Skip::Quota(why) => write!(f, "quota: {why}"),
            Skip::Error(e) => write!(f, "error: {e}"),
        }
    }
}
