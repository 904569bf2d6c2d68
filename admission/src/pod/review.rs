//! The pod review (docs/design/upstream-admission.md §3.1).

use std::sync::Arc;

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tailor_core::policy::update_mode;
use tailor_core::quota::{QuotaFit, QuotaOutcome};
use tailor_core::sizing::{EnvelopeRefused, LimitPolicyError, PatchOptions};
use tailor_crds::{UpdateMode, VerticalPodAutoscaler};

use super::SkipReason;
use super::memo::{Answer, PatchMemo, sizing_key};
use super::patch::patch_pod_within;
use crate::job_retries::{JobOomHistory, job_owner};
use crate::review::EncodedPatch;
use crate::slim_pod::{PodText, SlimPod};
use tailor_core::sizing::{OomBumpRule, RetryRaise, raise_for_retry};

/// What happened to a pod review (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Patched from VPA `vpa`.
    Patched {
        /// The VPA.
        vpa: VpaName,
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
        /// The VPA.
        vpa: VpaName,
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

/// The VPA a pod was sized from, named as `namespace/name` (the pod's namespace) when a log line writes it:
/// a review answered without a log line formats nothing.
#[derive(Clone, Debug)]
pub struct VpaName {
    namespace: String,
    vpa: Arc<VerticalPodAutoscaler>,
}

impl VpaName {
    /// `vpa`, which sized a pod in `namespace`.
    fn new(namespace: String, vpa: Arc<VerticalPodAutoscaler>) -> Self {
        VpaName { namespace, vpa }
    }

    /// The VPA's name.
    pub fn name(&self) -> &str {
        self.vpa.metadata.name.as_deref().unwrap_or_default()
    }
}

impl std::fmt::Display for VpaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name())
    }
}

impl PartialEq for VpaName {
    fn eq(&self, other: &Self) -> bool {
        self.namespace == other.namespace && self.name() == other.name()
    }
}

impl Eq for VpaName {}

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
) -> (crate::review::Response, PodOutcome) {
    let (response, outcome, _) = review_pod_with(review, index, options, memo, None);
    (response, outcome)
}

/// [`review_pod`], with the memory of a Job pod's retry raised after its earlier attempts' OOM kills
/// (`retries`; docs/jobs.md): the raise made, if any, comes back for the Event that reports it.
pub(crate) fn review_pod_with(
    review: &crate::review::Review<'_>,
    index: &tailor_kube::index::Index,
    options: &PatchOptions,
    memo: &PatchMemo,
    retries: Option<&RetryBump>,
) -> (crate::review::Response, PodOutcome, Option<Box<OomRetry>>) {
    let mut raised = None;
    let (response, outcome) = review_decoded(review, index, options, memo, |pod, ns, vpa| {
        let (vpa, retry) = retries?.raise(pod, ns, vpa)?;
        raised = Some(Box::new(retry));
        Some(Arc::new(vpa))
    });
    let sized = matches!(
        outcome,
        PodOutcome::Patched { .. } | PodOutcome::QuotaFitted { .. }
    );
    (response, outcome, raised.filter(|_| sized))
}

