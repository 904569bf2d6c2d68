//! One updater iteration after the liveness check (docs/design/upstream-updater.md §1.2 steps 2–10), over
//! objects the caller lists and with every decision and action injected: the binary passes its caches and the API,
//! `tailor plan` a snapshot and a dry run, the conformance tests upstream's doubles.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use json_patch::PatchOperation;
use k8s_openapi::jiff::Timestamp;
use tailor_core::policy::{has_startup_boost, update_mode};
use tailor_core::quantity::QuantityError;
use tailor_crds::{RecommendedPodResources, UpdateMode, VerticalPodAutoscaler};

use crate::decisions::calculator::PriorityCalculator;
use crate::decisions::config::{FeatureGates, PriorityConfig};
use crate::decisions::conflicts::Conflicts;
use crate::decisions::eviction_admission::EvictionAdmission;
use crate::decisions::infeasible::{InfeasibleAttempts, is_infeasible_error};
use crate::decisions::modes::{self, Path};
use crate::decisions::priority::PodPriority;
use crate::decisions::quota::QuotaUse;
use crate::decisions::resize::{ResizeError, ResizePlan};
use crate::decisions::restriction::{InPlaceDecision, InPlaceTimers, RestrictionError};
use crate::decisions::skip::Skip;
use crate::process::metrics::{GaugeKind, IterationGauges, Metrics, VpaLabel};
use crate::views::pods::{self, CachedPod};
use crate::writers::events::{self, UpdaterEvent};

/// The mutable state an updater keeps between iterations.
#[derive(Debug, Default)]
pub struct UpdaterState {
    /// Infeasible resize attempts (mode `InPlace`).
    pub infeasible: InfeasibleAttempts,
    /// Fallback timers of resizing pods.
    pub timers: InPlaceTimers,
    /// `evictionRequirements` of this iteration's pods.
    pub admission: EvictionAdmission,
    /// Iterations run (rotates the VPA order with [`IterationConfig::fair_order`]).
    pub iterations: u64,
    /// The `UpdatesBlocked` message last announced by an event, per blocked VPA (namespace, name): one
    /// event per change even while the VPA cache lags behind the condition written.
    pub announced: std::collections::HashMap<(String, String), String>,
    /// The replacements of evicted pods, and the workloads whose evictions pause because one came back
    /// without Tailor's webhook.
    pub replacements: crate::decisions::replacements::ReplacementWatch,
    /// The limit-policy error last announced per selected VPA (namespace, name) whose annotation does not
    /// parse: one warning per VPA and error (docs/limit-policy.md).
    pub limit_policy_errors: std::collections::HashMap<(String, String), String>,
}

