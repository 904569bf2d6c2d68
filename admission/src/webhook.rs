//! The production [`Reviewer`]: pods go through [`crate::pod::review_pod`] against the current
//! [`Index`], VPAs through [`crate::vpa::review_vpa`].

use std::sync::Arc;

use arc_swap::ArcSwap;
use kube::core::{DynamicObject, admission::AdmissionRequest};
use tailor_crds::validation::FeatureGates;

use crate::{
    index::Index,
    pod::{PatchOptions, PodOutcome, review_pod},
    review::{ReviewResult, Reviewed, Reviewer},
    vpa::{VpaOutcome, review_vpa},
};

/// Pod and VPA admission over a swappable index.
pub struct Webhook {
    index: ArcSwap<Index>,
    gates: FeatureGates,
    options: PatchOptions,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("gates", &self.gates)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// A webhook over `index`.
    pub fn new(index: Index, gates: FeatureGates, options: PatchOptions) -> Self {
        Webhook {
            index: ArcSwap::from_pointee(index),
            gates,
            options,
        }
    }

    /// Replaces the index (standalone mode re-reading its manifests).
    pub fn set_index(&self, index: Index) {
        self.index.store(Arc::new(index));
    }
}

impl Reviewer for Webhook {
    fn review_pod(&self, req: &AdmissionRequest<DynamicObject>) -> Reviewed {
        let index = self.index.load();
        let (response, outcome) = review_pod(req, &index, &self.options);
        let pod = || {
            let name = if req.name.is_empty() {
                req.object
                    .as_ref()
                    .and_then(|o| o.metadata.generate_name.clone())
                    .map(|g| format!("{g}%"))
                    .unwrap_or_default()
            } else {
                req.name.clone()
            };
            format!("{}/{name}", req.namespace.as_deref().unwrap_or_default())
        };
        let result = match outcome {
            PodOutcome::Patched { vpa } => {
                tracing::debug!(uid = %req.uid, pod = %pod(), %vpa, "pod patched");
                ReviewResult::Patched
            }
            PodOutcome::NoMatch { reason: None } => ReviewResult::Allowed,
            PodOutcome::NoMatch {
                reason: Some(reason),
            } => {
                tracing::debug!(uid = %req.uid, pod = %pod(), %reason, "pod not matched");
                ReviewResult::Allowed
            }
            PodOutcome::SkippedUpstream => {
                tracing::debug!(uid = %req.uid, pod = %pod(), "pod already sized by upstream VPA; left alone");
                ReviewResult::SkippedUpstream
            }
            PodOutcome::Error(error) => {
                tracing::warn!(uid = %req.uid, pod = %pod(), %error, "pod admitted unmodified");
                ReviewResult::Error
            }
        };
        Reviewed { response, result }
    }

    fn review_vpa(&self, req: &AdmissionRequest<DynamicObject>) -> Reviewed {
        let (response, outcome) = review_vpa(req, self.gates);
        let result = match outcome {
            VpaOutcome::Accepted { defaulted: true } => ReviewResult::Patched,
            VpaOutcome::Accepted { defaulted: false } => ReviewResult::Allowed,
            VpaOutcome::Denied(message) => {
                tracing::info!(uid = %req.uid, namespace = req.namespace.as_deref().unwrap_or_default(),
                    name = %req.name, %message, "VPA rejected");
                ReviewResult::Denied
            }
        };
        Reviewed { response, result }
    }
}