/// The body of [`review_pod_with`]; `raise` may answer a VPA with raised targets for the pod.
fn review_decoded(
    review: &crate::review::Review<'_>,
    index: &tailor_kube::index::Index,
    options: &PatchOptions,
    memo: &PatchMemo,
    raise: impl FnOnce(&Pod, &str, &Arc<VerticalPodAutoscaler>) -> Option<Arc<VerticalPodAutoscaler>>,
) -> (crate::review::Response, PodOutcome) {
    let req = &review.request;
    let allowed = req.response();
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
    let (mut meta, text) = match decoded {
        Ok(slim) => {
            let SlimPod { meta, text } = *slim;
            (meta, text)
        }
        Err(e) => return (allowed, PodOutcome::Error(e)),
    };
    let namespace = meta
        .namespace
        .take()
        .filter(|ns| !ns.is_empty())
        .or_else(|| req.namespace.as_deref().map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    let (vpa, conflict) = match matching_vpa(&meta, &text, &namespace, index) {
        Ok(matched) => matched,
        Err(outcome) => return (allowed, outcome),
    };
    // The retry bump reads a Job pod's containers: such a pod is built now.
    let job = job_owner(&meta).is_some();
    let mut pod = PodSoFar::Slim(meta);
    if job {
        match pod.sized(&text, &namespace) {
            Ok(sized) => pod = PodSoFar::Sized(sized),
            Err(outcome) => return (allowed, outcome),
        }
    }
    // A raised VPA is this pod's alone: never memoised.
    let raised = match &pod {
        PodSoFar::Sized(pod) => raise(pod, &namespace, &vpa),
        PodSoFar::Slim(_) => None,
    };
    let memoise = raised.is_none();
    let matched = MatchedPod {
        pod,
        text: &text,
        namespace,
        vpa: raised.unwrap_or(vpa),
        conflict,
        memoise,
    };
    size_matched(allowed, matched, index, options, memo)
}

/// A pod as far as the review built it: its metadata alone while it is only matched (and answered from the
/// memo), the whole pod once it is sized.
#[expect(
    clippy::large_enum_variant,
    reason = "one per review, on the stack: boxing the metadata would allocate for every review"
)]
enum PodSoFar {
    /// The metadata the review decoded, without its namespace; the spec and status are still text.
    Slim(ObjectMeta),
    /// The pod with its sizing fields decoded.
    Sized(Box<Pod>),
}

impl PodSoFar {
    /// The whole pod in `namespace`, its sizing fields decoded from `text` if they were not yet.
    fn sized(self, text: &PodText<'_>, namespace: &str) -> Result<Box<Pod>, PodOutcome> {
        match self {
            PodSoFar::Sized(pod) => Ok(pod),
            PodSoFar::Slim(meta) => sized_pod(text, meta, namespace).map(Box::new),
        }
    }
}

/// The VPA that sizes the pod of `meta` (its labels read from `text`), and the warning when several name its
/// workload; otherwise the outcome (no VPA, or an owner chain that could not be resolved).
fn matching_vpa(
    meta: &ObjectMeta,
    text: &PodText<'_>,
    namespace: &str,
    index: &tailor_kube::index::Index,
) -> Result<(Arc<VerticalPodAutoscaler>, Option<String>), PodOutcome> {
    match index.matching_vpas_labelled(meta, text, namespace) {
        Ok(Some(matched)) => {
            // Several VPAs on one workload: sized from the oldest, as upstream; said in the response's
            // warnings and the log, in the updater's words (it updates none of them:
            // docs/decisions/conflicting-vpas.md).
            let conflict = matched.conflict_warning();
            if let Some(w) = &conflict {
                tracing::warn!(warning = %w, "pod matched by several VPAs");
            }
            Ok((matched.vpa, conflict))
        }
        Ok(None) => Err(PodOutcome::NoMatch { reason: None }),
        Err(e) => Err(PodOutcome::Unsized {
            reason: crate::review::UnsizedReason::of(&e),
            detail: e.to_string(),
            vpas: index.likely_vpas(&e),
            generate_name: meta.generate_name.clone(),
        }),
    }
}

/// The pod of `meta` in `namespace` with its sizing fields (`text`) decoded; the outcome when one of them
/// does not decode.
fn sized_pod(text: &PodText<'_>, mut meta: ObjectMeta, namespace: &str) -> Result<Pod, PodOutcome> {
    meta.namespace = Some(namespace.to_owned());
    text.pod(meta)
        .map_err(|e| PodOutcome::Error(format!("cannot decode pod: {e}")))
}

/// A pod matched to the VPA that sizes it.
struct MatchedPod<'a> {
    /// The pod; its spec and status are decoded from `text` when it is sized.
    pod: PodSoFar,
    /// The sizing fields of its spec and status as sent (the memo's key).
    text: &'a PodText<'a>,
    namespace: String,
    vpa: Arc<VerticalPodAutoscaler>,
    /// The warning about several VPAs on the workload.
    conflict: Option<String>,
    /// Whether the answer may come from, and go to, the memo.
    memoise: bool,
}

