//! `tailor plan`: what one updater iteration would do to the pods of a snapshot, with the decision code the
//! binary runs ([`run_once`] over the snapshot's objects) and a dry-run actuator that honours the
//! snapshot's PodDisruptionBudgets and the rate limits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use json_patch::PatchOperation;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tailor_core::target::selector_matches;
use tailor_crds::VerticalPodAutoscaler;

use super::snapshot::Snapshot;
use crate::decisions::config::RestrictionConfig;
use crate::decisions::resize::ResizePlan;
use crate::decisions::restriction::{Creator, ReplicaLookup, unknown_kind_replicas};
use crate::decisions::skip::Skip;
use crate::iteration::{ActError, Action, Actuator, IterationConfig, UpdaterState, run_once};
use crate::process::metrics::IterationGauges;
use crate::run_loop::{pods_in_key_order, vpas_in_key_order};
use crate::views::cache_view::{CacheView, NamespaceLabels};
use crate::views::lease;
use crate::views::pods::{self, CachedPod};
use crate::writers::events::UpdaterEvent;
use tailor_kube::rate::{RateSettings, TokenBucket};

/// Replica counts read from the snapshot's controllers (docs/design/upstream-updater.md §3.1 table).
#[derive(Debug, Default)]
pub struct SnapshotReplicas {
    counts: HashMap<(String, String, String), Option<i32>>,
    /// Controllers of other kinds: `spec.replicas`, as the binary reads it from `/scale`.
    scaled: HashMap<(String, String, String), i32>,
}

impl SnapshotReplicas {
    /// The counts of a snapshot's controllers.
    pub fn of(s: &Snapshot) -> Self {
        SnapshotReplicas {
            counts: s.replicas.clone(),
            scaled: s.scale_replicas.clone(),
        }
    }
}

impl ReplicaLookup for SnapshotReplicas {
    fn configured(&self, c: &Creator, live: i32) -> Result<i32, String> {
        match c.kind.as_str() {
            "ReplicaSet" | "StatefulSet" | "ReplicationController" | "DaemonSet" => self
                .counts
                .get(&(c.kind.clone(), c.namespace.clone(), c.name.clone()))
                .ok_or_else(|| {
                    format!("{} {}/{} not in the snapshot", c.kind, c.namespace, c.name)
                })?
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{} {}/{} has no replicas", c.kind, c.namespace, c.name)),
            "Job" => Ok(live),
            // As the binary's `/scale` count (cache_view::ReplicaStores): a positive `spec.replicas`, else
            // upstream's 0.
            _ => Ok(self
                .scaled
                .get(&(c.kind.clone(), c.namespace.clone(), c.name.clone()))
                .copied()
                .filter(|n| *n > 0)
                .unwrap_or_else(unknown_kind_replicas)),
        }
    }
}

/// A dry run: evictions are checked against the snapshot's PodDisruptionBudgets (`status.disruptionsAllowed`,
/// consumed as they go), resizes always succeed, rate limits run on a virtual clock.
pub struct DryRun {
    budgets: Vec<(
        String,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
        i32,
        String,
    )>,
    eviction: TokenBucket,
    in_place: TokenBucket,
    clock: f64,
    deadline: f64,
    /// The events the binary would record on VPAs, as notes.
    pub notes: Vec<String>,
}

impl DryRun {
    /// A dry run over `snapshot`'s budgets, with `rate` limits over one `interval`.
    pub fn new(snapshot: &Snapshot, rate: RateSettings, interval: Duration) -> Self {
        let budgets = snapshot
            .pdbs
            .iter()
            .filter_map(|p| {
                let selector = p.spec.as_ref()?.selector.clone()?;
                let allowed = p
                    .status
                    .as_ref()
                    .map(|s| s.disruptions_allowed)
                    .unwrap_or(i32::MAX);
                Some((
                    p.metadata.namespace.clone().unwrap_or_default(),
                    selector,
                    allowed,
                    p.metadata.name.clone().unwrap_or_default(),
                ))
            })
            .collect();
        DryRun {
            budgets,
            eviction: TokenBucket::new(rate),
            in_place: TokenBucket::new(rate),
            clock: 0.0,
            deadline: interval.as_secs_f64(),
            notes: Vec::new(),
        }
    }

    fn wait(&mut self, eviction: bool) -> Result<(), ActError> {
        let bucket = if eviction {
            &mut self.eviction
        } else {
            &mut self.in_place
        };
        let wait = bucket.reserve(self.clock, self.deadline)?;
        self.clock += wait.as_secs_f64();
        Ok(())
    }
}

