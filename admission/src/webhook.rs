//! The production [`Reviewer`]: pods go through [`crate::pod::review_pod`] against the current
//! [`Index`], VPAs through [`crate::vpa::review_vpa`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use tailor_core::text::capped;
use tailor_core::validation::FeatureGates;

use tailor_core::sizing::PatchOptions;
use tailor_kube::index::Index;

use crate::flags::DEFAULT_PATCH_MEMO_BYTES;

use crate::{
    pod::{LimitPolicyWarning, OomRetry, PatchMemo, PodOutcome, RetryBump, review_pod_with},
    review::{Review, ReviewResult, Reviewed, Reviewer},
    vpa::{VpaOutcome, review_vpa},
};

/// Seconds between two warnings about pods admitted unsized (the ones between are counted in the next).
pub const UNSIZED_WARN_PERIOD_SECS: u64 = 10;
/// Seconds between two log warnings about VPAs whose limit-policy annotation does not parse (the ones
/// between are counted in the next; each VPA also gets a paced Event).
pub const LIMIT_POLICY_WARN_PERIOD_SECS: u64 = 60;

/// Pod and VPA admission over a swappable index.
pub struct Webhook {
    index: ArcSwap<Index>,
    gates: FeatureGates,
    options: PatchOptions,
    memo: PatchMemo,
    unsized_warned: AtomicU64,
    unsized_quiet: AtomicU64,
    policy_warned: AtomicU64,
    policy_quiet: AtomicU64,
    started: std::time::Instant,
    quota: Option<crate::quota_report::QuotaReport>,
    events: Option<crate::vpa_events::VpaEvents>,
    retries: Option<RetryBump>,
    retry_bumps: prometheus_client::metrics::counter::Counter,
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
            memo: PatchMemo::new(options.clone(), DEFAULT_PATCH_MEMO_BYTES),
            options,
            unsized_warned: AtomicU64::new(0),
            unsized_quiet: AtomicU64::new(0),
            policy_warned: AtomicU64::new(0),
            policy_quiet: AtomicU64::new(0),
            started: std::time::Instant::now(),
            quota: None,
            events: None,
            retries: None,
            retry_bumps: Default::default(),
        }
    }

    /// Raises the memory of a Job pod's retry after its earlier attempts' OOM kills (docs/jobs.md).
    pub fn with_retry_bump(mut self, retries: RetryBump) -> Self {
        self.retries = Some(retries);
        self
    }

    /// Writes a `PodAdmittedUnsized` Event on the VPAs that probably cover a pod admitted unsized.
    pub fn with_events(mut self, events: crate::vpa_events::VpaEvents) -> Self {
        self.events = Some(events);
        self
    }

    /// Reports pods whose patch quota fit changed (metric and Events).
    pub fn with_quota_report(mut self, report: crate::quota_report::QuotaReport) -> Self {
        self.quota = Some(report);
        self
    }

    /// Whether to warn about a pod admitted unsized now (at most once per [`UNSIZED_WARN_PERIOD_SECS`]),
    /// and how many were not warned about since the last warning.
    fn unsized_warning(&self) -> Option<u64> {
        self.paced(
            &self.unsized_warned,
            &self.unsized_quiet,
            UNSIZED_WARN_PERIOD_SECS,
        )
    }

    /// Whether a warning last given at `warned` (seconds) is due again after `period`, and how many were held
    /// back since (counted in `quiet`).
    fn paced(&self, warned: &AtomicU64, quiet: &AtomicU64, period: u64) -> Option<u64> {
        // Seconds since start, plus one period so that the first one is always warned about.
        let now = self.started.elapsed().as_secs() + period;
        let last = warned.load(Ordering::Acquire);
        let due = now >= last + period
            && warned
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if due {
            Some(quiet.swap(0, Ordering::AcqRel))
        } else {
            quiet.fetch_add(1, Ordering::AcqRel);
            None
        }
    }

    /// A pod sized from a VPA whose limit-policy annotation does not parse (`warning`; `None`: nothing to
    /// say): a log warning (paced) and a `LimitPolicyInvalid` Event on the VPA (paced per VPA by the Event
    /// writer).
    fn report_limit_policy(&self, warning: Option<&LimitPolicyWarning>) {
        let Some(LimitPolicyWarning {
            namespace,
            name,
            uid,
            error,
        }) = warning
        else {
            return;
        };
        if let Some(unwarned) = self.paced(
            &self.policy_warned,
            &self.policy_quiet,
            LIMIT_POLICY_WARN_PERIOD_SECS,
        ) {
            tracing::warn!(vpa = %format!("{}/{}", capped(namespace), capped(name)), error = %error,
                not_warned_since_last = unwarned, "limit policy not followed: limits keep their ratio");
        }
        if let Some(events) = &self.events {
            events.send(tailor_kube::vpa_event::VpaEvent {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
                reason: crate::vpa_events::LIMIT_POLICY_INVALID,
                note: format!("{error}; pods keep their limit/request ratio until it is fixed"),
            });
        }
    }

    /// A pod whose VPA's pod-level envelope could not be applied (docs/pod-level-resources.md): a log line
    /// and a `PodLevelEnvelopeRefused` Event on the VPA (paced per VPA by the Event writer).
    fn report_envelope_refused(
        &self,
        pod: &str,
        refusal: crate::pod::EnvelopeRefusal,
    ) -> ReviewResult {
        let crate::pod::EnvelopeRefusal {
            namespace,
            name,
            uid,
            refused,
        } = refusal;
        tracing::info!(%pod, vpa = %format!("{}/{}", capped(&namespace), capped(&name)), reason = %refused,
            "pod-level envelope not applied: the pod keeps its pod-level resources");
        if let Some(events) = &self.events {
            events.send(tailor_kube::vpa_event::VpaEvent {
                namespace,
                name,
                uid,
                reason: crate::vpa_events::POD_LEVEL_ENVELOPE_REFUSED,
                note: format!(
                    "{pod}: pod-level envelope not applied, the pod keeps its own: {refused}"
                ),
            });
        }
        ReviewResult::PodLevelLeftAlone
    }

    /// Gives the patch memo `bytes` (`--patch-memo-mib`; 0: off) instead of the default.
    pub fn with_patch_memo_bytes(mut self, bytes: usize) -> Self {
        self.memo = PatchMemo::new(self.options.clone(), bytes);
        self
    }

    /// Registers the webhook's own metrics (the patch memo's, the OOM retry bumps).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.memo.register(registry);
        registry.register(
            "oom_retry_bumps",
            "Job pods admitted with more memory after an earlier attempt of their Job was OOM-killed",
            self.retry_bumps.clone(),
        );
    }

    /// Replaces the index (standalone mode re-reading its manifests).
    pub fn set_index(&self, index: Index) {
        self.index.store(Arc::new(index));
    }
}

