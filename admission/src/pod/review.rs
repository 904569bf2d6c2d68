//! The pod review (docs/design/upstream-admission.md §3.1).

use super::*;

/// What happened to a pod review (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Patched from VPA `vpa` (`namespace/name`).
    Patched {
        /// The VPA, as `namespace/name`.
        vpa: String,
        /// Set when the VPA's limit-policy annotation does not parse (its limits kept their ratio).
        limit_policy: Option<Box<LimitPolicyWarning>>,
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
        /// Set when the VPA's limit-policy annotation does not parse (its limits kept their ratio).
        limit_policy: Option<Box<LimitPolicyWarning>>,
    },
    /// Patched from VPA `vpa`, but its pod-level envelope was not applied (`--pod-level-resources`,
    /// docs/pod-level-resources.md): the pod keeps its pod-level resources as without the flag.
    EnvelopeRefused(Box<EnvelopeRefusal>),
    /// An error left the pod unmodified.
    Error(String),
}

/// A pod that could not take its VPA's pod-level envelope (docs/pod-level-resources.md), for the log line and
/// the Event on the VPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeRefusal {
    /// The VPA's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid` (empty when unknown).
    pub uid: String,
    /// Why.
    pub refused: EnvelopeRefused,
}

/// A VPA whose limit-policy annotation does not parse (docs/limit-policy.md): the pod's limits kept their
/// ratio, and the webhook says why in a log line and an Event on the VPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitPolicyWarning {
    /// The VPA's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid` (empty when unknown).
    pub uid: String,
    /// What is wrong with the annotation.
    pub error: LimitPolicyError,
}

impl LimitPolicyWarning {
    /// The warning for `vpa` in `namespace`, when its annotation did not parse.
    fn of(
        vpa: &VerticalPodAutoscaler,
        namespace: &str,
        error: Option<LimitPolicyError>,
    ) -> Option<Box<Self>> {
        error.map(|error| {
            Box::new(LimitPolicyWarning {
                namespace: namespace.to_owned(),
                name: vpa.metadata.name.clone().unwrap_or_default(),
                uid: vpa.metadata.uid.clone().unwrap_or_default(),
                error,
            })
        })
    }
}

/// Reviews a pod `CREATE` (docs/design/upstream-admission.md §3.1): finds the VPA in `index` and returns the
/// patch. Never denies; any error (a pod over Tailor's budgets included, see [`crate::review_budgets`]) admits
/// the pod unmodified. A pod whose sizing inputs equal the last one's against the same VPA gets that pod's
/// patch from `memo`.
pub fn review_pod(
    review: &crate::review::Review<'_>,
    index: &tailor_kube::index::Index,
    options: &PatchOptions,
    memo: &PatchMemo,
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
            // warnings and the log, in the updater's words (it updates none of them:
            // docs/decisions/conflicting-vpas.md).
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
    let limit_ranges = index.shared_limit_ranges(&namespace);
    let quotas = index.quotas(&namespace);
    let vpa_label = || {
        format!(
            "{namespace}/{}",
            vpa.metadata.name.as_deref().unwrap_or_default()
        )
    };
    // Quota fit reads the quotas' usage, which every pod changes: such pods are never memoised.
    let key = (quotas.is_empty() && memo.serves(options))
        .then(|| sizing_key(&pod, &namespace))
        .flatten();
    if let Some(answer) = key
        .as_deref()
        .and_then(|key| memo.get(&vpa, &limit_ranges, key))
    {
        return answered(allowed, answer, conflict, vpa_label());
    }
    let owned_limit_ranges: Vec<_> = limit_ranges.iter().map(|lr| (**lr).clone()).collect();
    let result = match patch_pod_within(&pod, &vpa, &owned_limit_ranges, &quotas, options) {
        Ok(result) => result,
        Err(e) => return (allowed, PodOutcome::Error(e.to_string())),
    };
    if let Some(reason) = result.skipped {
        let outcome = match reason {
            SkipReason::UpstreamManaged => PodOutcome::SkippedUpstream,
            SkipReason::AlreadySized => PodOutcome::AlreadySized,
        };
        if result.patch.0.is_empty() {
            return (allowed, outcome);
        }
        return match allowed.clone().with_patch(result.patch) {
            Ok(response) => (response, outcome),
            Err(e) => (allowed, PodOutcome::Error(e.to_string())),
        };
    }
    let patch = match serde_json::to_vec(&result.patch) {
        Ok(patch) => patch,
        Err(e) => return (allowed, PodOutcome::Error(e.to_string())),
    };
    let answer = Answer {
        patch: patch.into(),
        pod_level_only: result.updates.is_empty() && !result.pod_level.is_empty(),
    };
    let warning = LimitPolicyWarning::of(&vpa, &namespace, result.limit_policy);
    if let Some(refused) = result.envelope_refused {
        // Not memoised: each such pod is reported (the Event writer paces them per VPA).
        let (response, outcome) = answered(allowed, answer, conflict, String::new());
        if let PodOutcome::Error(_) = outcome {
            return (response, outcome);
        }
        let outcome = PodOutcome::EnvelopeRefused(Box::new(EnvelopeRefusal {
            namespace: namespace.clone(),
            name: vpa.metadata.name.clone().unwrap_or_default(),
            uid: vpa.metadata.uid.clone().unwrap_or_default(),
            refused,
        }));
        return (response, outcome);
    }
    if result.quota.outcome != QuotaOutcome::Fits {
        let (response, outcome) = answered(allowed, answer, conflict, String::new());
        if let PodOutcome::Error(_) = outcome {
            return (response, outcome);
        }
        let outcome = PodOutcome::QuotaFitted {
            vpa: vpa_label(),
            vpa_uid: vpa.metadata.uid.clone().unwrap_or_default(),
            fit: result.quota,
            generate_name: pod.metadata.generate_name.clone(),
            limit_policy: warning,
        };
        return (response, outcome);
    }
    if let Some(key) = key {
        memo.put(&vpa, &limit_ranges, key, answer.clone());
    }
    let (response, mut outcome) = answered(allowed, answer, conflict, vpa_label());
    if let PodOutcome::Patched { limit_policy, .. } = &mut outcome {
        *limit_policy = warning;
    }
    (response, outcome)
}

/// The response carrying `answer`'s patch (and the warning about several VPAs), and its outcome against
/// VPA `vpa` (`namespace/name`).
fn answered(
    allowed: kube::core::admission::AdmissionResponse,
    answer: Answer,
    conflict: Option<String>,
    vpa: String,
) -> (kube::core::admission::AdmissionResponse, PodOutcome) {
    // `with_patch` marks the response as a JSON patch; the patch itself is already serialised.
    match allowed.clone().with_patch(json_patch::Patch(Vec::new())) {
        Ok(mut response) => {
            response.patch = Some(answer.patch.to_vec());
            if let Some(w) = conflict {
                response.warnings = Some(vec![w]);
            }
            let outcome = if answer.pod_level_only {
                PodOutcome::PodLevelLeftAlone { vpa }
            } else {
                PodOutcome::Patched {
                    vpa,
                    limit_policy: None,
                }
            };
            (response, outcome)
        }
        Err(e) => (allowed, PodOutcome::Error(e.to_string())),
    }
}