impl Actuator for DryRun {
    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        self.wait(true)
    }

    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        self.wait(false)
    }

    async fn evict(&mut self, pod: &CachedPod) -> Result<(), ActError> {
        let ns = pods::namespace(pod);
        let labels = pods::labels(pod);
        let matching: Vec<usize> = self
            .budgets
            .iter()
            .enumerate()
            .filter(|(_, (n, sel, _, _))| n == ns && selector_matches(sel, labels).unwrap_or(false))
            .map(|(i, _)| i)
            .collect();
        if let Some(&i) = matching.iter().find(|&&i| self.budgets[i].2 <= 0) {
            return Err(ActError::Other(format!(
                "would violate the pod's disruption budget {}",
                self.budgets[i].3
            )));
        }
        for i in matching {
            self.budgets[i].2 -= 1;
        }
        Ok(())
    }

    async fn resize(&mut self, _pod: &CachedPod, _plan: &ResizePlan) -> Result<(), ActError> {
        Ok(())
    }

    fn event(&mut self, _pod: &CachedPod, _vpa: &VerticalPodAutoscaler, _event: UpdaterEvent) {}

    async fn set_conditions(
        &mut self,
        _vpa: &VerticalPodAutoscaler,
        _conditions: Vec<tailor_crds::VerticalPodAutoscalerCondition>,
    ) -> Result<(), ActError> {
        // A dry run writes nothing; the plan lists the reasons with the VPAs and pods.
        Ok(())
    }

    fn vpa_event(&mut self, vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        // The binary's warnings on VPAs, in the plan's notes.
        if self.notes.len() < MAX_NOTES {
            self.notes.push(format!(
                "event {} on VPA {}/{}: {}",
                event.reason,
                vpa.metadata.namespace.as_deref().unwrap_or_default(),
                vpa.metadata.name.as_deref().unwrap_or_default(),
                event.message
            ));
        }
    }
}

/// The recommender's sizing-within-the-cluster decisions a VPA's status carries (a resource left to an
/// HPA, a target capped to a node: docs/decisions/hpa-coherence.md, docs/decisions/node-fit.md), which the
/// updater follows like any recommendation: one note each.
pub fn sizing_notes(vpa: &VerticalPodAutoscaler) -> Vec<String> {
    use tailor_crds::condition::{CAPPED_TO_NODE_SIZE, RESOURCES_LEFT_TO_HPA};
    let name = format!(
        "{}/{}",
        vpa.metadata.namespace.as_deref().unwrap_or_default(),
        vpa.metadata.name.as_deref().unwrap_or_default()
    );
    vpa.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| {
            (c.type_ == RESOURCES_LEFT_TO_HPA || c.type_ == CAPPED_TO_NODE_SIZE)
                && c.status == "True"
        })
        .map(|c| {
            format!(
                "VPA {name}: {}: {}",
                c.type_,
                c.message.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// The events the binary would record on VPAs `report` blocks, as the binary decides them: one for each
/// `UpdatesBlocked` condition that would change ([`crate::decisions::conditions::change`]).
fn announce_blocked(
    actuator: &mut DryRun,
    vpas: &[Arc<VerticalPodAutoscaler>],
    report: &crate::iteration::Report,
    now: Timestamp,
) {
    let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    let mut announced = HashMap::new();
    for vpa in vpas {
        let key = (
            vpa.metadata.namespace.clone().unwrap_or_default(),
            vpa.metadata.name.clone().unwrap_or_default(),
        );
        if let Some(change) =
            crate::decisions::conditions::change(vpa, report.blocked.get(&key), &time)
        {
            crate::run_loop::announce(actuator, &mut announced, vpa, key, change.event);
        }
    }
}

/// Most VPA events a plan lists in its notes.
const MAX_NOTES: usize = 1_000;

/// Settings of a plan.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// Iteration settings (from the updater's flags).
    pub iteration: IterationConfig,
    /// Budget settings.
    pub restriction: RestrictionConfig,
    /// Rate limits.
    pub rate: RateSettings,
    /// `--updater-interval`: the window the rate limits apply to.
    pub interval: Duration,
    /// The webhook's status Lease name and validity (`None`: not checked).
    pub status_lease: Option<(String, Duration)>,
    /// The iteration's clock.
    pub now: Timestamp,
    /// The webhook's pod floor (the updater's `--pod-recommendation-min-*` flags).
    pub floor: Option<tailor_core::sizing::PodFloor>,
    /// What the cluster's API server accepts of an in-place resize (its version; the binary reads it
    /// from `/version`).
    pub resize_rules: crate::decisions::resize_check::ResizeRules,
}

/// One pod in the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodPlan {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The VPA (`namespace/name`).
    pub vpa: String,
    /// Its effective mode.
    pub mode: String,
    /// `evict`, `resize` or `skip`.
    pub action: &'static str,
    /// Why it is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The resize patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<Vec<PatchOperation>>,
}

/// A VPA left out before its pods were matched.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SkippedVpa {
    /// `namespace/name`.
    pub vpa: String,
    /// Why.
    pub reason: String,
}

