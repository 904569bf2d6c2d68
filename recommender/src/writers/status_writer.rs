//! Status writer: what each VPA's status becomes (recommendation, conditions, `observedGeneration`),
//! planned purely from the model and the previous status ([`plan_status`]), then written as one merge
//! patch of the status subresource per VPA that changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::value::RawValue;
use tailor_crds::condition as cond;
use tailor_crds::{
    RecommendedContainerResources, RecommendedPodResources, ResourceList, UpdateMode,
    VerticalPodAutoscalerCondition, VerticalPodAutoscalerStatus,
};
use tailor_kube::leader::Fence;

use crate::error::Error;
use crate::ingest::{VpaKey, key_of};
use crate::process::metrics::SizedWithinCluster;
use crate::run_loop::{LoopReport, Recommender};
use crate::selection::{RECOMMENDATION_MISSING_LOG_PERIOD, track_missing_recommendation};
use crate::time::to_time_secs;
use crate::views::watched_vpa::{StoredStatus, WatchedVpa};
use crate::writers::edge::Writes;
use crate::writers::ratelimit::RateLimiter;
pub use crate::writers::written::{LastWrite, StatusDigest};
use tailor_engine::estimate::{ContainerRecommendation, VpaInput, confidence, recommend};
use tailor_engine::model::AggregateContainerState;
use tailor_engine::policy::Resources;
use tailor_engine::units::Nanos;

use crate::views::cluster_view::loop_view;
use tailor_cluster_fit::node_fit::{MAX_SHAPES, PodShape};
use tailor_cluster_fit::view::FitView;
use tailor_cluster_fit::within::{
    ClusterNotes, NodeFitNote, cluster_conditions, size_within_cluster,
};

const DAY: i64 = 86_400_000_000_000;

/// `ConfigUnsupported` reason when the spec breaks a validation rule (the message names the field).
pub const INVALID_SPEC_REASON: &str = "InvalidSpec";
/// `ConfigUnsupported` reason when the target cannot be resolved (upstream's message).
pub const TARGET_REASON: &str = "TargetNotResolved";

/// `NoPodsMatched` reason and message.
pub const NO_PODS_MATCHED_MESSAGE: &str = "No pods match this VPA object";

/// Quantities as upstream's recommender writes them: CPU in millicores (`250m`, `2`), memory in binary SI
/// (`250Mi`; a byte count not divisible by 1024 prints in decimal, as Go does), so that the two autoscalers'
/// statuses compare equal as strings.
fn resource_list(r: &Resources) -> ResourceList {
    let mut out = ResourceList::new();
    if let Some(c) = r.cpu {
        out.insert("cpu".into(), tailor_core::quantity::from_amount("cpu", c));
    }
    if let Some(m) = r.memory {
        out.insert("memory".into(), tailor_core::quantity::from_binary(m));
    }
    out
}

/// The API form of the engine's per-container recommendations; `None` when there are none.
pub fn to_api_recommendation(recs: &[ContainerRecommendation]) -> Option<RecommendedPodResources> {
    if recs.is_empty() {
        return None;
    }
    Some(RecommendedPodResources {
        container_recommendations: Some(
            recs.iter()
                .map(|r| RecommendedContainerResources {
                    container_name: Some(r.container_name.clone()),
                    target: resource_list(&r.target),
                    lower_bound: Some(resource_list(&r.lower_bound)),
                    upper_bound: Some(resource_list(&r.upper_bound)),
                    uncapped_target: Some(resource_list(&r.uncapped_target)),
                })
                .collect(),
        ),
    })
}

