//! VPAs into the model: `/scale` lookups for custom targets, selection, target resolution, and the
//! [`VpaAction`] each owned VPA needs.

use std::collections::HashSet;
use std::sync::Arc;

use super::{VpaAction, VpaEntry, VpaKey, key_of, recommender_names, resource_policy, vpa_action};
use crate::error::Error;
use crate::run_loop::Recommender;
use crate::views::target::{self, ScaleEntry, StoreLookup, TargetKey};
use crate::views::watched_vpa::WatchedVpa;
use tailor_engine::model::VpaState;
use tailor_engine::units::Nanos;

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
            if !self.cfg.owns(&ns, &recommender_names(&v.spec))
                || tailor_core::target::is_well_known(&t.kind)
            {
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
            // The error is kept as text: it is cached and becomes part of the `ConfigUnsupported` message.
            let selector = (self.reads)
                .scale_selector(&key.api_version, &key.kind, &key.namespace, &key.name)
                .await
                .map_err(|e| e.to_string());
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
    pub fn sync_vpas(&mut self) -> Vec<Arc<WatchedVpa>> {
        let mut owned = Vec::new();
        let mut seen = HashSet::new();
        let mut all = self.stores.vpas.state();
        all.sort_by_key(|v| key_of(v));
        for v in all {
            let key = key_of(&v);
            if !self.cfg.owns(&key.0, &recommender_names(&v.spec)) {
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
            let workload = target.map(|t| (t.kind, t.name));
            self.sync_vpa(&key, &v, workload, resolution);
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

    /// Says what becomes of a VPA's per-VPA recommender settings: upstream applies them only behind its alpha
    /// PerVPAConfig gate (off by default) and logs them otherwise. Tailor applies the OOM bumps behind the
    /// same gate, and never the aggregation intervals (README).
    fn log_per_vpa_settings(&self, key: &VpaKey, spec: &tailor_crds::VerticalPodAutoscalerSpec) {
        if !tailor_core::validation::uses_per_vpa_recommender_config(spec) {
            return;
        }
        let applied = if self.cfg.per_vpa_config {
            "oomBumpUpRatio and oomMinBumpUp bump this VPA's OOMs; memoryAggregationInterval* are not applied"
        } else {
            "not applied without --feature-gates=PerVPAConfig=true; the flags size every VPA"
        };
        tracing::info!(
            vpa = %format!("{}/{}", key.0, key.1),
            "containerPolicies set oomBumpUpRatio, oomMinBumpUp or memoryAggregationInterval*: {applied}"
        );
    }

    fn sync_vpa(
        &mut self,
        key: &VpaKey,
        v: &WatchedVpa,
        workload: Option<(String, String)>,
        res: target::Resolution,
    ) {
        let uid = v.metadata.uid.clone().unwrap_or_default();
        let current = self.vpas.get(key).and_then(|e| {
            let m = self.model.vpas().get(e.index)?;
            Some((e.uid.as_str(), &m.selector))
        });
        let retargeted = self.vpas.get(key).is_some_and(|e| e.target != workload);
        let action = vpa_action(current, &uid, &res.selector, retargeted);
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
                let mut entry = VpaEntry::new(index, uid, workload);
                self.log_per_vpa_settings(key, &v.spec);
                if action == VpaAction::Retarget {
                    // The old workload's history goes, checkpoints included: nothing is restored, the
                    // stored checkpoints are deleted before this loop writes new ones, and the history
                    // bootstrap starts over for the new target.
                    entry.restore_pending = false;
                    self.retargeted.insert(key.clone());
                    let vpa = key.1.as_str();
                    let stale: Vec<(String, String)> = {
                        let mut out = Vec::new();
                        self.stores.checkpoints.each(|ns, name, c| {
                            if ns == key.0 && &*c.vpa == vpa {
                                out.push((ns.to_owned(), name.to_owned()));
                            }
                        });
                        out
                    };
                    for k in stale {
                        self.written_checkpoints.remove(&k);
                    }
                    if let Some(h) = self.history.as_mut() {
                        h.forget(key);
                    }
                    tracing::info!(
                        vpa = %format!("{}/{}", key.0, key.1),
                        "targetRef or selector changed: the old workload's history and checkpoints are dropped"
                    );
                }
                self.vpas.insert(key.clone(), entry);
                self.vpas_changed = true;
                index
            }
        };
        if let Some(m) = self.model.vpa_mut(index) {
            m.policy = resource_policy(&v.spec).ok().flatten();
            m.annotations = v.metadata.annotations.clone().unwrap_or_default();
            m.controller_exists = res.unsupported.is_none();
        }
        if let Some(e) = self.vpas.get_mut(key) {
            e.unsupported = res.unsupported;
        }
    }
}