/// The plan of one iteration.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The clock used.
    pub now: String,
    /// Whether the webhook's status lease was fresh (or not checked).
    pub admission_alive: bool,
    /// Per pod, in VPA processing order then pod name.
    pub pods: Vec<PodPlan>,
    /// VPAs not considered, with the reason.
    pub skipped_vpas: Vec<SkippedVpa>,
    /// Set when the iteration would stop early (a rate limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
    /// Notes for the reader (assumptions made).
    pub notes: Vec<String>,
}

/// The iteration settings of a plan: without webhook-scope flags, the scope of the webhook as the snapshot's
/// MutatingWebhookConfiguration registers it (the deployed updater gets the same from the chart's flags), said
/// in a note.
fn iteration_for(
    snapshot: &Snapshot,
    settings: &PlanSettings,
    notes: &mut Vec<String>,
) -> crate::iteration::IterationConfig {
    let mut iteration = settings.iteration.clone();
    if iteration.webhook_scope == crate::decisions::scope::WebhookScope::default()
        && let Some(scope) = &snapshot.webhook_scope
    {
        iteration.webhook_scope = scope.clone();
        notes.push(format!(
            "webhook scope from the snapshot's MutatingWebhookConfiguration ({}): namespaces excluded: {}",
            crate::decisions::scope::POD_WEBHOOK_NAME,
            if scope.excluded_namespaces.is_empty() {
                "none".to_owned()
            } else {
                scope.excluded_namespaces.join(", ")
            }
        ));
    }
    iteration
}

/// Plans one iteration over `snapshot`.
pub async fn plan(snapshot: &Snapshot, settings: &PlanSettings) -> Plan {
    let mut notes = Vec::new();
    if !snapshot.ignored.is_empty() {
        notes.push(format!(
            "{} documents of other kinds ignored",
            snapshot.ignored.len()
        ));
    }
    let (admission_alive, alive_reason) = admission_from_lease(snapshot, settings, &mut notes);
    // In the order the binary hands them over (namespace/name), so that ties fall the same way.
    notes.extend(snapshot.index.vpas().iter().flat_map(sizing_notes));
    let vpas = vpas_in_key_order(
        snapshot
            .index
            .vpas()
            .iter()
            .cloned()
            .map(Arc::new)
            .collect(),
    );
    let pods = pods_in_key_order(snapshot.pods.clone());
    let view = snapshot_view(snapshot, settings);
    let iteration = iteration_for(snapshot, settings, &mut notes);
    let mut actuator = DryRun::new(snapshot, settings.rate, settings.interval);
    let mut state = UpdaterState::default();
    let mut gauges = IterationGauges::default();
    let report = run_once(
        &iteration,
        &mut state,
        &view,
        &mut actuator,
        &vpas,
        || pods.clone(),
        settings.now,
        &mut gauges,
        None,
    )
    .await;
    announce_blocked(&mut actuator, &vpas, &report, settings.now);
    notes.append(&mut actuator.notes);
    let out = pod_plans(&report, admission_alive);
    if let Some(why) = alive_reason {
        notes.push(format!(
            "admission not alive: {why}; nothing would be updated"
        ));
    }
    Plan {
        now: settings.now.to_string(),
        admission_alive,
        pods: out,
        skipped_vpas: report
            .skipped_vpas
            .iter()
            .map(|(ns, name, reason)| SkippedVpa {
                vpa: format!("{ns}/{name}"),
                reason: reason.clone(),
            })
            .collect(),
        aborted: report.aborted,
        notes,
    }
}

/// Whether the webhook is alive by its status lease in the snapshot (always, when not checked), and why not;
/// a lease missing from the snapshot is assumed alive, said in a note.
fn admission_from_lease(
    snapshot: &Snapshot,
    settings: &PlanSettings,
    notes: &mut Vec<String>,
) -> (bool, Option<String>) {
    let mut admission_alive = true;
    let mut alive_reason = None;
    if let Some((name, timeout)) = &settings.status_lease {
        match snapshot
            .leases
            .iter()
            .rfind(|l| l.metadata.name.as_deref() == Some(name.as_str()))
        {
            Some(l) if lease::is_valid(l, *timeout, settings.now) => {}
            Some(_) => {
                admission_alive = false;
                alive_reason = Some(format!(
                    "status lease {name} is older than {}",
                    humantime::format_duration(*timeout)
                ));
            }
            None => notes.push(format!(
                "the webhook's status lease {name} is not in the snapshot; assumed alive"
            )),
        }
    }
    (admission_alive, alive_reason)
}