/// The pod's name, or its `generateName` followed by `*` while it has none.
fn pod_label(review: &Review<'_>, generate_name: Option<&str>) -> String {
    let req = &review.request;
    if !req.name.is_empty() {
        return capped(&req.name).to_string();
    }
    match generate_name {
        Some(prefix) => format!("{}*", capped(prefix)),
        None => "(unnamed)".to_owned(),
    }
}

impl Webhook {
    /// A `PodAdmittedUnsized` Event on each VPA that probably covers the pod (`vpas`: name, uid).
    fn report_unsized(
        &self,
        review: &Review<'_>,
        reason: crate::review::UnsizedReason,
        detail: &str,
        vpas: Vec<(String, String)>,
        generate_name: Option<&str>,
    ) {
        let Some(events) = &self.events else {
            return;
        };
        let namespace = review.request.namespace.as_deref().unwrap_or_default();
        let note = format!(
            "Pod {}: admitted without this VPA's requests: {} ({})",
            pod_label(review, generate_name),
            capped(detail),
            reason.as_str()
        );
        for (name, uid) in vpas {
            events.send(tailor_kube::vpa_event::VpaEvent {
                namespace: namespace.to_owned(),
                name,
                uid,
                reason: "PodAdmittedUnsized",
                note: note.clone(),
            });
        }
    }
}

impl Webhook {
    /// A Job pod's retry admitted with more memory: a log line and an `OOMRetryBump` Event on the VPA per
    /// retry (not paced: the Job controller's back-off already spaces retries).
    fn report_oom_retry(&self, retry: OomRetry) {
        self.retry_bumps.inc();
        let raises: Vec<String> = (retry.raises.iter())
            .map(|r| {
                let mib = |b: i64| format!("{}Mi", (b.max(0) as u64).div_ceil(1 << 20));
                let from = r.target.map_or_else(|| "none".to_owned(), mib);
                let cap = match r.max_allowed {
                    Some(m) if r.raised >= m => format!(", held at maxAllowed {}", mib(m)),
                    _ => String::new(),
                };
                format!(
                    "{}: memory target {from} -> {} (an attempt was OOM-killed at {}{cap})",
                    capped(&r.container),
                    mib(r.capped()),
                    mib(r.killed_at)
                )
            })
            .collect();
        let note = format!(
            "{} of Job {} (retry after {} OOM-killed attempt(s)): {}",
            capped(&retry.pod),
            capped(&retry.job),
            retry.killed_pods,
            raises.join("; ")
        );
        tracing::info!(vpa = %format!("{}/{}", capped(&retry.namespace), capped(&retry.name)), %note,
            "Job retry admitted with more memory after an OOM kill");
        // The killed attempt as the related object: the recorder would fold raises after different attempts
        // into the first one's series.
        let related =
            (retry.last_killed).map(|(name, uid)| k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(retry.namespace.clone()),
                name: Some(name),
                uid: (!uid.is_empty()).then_some(uid),
                ..Default::default()
            });
        if let Some(events) = &self.events {
            let event = tailor_kube::vpa_event::VpaEvent {
                namespace: retry.namespace,
                name: retry.name,
                uid: retry.uid,
                reason: crate::vpa_events::OOM_RETRY_BUMP,
                note,
            };
            events.send_related(event, related);
        }
    }
}