fn has_entries(r: Option<&RecommendedPodResources>) -> bool {
    r.and_then(|r| r.container_recommendations.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// What this loop found out about one VPA.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Findings {
    /// The recommendation to publish.
    pub recommendation: Option<RecommendedPodResources>,
    /// Whether any pod matches.
    pub pods_matched: bool,
    /// `ConfigUnsupported` message when the spec breaks a validation rule: the errors, each naming its field.
    /// The status is still written (a VPA admitted while the webhook was down must not freeze).
    pub invalid_spec: Option<String>,
    /// `ConfigUnsupported` message when the target cannot be resolved (upstream's messages).
    pub unsupported: Option<String>,
    /// `LowConfidence` message when some container has less than a day of history.
    pub low_confidence: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `FetchingHistory` message while the VPA's usage history is being loaded.
    pub fetching_history: Option<String>,
    /// `CheckpointSkipped` message naming a checkpoint that could not be restored (for a day after).
    pub checkpoint_skipped: Option<String>,
    /// [`PROFILE_RULE`]: which rule a per-container profile (`auto`) applied, as (reason, message).
    pub profile_rule: Option<(String, String)>,
    /// What node fit did (`CappedToNodeSize`).
    pub node_fit: Option<NodeFitNote>,
    /// `ResourcesLeftToHPA` message when an HPA scales the workload on CPU or memory utilization.
    pub left_to_hpa: Option<String>,
}

/// A VPA's recommendation in API form, its `LowConfidence` message, what sizing within the cluster did, and
/// [`PROFILE_RULE`] (reason, message).
type VpaRecommendation = (
    Option<RecommendedPodResources>,
    Option<String>,
    ClusterNotes,
    Option<(String, String)>,
);

/// Tailor's condition for VPAs whose profile decides per container (`auto`): reason `Daily` when CPU follows
/// the hour of the day for some container, else `Priced` when some container's all-day CPU request is priced
/// against its risk, `Upstream` when every container has upstream's all-day estimate (too little history);
/// the message names each container's rule, and says when its memory is set over steady daily peaks. Absent
/// for other profiles.
pub const PROFILE_RULE: &str = "TailorProfileRule";

/// The [`PROFILE_RULE`] reason and message from a recommendation's explanations; `None` when no container
/// was decided by a per-container rule. Only rule names: the figures behind them move every loop and are
/// `tailor recommend --explain`'s.
pub fn profile_rule(
    explain: &[tailor_engine::estimate::ContainerExplain],
) -> Option<(String, String)> {
    let rules: Vec<(&str, &str, bool)> = explain
        .iter()
        .filter_map(|e| {
            let steady = e.memory_rule.as_ref().is_some_and(|m| m.rule == "steady");
            e.cpu_rule
                .as_ref()
                .map(|r| (e.container.as_str(), r.rule, steady))
        })
        .collect();
    if rules.is_empty() {
        return None;
    }
    let reason = if rules.iter().any(|r| r.1 == "daily") {
        "Daily"
    } else if rules.iter().any(|r| r.1 == "priced") {
        "Priced"
    } else {
        "Upstream"
    };
    let message = rules
        .iter()
        .map(|(c, r, steady)| {
            let memory = if *steady {
                ", memory a small margin over its steady daily peaks"
            } else {
                ""
            };
            format!("{}{memory}", cpu_rule_note(c, r))
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some((reason.into(), message))
}

/// `percentile` when `v` targets a Job or a CronJob (`--job-target-memory-percentile`, docs/jobs.md).
fn job_memory_percentile(v: &WatchedVpa, percentile: Option<f64>) -> Option<f64> {
    let target = v.spec.target_ref.as_ref()?;
    let batch = (target.api_version.as_deref()).is_some_and(|a| a.starts_with("batch/"));
    (batch && matches!(target.kind.as_str(), "Job" | "CronJob"))
        .then_some(percentile)
        .flatten()
}

/// What one container's CPU rule means, for [`profile_rule`]'s message.
fn cpu_rule_note(c: &str, rule: &str) -> String {
    match rule {
        "daily" => format!(
            "{c}: CPU follows its repeating daily pattern (a day plan of a few requests, each priced over its \
             hours, resized in place as the hours turn)"
        ),
        "priced" => format!(
            "{c}: all-day CPU request priced against its risk on its own history (no strong, repeating \
                 daily pattern worth the resizes)"
        ),
        _ => format!("{c}: upstream's all-day estimate (less than a day of history)"),
    }
}

impl SizedWithinCluster {
    /// Counts what sizing within the cluster did to one VPA's planned status.
    fn count(&mut self, f: &Findings) {
        match f.node_fit {
            Some(NodeFitNote::Capped { .. }) => self.node_capped += 1,
            Some(NodeFitNote::NoneFits(_)) => self.no_node_fits += 1,
            None => {}
        }
        if f.left_to_hpa.is_some() {
            self.left_to_hpa += 1;
        }
    }
}

fn set(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let status = if status { "True" } else { "False" };
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let (reason, message) = (opt(reason), opt(message));
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Some(now.clone());
        }
        c.status = status.into();
        c.reason = reason;
        c.message = message;
        return;
    }
    conditions.push(VerticalPodAutoscalerCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(now.clone()),
        reason,
        message,
        observed_generation: None,
    });
}