/// The patch of a matched pod (memoised, quota-fitted, or with its envelope refused), and its outcome.
fn size_matched(
    allowed: crate::review::Response,
    matched: MatchedPod<'_>,
    index: &tailor_kube::index::Index,
    options: &PatchOptions,
    memo: &PatchMemo,
) -> (crate::review::Response, PodOutcome) {
    let MatchedPod {
        pod,
        text,
        namespace: pod_namespace,
        vpa,
        conflict,
        memoise,
    } = matched;
    let namespace = pod_namespace.as_str();
    let limit_ranges = index.shared_limit_ranges(namespace);
    let quotas = index.quotas(namespace);
    // Quota fit reads the quotas' usage, which every pod changes: such pods are never memoised.
    let key = (quotas.is_empty() && memoise && memo.serves(options))
        .then(|| sizing_key(text, namespace))
        .flatten();
    if let Some(answer) = key
        .as_deref()
        .and_then(|key| memo.get(&vpa, &limit_ranges, key))
    {
        return answered(allowed, answer, conflict, VpaName::new(pod_namespace, vpa));
    }
    let pod = match pod.sized(text, namespace) {
        Ok(pod) => pod,
        Err(outcome) => return (allowed, outcome),
    };
    let pod = &*pod;
    let owned_limit_ranges: Vec<_> = limit_ranges.iter().map(|lr| (**lr).clone()).collect();
    let result = match patch_pod_within(pod, &vpa, &owned_limit_ranges, &quotas, options) {
        Ok(result) => result,
        Err(e) => return (allowed, PodOutcome::Error(e.to_string())),
    };
    if let Some(reason) = result.skipped {
        return skipped(allowed, reason, result.patch);
    }
    let patch = match serde_json::to_vec(&result.patch) {
        Ok(patch) => patch,
        Err(e) => return (allowed, PodOutcome::Error(e.to_string())),
    };
    let answer = Answer {
        patch: EncodedPatch::of_json(&patch),
        pod_level_only: result.updates.is_empty() && !result.pod_level.is_empty(),
    };
    let warning = LimitPolicyWarning::of(&vpa, namespace, result.limit_policy);
    if let Some(refused) = result.envelope_refused {
        // Not memoised: each such pod is reported (the Event writer paces them per VPA).
        let refused = envelope_refused(&vpa, namespace, refused);
        return reported(allowed, answer, conflict, refused);
    }
    if result.quota.outcome != QuotaOutcome::Fits {
        let fitted = PodOutcome::QuotaFitted {
            vpa: VpaName::new(pod_namespace.clone(), vpa.clone()).to_string(),
            vpa_uid: vpa.metadata.uid.clone().unwrap_or_default(),
            fit: result.quota,
            generate_name: pod.metadata.generate_name.clone(),
            limit_policy: warning,
        };
        return reported(allowed, answer, conflict, fitted);
    }
    if let Some(key) = key {
        memo.put(&vpa, &limit_ranges, key, answer.clone());
    }
    let vpa = VpaName::new(pod_namespace, vpa);
    let (response, mut outcome) = answered(allowed, answer, conflict, vpa);
    if let PodOutcome::Patched { limit_policy, .. } = &mut outcome {
        *limit_policy = warning;
    }
    (response, outcome)
}

/// The response carrying `answer` with `outcome` as its outcome (a pod that is reported, never memoised).
fn reported(
    allowed: crate::review::Response,
    answer: Answer,
    conflict: Option<String>,
    outcome: PodOutcome,
) -> (crate::review::Response, PodOutcome) {
    (with_answer(allowed, &answer, conflict), outcome)
}

/// The outcome of a pod whose VPA's pod-level envelope it could not take.
fn envelope_refused(
    vpa: &VerticalPodAutoscaler,
    namespace: &str,
    refused: EnvelopeRefused,
) -> PodOutcome {
    PodOutcome::EnvelopeRefused(Box::new(EnvelopeRefusal {
        namespace: namespace.to_owned(),
        name: vpa.metadata.name.clone().unwrap_or_default(),
        uid: vpa.metadata.uid.clone().unwrap_or_default(),
        refused,
    }))
}

