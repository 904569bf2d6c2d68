//! The pod patch: a pod, the VPA that governs it and the namespace's LimitRanges in; a JSON Patch out
//! (docs/design/upstream-admission.md §3.3–§3.9).
//!
//! Order of work, as upstream (sections of docs/design/upstream-admission.md):
//! 1. **Recommendation processing** ([`process_recommendation`]): Pod-type LimitRange sums
//!    (docs/design/upstream-admission.md §3.4), then per container and per field (`target`, `lowerBound`,
//!    `upperBound`) the Container-type LimitRange bounds (docs/design/upstream-admission.md §3.5), the
//!    policy's `minAllowed`/`maxAllowed`, and for `RequestsOnly` the cap at the current limit.
//! 2. **Assembly** ([`container_resources`]): requests from `target`; limits kept in proportion
//!    (docs/design/upstream-admission.md §3.6), or by the VPA's limit policy (docs/limit-policy.md).
//! 3. **Patch** ([`resource_patches`], [`patch_pod`]): `add` operations for every request and limit
//!    (`remove` for a limit the policy unsets), Tailor's updates and observed-containers annotations.
//!
//! Everything here is pure. Tailor-only behaviour sits behind [`PatchOptions`] and is off by default.
//!
//! [`process_recommendation`]: tailor_core::sizing::process_recommendation
//! [`container_resources`]: tailor_core::sizing::container_resources
//! [`PatchOptions`]: tailor_core::sizing::PatchOptions

use json_patch::Patch;
use tailor_core::quota::QuotaFit;
use tailor_core::sizing::{EnvelopeRefused, LimitPolicyError};

mod boost;
mod memo;
mod patch;
mod review;

pub use memo::{Answer, MAX_KEY_BYTES, PatchMemo, Version, sizing_key};
pub use patch::{
    observed_containers_value, patch_pod, patch_pod_within, resource_patches, resource_value_op,
};
pub use review::{EnvelopeRefusal, LimitPolicyWarning, PodOutcome, RetryBump, VpaName, review_pod};
pub(crate) use review::{OomRetry, review_pod_with};

/// Why a pod was left alone without looking at the recommendation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The pod carries upstream's `vpaUpdates` annotation: the upstream webhook already sized it (the
    /// patch then only removes Tailor's annotations of an earlier call, if any).
    UpstreamManaged,
    /// The pod already carries Tailor's updates annotation: sized by an earlier call of this admission
    /// (the API server reinvoked the webhook after another one changed the pod).
    AlreadySized,
}

/// What Tailor changed in one container, for the updates annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerUpdate {
    /// Index in `spec.containers` (or `spec.initContainers` when `init`).
    pub index: usize,
    /// Container name.
    pub name: String,
    /// Whether this is a native sidecar in `spec.initContainers`.
    pub init: bool,
    /// Items such as `cpu capped to maxAllowed`, `cpu request`, `memory limit`.
    pub items: Vec<String>,
}

/// The result of [`patch_pod`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPatch {
    /// The JSON Patch to return to the API server (empty when skipped, but for the withdrawal of Tailor's
    /// annotations from a pod upstream sized).
    pub patch: Patch,
    /// Set when the pod was deliberately left alone.
    pub skipped: Option<SkipReason>,
    /// Per-container changes, in container order (only containers that got operations).
    pub updates: Vec<ContainerUpdate>,
    /// Resources the recommendation would have changed but the pod budgets at pod level
    /// ([`pod_level_resources`](tailor_core::sizing::pod_level_resources)): left alone in every container.
    pub pod_level: Vec<&'static str>,
    /// What quota fit did ([`patch_pod_within`]; `Fits` without quotas).
    pub quota: QuotaFit,
    /// Why the VPA's limit-policy annotation was not followed (it does not parse: limits kept their ratio,
    /// docs/limit-policy.md); the webhook reports it.
    pub limit_policy: Option<LimitPolicyError>,
    /// Why the VPA's pod-level envelope was not applied (`--pod-level-resources`, docs/pod-level-resources.md):
    /// the pod keeps its pod-level resources; the webhook reports it.
    pub envelope_refused: Option<EnvelopeRefused>,
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_limit_policy;
#[cfg(test)]
mod tests_oom_retry;
#[cfg(test)]
mod tests_pod_level;