/// Per-VPA budget decisions (docs/design/upstream-updater.md §3, §5.3–§5.4, §5.8), built fresh for each VPA of
/// each iteration.
pub trait Gate {
    /// `CanEvict`, with the reason when refused.
    fn can_evict(
        &mut self,
        pod: &CachedPod,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<(), Skip>;
    /// `CanInPlaceUpdate`.
    fn can_in_place_update(
        &mut self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<InPlaceDecision, QuantityError>;
    /// `CanUnboost`.
    fn can_unboost(&mut self, pod: &CachedPod, vpa: &VerticalPodAutoscaler, now: Timestamp)
    -> bool;
    /// Checks an eviction before the API call.
    fn check_evict(
        &mut self,
        pod: &CachedPod,
        state: &mut UpdaterState,
        now: Timestamp,
    ) -> Result<(), RestrictionError>;
    /// Counts a successful eviction.
    fn evicted(&mut self, pod: &CachedPod);
    /// Checks an in-place update before the PATCH.
    fn check_in_place(&mut self, pod: &CachedPod) -> Result<(), RestrictionError>;
    /// Counts a started in-place update.
    fn in_place_started(&mut self, pod: &CachedPod, state: &mut UpdaterState, now: Timestamp);
    /// Why an in-place update of `pod` is deferred (for reports).
    fn deferral_reason(&self, pod: &CachedPod) -> Skip;
}

/// What the iteration reads from the cluster's caches (pure lookups).
pub trait ClusterView {
    /// The budget decisions of one VPA.
    type Gate: Gate;
    /// Reads the VPA's target selector (docs/design/upstream-updater.md §1.2 step 3); an error skips the VPA.
    fn fetch_selector(&self, vpa: &VerticalPodAutoscaler) -> Result<(), String>;
    /// Index into `selected` of the VPA that governs `pod` (docs/design/upstream-updater.md §1.2 step 6).
    fn controlling_vpa(&self, pod: &CachedPod, selected: &Candidates) -> Option<usize>;
    /// The budgets of `vpa`'s live pods.
    fn gate(&self, vpa: &VerticalPodAutoscaler, pods: &[Arc<CachedPod>]) -> Self::Gate;
    /// The processed (capped) recommendation for `pod` (docs/design/upstream-updater.md §2.1).
    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        pod: &CachedPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String>;
    /// Whether pods that declare pod-level resources are compared with their VPA's envelope
    /// (`--pod-level-resources`, docs/pod-level-resources.md).
    fn pod_level_resources(&self) -> bool {
        false
    }
    /// The priority of `pod` for `rec` (docs/design/upstream-updater.md §2.3).
    fn priority(
        &self,
        pod: &CachedPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String>;
    /// The two patches that resize `pod` to `vpa`'s recommendation.
    fn resize_plan(
        &self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> Result<ResizePlan, ResizeError>;
    /// Why quota fit holds back an update of `pod` to `vpa`'s recommendation (docs/decisions/quota-fit.md);
    /// views without quotas never do.
    fn quota_hold(
        &self,
        _vpa: &VerticalPodAutoscaler,
        _pod: &CachedPod,
        _purpose: QuotaUse,
    ) -> Option<Skip> {
        None
    }
    /// Starts an iteration at `now` (views without per-iteration caches ignore it).
    fn begin_iteration(&mut self, _now: Timestamp) {}
    /// The labels of `namespace`, when known (for the webhook's namespace selector).
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>>;
    /// The upstream VPA (`autoscaling.k8s.io`) in a mode other than `Off` that targets `vpa`'s workload
    /// too ([`crate::decisions::upstream`]); `Err` while upstream VPAs are not known yet. Views without upstream VPAs
    /// have none.
    fn upstream_vpa(
        &self,
        _vpa: &VerticalPodAutoscaler,
    ) -> Result<Option<tailor_kube::upstream_vpa::UpstreamVpa>, String> {
        Ok(None)
    }
}

/// The VPAs an iteration selected, indexed by target (namespace, kind, name) for pod matching.
#[derive(Debug, Default)]
pub struct Candidates {
    /// The selected VPAs, in list order.
    pub vpas: Vec<Arc<VerticalPodAutoscaler>>,
    by_target: std::collections::HashMap<(String, String, String), Vec<usize>>,
    namespaces: std::collections::HashSet<String>,
    custom_target_namespaces: std::collections::HashSet<String>,
}

impl Candidates {
    /// Indexes `vpas` by their target.
    pub fn new(vpas: Vec<Arc<VerticalPodAutoscaler>>) -> Self {
        let mut by_target: std::collections::HashMap<(String, String, String), Vec<usize>> =
            std::collections::HashMap::new();
        let mut namespaces = std::collections::HashSet::new();
        let mut custom_target_namespaces = std::collections::HashSet::new();
        for (i, v) in vpas.iter().enumerate() {
            if let Some(t) = v.spec.target_ref.as_ref() {
                let ns = v.metadata.namespace.clone().unwrap_or_default();
                namespaces.insert(ns.clone());
                if !tailor_core::target::is_well_known(&t.kind) {
                    custom_target_namespaces.insert(ns.clone());
                }
                by_target
                    .entry((ns, t.kind.clone(), t.name.clone()))
                    .or_default()
                    .push(i);
            }
        }
        Candidates {
            vpas,
            by_target,
            namespaces,
            custom_target_namespaces,
        }
    }

    /// Whether a selected VPA in `namespace` targets a kind outside the well-known ones. Only then can a
    /// pod whose controller is of another kind belong to a selected VPA (no well-known controller owns
    /// objects of other kinds), so only then is its controller looked up through `/scale`.
    pub fn has_custom_target(&self, namespace: &str) -> bool {
        self.custom_target_namespaces.contains(namespace)
    }

    /// Whether a selected VPA lives in `namespace` (pods elsewhere need no matching, nor any lookup).
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// Indices of the VPAs targeting `kind`/`name` in `namespace`.
    pub fn for_target(&self, namespace: &str, kind: &str, name: &str) -> &[usize] {
        self.by_target
            .get(&(namespace.to_owned(), kind.to_owned(), name.to_owned()))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

/// Why an action against the API failed.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The API server refused or failed the call.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The rate limiter refused to wait.
    #[error(transparent)]
    RateLimit(#[from] tailor_kube::rate::WaitError),
    /// Any other failure (dry runs, simulated PodDisruptionBudgets).
    #[error("{0}")]
    Other(String),
}

impl ActError {
    /// Whether a PodDisruptionBudget refused the eviction (HTTP 429): retried next iteration, not an error.
    pub fn is_disruption_budget(&self) -> bool {
        match self {
            ActError::Api(kube::Error::Api(s)) => s.code == 429,
            ActError::Other(m) => m.contains("disruption budget"),
            _ => false,
        }
    }
}

/// How the iteration acts on the cluster.
pub trait Actuator {
    /// Waits for an eviction token; an error aborts the iteration.
    fn wait_eviction(&mut self) -> impl Future<Output = Result<(), ActError>>;
    /// Waits for an in-place token; an error aborts the iteration.
    fn wait_in_place(&mut self) -> impl Future<Output = Result<(), ActError>>;
    /// Posts the Eviction of `pod`.
    fn evict(&mut self, pod: &CachedPod) -> impl Future<Output = Result<(), ActError>>;
    /// Sends the resize PATCH, then the annotation PATCH (whose failure is only logged).
    fn resize(
        &mut self,
        pod: &CachedPod,
        plan: &ResizePlan,
    ) -> impl Future<Output = Result<(), ActError>>;
    /// Records an event on the pod or on `vpa`.
    fn event(&mut self, pod: &CachedPod, vpa: &VerticalPodAutoscaler, event: UpdaterEvent);
    /// Records an event on `vpa` alone (why the updater leaves it or some of its pods alone).
    fn vpa_event(&mut self, vpa: &VerticalPodAutoscaler, event: UpdaterEvent);
    /// Replaces `vpa`'s `status.conditions` (the `UpdatesBlocked` condition changed).
    fn set_conditions(
        &mut self,
        vpa: &VerticalPodAutoscaler,
        conditions: Vec<tailor_crds::VerticalPodAutoscalerCondition>,
    ) -> impl Future<Output = Result<(), ActError>>;
    /// Sets the instant by which the coming iteration's rate-limiter waits must end (actuators without
    /// a limiter ignore it).
    fn set_deadline(&mut self, _deadline: tokio::time::Instant) {}
}

/// Settings of an iteration.
#[derive(Clone, Debug, Default)]
pub struct IterationConfig {
    /// Priority thresholds.
    pub priority: PriorityConfig,
    /// Feature gates.
    pub gates: FeatureGates,
    /// `--ignored-vpa-object-namespaces`.
    pub ignored_namespaces: Vec<String>,
    /// Tailor improvement: `InPlace` honours its deferrals instead of re-patching
    /// (docs/design/upstream-updater.md §8 item 1).
    pub in_place_honours_deferrals: bool,
    /// Tailor improvement: the VPA order rotates each iteration, so that a rate limit reaches every VPA in
    /// turn (upstream: random map order, docs/design/upstream-updater.md §8 item 17).
    pub fair_order: bool,
    /// Tailor (docs/decisions/webhook-scope.md): pods the webhook never sizes are left alone (upstream acts on
    /// them, and an evicted pod comes back unchanged, to be evicted again). Default: every pod in scope, as
    /// upstream.
    pub webhook_scope: crate::decisions::scope::WebhookScope,
    /// Tailor (docs/decisions/conflicting-vpas.md, docs/design/upstream-updater.md §8 item 8): no VPA of a
    /// workload that several VPAs target is acted on, and each of them gets a warning event.
    pub skip_conflicting_vpas: bool,
    /// Tailor: how often a workload whose evictions pause (a replacement came back without Tailor's
    /// webhook) gets one probe eviction (`None`: [`crate::decisions::replacements::PROBE_AFTER`]).
    pub unsized_replacement_probe_interval: Option<std::time::Duration>,
}

/// What happened to one pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Evicted.
    Evict,
    /// Resized in place with these resize operations.
    Resize(Vec<PatchOperation>),
    /// Left alone, and why.
    Skip(Skip),
}

/// One VPA's pods and what happened to each.
#[derive(Clone, Debug, PartialEq)]
pub struct VpaReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Effective mode.
    pub mode: String,
    /// Pod name → outcome, in name order.
    pub pods: BTreeMap<String, Action>,
}

/// The outcome of an iteration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// VPAs whose pods were considered, in processing order.
    pub vpas: Vec<VpaReport>,
    /// VPAs skipped before matching, with the reason.
    pub skipped_vpas: Vec<(String, String, String)>,
    /// VPAs using the deprecated `Auto` mode.
    pub deprecated: Vec<String>,
    /// Set when the iteration stopped early (a rate-limiter wait failed).
    pub aborted: Option<String>,
    /// Evictions done.
    pub evictions: usize,
    /// Resizes done.
    pub resizes: usize,
    /// Whether pods were listed (not when no VPA was selected).
    pub pods_listed: bool,
    /// VPAs (namespace, name) whose pods, or some of them, are left alone, and why (their
    /// `UpdatesBlocked` condition).
    pub blocked: BTreeMap<(String, String), crate::decisions::conditions::Blocked>,
    /// VPAs (namespace, name) left out before it could be told whether they are blocked (upstream VPAs
    /// not listed yet): their `UpdatesBlocked` condition stays as it is.
    pub undecided: std::collections::BTreeSet<(String, String)>,
}

struct Vpa<'a> {
    vpa: &'a VerticalPodAutoscaler,
    label: VpaLabel<'a>,
    mode: UpdateMode,
}

/// Runs one iteration over `vpas` (list order) and the live `pods`: which VPAs are selected
/// (`select_vpas`), whose pods are whose (`assign_pods`), then each VPA's pass (`pass_vpa`) until
/// one aborts the iteration.
#[allow(clippy::too_many_arguments)]
pub async fn run_once<V: ClusterView, A: Actuator>(
    config: &IterationConfig,
    state: &mut UpdaterState,
    view: &V,
    actuator: &mut A,
    vpas: &[Arc<VerticalPodAutoscaler>],
    list_pods: impl FnOnce() -> Vec<Arc<CachedPod>>,
    now: Timestamp,
    gauges: &mut IterationGauges,
    metrics: Option<&Metrics>,
) -> Report {
    let mut report = Report::default();
    let selected = select_vpas(config, view, vpas, &mut report);
    if !state.replacements.is_empty() {
        let keys: std::collections::HashSet<(&str, &str)> = selected
            .iter()
            .map(|v| {
                let m = &v.metadata;
                (
                    m.namespace.as_deref().unwrap_or_default(),
                    m.name.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        (state.replacements).retain(|(ns, name)| keys.contains(&(ns.as_str(), name.as_str())));
    }
    report_limit_policies(state, actuator, &selected);
    if selected.is_empty() {
        state.admission.clean_up();
        return report;
    }
    let selected = Candidates::new(selected);
    let all_pods = list_pods();
    report.pods_listed = true;
    let (assigned, order) = assign_pods(config, state, view, &selected, &all_pods);
    for i in order {
        let (vpa, vpa_pods) = (selected.vpas[i].as_ref(), &assigned[i]);
        let passed = pass_vpa(
            config,
            &mut *state,
            view,
            &mut *actuator,
            vpa,
            vpa_pods,
            now,
            &mut *gauges,
            metrics,
            &mut report,
        )
        .await;
        if let Err(reason) = passed {
            report.aborted = Some(reason);
            break;
        }
    }
    if let Some(m) = metrics {
        let paused = i64::try_from(state.replacements.paused()).unwrap_or(i64::MAX);
        m.evictions_paused_workloads.set(paused);
    }
    report
}

/// Warns once (a log line, a `LimitPolicyInvalid` event on the VPA) about each selected VPA whose
/// limit-policy annotation does not parse (its pods' limits keep their ratio: docs/limit-policy.md), and
/// again when its error changes; forgets VPAs no longer selected or fixed.
fn report_limit_policies<A: Actuator>(
    state: &mut UpdaterState,
    actuator: &mut A,
    selected: &[Arc<VerticalPodAutoscaler>],
) {
    let mut seen = std::collections::HashSet::new();
    for vpa in selected {
        let Err(error) = tailor_core::sizing::LimitPolicy::of(vpa) else {
            continue;
        };
        let m = &vpa.metadata;
        let key = (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        let error = error.to_string();
        if state.limit_policy_errors.get(&key) != Some(&error) {
            tracing::warn!(vpa = %format!("{}/{}", key.0, key.1), %error,
                "limit policy not followed: limits keep their ratio");
            actuator.vpa_event(vpa, events::limit_policy_invalid(&error));
            state.limit_policy_errors.insert(key.clone(), error);
        }
        seen.insert(key);
    }
    state
        .limit_policy_errors
        .retain(|key, _| seen.contains(key));
}

/// The per-VPA gate (docs/design/upstream-updater.md §1.2 steps 2–5): the VPAs of `vpas` whose pods this
/// iteration looks at. Each VPA left out is in `report.skipped_vpas` with why, and those blocked for a reason
/// its owner must fix also get an Event and the `UpdatesBlocked` condition.
fn select_vpas<V: ClusterView>(
    config: &IterationConfig,
    view: &V,
    vpas: &[Arc<VerticalPodAutoscaler>],
    report: &mut Report,
) -> Vec<Arc<VerticalPodAutoscaler>> {
    let mut selected: Vec<Arc<VerticalPodAutoscaler>> = Vec::new();
    let conflicts = if config.skip_conflicting_vpas {
        Conflicts::of(vpas)
    } else {
        Conflicts::default()
    };
    for vpa in vpas {
        let ns = vpa.metadata.namespace.clone().unwrap_or_default();
        let name = vpa.metadata.name.clone().unwrap_or_default();
        if config.ignored_namespaces.contains(&ns) {
            report
                .skipped_vpas
                .push((ns, name, "namespace ignored".into()));
            continue;
        }
        if modes::is_deprecated(vpa.spec.update_policy.as_ref()) {
            report.deprecated.push(format!("{ns}/{name}"));
        }
        // Said on every VPA of the conflict, `Initial` ones included: the webhook applies one of them.
        if let Some(why) = conflicts.of_vpa(vpa) {
            let event = events::conflicting_vpas(why);
            block(report, (ns, name), event, why.to_owned());
            continue;
        }
        if !modes::is_selected(vpa) {
            let mode = modes::mode_label(&update_mode(&vpa.spec));
            report.skipped_vpas.push((ns, name, format!("mode {mode}")));
            continue;
        }
        if beside_upstream(view, vpa, report, (&ns, &name)) {
            continue;
        }
        let labels = if config.webhook_scope.needs_namespace_labels() {
            view.namespace_labels(&ns)
        } else {
            None
        };
        if let Some(why) = config
            .webhook_scope
            .namespace_excluded(&ns, labels.as_ref())
        {
            let text = format!("{why}: its pods would come back unchanged from an eviction");
            let event = events::outside_webhook(&text);
            block(report, (ns, name), event, text);
            continue;
        }
        if let Err(e) = view.fetch_selector(vpa) {
            report.skipped_vpas.push((ns, name, format!("target: {e}")));
            continue;
        }
        selected.push(vpa.clone());
    }
    selected
}

/// Leaves the VPA `key` out when an upstream VPA in a mode other than `Off` targets its workload too (it
/// is then blocked, its condition naming the upstream VPA), or while upstream VPAs are not known yet;
/// returns whether it did.
fn beside_upstream<V: ClusterView>(
    view: &V,
    vpa: &VerticalPodAutoscaler,
    report: &mut Report,
    (ns, name): (&str, &str),
) -> bool {
    let key = (ns.to_owned(), name.to_owned());
    match view.upstream_vpa(vpa) {
        Ok(None) => false,
        Ok(Some(upstream)) => {
            let text = crate::decisions::upstream::stand_down_message(&upstream);
            let why = format!("upstream VPA {}", upstream.key());
            block(report, key, events::sized_by_upstream(&text), why);
            true
        }
        Err(e) => {
            report.undecided.insert(key.clone());
            report.skipped_vpas.push((key.0, key.1, e));
            true
        }
    }
}

/// Leaves the VPA `key` out for `why`, with `event`'s reason and message for its `UpdatesBlocked`
/// condition (the event itself goes out with a change of the condition, [`crate::decisions::conditions::change`]).
fn block(report: &mut Report, key: (String, String), event: UpdaterEvent, why: String) {
    report.blocked.insert(
        key.clone(),
        crate::decisions::conditions::Blocked::of(event),
    );
    report.skipped_vpas.push((key.0, key.1, why));
}

/// The live (not terminating) pods of each selected VPA, by its index in `selected`, and the order the
/// VPAs with pods are processed in (rotated every iteration with `fair_order`). Also forgets the failed
/// resizes of pods that are gone and starts the eviction-requirements bookkeeping of this iteration.
fn assign_pods<V: ClusterView>(
    config: &IterationConfig,
    state: &mut UpdaterState,
    view: &V,
    selected: &Candidates,
    all_pods: &[Arc<CachedPod>],
) -> (Vec<Vec<Arc<CachedPod>>>, Vec<usize>) {
    let live: Vec<&Arc<CachedPod>> = all_pods
        .iter()
        .filter(|p| !pods::is_terminating(p))
        .collect();
    let mut assigned: Vec<Vec<Arc<CachedPod>>> = vec![Vec::new(); selected.vpas.len()];
    for pod in &live {
        if let Some(i) = view.controlling_vpa(pod, selected)
            && let Some(list) = assigned.get_mut(i)
        {
            list.push(Arc::clone(pod));
        }
    }
    if !state.infeasible.is_empty() {
        state
            .infeasible
            .retain_live(live.iter().map(|p| pods::uid(p)));
    }
    state.admission.loop_init(
        selected
            .vpas
            .iter()
            .zip(&assigned)
            .filter(|(_, p)| !p.is_empty())
            .map(|(v, p)| (v.as_ref(), p.as_slice())),
    );
    let mut order: Vec<usize> = (0..selected.vpas.len())
        .filter(|&i| !assigned[i].is_empty())
        .collect();
    if config.fair_order && !order.is_empty() {
        let shift = usize::try_from(state.iterations % order.len() as u64).unwrap_or(0);
        order.rotate_left(shift);
    }
    state.iterations = state.iterations.wrapping_add(1);
    (assigned, order)
}

/// One VPA's pass over its live pods ([`VpaPass`]), its report added to `report` and its updates to the
/// metrics (also when it aborts the iteration, which an `Err` says). The arguments are
/// [`run_once`]'s, which the pass borrows.
#[allow(clippy::too_many_arguments)]
async fn pass_vpa<V: ClusterView, A: Actuator>(
    config: &IterationConfig,
    state: &mut UpdaterState,
    view: &V,
    actuator: &mut A,
    vpa: &VerticalPodAutoscaler,
    vpa_pods: &[Arc<CachedPod>],
    now: Timestamp,
    gauges: &mut IterationGauges,
    metrics: Option<&Metrics>,
    report: &mut Report,
) -> Result<(), String> {
    let mode = update_mode(&vpa.spec);
    let mode_text = modes::mode_label(&mode);
    let entry = Vpa {
        vpa,
        label: VpaLabel {
            size: vpa_pods.len(),
            name: vpa.metadata.name.as_deref().unwrap_or_default(),
            namespace: vpa.metadata.namespace.as_deref().unwrap_or_default(),
            mode: &mode_text,
        },
        mode: mode.clone(),
    };
    let mut pass = VpaPass {
        config,
        state,
        view,
        actuator,
        entry: &entry,
        gate: view.gate(vpa, vpa_pods),
        now,
        size: vpa_pods.len(),
        gauges,
        metrics,
        report,
        vpa_report: VpaReport {
            namespace: entry.label.namespace.to_owned(),
            name: entry.label.name.to_owned(),
            mode: mode_text.clone(),
            pods: BTreeMap::new(),
        },
        done: Done::default(),
    };
    let aborted = pass.run(vpa_pods).await;
    let VpaPass {
        vpa_report,
        done,
        report,
        ..
    } = pass;
    // Updates are counted in the metrics once the VPA is processed, also when it aborts the iteration.
    if let Some((evicted, resized)) = metrics.map(|m| m.vpa_counters(&entry.label)) {
        evicted.inc_by(done.evicted);
        resized.inc_by(done.resized);
    }
    report.vpas.push(vpa_report);
    aborted
}

fn set(report: &mut VpaReport, pod: &CachedPod, action: Action) {
    report.pods.insert(pods::name(pod).to_owned(), action);
}

/// Updates done for one VPA, counted in the metrics once the VPA is processed.
#[derive(Default)]
struct Done {
    evicted: u64,
    resized: u64,
}

/// One VPA's pass over its pods (docs/design/upstream-updater.md §1.2 steps 7–10), one method per step: which
/// pods are in the webhook's scope ([`VpaPass::in_webhook_scope`]), start-up boosts that expired
/// ([`VpaPass::unboost`]), the mode's pass over the rest (resize in place, [`VpaPass::resize_in_place`], or
/// choose whom to evict, [`VpaPass::choose_evictions`]),
/// the evictions ([`VpaPass::evict`]) and the per-VPA gauges ([`VpaPass::count`]). An `Err` from a step aborts
/// the iteration (a rate limiter failed).
struct VpaPass<'p, V: ClusterView, A: Actuator> {
    config: &'p IterationConfig,
    state: &'p mut UpdaterState,
    view: &'p V,
    actuator: &'p mut A,
    entry: &'p Vpa<'p>,
    gate: V::Gate,
    now: Timestamp,
    /// Live pods of the VPA (the gauges' size bucket).
    size: usize,
    gauges: &'p mut IterationGauges,
    metrics: Option<&'p Metrics>,
    report: &'p mut Report,
    /// What happened to each pod.
    vpa_report: VpaReport,
    /// Updates done, counted in the metrics once the VPA is processed (also when it aborts the iteration).
    done: Done,
}

/// How many pods a mode's pass found to update, for the per-VPA gauges.
#[derive(Default)]
struct Chosen {
    /// Pods to evict, in priority order.
    evictions: Vec<Arc<CachedPod>>,
    in_place_updatable: usize,
    evictable: usize,
}

impl<V: ClusterView, A: Actuator> VpaPass<'_, V, A> {
    /// Runs every step over `vpa_pods`.
    async fn run(&mut self, vpa_pods: &[Arc<CachedPod>]) -> Result<(), String> {
        let mode_text = self.entry.label.mode;
        self.gauges.add(
            GaugeKind::ControlledPods,
            self.size,
            mode_text,
            self.size as i64,
        );
        self.watch_replacements(vpa_pods);
        let in_scope = self.in_webhook_scope(vpa_pods);
        let available = self.unboost(&in_scope).await?;
        let chosen = match modes::path(&self.entry.mode, self.config.gates.in_place) {
            path @ (Path::None | Path::InPlaceGateOff) => {
                for pod in &available {
                    self.set(pod, Action::Skip(Skip::Mode(mode_text.to_owned())));
                }
                if path == Path::InPlaceGateOff {
                    tracing::warn!(vpa = %self.entry.label.name, "updateMode InPlace needs feature gate InPlace; pods left alone");
                }
                return Ok(());
            }
            Path::InPlace => self.resize_in_place(&available).await?,
            Path::Evict => self.choose_evictions(&available),
        };
        self.evict(&chosen.evictions, vpa_pods).await?;
        self.count(&chosen);
        self.block_for_quota();
        Ok(())
    }

    /// Quota fit held back some pods (docs/decisions/quota-fit.md): the VPA says so in a warning event and its
    /// `UpdatesBlocked` condition, as for the other reasons its pods are left alone.
    fn block_for_quota(&mut self) {
        let mut held = self.vpa_report.pods.values().filter_map(|a| match a {
            Action::Skip(Skip::Quota(why)) => Some(why),
            _ => None,
        });
        let Some(first) = held.next().cloned() else {
            return;
        };
        let count = 1 + held.count();
        self.block(events::quota_held(count, &first));
    }

    fn set(&mut self, pod: &CachedPod, action: Action) {
        set(&mut self.vpa_report, pod, action);
    }

    fn key(&self) -> crate::decisions::replacements::Key {
        (
            self.vpa_report.namespace.clone(),
            self.vpa_report.name.clone(),
        )
    }

    /// Judges the replacements of the VPA's evicted pods among its live pods ([`crate::decisions::replacements`]).
    fn watch_replacements(&mut self, vpa_pods: &[Arc<CachedPod>]) {
        let key = self.key();
        if let Some(pod) = self.state.replacements.observe(&key, vpa_pods, self.now) {
            tracing::warn!(
                vpa = %format!("{}/{}", key.0, key.1),
                %pod,
                "a replacement of an evicted pod was admitted without Tailor's webhook: evictions pause"
            );
            if let Some(m) = self.metrics {
                m.record_unsized_replacement(&self.entry.label);
            }
        }
    }

    /// The pods the webhook sizes. Pods it never sizes count in the budgets but are not updated
    /// (docs/decisions/webhook-scope.md); nor are pods that carry a mark of upstream VPA (its numbers win on a
    /// workload both cover, README). Either kind blocks the VPA's updates, its condition saying why.
    fn in_webhook_scope(&mut self, vpa_pods: &[Arc<CachedPod>]) -> Vec<Arc<CachedPod>> {
        let size = self.size;
        let mut outside = 0usize;
        let mut upstream: Option<(usize, &'static str)> = None;
        let mut in_scope: Vec<Arc<CachedPod>> = Vec::with_capacity(vpa_pods.len());
        for pod in vpa_pods {
            if let Some(mark) = pods::upstream_mark(pod) {
                let (count, _) = upstream.get_or_insert((0, mark));
                *count += 1;
                self.set(pod, Action::Skip(Skip::SizedByUpstream(mark)));
                continue;
            }
            match self.config.webhook_scope.pod_excluded(pods::labels(pod)) {
                Some(why) => {
                    outside += 1;
                    self.set(pod, Action::Skip(Skip::OutsideWebhook(why)));
                }
                None => in_scope.push(Arc::clone(pod)),
            }
        }
        if outside > 0 {
            self.block(events::outside_webhook(&format!(
                "{outside} of {size} pods are not selected by the webhook's objectSelector: they are not \
                 updated (an evicted pod would come back unchanged)"
            )));
        }
        if let Some((count, mark)) = upstream {
            self.block(events::sized_by_upstream(&format!(
                "{count} of {size} pods carry upstream VPA's annotation {mark}: an upstream VPA covers this \
                 workload too (its webhook sizes the pods after Tailor's, its updater resizes them); they are \
                 not updated (an evicted pod would come back with upstream's numbers). Keep one of the two VPAs"
            )));
        }
        in_scope
    }

    /// Marks the VPA's updates blocked with `event`'s reason and message (the event goes out with a change
    /// of its condition).
    fn block(&mut self, event: UpdaterEvent) {
        let key = (
            self.vpa_report.namespace.clone(),
            self.vpa_report.name.clone(),
        );
        (self.report.blocked).insert(key, crate::decisions::conditions::Blocked::of(event));
    }

    /// Start-up boost pass (docs/design/upstream-updater.md §5.8): resizes pods whose boost expired back to the
    /// recommendation; returns the pods without a boost, which the mode's pass may update.
    async fn unboost(
        &mut self,
        pods_in_scope: &[Arc<CachedPod>],
    ) -> Result<Vec<Arc<CachedPod>>, String> {
        let vpa = self.entry.vpa;
        if !(self.config.gates.cpu_startup_boost && has_startup_boost(&vpa.spec)) {
            return Ok(pods_in_scope.to_vec());
        }
        let mut available = Vec::new();
        for pod in pods_in_scope {
            let expired = pods::expired_boost_keys(pod, vpa, self.now);
            if !expired.is_empty() {
                self.set(pod, Action::Skip(Skip::BoostActive));
                if !self.gate.can_unboost(pod, vpa, self.now) {
                    continue;
                }
                if let Err(e) = self.resize(pod).await? {
                    if let Some(m) = self.metrics {
                        m.record_failed_in_place_update(&self.entry.label, "UnboostError");
                    }
                    self.set(pod, Action::Skip(Skip::Error(e.to_string())));
                }
            } else if !pods::has_boost_annotation(pod) {
                available.push(Arc::clone(pod));
            } else {
                self.set(pod, Action::Skip(Skip::BoostActive));
            }
        }
        Ok(available)
    }

    /// Waits for the in-place rate limiter, then resizes `pod` (docs/design/upstream-updater.md §5.5) and
    /// records the resize. The outer `Err` aborts the iteration (the limiter failed); the inner one is this
    /// pod's failure, for the caller to record.
    async fn resize(&mut self, pod: &CachedPod) -> Result<Result<(), InPlaceError>, String> {
        if let Err(e) = self.actuator.wait_in_place().await {
            if let Some(m) = self.metrics {
                m.record_failed_in_place_update(
                    &self.entry.label,
                    "InPlaceUpdateRateLimiterWaitFailed",
                );
            }
            self.set(pod, Action::Skip(Skip::RateLimited));
            return Err(format!("in-place rate limiter: {e}"));
        }
        let (vpa, now) = (self.entry.vpa, self.now);
        let result = in_place_update(
            self.view,
            &mut *self.actuator,
            &mut self.gate,
            &mut *self.state,
            pod,
            vpa,
            now,
        )
        .await;
        Ok(result.map(|plan| {
            self.done.resized += 1;
            self.report.resizes += 1;
            self.set(pod, Action::Resize(plan.resize));
        }))
    }

    /// Mode `InPlaceOrRecreate` / `InPlace` (docs/design/upstream-updater.md §5): offers the pods the budgets
    /// let through, resizes them in priority order, and returns the ones to evict instead (never in mode
    /// `InPlace`).
    async fn resize_in_place(&mut self, available: &[Arc<CachedPod>]) -> Result<Chosen, String> {
        let config = self.config;
        let mut calc = PriorityCalculator::new(self.entry.vpa, &config.priority, config.gates);
        self.offer_for_resize(available, &mut calc);
        let sorted = self.sorted(calc).unwrap_or_default();
        let mut chosen = Chosen {
            in_place_updatable: sorted.len(),
            ..Chosen::default()
        };
        self.gauges.add(
            GaugeKind::InPlaceUpdatablePods,
            self.size,
            self.entry.label.mode,
            chosen.in_place_updatable as i64,
        );
        for candidate in sorted {
            self.resize_candidate(&candidate.pod, &mut chosen).await?;
        }
        Ok(chosen)
    }

    /// Offers to `calc` the pods whose in-place decision lets them be resized (or, outside mode `InPlace`,
    /// evicted); reports why the others are left alone.
    fn offer_for_resize(
        &mut self,
        available: &[Arc<CachedPod>],
        calc: &mut PriorityCalculator<'_>,
    ) {
        let (vpa, now) = (self.entry.vpa, self.now);
        let in_place_mode = self.entry.mode == UpdateMode::InPlace;
        for pod in available {
            let decision = match self.gate.can_in_place_update(pod, vpa, self.state, now) {
                Ok(d) => d,
                Err(e) => {
                    self.set(pod, Action::Skip(Skip::Error(e.to_string())));
                    continue;
                }
            };
            let keep = match decision {
                InPlaceDecision::Approved => true,
                InPlaceDecision::Evict => !in_place_mode,
                InPlaceDecision::Deferred | InPlaceDecision::Infeasible => in_place_mode,
                InPlaceDecision::InfeasibleCached => {
                    self.actuator.event(pod, vpa, events::resize_skipped());
                    if let Some(m) = self.metrics {
                        m.record_infeasible_cached(&self.entry.label);
                    }
                    self.set(pod, Action::Skip(Skip::InfeasibleCached));
                    false
                }
            };
            if !keep {
                if decision != InPlaceDecision::InfeasibleCached {
                    let skip = decision_skip(&self.gate, pod, decision);
                    self.set(pod, Action::Skip(skip));
                }
                continue;
            }
            offer(
                self.view,
                self.state,
                calc,
                vpa,
                pod,
                now,
                &mut self.vpa_report,
            );
        }
    }

    /// Resizes one offered pod in place, after deciding again (the budgets moved with every resize before
    /// it); a pod to evict instead joins `chosen.evictions`.
    async fn resize_candidate(
        &mut self,
        pod: &Arc<CachedPod>,
        chosen: &mut Chosen,
    ) -> Result<(), String> {
        let (vpa, now) = (self.entry.vpa, self.now);
        let in_place_mode = self.entry.mode == UpdateMode::InPlace;
        let decision = match self.gate.can_in_place_update(pod, vpa, self.state, now) {
            Ok(d) => d,
            Err(e) => {
                self.set(pod, Action::Skip(Skip::Error(e.to_string())));
                return Ok(());
            }
        };
        match decision {
            InPlaceDecision::Deferred
                if !in_place_mode || self.config.in_place_honours_deferrals =>
            {
                let skip = decision_skip(&self.gate, pod, decision);
                self.set(pod, Action::Skip(skip));
                return Ok(());
            }
            InPlaceDecision::Evict => {
                chosen.evictions.push(Arc::clone(pod));
                return Ok(());
            }
            InPlaceDecision::InfeasibleCached => {
                self.set(pod, Action::Skip(Skip::InfeasibleCached));
                return Ok(());
            }
            InPlaceDecision::Infeasible => self.record_infeasible(pod),
            InPlaceDecision::Deferred | InPlaceDecision::Approved => {}
        }
        if let Some(skip) = self.view.quota_hold(vpa, pod, QuotaUse::Resize) {
            // The raise does not fit in place; outside mode InPlace the replacement may still get part
            // of it (the eviction checks that).
            if in_place_mode {
                self.set(pod, Action::Skip(skip));
            } else {
                chosen.evictions.push(Arc::clone(pod));
            }
            return Ok(());
        }
        if let Err(e) = self.resize(pod).await? {
            if in_place_mode {
                self.in_place_failed(pod, &e);
            } else {
                if let Some(m) = self.metrics {
                    m.record_failed_in_place_update(&self.entry.label, "InPlaceUpdateError");
                }
                self.set(pod, Action::Skip(Skip::Error(e.to_string())));
                chosen.evictions.push(Arc::clone(pod));
            }
        }
        Ok(())
    }

    /// Remembers that `pod` cannot take the VPA's current recommendation in place (mode `InPlace`).
    fn record_infeasible(&mut self, pod: &CachedPod) {
        if let Some(raw) = self
            .entry
            .vpa
            .status
            .as_ref()
            .and_then(|s| s.recommendation.clone())
        {
            self.state.infeasible.record(pods::uid(pod), raw);
        }
    }

    /// A failed resize in mode `InPlace`: remembered when the kubelet found it infeasible, counted, reported.
    fn in_place_failed(&mut self, pod: &CachedPod, e: &InPlaceError) {
        let infeasible =
            matches!(e, InPlaceError::Act(ActError::Api(api)) if is_infeasible_error(Some(api)));
        if infeasible {
            self.record_infeasible(pod);
        }
        if let Some(m) = self.metrics {
            let reason = if infeasible {
                "InPlaceUpdateInfeasible"
            } else {
                "InPlaceUpdateError"
            };
            m.record_failed_in_place_update(&self.entry.label, reason);
        }
        self.set(pod, Action::Skip(skip_of(e)));
    }

    /// The offered pods in priority order (docs/design/upstream-updater.md §2.4); the ones
    /// `evictionRequirements` refuse are reported. `None` when the pods cannot be ordered (logged).
    fn sorted(
        &mut self,
        calc: PriorityCalculator<'_>,
    ) -> Option<Vec<crate::decisions::calculator::Candidate>> {
        match calc.sorted(&self.state.admission) {
            Ok((sorted, refused)) => {
                for pod in refused {
                    self.set(&pod, Action::Skip(Skip::EvictionRequirements));
                }
                Some(sorted)
            }
            Err(e) => {
                tracing::warn!(vpa = %self.entry.label.name, error = %e, "cannot order pods");
                None
            }
        }
    }

    /// Mode `Recreate` (and `Auto`): the pods the budgets let through, in priority order.
    fn choose_evictions(&mut self, available: &[Arc<CachedPod>]) -> Chosen {
        let (vpa, now, config) = (self.entry.vpa, self.now, self.config);
        let mut calc = PriorityCalculator::new(vpa, &config.priority, config.gates);
        for pod in available {
            if let Err(skip) = self.gate.can_evict(pod, self.state, now) {
                self.set(pod, Action::Skip(skip));
                continue;
            }
            offer(
                self.view,
                self.state,
                &mut calc,
                vpa,
                pod,
                now,
                &mut self.vpa_report,
            );
        }
        let evictions: Vec<Arc<CachedPod>> = self
            .sorted(calc)
            .map(|sorted| sorted.into_iter().map(|c| c.pod).collect())
            .unwrap_or_default();
        let evictable = evictions.len();
        self.gauges.add(
            GaugeKind::EvictablePods,
            self.size,
            self.entry.label.mode,
            evictable as i64,
        );
        Chosen {
            evictions,
            in_place_updatable: 0,
            evictable,
        }
    }

    /// Evicts `evictions` in order (docs/design/upstream-updater.md §3.4), each after the budget and the
    /// eviction rate limiter allow it.
    async fn evict(
        &mut self,
        evictions: &[Arc<CachedPod>],
        vpa_pods: &[Arc<CachedPod>],
    ) -> Result<(), String> {
        let (vpa, now, key) = (self.entry.vpa, self.now, self.key());
        let probe = (self.config.unsized_replacement_probe_interval)
            .unwrap_or(crate::decisions::replacements::PROBE_AFTER);
        for pod in evictions {
            if let Some(skip) = self.view.quota_hold(vpa, pod, QuotaUse::Replace) {
                self.set(pod, Action::Skip(skip));
                continue;
            }
            if let Err(why) = self.state.replacements.may_evict(&key, now, probe) {
                self.set(pod, Action::Skip(Skip::ReplacementsUnsized));
                self.block(events::replacements_unsized(&why));
                continue;
            }
            if let Err(skip) = self.gate.can_evict(pod, self.state, now) {
                self.set(pod, Action::Skip(skip));
                continue;
            }
            if let Err(e) = self.actuator.wait_eviction().await {
                if let Some(m) = self.metrics {
                    m.record_failed_eviction(&self.entry.label, "EvictionRateLimiterWaitFailed");
                }
                self.set(pod, Action::Skip(Skip::RateLimited));
                return Err(format!("eviction rate limiter: {e}"));
            }
            match evict_pod(
                &mut *self.actuator,
                &mut self.gate,
                &mut *self.state,
                pod,
                vpa,
                now,
            )
            .await
            {
                Ok(()) => {
                    self.done.evicted += 1;
                    self.report.evictions += 1;
                    self.set(pod, Action::Evict);
                    self.state.replacements.evicted(&key, vpa_pods, now);
                }
                Err(e) => {
                    if let Some(m) = self.metrics {
                        m.record_failed_eviction(&self.entry.label, "EvictionError");
                    }
                    let skip = match &e {
                        InPlaceError::Act(a) if a.is_disruption_budget() => Skip::DisruptionBudget,
                        other => Skip::Error(other.to_string()),
                    };
                    self.set(pod, Action::Skip(skip));
                }
            }
        }
        Ok(())
    }

    /// The per-VPA gauges: whether the VPA had pods to update, and whether any was updated.
    fn count(&mut self, chosen: &Chosen) {
        let (size, mode_text) = (self.size, self.entry.label.mode);
        let counted = [
            (chosen.evictable > 0, GaugeKind::VpasWithEvictablePods),
            (self.done.evicted > 0, GaugeKind::VpasWithEvictedPods),
            (
                chosen.in_place_updatable > 0,
                GaugeKind::VpasWithInPlaceUpdatablePods,
            ),
            (self.done.resized > 0, GaugeKind::VpasWithInPlaceUpdatedPods),
        ];
        for (yes, kind) in counted {
            if yes {
                self.gauges.add(kind, size, mode_text, 1);
            }
        }
    }
}

/// The skip reason of a failed in-place update.
fn skip_of(e: &InPlaceError) -> Skip {
    match e {
        InPlaceError::Resize(ResizeError::Refused(why)) => Skip::ResizeRefused(why.clone()),
        other => Skip::Error(other.to_string()),
    }
}

fn decision_skip<G: Gate>(gate: &G, pod: &CachedPod, decision: InPlaceDecision) -> Skip {
    match decision {
        InPlaceDecision::Deferred => gate.deferral_reason(pod),
        InPlaceDecision::InfeasibleCached => Skip::InfeasibleCached,
        _ => Skip::ResizeInProgress,
    }
}

fn offer<V: ClusterView>(
    view: &V,
    state: &UpdaterState,
    calc: &mut PriorityCalculator<'_>,
    vpa: &VerticalPodAutoscaler,
    pod: &Arc<CachedPod>,
    now: Timestamp,
    vpa_report: &mut VpaReport,
) {
    let result = view.processed(vpa, pod).and_then(|rec| {
        let mut priority = view.priority(pod, rec.as_ref())?;
        if view.pod_level_resources() {
            crate::decisions::priority::add_pod_level(&mut priority, pod, vpa)
                .map_err(|e| e.to_string())?;
        }
        calc.add_pod(Arc::clone(pod), rec, priority, &state.infeasible, now)
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(Some(skip)) => set(vpa_report, pod, Action::Skip(skip)),
        Ok(None) => {}
        Err(e) => set(vpa_report, pod, Action::Skip(Skip::Error(e))),
    }
}

/// Why an eviction or in-place update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InPlaceError {
    /// The budget refused it.
    #[error(transparent)]
    Restriction(#[from] RestrictionError),
    /// No resize could be computed.
    #[error(transparent)]
    Resize(#[from] ResizeError),
    /// The API call failed.
    #[error(transparent)]
    Act(#[from] ActError),
}

/// `Evict` (docs/design/upstream-updater.md §3.4): checks the budget, posts the Eviction, records the events
/// and counts it.
pub async fn evict_pod<G: Gate, A: Actuator>(
    actuator: &mut A,
    gate: &mut G,
    state: &mut UpdaterState,
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    now: Timestamp,
) -> Result<(), InPlaceError> {
    gate.check_evict(pod, state, now)?;
    actuator.evict(pod).await?;
    for event in events::evicted(pods::name(pod)) {
        actuator.event(pod, vpa, event);
    }
    gate.evicted(pod);
    Ok(())
}

/// `InPlaceUpdate` (docs/design/upstream-updater.md §5.5): checks group membership, computes and sends the
/// patches, records the event and counts it.
pub async fn in_place_update<V: ClusterView, G: Gate, A: Actuator>(
    view: &V,
    actuator: &mut A,
    gate: &mut G,
    state: &mut UpdaterState,
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    now: Timestamp,
) -> Result<ResizePlan, InPlaceError> {
    gate.check_in_place(pod)?;
    let plan = view.resize_plan(pod, vpa, now)?;
    actuator.resize(pod, &plan).await?;
    actuator.event(pod, vpa, events::resized_noting(&plan.notes));
    gate.in_place_started(pod, state, now);
    Ok(plan)
}
