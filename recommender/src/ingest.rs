//! Ingest: VPAs, pods, checkpoints, usage samples and OOMs into the model ([`ClusterState`], the one
//! model of the controller). What changes is decided purely ([`vpa_action`], [`PodFilter`]); the steps
//! then apply it to the model.
//!
//! [`ClusterState`]: tailor_engine::model::ClusterState

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tailor_crds::{PodResourcePolicy, VerticalPodAutoscaler, VerticalPodAutoscalerStatus};

use crate::checkpoint::{self, OpenWindow};
use crate::error::Error;
use crate::run_loop::{LoopReport, Recommender};
use crate::slim::SlimPod;
use crate::target::{self, ScaleEntry, StoreLookup, TargetKey};
use tailor_engine::model::{
    AggregateContainerState, ContainerId, Labels, ModelError, PodPhase, Sample, Selector, VpaState,
};
use tailor_engine::policy::{self, PolicyError};
use tailor_engine::units::{Nanos, Resource};

/// `(namespace, name)` of a VPA.
pub type VpaKey = (String, String);

/// What the loop remembers about a VPA it handles, besides the model's [`VpaState`].
#[derive(Debug)]
pub(crate) struct VpaEntry {
    /// Index of the VPA in the model.
    pub(crate) index: usize,
    /// `metadata.uid` (a new uid is a new VPA).
    uid: String,
    /// Its checkpoints are still to be restored.
    pub(crate) restore_pending: bool,
    /// When its checkpoints were last written without error.
    pub(crate) last_checkpoint: Option<Nanos>,
    /// The stored status a write was based on, and what was written.
    pub(crate) last_written: Option<(
        Option<VerticalPodAutoscalerStatus>,
        VerticalPodAutoscalerStatus,
    )>,
    /// `ConfigUnsupported` message of the target resolution.
    pub(crate) unsupported: Option<String>,
    /// When a missing recommendation was last logged.
    pub(crate) missing_logged: Option<Nanos>,
}

impl VpaEntry {
    fn new(index: usize, uid: String) -> Self {
        VpaEntry {
            index,
            uid,
            restore_pending: true,
            last_checkpoint: None,
            last_written: None,
            unsupported: None,
            missing_logged: None,
        }
    }
}

/// What the loop remembers about a pod in the model: enough to skip unchanged pods and init containers.
#[derive(Debug)]
pub(crate) struct PodEntry {
    resource_version: Option<String>,
    init: Vec<String>,
    seen: u64,
}

/// `(namespace, name)` of a VPA object.
pub fn key_of(v: &VerticalPodAutoscaler) -> VpaKey {
    (
        v.metadata.namespace.clone().unwrap_or_default(),
        v.metadata.name.clone().unwrap_or_default(),
    )
}

/// The names in `spec.recommenders`.
pub fn recommender_names(v: &VerticalPodAutoscaler) -> Vec<String> {
    v.spec
        .recommenders
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

/// The VPA's `resourcePolicy`, once every `minAllowed` / `maxAllowed` quantity is known to parse.
pub fn resource_policy(
    v: &VerticalPodAutoscaler,
) -> Result<Option<PodResourcePolicy>, PolicyError> {
    let Some(p) = v.spec.resource_policy.as_ref() else {
        return Ok(None);
    };
    policy::validate(p)?;
    Ok(Some(p.clone()))
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

/// What a sync does with one owned VPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VpaAction {
    /// New to the model.
    Add,
    /// Same identity and selector: only policy, annotations and target state are refreshed.
    Keep,
    /// Same identity, new selector: re-linked in place (restored history is kept; upstream drops it).
    Reselect,
    /// A new object under the same name: the old one is retired and the new one starts over.
    Replace,
}

/// The action for a VPA with `uid` resolving to `selector`, given the model's current `(uid, selector)`.
pub fn vpa_action(current: Option<(&str, &Selector)>, uid: &str, selector: &Selector) -> VpaAction {
    match current {
        None => VpaAction::Add,
        Some((u, _)) if u != uid => VpaAction::Replace,
        Some((_, s)) if s != selector => VpaAction::Reselect,
        Some(_) => VpaAction::Keep,
    }
}

/// Which pods enter the model: with `--memory-saver`, only those some VPA of their namespace selects;
/// otherwise all.
#[derive(Debug)]
pub struct PodFilter<'a> {
    memory_saver: bool,
    selectors: HashMap<&'a str, Vec<&'a Selector>>,
}

impl<'a> PodFilter<'a> {
    /// A filter over the selectors of `vpas` (namespace, selector).
    pub fn new(
        memory_saver: bool,
        vpas: impl IntoIterator<Item = (&'a str, &'a Selector)>,
    ) -> Self {
        let mut selectors: HashMap<&str, Vec<&Selector>> = HashMap::new();
        for (ns, s) in vpas {
            if *s != Selector::Nothing {
                selectors.entry(ns).or_default().push(s);
            }
        }
        PodFilter {
            memory_saver,
            selectors,
        }
    }

