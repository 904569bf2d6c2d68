//! The pod review (upstream spec §3.1).

use super::*;

/// What happened to a pod review (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Patched from VPA `vpa` (`namespace/name`).
    Patched {
        /// The VPA, as `namespace/name`.
        vpa: String,
    },
    /// No VPA governs the pod.
    NoMatch {
        /// Why, when there is more to say than "none".
        reason: Option<String>,
    },
    /// Admitted unsized although a VPA may govern the pod: its owner chain could not be resolved.
    Unsized {
        /// Which kind of failure.
        reason: crate::review::UnsizedReason,
        /// The chain error.
        detail: String,
        /// The VPAs that probably cover the pod, as (name, uid) ([`tailor_kube::index::Index::likely_vpas`]).
        vpas: Vec<(String, String)>,
        /// The pod's `metadata.generateName` (it has no name yet), for the Events.
        generate_name: Option<String>,
    },
    /// The pod already carries upstream's `vpaUpdates` annotation and was left alone (but for Tailor's
    /// annotations of an earlier call, removed).
    SkippedUpstream,
    /// Tailor sized the pod in an earlier call of this admission; left as it is.
    AlreadySized,
    /// Matched `vpa`, but every resource the recommendation would change is budgeted at pod level
    /// (`spec.resources`): only the updates annotation says so.
    PodLevelLeftAlone {
        /// The VPA, as `namespace/name`.
        vpa: String,
    },
    /// Patched from VPA `vpa`, but quota fit cut or dropped its raises, or left the pod alone.
    QuotaFitted {
        /// The VPA, as `namespace/name`.
        vpa: String,
        /// The VPA's `metadata.uid` (for the Event on it; empty when unknown).
        vpa_uid: String,
        /// What quota fit did and why.
        fit: QuotaFit,
        /// The pod's `metadata.generateName`, for the report.
        generate_name: Option<String>,
    },
    /// An error left the pod unmodified.
    Error(String),
}

/// Reviews a pod `CREATE` (upstream spec §3.1): finds the VPA in `index` and returns the patch. Never
/// denies; any error (a pod over Tailor's budgets included, see [`crate::review_budgets`]) admits the pod unmodified.
pub fn review_pod(
    review: &crate::review::Review<'_>,
    index: &tailor_kube::index::Index,
    options: &PatchOptions,
) -> (kube::core::admission::AdmissionResponse, PodOutcome) {
    use kube::core::admission::AdmissionResponse;
    let req = &review.request;
    let allowed = AdmissionResponse::from(req);
    if req.resource.version != "v1" {
        return (
            allowed,
            PodOutcome::Error("only v1 Pods are supported".into()),
        );
    }
    let decoded = review
        .take_pod()
        .ok_or_else(|| "request has no object".to_owned())
        .and_then(|pod| pod.map_err(|e| e.to_string()));
    let mut pod = match decoded {
        Ok(pod) => pod,
        Err(e) => return (allowed, PodOutcome::Error(e)),
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_else(|| "default".to_owned());
    pod.metadata.namespace = Some(namespace.clone());
    let (vpa, conflict) = match index.matching_vpas(&pod, &namespace) {
        Ok(Some(matched)) => {
            // Several VPAs on one workload: sized from the oldest, as upstream; said in the response's
            // warnings and the log, in the updater's words (it updates none of them, issue 30).
            let conflict = matched.conflict_warning();
            if let Some(w) = &conflict {
                tracing::warn!(warning = %w, "pod matched by several VPAs");
            }
            (matched.vpa, conflict)
        }
        Ok(None) => return (allowed, PodOutcome::NoMatch { reason: None }),
        Err(e) => {
            return (
                allowed,
                PodOutcome::Unsized {
                    reason: crate::review::UnsizedReason::of(&e),
                    detail: e.to_string(),
                    vpas: index.likely_vpas(&e),
                    generate_name: pod.metadata.generate_name.clone(),
                },
            );
        }
    };
    let limit_ranges = index.limit_ranges(&namespace);
    let quotas = index.quotas(&namespace);
    let vpa_uid = vpa.metadata.uid.clone();
    match patch_pod_within(&pod, &vpa, &limit_ranges, &quotas, options) {
        Ok(PodPatch {
            skipped: Some(reason),
            patch,
            ..
        }) => {
            let outcome = match reason {
                SkipReason::UpstreamManaged => PodOutcome::SkippedUpstream,
                SkipReason::AlreadySized => PodOutcome::AlreadySized,
            };
            if patch.0.is_empty() {
                return (allowed, outcome);
            }
            match allowed.clone().with_patch(patch) {
                Ok(response) => (response, outcome),
                Err(e) => (allowed, PodOutcome::Error(e.to_string())),
            }
        }
        Ok(result) => match allowed.clone().with_patch(result.patch) {
            Ok(mut response) => {
                if let Some(w) = conflict {
                    response.warnings = Some(vec![w]);
                }
                let vpa = format!(
                    "{namespace}/{}",
                    vpa.metadata.name.as_deref().unwrap_or_default()
                );
                let outcome = if result.quota.outcome != QuotaOutcome::Fits {
                    PodOutcome::QuotaFitted {
                        vpa,
                        vpa_uid: vpa_uid.unwrap_or_default(),
                        fit: result.quota,
                        generate_name: pod.metadata.generate_name.clone(),
                    }
                } else if result.updates.is_empty() && !result.pod_level.is_empty() {
                    PodOutcome::PodLevelLeftAlone { vpa }
                } else {
                    PodOutcome::Patched { vpa }
                };
                (response, outcome)
            }
            Err(e) => (allowed, PodOutcome::Error(e.to_string())),
        },
        Err(e) => (allowed, PodOutcome::Error(e.to_string())),
    }
}
