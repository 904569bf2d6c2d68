//! The recommender loop: VPAs and pods from the stores into the model, usage from the metrics API, OOMs
//! from the observer, recommendations into VPA status, and checkpoints. [`Recommender::run_once`] is one
//! iteration at a given time; [`Recommender::run`] repeats it on a ticker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use tailor_crds::{
    PodResourcePolicy, VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint,
    VerticalPodAutoscalerStatus,
};
use tokio::time::Instant;

use super::checkpoint::{self, OpenWindow};
use super::config::ControllerConfig;
use super::metrics::Metrics;
use super::oom::OomQueue;
use super::ratelimit::RateLimiter;
use super::status::{self, Findings};
use super::stores::Stores;
use super::target::{self, ScaleCache, ScaleEntry, TargetKey};
use super::time::{from_timestamp, to_time_secs};
use crate::metrics_api::MetricsApiSource;
use tailor_engine::estimate::{VpaInput, confidence, recommend};
use tailor_engine::model::{
    AggregateContainerState, ClusterState, ContainerId, ContainerState, Labels, ModelError,
    PodPhase, Sample, SampleSink, Selector, VpaState,
};
use tailor_engine::policy::{self, PolicyError};
use tailor_engine::units::{Nanos, Resource, ResourceAmount};

/// The field manager named in every write.
pub const FIELD_MANAGER: &str = "tailor-recommender";

const DAY: i64 = 86_400_000_000_000;

type VpaKey = (String, String);

/// What one loop did (also exported as metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopReport {
    /// VPAs this recommender handles.
    pub vpas: usize,
    /// Pods in the model.
    pub pods: usize,
    /// Samples accepted by the model.
    pub samples_accepted: u64,
    /// Samples rejected (out of order, unknown container, negative).
    pub samples_rejected: u64,
    /// OOMs recorded.
    pub ooms_recorded: u64,
    /// OOMs not recorded (too old, unknown pod or container, queue overflow).
    pub ooms_rejected: u64,
    /// Whether the metrics API answered.
    pub metrics_ok: bool,
    /// Status patches sent successfully.
    pub status_writes: u64,
    /// Status patches that failed.
    pub status_errors: u64,
    /// Checkpoints written (created or replaced).
    pub checkpoints_written: u64,
    /// Checkpoint writes that failed.
    pub checkpoint_errors: u64,
    /// Checkpoints deleted by GC.
    pub checkpoints_deleted: u64,
    /// Checkpoints restored into the model.
    pub checkpoints_restored: u64,
    /// Aggregates removed by the model's GC.
    pub aggregates_collected: usize,
}

#[derive(Debug)]
struct VpaEntry {
    index: usize,
    uid: String,
    selector: Selector,
    restore_pending: bool,
    last_checkpoint: Option<Nanos>,
    /// The store status a write was based on, and what was written.
    last_written: Option<(
        Option<VerticalPodAutoscalerStatus>,
        VerticalPodAutoscalerStatus,
    )>,
}

#[derive(Debug)]
struct PodEntry {
    resource_version: Option<String>,
    labels: Labels,
    /// Container names with a shadow of their window state (the model's state is private; the shadow is
    /// fed the same samples and OOMs, so it is identical).
    containers: Vec<(String, ContainerState)>,
    init: Vec<String>,
    seen: u64,
}

/// A sink that ignores histogram updates: the shadow window state only needs the container logic.
struct NoSink;

impl SampleSink for NoSink {
    fn add_cpu(&mut self, _: ResourceAmount, _: Nanos) {}
    fn add_memory(&mut self, _: ResourceAmount, _: Nanos) {}
    fn subtract_memory(&mut self, _: ResourceAmount, _: Nanos) {}
}

fn phase(p: Option<&str>) -> PodPhase {
    match p {
        Some("Pending") => PodPhase::Pending,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Running,
    }
}

fn key_of(v: &VerticalPodAutoscaler) -> VpaKey {
    (
        v.metadata.namespace.clone().unwrap_or_default(),
        v.metadata.name.clone().unwrap_or_default(),
    )
}

