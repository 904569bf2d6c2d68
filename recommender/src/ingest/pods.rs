//! Pods into the model: those the [`PodFilter`] tracks, re-read only when they or the VPAs changed.

use super::{PodEntry, PodFilter, phase};
use crate::run_loop::Recommender;
use crate::slim::SlimPod;
use tailor_engine::model::{ContainerId, Labels, PodPhase};

impl Recommender {
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
}