impl Webhook {
    /// What a pod review's `outcome` counts as, reported (log lines, Events, the quota report).
    fn result_of(&self, review: &Review<'_>, outcome: PodOutcome) -> ReviewResult {
        let req = &review.request;
        let pod = || {
            format!(
                "{}/{}",
                capped(req.namespace.as_deref().unwrap_or_default()),
                capped(&req.name)
            )
        };
        match outcome {
            PodOutcome::EnvelopeRefused(refusal) => self.report_envelope_refused(&pod(), *refusal),
            PodOutcome::Patched { vpa, limit_policy } => {
                tracing::debug!(uid = %capped(&req.uid), pod = %pod(), %vpa, "pod patched");
                self.report_limit_policy(limit_policy.as_deref());
                ReviewResult::Patched
            }
            PodOutcome::NoMatch { reason: None } => ReviewResult::Allowed,
            PodOutcome::NoMatch {
                reason: Some(reason),
            } => {
                tracing::debug!(uid = %capped(&req.uid), pod = %pod(), reason = %capped(&reason), "pod not matched");
                ReviewResult::Allowed
            }
            PodOutcome::Unsized {
                reason,
                detail,
                vpas,
                generate_name,
            } => {
                if let Some(unwarned) = self.unsized_warning() {
                    tracing::warn!(uid = %capped(&req.uid), pod = %pod(), reason = reason.as_str(),
                        error = %capped(&detail), not_warned_since_last = unwarned,
                        "pod admitted unsized: its owner could not be resolved");
                }
                self.report_unsized(review, reason, &detail, vpas, generate_name.as_deref());
                ReviewResult::Unsized(reason)
            }
            PodOutcome::QuotaFitted {
                vpa,
                vpa_uid,
                fit,
                generate_name,
                limit_policy,
            } => {
                self.report_limit_policy(limit_policy.as_deref());
                let notes = fit.notes().join("; ");
                tracing::info!(uid = %capped(&req.uid), pod = %pod(), %vpa, outcome = fit.outcome.as_str(),
                    quota = %capped(&notes), "pod patch fitted to the namespace's ResourceQuotas");
                if let Some(report) = &self.quota {
                    report.record(
                        &vpa,
                        &vpa_uid,
                        &pod_label(review, generate_name.as_deref()),
                        &fit,
                    );
                }
                ReviewResult::Patched
            }
            PodOutcome::PodLevelLeftAlone { vpa } => {
                tracing::debug!(uid = %capped(&req.uid), pod = %pod(), %vpa, "pod budgets its resources at pod level; left alone");
                ReviewResult::PodLevelLeftAlone
            }
            PodOutcome::SkippedUpstream => {
                tracing::debug!(uid = %capped(&req.uid), pod = %pod(), "pod already sized by upstream VPA; left alone");
                ReviewResult::SkippedUpstream
            }
            PodOutcome::AlreadySized => {
                tracing::debug!(uid = %capped(&req.uid), pod = %pod(), "pod sized by an earlier call of this admission");
                ReviewResult::AlreadySized
            }
            PodOutcome::Error(error) => {
                tracing::warn!(uid = %capped(&req.uid), pod = %pod(), error = %capped(&error), "pod admitted unmodified");
                ReviewResult::Error
            }
        }
    }
}

impl Reviewer for Webhook {
    fn review_pod(&self, review: &Review<'_>) -> Reviewed {
        let index = self.index.load();
        let (response, outcome, retry) = review_pod_with(
            review,
            &index,
            &self.options,
            &self.memo,
            self.retries.as_ref(),
        );
        let result = self.result_of(review, outcome);
        if let Some(retry) = retry {
            self.report_oom_retry(*retry);
        }
        Reviewed { response, result }
    }

    fn review_vpa(&self, review: &Review<'_>) -> Reviewed {
        let (response, outcome) = review_vpa(review, self.gates);
        let req = &review.request;
        let result = match outcome {
            VpaOutcome::Accepted { defaulted: true } => ReviewResult::Patched,
            VpaOutcome::Accepted { defaulted: false } => ReviewResult::Allowed,
            VpaOutcome::Denied(message) => {
                tracing::info!(uid = %capped(&req.uid), namespace = %capped(req.namespace.as_deref().unwrap_or_default()),
                    name = %capped(&req.name), message = %capped(&message), "VPA rejected");
                ReviewResult::Denied
            }
        };
        Reviewed { response, result }
    }
}