fn remove(conditions: &mut Vec<VerticalPodAutoscalerCondition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The status to plan from the stored status's conditions (`old`): conditions owned by the recommender
/// (all but user-set ones) are set or removed (`FetchingHistory` while the history bootstrap runs), a
/// condition keeps its `lastTransitionTime` unless its status changes, and conditions are sorted by type.
pub fn plan_status(
    old: &[VerticalPodAutoscalerCondition],
    f: &Findings,
    now: &Time,
) -> VerticalPodAutoscalerStatus {
    let mut conditions = old.to_vec();
    plan_config_conditions(&mut conditions, f, now);
    let provided = plan_recommendation_conditions(&mut conditions, f, now);
    set_or_remove(
        &mut conditions,
        cond::FETCHING_HISTORY,
        "FetchingHistory",
        f.fetching_history.as_deref(),
        now,
    );
    plan_cluster_conditions(&mut conditions, f, now);
    set_or_remove(
        &mut conditions,
        cond::CHECKPOINT_SKIPPED,
        "InvalidCheckpoint",
        f.checkpoint_skipped.as_deref(),
        now,
    );
    match (&f.profile_rule, provided) {
        (Some((reason, m)), true) => set(&mut conditions, PROFILE_RULE, true, reason, m, now),
        _ => remove(&mut conditions, PROFILE_RULE),
    }
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    VerticalPodAutoscalerStatus {
        recommendation: f.recommendation.clone(),
        conditions: Some(conditions),
        observed_generation: f.generation,
    }
}

/// Sets condition `type_` True with `reason` and `message` when there is a message; removes it when not.
fn set_or_remove(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    type_: &str,
    reason: &str,
    message: Option<&str>,
    now: &Time,
) {
    match message {
        Some(m) => set(conditions, type_, true, reason, m, now),
        None => remove(conditions, type_),
    }
}

/// The spec's conditions: `ConfigDeprecated` is always removed; `ConfigUnsupported` says why the spec is
/// invalid, else why the target cannot be resolved, else is removed.
fn plan_config_conditions(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    f: &Findings,
    now: &Time,
) {
    remove(conditions, cond::CONFIG_DEPRECATED);
    match &f.invalid_spec {
        Some(m) => set(
            conditions,
            cond::CONFIG_UNSUPPORTED,
            true,
            INVALID_SPEC_REASON,
            m,
            now,
        ),
        None => set_or_remove(
            conditions,
            cond::CONFIG_UNSUPPORTED,
            TARGET_REASON,
            f.unsupported.as_deref(),
            now,
        ),
    }
}

/// The pods' and the recommendation's conditions: `NoPodsMatched`, `RecommendationProvided` (with the
/// no-pods reason when no pod matches) and `LowConfidence` (only beside a recommendation). Returns whether a
/// recommendation is provided.
fn plan_recommendation_conditions(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    f: &Findings,
    now: &Time,
) -> bool {
    if f.pods_matched {
        remove(conditions, cond::NO_PODS_MATCHED);
    } else {
        set(
            conditions,
            cond::NO_PODS_MATCHED,
            true,
            "NoPodsMatched",
            NO_PODS_MATCHED_MESSAGE,
            now,
        );
    }
    let provided = has_entries(f.recommendation.as_ref());
    if provided {
        set(conditions, cond::RECOMMENDATION_PROVIDED, true, "", "", now);
    } else if f.pods_matched {
        set(
            conditions,
            cond::RECOMMENDATION_PROVIDED,
            false,
            "",
            "",
            now,
        );
    } else {
        set(
            conditions,
            cond::RECOMMENDATION_PROVIDED,
            false,
            "NoPodsMatched",
            NO_PODS_MATCHED_MESSAGE,
            now,
        );
    }
    let low_confidence = f.low_confidence.as_deref().filter(|_| provided);
    set_or_remove(
        conditions,
        cond::LOW_CONFIDENCE,
        "LowConfidence",
        low_confidence,
        now,
    );
    provided
}

/// The conditions of sizing within the cluster: `CappedToNodeSize` from node fit's note, and
/// `ResourcesLeftToHPA`.
fn plan_cluster_conditions(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    f: &Findings,
    now: &Time,
) {
    for (type_, state) in cluster_conditions(f.node_fit.as_ref(), f.left_to_hpa.as_deref()) {
        match state {
            Some((status, reason, message)) => set(conditions, type_, status, reason, message, now),
            None => remove(conditions, type_),
        }
    }
}

/// The `ConfigUnsupported` message of VPA `name` whose spec breaks a validation rule: the webhook's own
/// refusal of it (the same rules, through the same function), its errors each naming the field; `None` when
/// valid.
pub fn invalid_spec_message(
    name: &str,
    spec: &tailor_crds::VerticalPodAutoscalerSpec,
) -> Option<String> {
    let errors = tailor_core::validation::validate_spec(spec).errors;
    (!errors.is_empty())
        .then(|| tailor_core::validation::invalid_message("VerticalPodAutoscaler", name, &errors))
}

/// Whether a status digesting to `new` must be written over the stored one digesting to `old`: they
/// differ, and it is not what the last write (`last`) already sent from the same base.
pub fn needs_write(old: StatusDigest, new: StatusDigest, last: Option<&LastWrite>) -> bool {
    new != old && !last.is_some_and(|l| l.base == old && l.written == new)
}

/// `LowConfidence` message when some container has less than a day of history.
pub fn low_confidence_message(
    recs: &[ContainerRecommendation],
    aggregates: &BTreeMap<String, AggregateContainerState>,
) -> Option<String> {
    let low: Vec<String> = recs
        .iter()
        .filter_map(|c| {
            let conf = aggregates
                .get(&c.container_name)
                .map(|a| confidence(a, DAY))?;
            (conf < 1.0).then(|| format!("{} ({:.2} days)", c.container_name, conf))
        })
        .collect();
    (!low.is_empty()).then(|| format!("Less than one day of usage history: {}", low.join(", ")))
}

/// The recommendation and `LowConfidence` message of the previous status, kept while the metrics API
/// fails.
pub fn kept_recommendation(
    old: Option<&StoredStatus>,
) -> (Option<RecommendedPodResources>, Option<String>) {
    let recommendation = old.and_then(StoredStatus::recommendation);
    let low_confidence = old
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == cond::LOW_CONFIDENCE)
        })
        .filter(|c| c.status == "True")
        .map(|c| c.message.clone().unwrap_or_default());
    (recommendation, low_confidence)
}