/// The VPA's `resourcePolicy`, once every `minAllowed` / `maxAllowed` quantity is known to parse.
fn resource_policy(v: &VerticalPodAutoscaler) -> Result<Option<PodResourcePolicy>, PolicyError> {
    let Some(p) = v.spec.resource_policy.as_ref() else {
        return Ok(None);
    };
    policy::validate(p)?;
    Ok(Some(p.clone()))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

struct CheckpointJob {
    namespace: String,
    name: String,
    desired: VerticalPodAutoscalerCheckpoint,
    exists: bool,
    existing: Option<Arc<VerticalPodAutoscalerCheckpoint>>,
}

#[derive(Default)]
struct JobResults {
    written: Vec<String>,
    created: u64,
    replaced: u64,
    errors: u64,
}

async fn write_checkpoints(
    client: Client,
    limiter: RateLimiter,
    jobs: Vec<CheckpointJob>,
) -> JobResults {
    let mut out = JobResults::default();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    for job in jobs {
        let api: Api<VerticalPodAutoscalerCheckpoint> =
            Api::namespaced(client.clone(), &job.namespace);
        let patch = match checkpoint::replace_patch(job.existing.as_deref(), &job.desired) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(checkpoint = %job.name, error = %e, "cannot build checkpoint patch");
                out.errors += 1;
                continue;
            }
        };
        limiter.acquire().await;
        let mut create = !job.exists;
        if job.exists {
            match api
                .patch(&job.name, &pp, &Patch::<()>::Json(patch.clone()))
                .await
            {
                Ok(_) => {
                    out.replaced += 1;
                    out.written.push(job.name);
                    continue;
                }
                Err(e) if is_not_found(&e) => create = true,
                Err(e) => {
                    tracing::warn!(namespace = %job.namespace, checkpoint = %job.name, error = %e, "checkpoint write failed");
                    out.errors += 1;
                    continue;
                }
            }
            limiter.acquire().await;
        }
        if create {
            match api.create(&post, &job.desired).await {
                Ok(_) => {
                    out.created += 1;
                    out.written.push(job.name);
                }
                Err(e) if is_conflict(&e) => {
                    limiter.acquire().await;
                    match api.patch(&job.name, &pp, &Patch::<()>::Json(patch)).await {
                        Ok(_) => {
                            out.replaced += 1;
                            out.written.push(job.name);
                        }
                        Err(e) => {
                            tracing::warn!(namespace = %job.namespace, checkpoint = %job.name, error = %e, "checkpoint write failed");
                            out.errors += 1;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(namespace = %job.namespace, checkpoint = %job.name, error = %e, "checkpoint create failed");
                    out.errors += 1;
                }
            }
        }
    }
    out
}

/// The controller state across loops.
pub struct Recommender {
    cfg: ControllerConfig,
    client: Client,
    stores: Stores,
    ooms: OomQueue,
    metrics: Arc<Metrics>,
    limiter: RateLimiter,
    source: MetricsApiSource,
    model: ClusterState,
    vpas: BTreeMap<VpaKey, VpaEntry>,
    pods: HashMap<String, HashMap<String, PodEntry>>,
    scale: ScaleCache,
    written_checkpoints: HashSet<(String, String)>,
    last_checkpoint_gc: Option<Nanos>,
    loops: u64,
    vpas_changed: bool,
    history: Option<super::history::HistoryBootstrap>,
}

impl Recommender {
    /// A recommender over `stores`, writing through `client` under `limiter`.
    pub fn new(
        cfg: ControllerConfig,
        client: Client,
        stores: Stores,
        ooms: OomQueue,
        metrics: Arc<Metrics>,
        limiter: RateLimiter,
    ) -> Self {
        let gc = i64::try_from(cfg.aggregate_gc_interval.as_nanos()).unwrap_or(i64::MAX);
        Recommender {
            model: ClusterState::new(cfg.aggregations, gc),
            source: MetricsApiSource::new(client.clone(), &cfg.vpa_object_namespace),
            cfg,
            client,
            stores,
            ooms,
            metrics,
            limiter,
            vpas: BTreeMap::new(),
            pods: HashMap::new(),
            scale: ScaleCache::default(),
            written_checkpoints: HashSet::new(),
            last_checkpoint_gc: None,
            loops: 0,
            vpas_changed: true,
            history: None,
        }
    }

    /// Loads every new VPA's usage history in the background (see [`super::history`]).
    pub fn with_history(mut self, history: super::history::HistoryBootstrap) -> Self {
        self.history = Some(history);
        self
    }

    /// Starts the history of VPAs that have none yet (after checkpoints were restored, so history ends where
    /// they begin), and merges the histories that finished.
    async fn bootstrap_history(&mut self, owned: &[Arc<VerticalPodAutoscaler>], now: Nanos) {
        let Some(h) = self.history.as_mut() else {
            return;
        };
        for v in owned {
            let key = key_of(v);
            let (Some(e), Some(t)) = (self.vpas.get(&key), v.spec.target_ref.as_ref()) else {
                continue;
            };
            if h.started(&key) || (e.restore_pending && self.cfg.checkpoints_enabled) {
                continue;
            }
            let end = self
                .model
                .vpas()
                .get(e.index)
                .map(|m| super::history::history_end(&m.initial_states, now.div_euclid(1_000_000)))
                .unwrap_or(now.div_euclid(1_000_000));
            h.start(key, &t.kind, &t.name, end);
        }
        for (key, aggs) in h.poll().await {
            let Some(e) = self.vpas.get(&key) else {
                continue;
            };
            if let Some(m) = self.model.vpa_mut(e.index) {
                super::history::merge_into(&mut m.initial_states, aggs);
            }
        }
        let gone: Vec<VpaKey> = self
            .vpas
            .keys()
            .filter(|k| !owned.iter().any(|v| &key_of(v) == *k))
            .cloned()
            .collect();
        for k in gone {
            h.forget(&k);
        }
    }

    /// The model (read-only), for inspection.
    pub fn model(&self) -> &ClusterState {
        &self.model
    }

    /// Metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// One iteration at time `now`.
    pub async fn run_once(&mut self, now: Nanos) -> LoopReport {
        let start = Instant::now();
        let mut report = LoopReport::default();
        self.loops += 1;
        self.model.set_now(now);

        let t = Instant::now();
        self.refresh_scale_cache(now).await;
        let owned = self.load_vpas();
        self.metrics.step("load_vpas", t.elapsed().as_secs_f64());

        let t = Instant::now();
        let gone = self.load_pods();
        if self.cfg.checkpoints_enabled {
            self.restore_checkpoints(now, &mut report);
        }
        self.metrics.step("load_pods", t.elapsed().as_secs_f64());

        self.bootstrap_history(&owned, now).await;

        let t = Instant::now();
        report.metrics_ok = self.load_metrics(&mut report).await;
        self.record_ooms(&mut report);
        self.delete_pods(gone);
        self.metrics.step("load_metrics", t.elapsed().as_secs_f64());

        let t = Instant::now();
        self.update_vpas(&owned, now, report.metrics_ok, &mut report)
            .await;
        self.metrics.step("update_vpas", t.elapsed().as_secs_f64());

        if self.cfg.checkpoints_enabled {
            let t = Instant::now();
            self.maintain_checkpoints(&owned, now, &mut report).await;
            self.metrics.step("checkpoints", t.elapsed().as_secs_f64());
            let t = Instant::now();
            self.collect_checkpoints(now, &mut report).await;
            self.metrics
                .step("checkpoint_gc", t.elapsed().as_secs_f64());
        }

        let t = Instant::now();
        report.aggregates_collected = self.model.rate_limited_garbage_collect(now);
        self.metrics.step("aggregate_gc", t.elapsed().as_secs_f64());

        report.vpas = owned.len();
        report.pods = self.pods.values().map(HashMap::len).sum();
        self.metrics.vpas.set(report.vpas as i64);
        self.metrics.pods.set(report.pods as i64);
        self.metrics
            .aggregates
            .set(self.model.aggregate_count() as i64);
        self.metrics.step("total", start.elapsed().as_secs_f64());
        self.metrics
            .last_loop_timestamp
            .set(now.div_euclid(1_000_000_000));
        report
    }

    /// Looks up `/scale` selectors of targets that are not well-known kinds, at most once per TTL.
    async fn refresh_scale_cache(&mut self, now: Nanos) {
        let ttl = i64::try_from(self.cfg.scale_cache_ttl.as_nanos()).unwrap_or(i64::MAX);
        let mut wanted = HashSet::new();
        for v in self.stores.vpas.state() {
            let (ns, _) = key_of(&v);
            let names: Vec<String> = v
                .spec
                .recommenders
                .iter()
                .flatten()
                .map(|r| r.name.clone())
                .collect();
            let Some(t) = v.spec.target_ref.as_ref() else {
                continue;
            };
            if !self.cfg.owns(&ns, &names) || target::is_well_known(&t.kind) {
                continue;
            }
            wanted.insert(TargetKey::new(&ns, t));
        }
        self.scale.retain(|k| wanted.contains(k));
        for key in wanted {
            if self.scale.is_fresh(&key, now, ttl) {
                continue;
            }
            self.limiter.acquire().await;
            let selector = target::fetch_scale_selector(&self.client, &key).await;
            if let Err(e) = &selector {
                self.metrics.error("scale");
                tracing::warn!(target = ?key, error = %e, "cannot read the target's scale subresource");
            }
            self.scale.insert(
                key,
                ScaleEntry {
                    selector,
                    fetched: now,
                },
            );
        }
    }

    fn tombstone(&mut self, index: usize) {
        // The engine has no VPA removal: an entry that selects nothing and has no controller is inert.
        if let Some(v) = self.model.vpa_mut(index) {
            v.selector = Selector::Nothing;
            v.controller_exists = false;
            v.initial_states.clear();
            v.policy = None;
            v.annotations.clear();
        }
    }

    /// Brings the model's VPAs in line with the owned VPAs in the store; returns them.
    fn load_vpas(&mut self) -> Vec<Arc<VerticalPodAutoscaler>> {
        let mut owned = Vec::new();
        let mut seen = HashSet::new();
        let mut all = self.stores.vpas.state();
        all.sort_by_key(|v| key_of(v));
        for v in all {
            let key = key_of(&v);
            let names: Vec<String> = v
                .spec
                .recommenders
                .iter()
                .flatten()
                .map(|r| r.name.clone())
                .collect();
            if !self.cfg.owns(&key.0, &names) {
                continue;
            }
            let res = target::resolve(
                &self.stores,
                &self.scale,
                &key.0,
                v.spec.target_ref.as_ref(),
            );
            let policy = resource_policy(&v).ok().flatten();
            let annotations = v.metadata.annotations.clone().unwrap_or_default();
            let uid = v.metadata.uid.clone().unwrap_or_default();
            let controller_exists = res.unsupported.is_none();
            match self.vpas.get(&key) {
                Some(e) if e.uid == uid && e.selector == res.selector => {
                    if let Some(m) = self.model.vpa_mut(e.index) {
                        m.policy = policy;
                        m.annotations = annotations;
                        m.controller_exists = controller_exists;
                    }
                }
                existing => {
                    // New VPA, or a changed selector or identity. A changed selector keeps the restored
                    // history (upstream drops it); a new identity starts over.
                    let (carried, last_checkpoint, restore) = match existing {
                        Some(e) if e.uid == uid => {
                            let carried = self
                                .model
                                .vpas()
                                .get(e.index)
                                .map(|m| m.initial_states.clone())
                                .unwrap_or_default();
                            (carried, e.last_checkpoint, false)
                        }
                        _ => (BTreeMap::new(), None, true),
                    };
                    if let Some(i) = existing.map(|e| e.index) {
                        self.tombstone(i);
                    }
                    let mut state = VpaState::new(&key.0, &key.1, res.selector.clone());
                    state.policy = policy;
                    state.annotations = annotations;
                    state.controller_exists = controller_exists;
                    state.initial_states = carried;
                    let index = self.model.add_vpa(state);
                    self.vpas.insert(
                        key.clone(),
                        VpaEntry {
                            index,
                            uid,
                            selector: res.selector,
                            restore_pending: restore,
                            last_checkpoint,
                            last_written: None,
                        },
                    );
                    self.vpas_changed = true;
                }
            }
            seen.insert(key);
            owned.push(v);
        }
        let removed: Vec<VpaKey> = self
            .vpas
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in removed {
            if let Some(e) = self.vpas.remove(&k) {
                self.tombstone(e.index);
                self.vpas_changed = true;
            }
        }
        owned
    }

    /// Adds or updates the store's pods (only those some VPA selects, under memory-saver); returns the
    /// model pods that are gone (deleted after this loop's OOMs).
    fn load_pods(&mut self) -> Vec<(String, String)> {
        let generation = self.loops;
        let recheck = std::mem::take(&mut self.vpas_changed);
        let mut selectors: HashMap<&str, Vec<&Selector>> = HashMap::new();
        for ((ns, _), e) in &self.vpas {
            if e.selector != Selector::Nothing {
                selectors.entry(ns.as_str()).or_default().push(&e.selector);
            }
        }
        let memory_saver = self.cfg.memory_saver;
        let matched = |ns: &str, labels: &Labels| {
            !memory_saver
                || selectors
                    .get(ns)
                    .is_some_and(|s| s.iter().any(|s| s.matches(labels)))
        };
        let mut updates = Vec::new();
        for pod in self.stores.pods.state() {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let Some(name) = pod.metadata.name.as_deref() else {
                continue;
            };
            let ph = phase(pod.status.phase.as_deref());
            if ph == PodPhase::Pending || !self.cfg.namespace_watched(ns) {
                continue;
            }
            let existing = self.pods.get_mut(ns).and_then(|m| m.get_mut(name));
            let unchanged = existing.as_ref().is_some_and(|e| {
                e.resource_version.is_some() && e.resource_version == pod.metadata.resource_version
            });
            if unchanged && !recheck {
                if let Some(e) = existing {
                    e.seen = generation;
                }
                continue;
            }
            let labels: Labels = pod.metadata.labels.clone().unwrap_or_default();
            if !matched(ns, &labels) {
                continue;
            }
            if unchanged && let Some(e) = existing {
                e.seen = generation;
                continue;
            }
            updates.push((pod, labels, ph));
        }
        drop(selectors);
        for (pod, labels, ph) in updates {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            self.model.add_or_update_pod(&ns, &name, &labels, ph);
            let spec_containers: Vec<String> =
                pod.spec.containers.iter().map(|c| c.name.clone()).collect();
            let init: Vec<String> = pod
                .spec
                .init_containers
                .iter()
                .map(|c| c.name.clone())
                .collect();
            let entry = self
                .pods
                .entry(ns.clone())
                .or_default()
                .entry(name.clone())
                .or_insert_with(|| PodEntry {
                    resource_version: None,
                    labels: Labels::new(),
                    containers: Vec::new(),
                    init: Vec::new(),
                    seen: generation,
                });
            for c in spec_containers {
                if entry.containers.iter().any(|(n, _)| *n == c) {
                    continue;
                }
                let id = ContainerId {
                    namespace: &ns,
                    pod: &name,
                    container: &c,
                };
                if self.model.add_or_update_container(id).is_ok() {
                    entry.containers.push((c, ContainerState::default()));
                }
            }
            entry.resource_version = pod.metadata.resource_version.clone();
            entry.labels = labels;
            entry.init = init;
            entry.seen = generation;
        }
        let mut gone = Vec::new();
        for (ns, pods) in &self.pods {
            for (name, e) in pods {
                if e.seen != generation {
                    gone.push((ns.clone(), name.clone()));
                }
            }
        }
        gone
    }

    fn delete_pods(&mut self, gone: Vec<(String, String)>) {
        for (ns, name) in gone {
            self.model.delete_pod(&ns, &name);
            if let Some(m) = self.pods.get_mut(&ns) {
                m.remove(&name);
                if m.is_empty() {
                    self.pods.remove(&ns);
                }
            }
        }
    }

    /// Loads checkpoints of VPAs new to the model (all of them at start), except those this process wrote.
    fn restore_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
        if !self.vpas.values().any(|e| e.restore_pending) {
            return;
        }
        let interval = self.model.config.memory_aggregation_interval;
        let mut checkpoints = self.stores.checkpoints.state();
        checkpoints.sort_by_key(|c| c.metadata.name.clone());
        for cp in checkpoints {
            let ns = cp.metadata.namespace.clone().unwrap_or_default();
            let cp_name = cp.metadata.name.clone().unwrap_or_default();
            let (Some(vpa_name), Some(container)) = (
                cp.spec.vpa_object_name.clone(),
                cp.spec.container_name.clone(),
            ) else {
                continue;
            };
            let Some(e) = self.vpas.get(&(ns.clone(), vpa_name)) else {
                continue;
            };
            if !e.restore_pending
                || self
                    .written_checkpoints
                    .contains(&(ns.clone(), cp_name.clone()))
            {
                continue;
            }
            let index = e.index;
            let Some(status) = cp.status.as_ref() else {
                continue;
            };
            let mut agg = AggregateContainerState::new(&self.model.config, now);
            if let Err(err) = agg.load_from_checkpoint(&checkpoint::from_api_status(status)) {
                self.metrics.error("checkpoint_load");
                tracing::warn!(namespace = %ns, checkpoint = %cp_name, error = %err, "cannot load checkpoint");
                continue;
            }
            for w in checkpoint::open_windows(&cp) {
                let continued = now < w.end && self.continue_window(&ns, &w, &container, interval);
                if !continued {
                    agg.memory.add_sample(w.peak as f64, 1.0, w.end);
                }
            }
            if let Some(v) = self.model.vpa_mut(index) {
                match v.initial_states.get_mut(&container) {
                    Some(existing) => existing.merge(&agg),
                    None => {
                        v.initial_states.insert(container, agg);
                    }
                }
            }
            report.checkpoints_restored += 1;
        }
        for e in self.vpas.values_mut() {
            e.restore_pending = false;
        }
    }

    /// Re-opens a checkpointed memory window in a running container: a sample one interval before the
    /// window's end re-creates the same window with the same peak.
    fn continue_window(
        &mut self,
        ns: &str,
        w: &OpenWindow,
        container: &str,
        interval: i64,
    ) -> bool {
        let Some(entry) = self.pods.get_mut(ns).and_then(|m| m.get_mut(&w.pod)) else {
            return false;
        };
        let Some((_, shadow)) = entry.containers.iter_mut().find(|(n, _)| n == container) else {
            return false;
        };
        let t = w.end.saturating_sub(interval);
        let id = ContainerId {
            namespace: ns,
            pod: &w.pod,
            container,
        };
        let sample = Sample {
            time: t,
            resource: Resource::Memory,
            usage: w.peak,
        };
        if self.model.add_sample(id, sample).is_err() {
            return false;
        }
        let _ = shadow.add_memory_sample(t, w.peak, &self.model.config, &mut NoSink);
        true
    }

    /// Feeds one PodMetrics poll into the model; `false` if the metrics API failed.
    async fn load_metrics(&mut self, report: &mut LoopReport) -> bool {
        self.limiter.acquire().await;
        let (items, bad) = match self.source.list().await {
            Ok(x) => x,
            Err(e) => {
                self.metrics.error("metrics_api");
                tracing::warn!(error = %e, "cannot read the metrics API; keeping the last recommendations");
                return false;
            }
        };
        if bad > 0 {
            self.metrics.error("metrics_malformed");
        }
        let config = self.model.config;
        let (mut acc_cpu, mut acc_mem, mut rej_cpu, mut rej_mem) = (0u64, 0u64, 0u64, 0u64);
        for pm in items {
            let Some(entry) = self
                .pods
                .get_mut(&pm.namespace)
                .and_then(|m| m.get_mut(&pm.name))
            else {
                continue;
            };
            for c in pm.containers {
                if entry.init.contains(&c.name) {
                    continue;
                }
                let Some((_, shadow)) = entry.containers.iter_mut().find(|(n, _)| *n == c.name)
                else {
                    rej_cpu += u64::from(c.cpu_millicores.is_some());
                    rej_mem += u64::from(c.memory_bytes.is_some());
                    continue;
                };
                let id = ContainerId {
                    namespace: &pm.namespace,
                    pod: &pm.name,
                    container: &c.name,
                };
                if let Some(cpu) = c.cpu_millicores {
                    let s = Sample {
                        time: pm.timestamp,
                        resource: Resource::Cpu,
                        usage: cpu,
                    };
                    match self.model.add_sample(id, s) {
                        Ok(()) => acc_cpu += 1,
                        Err(_) => rej_cpu += 1,
                    }
                }
                if let Some(mem) = c.memory_bytes {
                    let s = Sample {
                        time: pm.timestamp,
                        resource: Resource::Memory,
                        usage: mem,
                    };
                    match self.model.add_sample(id, s) {
                        Ok(()) => acc_mem += 1,
                        Err(ModelError::PodNotFound(_)) | Err(ModelError::ContainerNotFound(_)) => {
                            rej_mem += 1;
                            continue;
                        }
                        Err(_) => rej_mem += 1,
                    }
                    let _ = shadow.add_memory_sample(pm.timestamp, mem, &config, &mut NoSink);
                }
            }
        }
        let count = |r: &'static str, res: &'static str, n: u64| {
            self.metrics
                .samples
                .get_or_create(&vec![("resource", r), ("result", res)])
                .inc_by(n);
        };
        count("cpu", "accepted", acc_cpu);
        count("memory", "accepted", acc_mem);
        count("cpu", "rejected", rej_cpu);
        count("memory", "rejected", rej_mem);
        report.samples_accepted += acc_cpu + acc_mem;
        report.samples_rejected += rej_cpu + rej_mem;
        true
    }

    /// Records every queued OOM with its own timestamp (an OOM older than later samples still counts,
    /// unless it is more than one aggregation interval older than the last memory sample).
    fn record_ooms(&mut self, report: &mut LoopReport) {
        let (records, dropped) = self.ooms.drain();
        if dropped > 0 {
            self.metrics
                .ooms
                .get_or_create(&vec![("source", "any"), ("result", "dropped")])
                .inc_by(dropped);
            report.ooms_rejected += dropped;
        }
        let config = self.model.config;
        for r in records {
            let result = match self
                .pods
                .get_mut(&r.namespace)
                .and_then(|m| m.get_mut(&r.pod))
            {
                None => "unknown_container",
                Some(entry) => match entry.containers.iter_mut().find(|(n, _)| *n == r.container) {
                    None => "unknown_container",
                    Some((_, shadow)) => {
                        let id = ContainerId {
                            namespace: &r.namespace,
                            pod: &r.pod,
                            container: &r.container,
                        };
                        match self.model.record_oom(id, r.time, r.memory_bytes) {
                            Ok(bumped) => {
                                let _ =
                                    shadow.record_oom(r.time, r.memory_bytes, &config, &mut NoSink);
                                tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, memory = bumped, source = r.source.label(), "OOM recorded");
                                "recorded"
                            }
                            Err(e) => {
                                tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, error = %e, "OOM not recorded");
                                "rejected"
                            }
                        }
                    }
                },
            };
            if result == "recorded" {
                report.ooms_recorded += 1;
            } else {
                report.ooms_rejected += 1;
            }
            self.metrics
                .ooms
                .get_or_create(&vec![("source", r.source.label()), ("result", result)])
                .inc();
        }
    }

    fn pods_matched(&self, ns: &str, selector: &Selector) -> bool {
        self.pods
            .get(ns)
            .is_some_and(|m| m.values().any(|p| selector.matches(&p.labels)))
    }

    /// Computes every owned VPA's status and patches those that changed, in parallel.
    async fn update_vpas(
        &mut self,
        owned: &[Arc<VerticalPodAutoscaler>],
        now: Nanos,
        metrics_ok: bool,
        report: &mut LoopReport,
    ) {
        let Some(now_t) = to_time_secs(now) else {
            return;
        };
        let mut patches = Vec::new();
        for v in owned {
            let key = key_of(v);
            let Some(e) = self.vpas.get(&key) else {
                continue;
            };
            let res = target::resolve(
                &self.stores,
                &self.scale,
                &key.0,
                v.spec.target_ref.as_ref(),
            );
            let mut unsupported = res.unsupported;
            let pods_matched = self.pods_matched(&key.0, &e.selector);
            let aggregates = self.model.aggregate_state_by_container_name(e.index);
            let (policy, annotations) = match self.model.vpas().get(e.index) {
                Some(m) => (m.policy.clone(), m.annotations.clone()),
                None => (None, BTreeMap::new()),
            };
            if let Err(err) = resource_policy(v) {
                unsupported.get_or_insert(format!("Invalid resourcePolicy: {err}"));
            }
            let input = VpaInput {
                policy: policy.as_ref(),
                annotations: &annotations,
            };
            let (mut recommendation, mut low_confidence) =
                match recommend(&self.cfg.recommender, &aggregates, input) {
                    Ok(r) => {
                        let low: Vec<String> = r
                            .containers
                            .iter()
                            .filter_map(|c| {
                                let conf = aggregates
                                    .get(&c.container_name)
                                    .map(|a| confidence(a, DAY))?;
                                (conf < 1.0)
                                    .then(|| format!("{} ({:.2} days)", c.container_name, conf))
                            })
                            .collect();
                        let low = (!low.is_empty()).then(|| {
                            format!("Less than one day of usage history: {}", low.join(", "))
                        });
                        (status::to_api_recommendation(&r.containers), low)
                    }
                    Err(err) => {
                        unsupported.get_or_insert(format!("Invalid resourcePolicy: {err}"));
                        (None, None)
                    }
                };
            let old = v.status.as_ref();
            if !metrics_ok {
                recommendation = old.and_then(|s| s.recommendation.clone());
                low_confidence = old
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| {
                        c.iter()
                            .find(|c| c.type_ == tailor_crds::condition::LOW_CONFIDENCE)
                    })
                    .filter(|c| c.status == "True")
                    .map(|c| c.message.clone().unwrap_or_default());
            }
            let findings = Findings {
                recommendation,
                pods_matched,
                unsupported,
                low_confidence,
                generation: v.metadata.generation,
                fetching_history: self.history.as_ref().and_then(|h| h.fetching(&key)),
            };
            let new = status::build_status(old, &findings, &now_t);
            if Some(&new) == old {
                continue;
            }
            if let Some((base, written)) = &e.last_written
                && base.as_ref() == old
                && *written == new
            {
                continue;
            }
            patches.push((key, old.cloned(), new));
        }
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let workers = self.cfg.update_worker_count.max(1);
        let results: Vec<_> = futures::stream::iter(patches)
            .map(|(key, base, new)| {
                let client = self.client.clone();
                let limiter = self.limiter.clone();
                let pp = pp.clone();
                async move {
                    let r = match status::merge_patch(&new) {
                        Ok(body) => {
                            limiter.acquire().await;
                            let api: Api<VerticalPodAutoscaler> = Api::namespaced(client, &key.0);
                            api.patch_status(&key.1, &pp, &Patch::Merge(&body))
                                .await
                                .map(|_| ())
                        }
                        Err(e) => Err(kube::Error::SerdeError(e)),
                    };
                    (key, base, new, r)
                }
            })
            .buffer_unordered(workers)
            .collect()
            .await;
        for (key, base, new, r) in results {
            match r {
                Ok(()) => {
                    report.status_writes += 1;
                    self.metrics
                        .status_writes
                        .get_or_create(&vec![("result", "ok")])
                        .inc();
                    if let Some(e) = self.vpas.get_mut(&key) {
                        e.last_written = Some((base, new));
                    }
                }
                Err(err) => {
                    report.status_errors += 1;
                    self.metrics
                        .status_writes
                        .get_or_create(&vec![("result", "error")])
                        .inc();
                    self.metrics.error("status");
                    tracing::warn!(namespace = %key.0, vpa = %key.1, error = %err, "cannot write VPA status");
                }
            }
        }
    }

    /// The checkpoints of one VPA: per container name, the merged aggregate minus open memory windows,
    /// and those windows.
    fn checkpoint_jobs(&self, vpa: &VerticalPodAutoscaler, now: Nanos) -> Vec<CheckpointJob> {
        let key = key_of(vpa);
        let Some(e) = self.vpas.get(&key) else {
            return Vec::new();
        };
        let mut states = self.model.aggregate_state_by_container_name(e.index);
        let mut windows: BTreeMap<String, Vec<OpenWindow>> = BTreeMap::new();
        if let Some(pods) = self.pods.get(&key.0) {
            let mut names: Vec<&String> = pods.keys().collect();
            names.sort();
            for pod in names {
                let Some(p) = pods.get(pod) else { continue };
                if !e.selector.matches(&p.labels) {
                    continue;
                }
                for (c, cs) in &p.containers {
                    let Some((peak, end)) = cs.open_window_peak(now) else {
                        continue;
                    };
                    if peak <= 0 {
                        continue;
                    }
                    if let Some(agg) = states.get_mut(c) {
                        agg.memory.subtract_sample(peak as f64, 1.0, end);
                    }
                    windows.entry(c.clone()).or_default().push(OpenWindow {
                        pod: pod.clone(),
                        end,
                        peak,
                    });
                }
            }
        }
        let mut jobs = Vec::new();
        for (container, agg) in states {
            let status = checkpoint::to_api_status(&agg.save_to_checkpoint(), now);
            let ws = windows.remove(&container).unwrap_or_default();
            let Ok(desired) = checkpoint::build(vpa, &container, status, &ws) else {
                continue;
            };
            let name = checkpoint::checkpoint_name(&key.1, &container);
            let existing = self
                .stores
                .checkpoints
                .get(&ObjectRef::new(&name).within(&key.0));
            let exists = existing.is_some()
                || self
                    .written_checkpoints
                    .contains(&(key.0.clone(), name.clone()));
            jobs.push(CheckpointJob {
                namespace: key.0.clone(),
                name,
                desired,
                exists,
                existing,
            });
        }
        jobs
    }

    /// Writes checkpoints, oldest-written VPA first, with `--update-worker-count` workers, until the
    /// `--checkpoints-timeout` deadline (each worker finishes its VPA; at least one VPA per worker).
    async fn maintain_checkpoints(
        &mut self,
        owned: &[Arc<VerticalPodAutoscaler>],
        now: Nanos,
        report: &mut LoopReport,
    ) {
        let deadline = Instant::now() + self.cfg.checkpoints_timeout;
        let mut order: Vec<(Option<Nanos>, VpaKey, Arc<VerticalPodAutoscaler>)> = owned
            .iter()
            .filter(|v| {
                !v.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            c.type_ == tailor_crds::condition::FETCHING_HISTORY
                                && c.status == "True"
                        })
                    })
            })
            .filter_map(|v| {
                let key = key_of(v);
                self.vpas
                    .get(&key)
                    .map(|e| (e.last_checkpoint, key, v.clone()))
            })
            .collect();
        order.sort_by(|a, b| {
            a.0.unwrap_or(i64::MIN)
                .cmp(&b.0.unwrap_or(i64::MIN))
                .then_with(|| a.1.cmp(&b.1))
        });
        let workers = self.cfg.update_worker_count.max(1);
        let mut pending = order.into_iter();
        let mut in_flight = FuturesUnordered::new();
        let mut started = 0usize;
        loop {
            while in_flight.len() < workers {
                if started >= workers && Instant::now() >= deadline {
                    break;
                }
                let Some((_, key, vpa)) = pending.next() else {
                    break;
                };
                let jobs = self.checkpoint_jobs(&vpa, now);
                let (client, limiter) = (self.client.clone(), self.limiter.clone());
                in_flight
                    .push(async move { (key, write_checkpoints(client, limiter, jobs).await) });
                started += 1;
            }
            let Some((key, r)) = in_flight.next().await else {
                break;
            };
            report.checkpoints_written += r.created + r.replaced;
            report.checkpoint_errors += r.errors;
            let m = &self.metrics.checkpoint_writes;
            m.get_or_create(&vec![("op", "create"), ("result", "ok")])
                .inc_by(r.created);
            m.get_or_create(&vec![("op", "replace"), ("result", "ok")])
                .inc_by(r.replaced);
            if r.errors > 0 {
                m.get_or_create(&vec![("op", "write"), ("result", "error")])
                    .inc_by(r.errors);
                self.metrics.error("checkpoint");
            }
            for name in r.written {
                self.written_checkpoints.insert((key.0.clone(), name));
            }
            if r.errors == 0
                && let Some(e) = self.vpas.get_mut(&key)
            {
                e.last_checkpoint = Some(now);
            }
        }
    }

    /// Deletes checkpoints whose VPA no longer exists (any recommender's VPAs count), every
    /// `--checkpoints-gc-interval`, with its own deadline; a pass that runs out of time is retried next loop.
    async fn collect_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
        let interval =
            i64::try_from(self.cfg.checkpoints_gc_interval.as_nanos()).unwrap_or(i64::MAX);
        if self
            .last_checkpoint_gc
            .is_some_and(|t| now.saturating_sub(t) < interval)
        {
            return;
        }
        let deadline = Instant::now() + self.cfg.checkpoints_timeout;
        let existing: HashSet<VpaKey> =
            self.stores.vpas.state().iter().map(|v| key_of(v)).collect();
        let mut doomed: Vec<(String, String)> = self
            .stores
            .checkpoints
            .state()
            .iter()
            .filter_map(|c| {
                let ns = c.metadata.namespace.clone().unwrap_or_default();
                let vpa = c.spec.vpa_object_name.clone().unwrap_or_default();
                let name = c.metadata.name.clone()?;
                (self.cfg.namespace_watched(&ns) && !existing.contains(&(ns.clone(), vpa)))
                    .then_some((ns, name))
            })
            .collect();
        doomed.sort();
        let mut finished = true;
        for (ns, name) in doomed {
            if Instant::now() >= deadline {
                finished = false;
                break;
            }
            self.limiter.acquire().await;
            let api: Api<VerticalPodAutoscalerCheckpoint> =
                Api::namespaced(self.client.clone(), &ns);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    report.checkpoints_deleted += 1;
                    self.written_checkpoints.remove(&(ns.clone(), name.clone()));
                    self.metrics
                        .checkpoint_writes
                        .get_or_create(&vec![("op", "delete"), ("result", "ok")])
                        .inc();
                }
                Err(e) if is_not_found(&e) => {
                    self.written_checkpoints.remove(&(ns.clone(), name.clone()));
                }
                Err(e) => {
                    finished = false;
                    self.metrics.error("checkpoint_gc");
                    tracing::warn!(namespace = %ns, checkpoint = %name, error = %e, "cannot delete orphaned checkpoint");
                }
            }
        }
        if finished {
            self.last_checkpoint_gc = Some(now);
        }
    }

    /// Writes every owned VPA's checkpoints once more (on shutdown), within the checkpoint deadline.
    pub async fn final_checkpoints(&mut self, now: Nanos) -> LoopReport {
        let mut report = LoopReport::default();
        if !self.cfg.checkpoints_enabled {
            return report;
        }
        let owned: Vec<Arc<VerticalPodAutoscaler>> = self
            .stores
            .vpas
            .state()
            .into_iter()
            .filter(|v| self.vpas.contains_key(&key_of(v)))
            .collect();
        self.maintain_checkpoints(&owned, now, &mut report).await;
        report
    }

    /// Runs a loop every interval (the first one right away) until `shutdown` resolves, then writes
    /// checkpoints one last time. `on_loop` is called after each loop (health, logging).
    pub async fn run<F>(&mut self, shutdown: F, mut on_loop: impl FnMut(&LoopReport))
    where
        F: std::future::Future<Output = ()>,
    {
        let mut ticker = tokio::time::interval(self.cfg.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let r = self.run_once(wall_now()).await;
                    on_loop(&r);
                }
                _ = &mut shutdown => break,
            }
        }
        let r = self.final_checkpoints(wall_now()).await;
        tracing::info!(
            written = r.checkpoints_written,
            errors = r.checkpoint_errors,
            "final checkpoints written"
        );
    }
}

/// The wall clock in engine time (only the binary's driver reads it; `run_once` takes time as a parameter).
pub fn wall_now() -> Nanos {
    from_timestamp(k8s_openapi::jiff::Timestamp::now()).unwrap_or(0)
}

#[allow(dead_code)]
fn _assert_send(r: &mut Recommender) -> impl std::future::Future<Output = LoopReport> + Send + '_ {
    r.run_once(0)
}
