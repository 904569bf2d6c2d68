//! The fleet's pass, run by the recommender's leader beside its loop (its own task, its own token
//! bucket: a namespace of 10,000 workloads is onboarded at `--fleet-qps` while recommendations keep being
//! written). Each pass reads the view, the VPA store and the upstream VPAs, plans with
//! [`tailor_core::fleet::plan()`], reports what changed (events, metrics, a log line) and writes: deletes
//! first (a workload a user's VPA now covers loses the fleet's at once), then creations and changes.
//! A pass writes for at most one resync interval, then plans again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::Store;
use tailor_core::fleet::plan::OwnedFields;
use tailor_core::fleet::{
    Apply, Change, Delete, DeleteReason, ExistingVpa, FleetPlan, SkipReason, UpstreamTarget,
    is_managed, plan,
};
use tailor_kube::leader::Fence;
use tailor_kube::upstream_vpa::UpstreamVpas;
use tokio::time::Instant;

use super::FleetConfig;
use super::metrics::FleetMetrics;
use super::sources::{FleetInputs, FleetView};
use super::writer::{EventTarget, FleetEvent, FleetWriter, WriteError, reference};
use crate::views::watched_vpa::WatchedVpa;
use crate::writers::ratelimit::RateLimiter;

/// Events about skipped workloads and refused namespaces recorded per pass at most (the rest are logged).
pub const EVENTS_PER_PASS: usize = 100;
/// How long a write is remembered while the VPA watch may not show it yet.
const RECENT: Duration = Duration::from_secs(120);
/// Quiet time after a change before a pass (a burst of changes makes one pass).
const DEBOUNCE: Duration = Duration::from_secs(1);

/// (namespace, kind, name) of a workload.
type WorkloadKey = (String, String, String);
/// (namespace, name) of a VPA.
type VpaKey = (String, String);

/// A write whose effect the VPA store may not show yet.
#[derive(Debug)]
enum Recent {
    Applied(Box<tailor_crds::VerticalPodAutoscaler>),
    Deleted,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Creations and changes the plan wanted.
    pub planned_applies: usize,
    /// Deletions the plan wanted.
    pub planned_deletes: usize,
    /// Writes that succeeded.
    pub written: usize,
    /// Writes that failed.
    pub failed: usize,
    /// Writes left for the next pass.
    pub pending: usize,
    /// Workloads left out.
    pub skipped: usize,
    /// Namespaces refused.
    pub refused: usize,
}

impl PassReport {
    fn count(&mut self, ok: bool) {
        if ok {
            self.written += 1;
        } else {
            self.failed += 1;
        }
    }
}

/// The fleet's state between passes.
pub struct FleetController<W> {
    config: FleetConfig,
    view: FleetView,
    vpas: Store<WatchedVpa>,
    upstream: UpstreamVpas,
    /// Only this namespace (`--vpa-object-namespace`), when set.
    namespace: Option<String>,
    writer: W,
    limiter: RateLimiter,
    fence: Fence,
    metrics: Arc<FleetMetrics>,
    skips: HashMap<WorkloadKey, SkipReason>,
    refusals: BTreeMap<String, String>,
    recent: HashMap<VpaKey, (Recent, Instant)>,
}