    /// Whether a pod in `namespace` with `labels` is tracked.
    pub fn tracks(&self, namespace: &str, labels: &Labels) -> bool {
        !self.memory_saver
            || self
                .selectors
                .get(namespace)
                .is_some_and(|s| s.iter().any(|s| s.matches(labels)))
    }
}

impl Recommender {
    /// Looks up `/scale` selectors of targets that are not well-known kinds, at most once per TTL.
    pub(crate) async fn refresh_scale_cache(&mut self, now: Nanos) {
        let ttl = i64::try_from(self.cfg.scale_cache_ttl.as_nanos()).unwrap_or(i64::MAX);
        let mut wanted = HashSet::new();
        for v in self.stores.vpas.state() {
            let (ns, _) = key_of(&v);
            let Some(t) = v.spec.target_ref.as_ref() else {
                continue;
            };
            if !self.cfg.owns(&ns, &recommender_names(&v)) || target::is_well_known(&t.kind) {
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
            if let Err(message) = &selector {
                self.record_error(&Error::Scale {
                    target: format!("{} {}/{}", key.kind, key.namespace, key.name),
                    message: message.clone(),
                });
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

    /// Brings the model's VPAs in line with the owned VPAs in the store: selection, target resolution,
    /// selector changes ([`ClusterState::set_vpa_selector`]), and VPAs that went away
    /// ([`ClusterState::retire_vpa`]). Returns the owned VPAs.
    ///
    /// [`ClusterState::set_vpa_selector`]: tailor_engine::model::ClusterState::set_vpa_selector
    /// [`ClusterState::retire_vpa`]: tailor_engine::model::ClusterState::retire_vpa
    pub fn sync_vpas(&mut self) -> Vec<Arc<VerticalPodAutoscaler>> {
        let mut owned = Vec::new();
        let mut seen = HashSet::new();
        let mut all = self.stores.vpas.state();
        all.sort_by_key(|v| key_of(v));
        for v in all {
            let key = key_of(&v);
            if !self.cfg.owns(&key.0, &recommender_names(&v)) {
                continue;
            }
            let target = v
                .spec
                .target_ref
                .as_ref()
                .map(|t| TargetKey::new(&key.0, t));
            let lookup = StoreLookup {
                stores: &self.stores,
                scale: &self.scale,
            };
            let resolution = target::resolve(target.as_ref(), &lookup);
            self.sync_vpa(&key, &v, resolution);
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
                self.model.retire_vpa(e.index);
                self.vpas_changed = true;
            }
        }
        owned
    }

    fn sync_vpa(&mut self, key: &VpaKey, v: &VerticalPodAutoscaler, res: target::Resolution) {
        let uid = v.metadata.uid.clone().unwrap_or_default();
        let current = self.vpas.get(key).and_then(|e| {
            let m = self.model.vpas().get(e.index)?;
            Some((e.uid.as_str(), &m.selector))
        });
        let action = vpa_action(current, &uid, &res.selector);
        let index = match (action, self.vpas.get(key).map(|e| e.index)) {
            (VpaAction::Keep, Some(index)) => index,
            (VpaAction::Reselect, Some(index)) => {
                self.model.set_vpa_selector(index, res.selector);
                self.vpas_changed = true;
                index
            }
            (_, existing) => {
                if let Some(old) = existing {
                    self.model.retire_vpa(old);
                }
                let index = self
                    .model
                    .add_vpa(VpaState::new(&key.0, &key.1, res.selector));
                self.vpas.insert(key.clone(), VpaEntry::new(index, uid));
                self.vpas_changed = true;
                index
            }
        };
        if let Some(m) = self.model.vpa_mut(index) {
            m.policy = resource_policy(v).ok().flatten();
            m.annotations = v.metadata.annotations.clone().unwrap_or_default();
            m.controller_exists = res.unsupported.is_none();
        }
        if let Some(e) = self.vpas.get_mut(key) {
            e.unsupported = res.unsupported;
        }
    }

    /// Adds or updates the store's pods that the [`PodFilter`] tracks; returns the model pods that are
    /// gone (deleted after this loop's OOMs).
    pub(crate) fn sync_pods(&mut self) -> Vec<(String, String)> {
        let generation = self.loops;
        let recheck = std::mem::take(&mut self.vpas_changed);
        let model_vpas = self.model.vpas();
        let filter = PodFilter::new(
            self.cfg.memory_saver,
            self.vpas
                .iter()
                .filter_map(|((ns, _), e)| Some((ns.as_str(), &model_vpas.get(e.index)?.selector))),
        );
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
            if !filter.tracks(ns, &labels) {
                continue;
            }
            if unchanged && let Some(e) = existing {
                e.seen = generation;
                continue;
            }
            updates.push((pod, labels, ph));
        }
        drop(filter);
        for (pod, labels, ph) in updates {
            self.add_pod(&pod, &labels, ph, generation);
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

    fn add_pod(&mut self, pod: &SlimPod, labels: &Labels, ph: PodPhase, generation: u64) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.model.add_or_update_pod(&ns, &name, labels, ph);
        for c in &pod.spec.containers {
            let id = ContainerId {
                namespace: &ns,
                pod: &name,
                container: &c.name,
            };
            if let Err(e) = self.model.add_or_update_container(id) {
                tracing::warn!(error = %e, "container not added to the model");
            }
        }
        let entry = PodEntry {
            resource_version: pod.metadata.resource_version.clone(),
            init: pod
                .spec
                .init_containers
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            seen: generation,
        };
        self.pods.entry(ns).or_default().insert(name, entry);
    }

    /// Removes pods that left the store from the model.
    pub(crate) fn delete_pods(&mut self, gone: Vec<(String, String)>) {
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
    pub(crate) fn restore_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
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
            if let Err(source) = agg.load_from_checkpoint(&checkpoint::from_api_status(status)) {
                self.record_error(&Error::CheckpointLoad {
                    namespace: ns,
                    checkpoint: cp_name,
                    source,
                });
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

    /// Re-opens a checkpointed memory window in a running container of the model: a sample one interval
    /// before the window's end re-creates the same window with the same peak.
    fn continue_window(
        &mut self,
        ns: &str,
        w: &OpenWindow,
        container: &str,
        interval: i64,
    ) -> bool {
        let id = ContainerId {
            namespace: ns,
            pod: &w.pod,
            container,
        };
        let sample = Sample {
            time: w.end.saturating_sub(interval),
            resource: Resource::Memory,
            usage: w.peak,
        };
        self.model.add_sample(id, sample).is_ok()
    }

    /// Feeds one PodMetrics poll into the model.
    pub(crate) async fn load_metrics(&mut self, report: &mut LoopReport) -> Result<(), Error> {
        self.limiter.acquire().await;
        let (items, bad) = self.source.list().await?;
        if bad > 0 {
            self.record_error(&Error::MalformedMetrics { count: bad });
        }
        let (mut acc_cpu, mut acc_mem, mut rej_cpu, mut rej_mem) = (0u64, 0u64, 0u64, 0u64);
        for pm in items {
            let Some(entry) = self.pods.get(&pm.namespace).and_then(|m| m.get(&pm.name)) else {
                continue;
            };
            for c in pm.containers {
                if entry.init.contains(&c.name) {
                    continue;
                }
                let id = ContainerId {
                    namespace: &pm.namespace,
                    pod: &pm.name,
                    container: &c.name,
                };
                let samples = [
                    (Resource::Cpu, c.cpu_millicores),
                    (Resource::Memory, c.memory_bytes),
                ];
                for (resource, usage) in samples {
                    let Some(usage) = usage else { continue };
                    let sample = Sample {
                        time: pm.timestamp,
                        resource,
                        usage,
                    };
                    let ok = self.model.add_sample(id, sample).is_ok();
                    let counter = match (resource, ok) {
                        (Resource::Cpu, true) => &mut acc_cpu,
                        (Resource::Cpu, false) => &mut rej_cpu,
                        (_, true) => &mut acc_mem,
                        (_, false) => &mut rej_mem,
                    };
                    *counter += 1;
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
        Ok(())
    }

    /// Records every queued OOM with its own timestamp (an OOM older than later samples still counts,
    /// unless it is more than one aggregation interval older than the last memory sample).
    pub(crate) fn record_ooms(&mut self, report: &mut LoopReport) {
        let (records, dropped) = self.ooms.drain();
        if dropped > 0 {
            self.metrics
                .ooms
                .get_or_create(&vec![("source", "any"), ("result", "dropped")])
                .inc_by(dropped);
            report.ooms_rejected += dropped;
        }
        for r in records {
            let id = ContainerId {
                namespace: &r.namespace,
                pod: &r.pod,
                container: &r.container,
            };
            let result = match self.model.record_oom(id, r.time, r.memory_bytes) {
                Ok(bumped) => {
                    tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, memory = bumped, source = r.source.label(), "OOM recorded");
                    "recorded"
                }
                Err(ModelError::PodNotFound(_) | ModelError::ContainerNotFound(_)) => {
                    "unknown_container"
                }
                Err(e) => {
                    tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, error = %e, "OOM not recorded");
                    "rejected"
                }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpa_action_follows_identity_then_selector() {
        let a = Selector::parse("app=a").unwrap();
        let b = Selector::parse("app=b").unwrap();
        assert_eq!(vpa_action(None, "u1", &a), VpaAction::Add);
        assert_eq!(vpa_action(Some(("u1", &a)), "u1", &a), VpaAction::Keep);
        assert_eq!(vpa_action(Some(("u1", &a)), "u1", &b), VpaAction::Reselect);
        assert_eq!(vpa_action(Some(("u1", &a)), "u2", &a), VpaAction::Replace);
        assert_eq!(vpa_action(Some(("u1", &a)), "u2", &b), VpaAction::Replace);
    }

    #[test]
    fn pod_filter_ignores_vpas_that_select_nothing() {
        let nothing = Selector::Nothing;
        let everything = Selector::everything();
        let labels = Labels::new();
        let f = PodFilter::new(true, [("a", &nothing), ("b", &everything)]);
        assert!(!f.tracks("a", &labels));
        assert!(f.tracks("b", &labels));
        assert!(!f.tracks("c", &labels));
        assert!(PodFilter::new(false, []).tracks("c", &labels));
    }
}