/// The stored [`PROFILE_RULE`] condition as (reason, message), kept with the stored recommendation.
pub fn kept_profile_rule(old: &[VerticalPodAutoscalerCondition]) -> Option<(String, String)> {
    old.iter()
        .find(|c| c.type_ == PROFILE_RULE)
        .filter(|c| c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// The node-fit and HPA conditions of the previous status, kept with its recommendation while the metrics
/// API fails.
pub fn kept_notes(old: &[VerticalPodAutoscalerCondition]) -> ClusterNotes {
    let find = |t: &str| old.iter().find(|c| c.type_ == t);
    let message = |c: &VerticalPodAutoscalerCondition| c.message.clone().unwrap_or_default();
    ClusterNotes {
        node_fit: find(cond::CAPPED_TO_NODE_SIZE).map(|c| {
            if c.status == "True" {
                NodeFitNote::Capped {
                    reason: if c.reason.as_deref() == Some("LargestNodePoolInstance") {
                        "LargestNodePoolInstance"
                    } else {
                        "LargestNode"
                    },
                    message: message(c),
                }
            } else {
                NodeFitNote::NoneFits(message(c))
            }
        }),
        left_to_hpa: find(cond::RESOURCES_LEFT_TO_HPA)
            .filter(|c| c.status == "True")
            .map(message),
    }
}

/// The JSON merge patch that turns any status into `status` (absent fields are sent as `null` so that
/// they are removed). Serialised straight from the status, without building a JSON tree first.
#[derive(Debug, serde::Serialize)]
pub struct MergePatch<'a> {
    status: MergePatchStatus<'a>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MergePatchStatus<'a> {
    recommendation: &'a Option<RecommendedPodResources>,
    conditions: &'a Option<Vec<VerticalPodAutoscalerCondition>>,
    observed_generation: Option<i64>,
}

/// The merge patch for `status` (see [`MergePatch`]).
pub fn merge_patch(status: &VerticalPodAutoscalerStatus) -> MergePatch<'_> {
    MergePatch {
        status: MergePatchStatus {
            recommendation: &status.recommendation,
            conditions: &status.conditions,
            observed_generation: status.observed_generation,
        },
    }
}

/// One planned status write: the merge patch already serialised, with the digests the loop remembers once
/// it succeeds. A loop plans every changed VPA before sending; kept as JSON text, a planned write holds a
/// few hundred bytes instead of the typed status's nested maps (about 2.5 KB per container).
#[derive(Debug)]
pub struct StatusWrite {
    /// The VPA.
    pub key: VpaKey,
    /// The digest of the stored status the write is based on.
    pub base: StatusDigest,
    /// The digest of the status written.
    pub written: StatusDigest,
    /// The body: [`merge_patch`] of the status, as JSON.
    pub body: Box<RawValue>,
}

impl StatusWrite {
    /// The write of `status` (digesting to `written`) to the VPA `key`, whose stored status digests to
    /// `base`.
    pub fn new(
        key: VpaKey,
        base: StatusDigest,
        written: StatusDigest,
        status: &VerticalPodAutoscalerStatus,
    ) -> Result<Self, serde_json::Error> {
        Ok(StatusWrite {
            key,
            base,
            written,
            body: serde_json::value::to_raw_value(&merge_patch(status))?,
        })
    }
}

/// Sends the planned writes to `writes`, `workers` at a time, each only if `fence` allows it when its turn
/// comes ([`Error::NotLeader`] otherwise); returns each write with its outcome.
pub async fn write_statuses(
    writes: &dyn Writes,
    limiter: RateLimiter,
    fence: &Fence,
    workers: usize,
    planned: Vec<StatusWrite>,
) -> Vec<(StatusWrite, Result<(), Error>)> {
    futures::stream::iter(planned)
        .map(|w| {
            let (limiter, fence) = (limiter.clone(), fence.clone());
            async move {
                let r = patch_status(writes, limiter, &fence, &w).await;
                (w, r)
            }
        })
        .buffer_unordered(workers.max(1))
        .collect()
        .await
}

async fn patch_status(
    writes: &dyn Writes,
    limiter: RateLimiter,
    fence: &Fence,
    w: &StatusWrite,
) -> Result<(), Error> {
    let (namespace, vpa) = (&w.key.0, &w.key.1);
    limiter.acquire().await;
    if !fence.allows_writes() {
        return Err(Error::NotLeader {
            what: format!("VPA {namespace}/{vpa} status"),
        });
    }
    writes
        .patch_status(namespace, vpa, &w.body)
        .await
        .map_err(|source| Error::StatusWrite {
            namespace: namespace.clone(),
            vpa: vpa.clone(),
            source,
        })
}

impl Recommender {
    /// Plans every owned VPA's status and patches those that changed, in parallel.
    pub(crate) async fn update_vpas(
        &mut self,
        owned: &[Arc<WatchedVpa>],
        now: Nanos,
        metrics_ok: bool,
        report: &mut LoopReport,
    ) {
        let Some(now_t) = to_time_secs(now) else {
            return;
        };
        if !self.fence.allows_writes() {
            tracing::warn!("not holding the leader lease: no VPA status is written");
            return;
        }
        let t = tokio::time::Instant::now();
        let writes = self.plan_status_writes(owned, now, &now_t, metrics_ok);
        report.phases.recommend_seconds = t.elapsed().as_secs_f64();
        self.metrics
            .step("recommend", report.phases.recommend_seconds);
        let t = tokio::time::Instant::now();
        let results = write_statuses(
            &*self.writes,
            self.limiter.clone(),
            &self.fence,
            self.cfg.update_worker_count,
            writes,
        )
        .await;
        report.phases.status_seconds = t.elapsed().as_secs_f64();
        self.metrics
            .step("status_writes", report.phases.status_seconds);
        self.record_status_results(results, report);
    }

    /// The status writes this loop needs, with missing recommendations tracked and logged on the way.
    fn plan_status_writes(
        &mut self,
        owned: &[Arc<WatchedVpa>],
        now: Nanos,
        now_t: &Time,
        metrics_ok: bool,
    ) -> Vec<StatusWrite> {
        let mut writes = Vec::new();
        let mut view = loop_view(&self.view);
        let mut sized = SizedWithinCluster::default();
        for v in owned {
            let key = key_of(v);
            let Some(findings) = self.findings(v, &key, metrics_ok, now, &mut view) else {
                continue;
            };
            sized.count(&findings);
            self.track_missing(&key, &findings, now);
            let status = plan_status(v.conditions(), &findings, now_t);
            let (base, written) = (v.status_digest(), StatusDigest::of(Some(&status)));
            let last = self.vpas.get(&key).and_then(|e| e.last_written.as_ref());
            if !needs_write(base, written, last) {
                continue;
            }
            match StatusWrite::new(key, base, written, &status) {
                Ok(w) => writes.push(w),
                // A status is strings, numbers and string-keyed maps: serialising it does not fail.
                Err(e) => tracing::error!(error = %e, "serialising a VPA status"),
            }
        }
        self.metrics.sized_within_cluster(&sized);
        writes
    }

    /// What the model, the target resolution and the history bootstrap say about one VPA.
    fn findings(
        &self,
        v: &WatchedVpa,
        key: &VpaKey,
        metrics_ok: bool,
        now: Nanos,
        view: &mut FitView,
    ) -> Option<Findings> {
        let e = self.vpas.get(key)?;
        let mut invalid_spec =
            invalid_spec_message(v.metadata.name.as_deref().unwrap_or_default(), &v.spec);
        let in_place = matches!(
            tailor_core::policy::update_mode(&v.spec),
            UpdateMode::InPlace | UpdateMode::InPlaceOrRecreate
        );
        let (mut recommendation, mut low_confidence, mut notes, mut profile_rule) =
            match self.recommendation(v, e.index, in_place, view) {
                Ok(r) => r,
                Err(err) => {
                    invalid_spec.get_or_insert(err);
                    (None, None, ClusterNotes::default(), None)
                }
            };
        if !metrics_ok {
            (recommendation, low_confidence) = kept_recommendation(v.status.as_ref());
            notes = kept_notes(v.conditions());
            profile_rule = kept_profile_rule(v.conditions());
        }
        Some(Findings {
            recommendation,
            pods_matched: self.model.has_matching_pod(e.index),
            invalid_spec,
            unsupported: e.unsupported.clone(),
            low_confidence,
            generation: v.metadata.generation,
            fetching_history: self.history.as_ref().and_then(|h| h.fetching(key)),
            checkpoint_skipped: e
                .skipped_checkpoint
                .as_ref()
                .filter(|(at, _)| now.saturating_sub(*at) < DAY)
                .map(|(_, m)| m.clone()),
            node_fit: notes.node_fit,
            left_to_hpa: notes.left_to_hpa,
            profile_rule,
        })
    }

    /// The distinct shapes of the model VPA `index`'s pods (at most [`MAX_SHAPES`]).
    fn shapes(&self, index: usize) -> Vec<Arc<PodShape>> {
        let mut shapes: Vec<Arc<PodShape>> = Vec::new();
        for (ns, name) in self.model.matching_pods(index) {
            let Some(s) = self
                .pods
                .get(ns)
                .and_then(|m| m.get(name))
                .and_then(|e| e.pod.shape.as_ref())
            else {
                continue;
            };
            if !shapes.iter().any(|x| Arc::ptr_eq(x, s)) {
                shapes.push(s.clone());
                if shapes.len() >= MAX_SHAPES {
                    break;
                }
            }
        }
        shapes
    }

    /// The engine's recommendation for the model VPA `index`, in API form, and its `LowConfidence` message.
    /// CPU follows the time of day (a profile's setting) only for VPAs whose pods are resized `in_place`: a pod
    /// admitted at night would otherwise keep its night request through the day.
    /// HPA coherence and node fit then apply ([`size_within_cluster`]).
    fn recommendation(
        &self,
        v: &WatchedVpa,
        index: usize,
        in_place: bool,
        view: &mut FitView,
    ) -> Result<VpaRecommendation, String> {
        let aggregates = self.model.aggregate_state_by_container_name(index);
        let empty = BTreeMap::new();
        let (policy, annotations) = match self.model.vpas().get(index) {
            Some(m) => (m.policy.as_ref(), &m.annotations),
            None => (None, &empty),
        };
        // The VPA's `tailor.dev/profile` annotation, else `--profile`, adjusts the estimation settings.
        let config = tailor_engine::profile::config_for(
            &self.cfg.recommender,
            self.cfg.profile,
            annotations,
        )
        .map_err(|e| e.to_string())?;
        let config = if !in_place && config.cpu_time_of_day.is_some() {
            let mut c = config.into_owned();
            c.cpu_time_of_day = None;
            std::borrow::Cow::Owned(c)
        } else {
            config
        };
        let config = match job_memory_percentile(v, self.cfg.job_target_memory_percentile) {
            Some(p) if p > config.target_memory_percentile => {
                let mut c = config.into_owned();
                c.target_memory_percentile = p;
                std::borrow::Cow::Owned(c)
            }
            _ => config,
        };
        // Explanations only where a profile decides per container: their rules become the
        // `TailorProfileRule` condition.
        let input = VpaInput {
            policy,
            annotations,
            explain: config.cpu_time_of_day.is_some_and(|t| t.only_if.is_some()),
        };
        let mut r = recommend(&config, &aggregates, input).map_err(|e| e.to_string())?;
        let shapes = if view.candidates.is_empty() {
            Vec::new()
        } else {
            self.shapes(index)
        };
        for s in &shapes {
            view.candidates.prepare(&s.placement);
        }
        let shape_refs: Vec<&PodShape> = shapes.iter().map(|s| &**s).collect();
        let namespace = v.metadata.namespace.as_deref().unwrap_or_default();
        let target = v.spec.target_ref.as_ref().map(|t| {
            (
                namespace,
                t.api_version.as_deref(),
                t.kind.as_str(),
                t.name.as_str(),
            )
        });
        let notes = size_within_cluster(&mut r.containers, view, target, &shape_refs, policy);
        Ok((
            to_api_recommendation(&r.containers),
            low_confidence_message(&r.containers, &aggregates),
            notes,
            profile_rule(&r.explain),
        ))
    }

    /// Logs a VPA that stays without a recommendation, at most once per
    /// [`RECOMMENDATION_MISSING_LOG_PERIOD`].
    fn track_missing(&mut self, key: &VpaKey, findings: &Findings, now: Nanos) {
        let has = has_entries(findings.recommendation.as_ref());
        let Some(e) = self.vpas.get_mut(key) else {
            return;
        };
        let t = track_missing_recommendation(
            &format!("{}/{}", key.0, key.1),
            has,
            e.missing_logged,
            now,
            RECOMMENDATION_MISSING_LOG_PERIOD,
        );
        e.missing_logged = t.last_logged;
        if let Some(m) = t.log {
            tracing::warn!("{m}");
        }
    }

    /// Counts the outcomes and remembers what was written.
    fn record_status_results(
        &mut self,
        results: Vec<(StatusWrite, Result<(), Error>)>,
        report: &mut LoopReport,
    ) {
        for (w, r) in results {
            let result = match r {
                Ok(()) => {
                    report.status_writes += 1;
                    if let Some(e) = self.vpas.get_mut(&w.key) {
                        e.last_written = Some(LastWrite {
                            base: w.base,
                            written: w.written,
                        });
                    }
                    "ok"
                }
                Err(err) => {
                    report.status_errors += 1;
                    self.record_error(&err);
                    "error"
                }
            };
            self.metrics
                .status_writes
                .get_or_create(&vec![("result", result)])
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Container `app`'s recommendation with target 250m and 256Mi.
    fn app_at_250m_256mi() -> ContainerRecommendation {
        ContainerRecommendation {
            container_name: "app".into(),
            target: Resources {
                cpu: Some(250),
                memory: Some(1 << 28),
            },
            ..Default::default()
        }
    }

    /// A VPA whose spec breaks a rule (applied while the webhook was away) keeps its recommendation written,
    /// with `ConfigUnsupported` saying which field; a target that cannot be resolved has its own reason.
    #[test]
    fn an_invalid_spec_is_a_condition_naming_the_field_and_the_status_is_still_written() {
        let spec: tailor_crds::VerticalPodAutoscalerSpec = serde_json::from_value(serde_json::json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "resourcePolicy": {"containerPolicies": [{
                "containerName": "app", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1", "memory": "1e30"}
            }]}
        }))
        .unwrap();
        let message = invalid_spec_message("web", &spec).unwrap();
        assert!(
            message.contains("spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]")
                && message.contains("spec.resourcePolicy.containerPolicies[0].maxAllowed[memory]"),
            "{message}"
        );
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let recs = [app_at_250m_256mi()];
        let status = plan_status(
            &[],
            &Findings {
                recommendation: to_api_recommendation(&recs),
                pods_matched: true,
                invalid_spec: Some(message.clone()),
                unsupported: Some("Cannot read targetRef".into()),
                ..Default::default()
            },
            &t0,
        );
        assert!(has_entries(status.recommendation.as_ref()));
        let conditions = status.conditions.unwrap_or_default();
        let c = conditions
            .iter()
            .find(|c| c.type_ == cond::CONFIG_UNSUPPORTED)
            .unwrap();
        assert_eq!(c.reason.as_deref(), Some(INVALID_SPEC_REASON));
        assert_eq!(c.message.as_deref(), Some(message.as_str()));
        let target_only = plan_status(
            &[],
            &Findings {
                unsupported: Some("Cannot read targetRef".into()),
                ..Default::default()
            },
            &t0,
        );
        let c = target_only
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == cond::CONFIG_UNSUPPORTED)
            .unwrap();
        assert_eq!(c.reason.as_deref(), Some(TARGET_REASON));
        assert!(
            invalid_spec_message("web", &tailor_crds::VerticalPodAutoscalerSpec::default())
                .is_none()
        );
    }

    #[test]
    fn each_reason_of_sizing_within_the_cluster_is_counted_and_exported() {
        let capped = Findings {
            node_fit: Some(NodeFitNote::Capped {
                reason: "LargestNode",
                message: "node n1".into(),
            }),
            left_to_hpa: Some("cpu to HPA web".into()),
            ..Default::default()
        };
        let none_fits = Findings {
            node_fit: Some(NodeFitNote::NoneFits("no node".into())),
            ..Default::default()
        };
        let mut sized = SizedWithinCluster::default();
        for f in [&capped, &none_fits, &Findings::default()] {
            sized.count(f);
        }
        assert_eq!(
            sized,
            SizedWithinCluster {
                node_capped: 1,
                no_node_fits: 1,
                left_to_hpa: 1
            }
        );
        let metrics = crate::process::metrics::Metrics::new();
        metrics.sized_within_cluster(&sized);
        let text = metrics.encode();
        for reason in ["node_capped", "no_node_fits", "left_to_hpa"] {
            assert!(
                text.contains(&format!(
                    "tailor_recommender_vpas_sized_within_cluster{{reason=\"{reason}\"}} 1"
                )),
                "{text}"
            );
        }
    }

    /// `auto`'s rule per container becomes the `TailorProfileRule` condition (rule names only, so that it
    /// does not change every loop); no condition for profiles without a per-container rule.
    #[test]
    fn the_profile_rule_is_a_condition() {
        use tailor_engine::estimate::{ContainerExplain, CpuRule};
        let ex = |c: &str, rule: Option<&'static str>| ContainerExplain {
            container: c.into(),
            cpu_rule: rule.map(|rule| CpuRule {
                rule,
                reason: "figures".into(),
                autocorrelation: Some(0.9),
                stability: None,
                hourly_percentile: None,
                priced_cores: Some(0.25),
                plan_cores_by_hour: None,
            }),
            ..Default::default()
        };
        assert_eq!(profile_rule(&[ex("a", None)]), None);
        let (reason, message) =
            profile_rule(&[ex("web", Some("daily")), ex("proxy", Some("upstream"))]).unwrap();
        assert_eq!(reason, "Daily");
        assert!(message.starts_with("web: CPU follows") && message.contains("proxy: upstream"));
        assert!(!message.contains("0.9"), "{message}");
        assert!(!message.contains("0.25"), "{message}");
        assert_eq!(
            profile_rule(&[ex("proxy", Some("upstream"))]).unwrap().0,
            "Upstream"
        );
        let (reason, message) =
            profile_rule(&[ex("web", Some("priced")), ex("proxy", Some("upstream"))]).unwrap();
        assert_eq!(reason, "Priced");
        assert!(
            message.starts_with("web: all-day CPU request priced"),
            "{message}"
        );
        assert!(!message.contains("memory"), "{message}");
        // A container whose memory is set over its steady daily peaks says so; the reason stays the CPU's.
        let mut steady = ex("web", Some("priced"));
        steady.memory_rule = Some(tailor_engine::stable_memory::MemoryRule {
            rule: "steady",
            reason: "figures".into(),
        });
        let (reason, message) = profile_rule(&[steady]).unwrap();
        assert_eq!(reason, "Priced");
        assert!(
            message.ends_with("memory a small margin over its steady daily peaks"),
            "{message}"
        );
        let (reason, message) =
            profile_rule(&[ex("web", Some("daily")), ex("proxy", Some("upstream"))]).unwrap();
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let f = Findings {
            recommendation: Some(RecommendedPodResources {
                container_recommendations: Some(vec![RecommendedContainerResources {
                    container_name: Some("web".into()),
                    ..Default::default()
                }]),
            }),
            pods_matched: true,
            profile_rule: Some((reason, message)),
            ..Default::default()
        };
        let status = plan_status(&[], &f, &t0);
        let c = status.conditions.unwrap();
        let rule = c.iter().find(|c| c.type_ == PROFILE_RULE).unwrap();
        assert_eq!(
            (rule.status.as_str(), rule.reason.as_deref()),
            ("True", Some("Daily"))
        );
        let without = plan_status(
            &c,
            &Findings {
                profile_rule: None,
                ..f
            },
            &t0,
        );
        assert!(
            without
                .conditions
                .unwrap()
                .iter()
                .all(|c| c.type_ != PROFILE_RULE)
        );
    }

    #[test]
    fn a_write_is_skipped_when_stored_or_already_sent_from_the_same_base() {
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let a = plan_status(&[], &Findings::default(), &t0);
        let b = plan_status(
            &[],
            &Findings {
                pods_matched: true,
                ..Default::default()
            },
            &t0,
        );
        let (none, a_, b_) = (
            StatusDigest::of(None),
            StatusDigest::of(Some(&a)),
            StatusDigest::of(Some(&b)),
        );
        assert!(needs_write(none, a_, None));
        assert!(!needs_write(a_, a_, None));
        let last = LastWrite {
            base: a_,
            written: b_,
        };
        assert!(!needs_write(a_, b_, Some(&last)));
        assert!(needs_write(b_, a_, Some(&last)));
        assert_ne!(StatusDigest::of(None), StatusDigest::of(Some(&a)));
        assert_eq!(
            StatusDigest::of(Some(&a)),
            StatusDigest::of(Some(&a.clone()))
        );
    }
    use crate::time::to_time_secs;

    #[test]
    fn transitions_keep_times_and_sort() {
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let t1 = to_time_secs(2_000_000_000_000).unwrap();
        let f = Findings::default();
        let s0 = plan_status(&[], &f, &t0);
        let c = s0.conditions.as_ref().unwrap();
        assert_eq!(
            c.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["NoPodsMatched", "RecommendationProvided"]
        );
        assert_eq!(c[1].status, "False");
        assert_eq!(c[1].reason.as_deref(), Some("NoPodsMatched"));
        let s1 = plan_status(s0.conditions.as_deref().unwrap_or_default(), &f, &t1);
        assert_eq!(s0, s1, "unchanged status keeps transition times");
        let f2 = Findings {
            pods_matched: true,
            recommendation: to_api_recommendation(&[ContainerRecommendation {
                container_name: "app".into(),
                ..Default::default()
            }]),
            low_confidence: Some("x".into()),
            ..Default::default()
        };
        let s2 = plan_status(s1.conditions.as_deref().unwrap_or_default(), &f2, &t1);
        let c = s2.conditions.as_ref().unwrap();
        assert_eq!(
            c.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [
                ("LowConfidence", "True"),
                ("RecommendationProvided", "True")
            ]
        );
        assert_eq!(c[1].last_transition_time, Some(t1));
    }

    #[test]
    fn a_planned_write_carries_the_merge_patch_and_the_written_digest() {
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let recs = [app_at_250m_256mi()];
        let status = plan_status(
            &[],
            &Findings {
                recommendation: to_api_recommendation(&recs),
                pods_matched: true,
                ..Default::default()
            },
            &t0,
        );
        let key = ("ns".to_string(), "v".to_string());
        let written = StatusDigest::of(Some(&status));
        let w = StatusWrite::new(key.clone(), StatusDigest::of(None), written, &status).unwrap();
        assert_eq!(w.key, key);
        assert_eq!(w.base, StatusDigest::of(None));
        assert_eq!(w.written, StatusDigest::of(Some(&status)));
        let body: serde_json::Value = serde_json::from_str(w.body.get()).unwrap();
        assert_eq!(
            body["status"]["recommendation"]["containerRecommendations"][0]["target"],
            serde_json::json!({"cpu": "250m", "memory": "256Mi"})
        );
        assert_eq!(
            body["status"]["conditions"][0]["type"],
            "RecommendationProvided"
        );
        // Absent fields are sent as null, so that the merge removes them.
        assert_eq!(
            body["status"]["observedGeneration"],
            serde_json::Value::Null
        );
        assert!(
            body["status"]
                .as_object()
                .unwrap()
                .contains_key("observedGeneration")
        );

        let none = plan_status(&[], &Findings::default(), &t0);
        let w = StatusWrite::new(key, written, StatusDigest::of(Some(&none)), &none).unwrap();
        let body: serde_json::Value = serde_json::from_str(w.body.get()).unwrap();
        assert!(
            body["status"]
                .as_object()
                .unwrap()
                .contains_key("recommendation")
        );
        assert_eq!(body["status"]["recommendation"], serde_json::Value::Null);
        assert_ne!(w.written, StatusDigest::of(Some(&status)));
    }
}