impl<W: FleetWriter> FleetController<W> {
    /// A controller over these sources, writing through `writer` while `fence` allows.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: FleetConfig,
        view: FleetView,
        vpas: Store<WatchedVpa>,
        upstream: UpstreamVpas,
        namespace: Option<String>,
        writer: W,
        fence: Fence,
        metrics: Arc<FleetMetrics>,
    ) -> Self {
        let limiter = RateLimiter::new(config.qps, config.burst);
        FleetController {
            config,
            view,
            vpas,
            upstream,
            namespace: namespace.filter(|n| !n.is_empty()),
            writer,
            limiter,
            fence,
            metrics,
            skips: HashMap::new(),
            refusals: BTreeMap::new(),
            recent: HashMap::new(),
        }
    }

    /// Whether every source has listed (nothing is planned before: a missing list would read as "no
    /// such workload" and delete).
    pub fn ready(&self) -> bool {
        self.view.ready() && self.upstream.all().is_ok()
    }

    /// Runs passes until `stop` resolves or the lease is lost: one when a source changes (after a
    /// second's quiet), at least every resync interval, and at once while writes are pending.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let lost = self.fence.lost();
        tokio::pin!(lost);
        let mut pending = 0;
        loop {
            if self.ready() {
                let report = self.pass(self.config.resync).await;
                if report.written + report.failed + report.pending > 0 {
                    tracing::info!(?report, "fleet pass");
                }
                pending = report.pending;
            }
            // Writes left by a pass that spent its budget go on at once (the bucket paces them).
            let wait = match (self.ready(), pending) {
                (false, _) => Duration::from_secs(1),
                (true, 0) => self.config.resync,
                (true, _) => Duration::ZERO,
            };
            tokio::select! {
                _ = self.view.changed() => tokio::time::sleep(DEBOUNCE).await,
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => return,
                _ = &mut lost => return,
            }
        }
    }

    /// One pass: plan, report, then write for at most `budget`.
    pub async fn pass(&mut self, budget: Duration) -> PassReport {
        let started = Instant::now();
        self.recent
            .retain(|_, (_, at)| started.duration_since(*at) < RECENT);
        let inputs = self.inputs();
        let (existing, uids) = self.existing(&inputs);
        self.forget_seen(&existing);
        let upstream = self.upstream_targets();
        let planned = plan(
            &inputs.namespaces,
            &inputs.workloads,
            &existing,
            &upstream,
            &self.config.settings,
        );
        let mut report = PassReport {
            planned_applies: planned.apply.len(),
            planned_deletes: planned.delete.len(),
            skipped: planned.skipped.len(),
            refused: planned.refused.len(),
            ..PassReport::default()
        };
        self.report(&planned).await;
        let FleetPlan { apply, delete, .. } = planned;
        let deletes: Vec<Delete> = delete
            .into_iter()
            .filter(|d| !self.recently_deleted(d))
            .collect();
        let applies: Vec<Apply> = apply
            .into_iter()
            .filter(|a| !self.recently_applied(a))
            .collect();
        let mut left = deletes.len() + applies.len();
        for d in deletes {
            if !self.may_write(started, budget) {
                break;
            }
            left -= 1;
            let uid = uids
                .get(&(d.namespace.clone(), d.name.clone()))
                .cloned()
                .unwrap_or_default();
            let ok = self.delete(&d, &uid).await;
            report.count(ok);
        }
        for a in applies {
            if !self.may_write(started, budget) {
                break;
            }
            left -= 1;
            let ok = self.apply(&a).await;
            report.count(ok);
        }
        report.pending = left;
        self.metrics
            .pending_writes
            .set(i64::try_from(left).unwrap_or(i64::MAX));
        report
    }

    /// Forgets the writes the VPA store shows now: the memo holds only what the watch has not shown yet.
    fn forget_seen(&mut self, existing: &[ExistingVpa]) {
        if self.recent.is_empty() {
            return;
        }
        let shown: HashMap<(&str, &str), Option<&OwnedFields>> = (existing.iter())
            .map(|v| ((v.namespace.as_str(), v.name.as_str()), v.managed.as_ref()))
            .collect();
        self.recent.retain(|(ns, name), (what, _)| {
            let now = shown.get(&(ns.as_str(), name.as_str()));
            match what {
                Recent::Deleted => now.is_some(),
                Recent::Applied(vpa) => {
                    let annotations = vpa.metadata.annotations.clone().unwrap_or_default();
                    let applied = OwnedFields::of(&vpa.spec, &annotations);
                    now.copied().flatten() != Some(&applied)
                }
            }
        });
    }

    /// Whether another write fits this pass (the lease held, the budget not spent).
    fn may_write(&self, started: Instant, budget: Duration) -> bool {
        self.fence.allows_writes() && started.elapsed() < budget
    }

    fn inputs(&self) -> FleetInputs {
        let mut inputs = self.view.inputs();
        if let Some(only) = &self.namespace {
            inputs.namespaces.retain(|n| &n.name == only);
            inputs.workloads.retain(|w| &w.namespace == only);
        }
        inputs
    }

    /// The Tailor VPAs as the rules read them, and the UIDs of the created ones. A created VPA whose
    /// target kind is not listed is left out: neither kept nor deleted.
    fn existing(&self, inputs: &FleetInputs) -> (Vec<ExistingVpa>, HashMap<VpaKey, String>) {
        let mut out = Vec::new();
        let mut uids = HashMap::new();
        for v in self.vpas.state() {
            let m = &v.metadata;
            let empty = BTreeMap::new();
            let annotations = m.annotations.as_ref().unwrap_or(&empty);
            let managed = is_managed(m.labels.as_ref().unwrap_or(&empty), annotations);
            let target = v.spec.target_ref.clone();
            let kind = target.as_ref().map(|t| t.kind.as_str()).unwrap_or_default();
            if managed && !inputs.settled_kinds.iter().any(|k| k == kind) {
                continue;
            }
            let key = (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            );
            if managed {
                uids.insert(key.clone(), m.uid.clone().unwrap_or_default());
            }
            out.push(ExistingVpa {
                namespace: key.0,
                name: key.1,
                target,
                managed: managed.then(|| OwnedFields::of(&v.spec, annotations)),
            });
        }
        (out, uids)
    }

    fn upstream_targets(&self) -> Vec<UpstreamTarget> {
        (self.upstream.all().unwrap_or_default().into_iter())
            .map(|u| UpstreamTarget {
                namespace: u.namespace,
                vpa: u.name,
                kind: u.target_kind,
                name: u.target_name,
            })
            .collect()
    }

    fn recently_deleted(&self, d: &Delete) -> bool {
        matches!(
            self.recent.get(&(d.namespace.clone(), d.name.clone())),
            Some((Recent::Deleted, _))
        )
    }

    fn recently_applied(&self, a: &Apply) -> bool {
        let m = &a.vpa.metadata;
        let key = (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        matches!(self.recent.get(&key), Some((Recent::Applied(v), _)) if **v == a.vpa)
    }

    /// Events, metrics and log lines for what changed since the last pass: refusals and skips.
    async fn report(&mut self, planned: &FleetPlan) {
        let by_mode = planned.by_mode.iter().map(|(m, n)| (m.as_str(), *n));
        self.metrics.set_vpas(by_mode);
        (self.metrics.refused_namespaces)
            .set(i64::try_from(planned.refused.len()).unwrap_or(i64::MAX));
        let mut events = Vec::new();
        let mut refusals = BTreeMap::new();
        for r in &planned.refused {
            if self.refusals.get(&r.namespace) != Some(&r.message) {
                tracing::warn!(namespace = %r.namespace, message = %r.message, "fleet: namespace policy refused");
                events.push(FleetEvent {
                    target: EventTarget::Namespace(r.namespace.clone()),
                    warning: true,
                    reason: "FleetPolicyRefused",
                    note: r.message.clone(),
                    related: None,
                });
            }
            refusals.insert(r.namespace.clone(), r.message.clone());
        }
        self.refusals = refusals;
        let mut skips = HashMap::new();
        for s in &planned.skipped {
            let key = (s.namespace.clone(), s.kind.clone(), s.name.clone());
            if self.skips.get(&key) != Some(&s.reason) {
                self.metrics
                    .skipped
                    .get_or_create(&vec![("reason", s.reason.as_str())])
                    .inc();
                tracing::info!(namespace = %s.namespace, kind = %s.kind, name = %s.name,
                    reason = s.reason.as_str(), detail = %s.detail, "fleet: workload left out");
                if s.reason != SkipReason::Deleting {
                    events.push(FleetEvent {
                        target: EventTarget::Namespace(s.namespace.clone()),
                        warning: matches!(
                            s.reason,
                            SkipReason::InvalidAnnotation
                                | SkipReason::NameTaken
                                | SkipReason::NameTooLong
                        ),
                        reason: "FleetSkipped",
                        note: format!(
                            "{} {} gets no VPA ({}): {}",
                            s.kind,
                            s.name,
                            s.reason.as_str(),
                            s.detail
                        ),
                        related: Some(reference("", &s.kind, &s.namespace, &s.name)),
                    });
                }
            }
            skips.insert(key, s.reason);
        }
        self.skips = skips;
        let dropped = events.len().saturating_sub(EVENTS_PER_PASS);
        for e in events.iter().take(EVENTS_PER_PASS) {
            self.writer.event(e).await;
        }
        if dropped > 0 {
            tracing::info!(
                dropped,
                "fleet: more decisions than events per pass; the rest are in the log only"
            );
        }
    }

    async fn delete(&mut self, d: &Delete, uid: &str) -> bool {
        self.limiter.acquire().await;
        let result = self.writer.delete(&d.namespace, &d.name, uid).await;
        let why = match &d.reason {
            DeleteReason::NamespaceNotChosen => "its namespace is no longer onboarded".to_owned(),
            DeleteReason::WorkloadGone => "its workload is gone".to_owned(),
            DeleteReason::Replaced => "its workload has a VPA under another name".to_owned(),
            DeleteReason::Skipped(r) => format!("its workload is now left out ({})", r.as_str()),
        };
        let key = (d.namespace.clone(), d.name.clone());
        match result {
            Ok(()) | Err(WriteError::Gone(_)) => {
                self.metrics.write("delete", "ok");
                tracing::info!(namespace = %d.namespace, vpa = %d.name, why = %why, "fleet: VPA deleted");
                self.recent.insert(key, (Recent::Deleted, Instant::now()));
                let note = format!("deleted VPA {} that Tailor created: {why}", d.name);
                self.writer
                    .event(&FleetEvent {
                        target: EventTarget::Namespace(d.namespace.clone()),
                        warning: false,
                        reason: "FleetDeleted",
                        note,
                        related: Some(reference(
                            "autoscaling.tailor.dev/v1",
                            "VerticalPodAutoscaler",
                            &d.namespace,
                            &d.name,
                        )),
                    })
                    .await;
                true
            }
            Err(e) => {
                self.metrics.write("delete", "error");
                tracing::warn!(namespace = %d.namespace, vpa = %d.name, error = %e, "fleet: delete failed");
                false
            }
        }
    }

    async fn apply(&mut self, a: &Apply) -> bool {
        self.limiter.acquire().await;
        let m = &a.vpa.metadata;
        let (namespace, name) = (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        let (action, done, reason) = match a.change {
            Change::Create => ("create", "created", "FleetCreated"),
            Change::Update => ("update", "changed", "FleetUpdated"),
        };
        // Only a VPA the fleet created is taken back from other managers; a creation never takes over.
        match self.writer.apply(&a.vpa, a.change == Change::Update).await {
            Ok(()) => {
                self.metrics.write(action, "ok");
                let source = (m.annotations.as_ref())
                    .and_then(|an| an.get(tailor_core::fleet::POLICY_ANNOTATION))
                    .cloned()
                    .unwrap_or_default();
                let mode = tailor_core::policy::update_mode(&a.vpa.spec);
                tracing::info!(namespace = %namespace, vpa = %name, action, mode = %mode, "fleet: VPA written");
                let key = (namespace.clone(), name.clone());
                self.recent.insert(
                    key,
                    (Recent::Applied(Box::new(a.vpa.clone())), Instant::now()),
                );
                let note = format!(
                    "{done} for {} {} in mode {mode} by {source}",
                    a.kind, a.workload
                );
                let event = FleetEvent {
                    target: EventTarget::Vpa(namespace, name),
                    warning: false,
                    reason,
                    note,
                    related: None,
                };
                self.writer.event(&event).await;
                true
            }
            Err(WriteError::Conflict(message)) => {
                self.metrics.write(action, "conflict");
                tracing::warn!(namespace = %namespace, vpa = %name, %message, "fleet: a VPA Tailor did not create holds the name");
                false
            }
            Err(e) => {
                self.metrics.write(action, "error");
                tracing::warn!(namespace = %namespace, vpa = %name, error = %e, "fleet: write failed");
                false
            }
        }
    }
}