/// The binary's cache view, filled from the snapshot: its VPA index with its ResourceQuotas, controllers'
/// replicas, upstream VPAs and namespaces' labels, with the settings' floor and resize rules.
fn snapshot_view(snapshot: &Snapshot, settings: &PlanSettings) -> CacheView<SnapshotReplicas> {
    let mut view =
        CacheView::new(
            snapshot.index.index().with_quotas(Arc::new(
                tailor_kube::quota_cache::StaticQuotas::new(&snapshot.resource_quotas),
            )),
            SnapshotReplicas::of(snapshot),
            settings.restriction.clone(),
            settings.iteration.gates,
            settings.now,
        );
    view.floor = settings.floor;
    view.resize_rules = settings.resize_rules;
    view.upstream = Some(tailor_kube::upstream_vpa::UpstreamVpas::fixed(
        snapshot.upstream_vpas.iter().cloned(),
    ));
    view.namespaces = Some(NamespaceLabels::Fixed(
        snapshot
            .namespaces
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                let mut labels = n.metadata.labels.clone().unwrap_or_default();
                labels
                    .entry("kubernetes.io/metadata.name".to_owned())
                    .or_insert_with(|| name.clone());
                Some((name, labels))
            })
            .collect(),
    ));
    view
}

/// One [`PodPlan`] per pod of the iteration's report, in its order; every pod is skipped when the webhook is
/// not alive.
fn pod_plans(report: &crate::iteration::Report, admission_alive: bool) -> Vec<PodPlan> {
    let mut out = Vec::new();
    for v in &report.vpas {
        for (pod, action) in &v.pods {
            let (action, reason, patch) = match action {
                _ if !admission_alive => ("skip", Some(Skip::AdmissionNotAlive.to_string()), None),
                Action::Evict => ("evict", None, None),
                Action::Resize(ops) => ("resize", None, Some(ops.clone())),
                Action::Skip(s) => ("skip", Some(s.to_string()), None),
            };
            out.push(PodPlan {
                namespace: v.namespace.clone(),
                pod: pod.clone(),
                vpa: format!("{}/{}", v.namespace, v.name),
                mode: v.mode.clone(),
                action,
                reason,
                patch,
            });
        }
    }
    out
}

/// A short text for a resize patch: `cpu request 250m, memory limit 512Mi`.
pub fn describe_patch(ops: &[PatchOperation]) -> String {
    let mut parts = Vec::new();
    for op in ops {
        if let PatchOperation::Add(add) = op {
            let path = add.path.to_string();
            let segments: Vec<&str> = path.split('/').collect();
            if let [_, "spec", "containers", i, "resources", field, resource] = segments.as_slice()
            {
                let field = field.trim_end_matches('s');
                let value = add.value.as_str().unwrap_or_default();
                parts.push(format!("[{i}] {resource} {field} {value}"));
            }
        }
    }
    parts.join(", ")
}

/// The plan as an aligned table.
pub fn table(plan: &Plan) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "NAMESPACE".into(),
        "POD".into(),
        "VPA".into(),
        "MODE".into(),
        "ACTION".into(),
        "DETAIL".into(),
    ]];
    for p in &plan.pods {
        let detail = match (&p.reason, &p.patch) {
            (Some(r), _) => r.chars().take(120).collect(),
            (None, Some(ops)) => describe_patch(ops),
            _ => String::new(),
        };
        rows.push([
            p.namespace.clone(),
            p.pod.clone(),
            p.vpa.rsplit('/').next().unwrap_or_default().to_owned(),
            p.mode.clone(),
            p.action.to_owned(),
            detail,
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        for (c, w) in widths.iter().enumerate() {
            out.push_str(&format!("{:<w$}  ", r[c], w = *w));
        }
        out.push_str(&r[5]);
        out.push('\n');
    }
    for s in &plan.skipped_vpas {
        out.push_str(&format!("VPA {} not considered: {}\n", s.vpa, s.reason));
    }
    if let Some(a) = &plan.aborted {
        out.push_str(&format!("the iteration stops early: {a}\n"));
    }
    for n in &plan.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let count = |a: &str| plan.pods.iter().filter(|p| p.action == a).count();
    out.push_str(&format!(
        "{} evict, {} resize, {} skip\n",
        count("evict"),
        count("resize"),
        count("skip")
    ));
    out
}