/// A pod left alone for `reason`; `patch` only removes Tailor's annotations of an earlier call, if any.
fn skipped(
    allowed: crate::review::Response,
    reason: SkipReason,
    patch: Patch,
) -> (crate::review::Response, PodOutcome) {
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

/// `response` carrying `answer`'s patch and the warning about several VPAs. The patch is already serialised:
/// it is set as it is, and [`crate::review::encode`] marks it as a JSON patch.
fn with_answer(
    mut response: crate::review::Response,
    answer: &Answer,
    conflict: Option<String>,
) -> crate::review::Response {
    response.patch = Some(answer.patch.clone());
    if let Some(w) = conflict {
        response.warnings = Some(vec![w]);
    }
    response
}

/// The response carrying `answer` ([`with_answer`]), and its outcome against VPA `vpa`.
fn answered(
    response: crate::review::Response,
    answer: Answer,
    conflict: Option<String>,
    vpa: VpaName,
) -> (crate::review::Response, PodOutcome) {
    let outcome = if answer.pod_level_only {
        PodOutcome::PodLevelLeftAlone { vpa }
    } else {
        PodOutcome::Patched {
            vpa,
            limit_policy: None,
        }
    };
    (with_answer(response, &answer, conflict), outcome)
}

/// The retry bump (docs/jobs.md): where the Job's OOM kills are read, and the bump rule.
#[derive(Clone)]
pub struct RetryBump {
    /// The Job's earlier attempts.
    pub history: Arc<dyn JobOomHistory>,
    /// `--oom-bump-up-ratio` and `--oom-min-bump-up-bytes`.
    pub rule: OomBumpRule,
}

impl std::fmt::Debug for RetryBump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryBump")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// A Job pod's retry admitted with more memory, for the log line and the Event on the VPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OomRetry {
    /// The VPA's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid` (empty when unknown).
    pub uid: String,
    /// The pod: its name, or its `generateName` followed by `*` while it has none.
    pub pod: String,
    /// The Job.
    pub job: String,
    /// The Job's failed pods with an OOM-killed container.
    pub killed_pods: u32,
    /// The OOM-killed attempt with the most memory, as (name, uid): the Event's related object.
    pub last_killed: Option<(String, String)>,
    /// What was raised.
    pub raises: Vec<RetryRaise>,
}

impl RetryBump {
    /// For a pod of a Job whose earlier attempts were OOM-killed, `vpa` with the memory targets raised, and
    /// what was raised; `None` when nothing is (not a Job pod, mode `Off`, no OOM kill, history unknown).
    fn raise(
        &self,
        pod: &Pod,
        namespace: &str,
        vpa: &VerticalPodAutoscaler,
    ) -> Option<(VerticalPodAutoscaler, OomRetry)> {
        if update_mode(&vpa.spec) == UpdateMode::Off {
            return None;
        }
        let (job, uid) = job_owner(&pod.metadata)?;
        let ooms = self.history.ooms(namespace, uid)?;
        let spec = pod.spec.as_ref()?;
        let killed: Vec<(String, i64)> = (ooms.containers.iter())
            .filter(|(name, _)| spec.containers.iter().any(|c| c.name == *name))
            .cloned()
            .collect();
        if killed.is_empty() {
            return None;
        }
        let mut raised = vpa.clone();
        let raises = raise_for_retry(&mut raised, &killed, self.rule);
        if raises.is_empty() {
            return None;
        }
        let retry = OomRetry {
            namespace: namespace.to_owned(),
            name: vpa.metadata.name.clone().unwrap_or_default(),
            uid: vpa.metadata.uid.clone().unwrap_or_default(),
            pod: match (&pod.metadata.name, &pod.metadata.generate_name) {
                (Some(name), _) if !name.is_empty() => name.clone(),
                (_, Some(prefix)) => format!("{prefix}*"),
                _ => "(unnamed)".to_owned(),
            },
            job: job.to_owned(),
            killed_pods: ooms.killed_pods,
            last_killed: ooms.last_killed.clone(),
            raises,
        };
        Some((raised, retry))
    }
}
