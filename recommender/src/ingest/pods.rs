//! Pods into the model: those the [`PodFilter`] tracks, re-read only when they or the VPAs changed.

use std::sync::Arc;

use super::{PodEntry, PodFilter};
use crate::run_loop::Recommender;
use crate::views::pod_store::StoredPod;
use tailor_core::sizing::POD_ROW;
use tailor_engine::model::{ContainerId, PodPhase};

impl Recommender {
    /// Adds or updates the store's pods that the [`PodFilter`] tracks; returns the model pods that are
    /// gone (deleted after this loop's OOMs).
    pub(crate) fn sync_pods(&mut self) -> Vec<(Arc<str>, Box<str>)> {
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
            let ns: &str = &pod.namespace;
            if pod.phase == PodPhase::Pending || !self.cfg.namespace_watched(ns) {
                continue;
            }
            let existing = self.pods.get_mut(ns).and_then(|m| m.get_mut(&*pod.name));
            let unchanged = existing.as_ref().is_some_and(|e| {
                e.pod.resource_version.is_some() && e.pod.resource_version == pod.resource_version
            });
            if unchanged && !recheck {
                if let Some(e) = existing {
                    e.seen = generation;
                }
                continue;
            }
            if !filter.tracks(ns, &pod.labels) {
                continue;
            }
            if unchanged && let Some(e) = existing {
                e.seen = generation;
                continue;
            }
            updates.push(pod);
        }
        drop(filter);
        for pod in updates {
            self.add_pod(pod, generation);
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

    fn add_pod(&mut self, pod: Arc<StoredPod>, generation: u64) {
        self.model
            .add_or_update_pod(&pod.namespace, &pod.name, &pod.labels, pod.phase);
        for c in pod.containers.iter() {
            let id = ContainerId {
                namespace: &pod.namespace,
                pod: &pod.name,
                container: c,
            };
            if let Err(e) = self.model.add_or_update_container(id) {
                tracing::warn!(error = %e, "container not added to the model");
            }
        }
        if self.cfg.pod_level_resources && pod.pod_level {
            let id = ContainerId {
                namespace: &pod.namespace,
                pod: &pod.name,
                container: POD_ROW,
            };
            if let Err(e) = self.model.add_or_update_container(id) {
                tracing::warn!(error = %e, "pod-level aggregate not added to the model");
            }
        }
        let (ns, name) = (pod.namespace.clone(), pod.name.clone());
        let entry = PodEntry {
            pod,
            seen: generation,
        };
        self.pods.entry(ns).or_default().insert(name, entry);
    }

    /// Removes pods that left the store from the model.
    pub(crate) fn delete_pods(&mut self, gone: Vec<(Arc<str>, Box<str>)>) {
        for (ns, name) in gone {
            self.model.delete_pod(&ns, &name);
            if let Some(j) = self.job_runs.as_mut() {
                j.forget_pod(&ns, &name);
            }
            if let Some(m) = self.pods.get_mut(&ns) {
                m.remove(&name);
                if m.is_empty() {
                    self.pods.remove(&ns);
                }
            }
        }
    }
}
