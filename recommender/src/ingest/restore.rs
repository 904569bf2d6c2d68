//! Checkpoints into the model: the restored aggregates of VPAs new to the model with their open memory
//! windows added back (windows of the earlier per-pod format are continued in containers that still run).

use std::collections::HashMap;

use crate::checkpoint::{self, OpenWindow, StoredWindows};
use crate::error::Error;
use crate::ingest::VpaKey;
use crate::run_loop::{LoopReport, Recommender};
use crate::time::from_time;
use crate::written::shapes_of;
use tailor_engine::model::{AggregateContainerState, ContainerId, Sample};
use tailor_engine::units::{Nanos, Resource};

impl Recommender {
    /// Loads checkpoints of VPAs new to the model (all of them at start), except those this process wrote.
    ///
    /// A VPA whose checkpoints were all restored counts them as its last write (at the oldest
    /// `lastUpdateTime`, with the histograms as restored), so that after a restart they are rewritten
    /// when they move or reach `--checkpoints-max-age`, as before it, not all in the first loop.
    pub(crate) fn restore_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
        if !self.vpas.values().any(|e| e.restore_pending) {
            return;
        }
        let interval = self.model.config.memory_aggregation_interval;
        let mut checkpoints = self.stores.checkpoints.state();
        checkpoints.sort_by_key(|c| c.metadata.name.clone());
        // Per VPA: the oldest `lastUpdateTime` of its restored checkpoints (`None` when one has none or
        // could not be loaded: that VPA's checkpoints are written in the first loop).
        let mut restored: HashMap<VpaKey, Option<Nanos>> = HashMap::new();
        for cp in checkpoints {
            let ns = cp.metadata.namespace.clone().unwrap_or_default();
            let cp_name = cp.metadata.name.clone().unwrap_or_default();
            let (Some(vpa_name), Some(container)) = (
                cp.spec.vpa_object_name.clone(),
                cp.spec.container_name.clone(),
            ) else {
                continue;
            };
            let key = (ns.clone(), vpa_name);
            let Some(e) = self.vpas.get(&key) else {
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
                restored.insert(key, None);
                continue;
            };
            let mut agg = AggregateContainerState::new(&self.model.config, now);
            if let Err(source) = agg.load_from_checkpoint(&checkpoint::from_api_status(status)) {
                restored.insert(key, None);
                self.record_error(&Error::CheckpointLoad {
                    namespace: ns,
                    checkpoint: cp_name,
                    source,
                });
                continue;
            }
            match checkpoint::open_windows(&cp) {
                StoredWindows::None => {}
                StoredWindows::Aggregated(windows) => windows.add_to(&mut agg.memory),
                // The earlier per-pod format: windows of containers that still run are continued.
                StoredWindows::PerPod(windows) => {
                    for w in windows {
                        let continued =
                            now < w.end && self.continue_window(&ns, &w, &container, interval);
                        if !continued {
                            agg.memory.add_sample(w.peak as f64, 1.0, w.end);
                        }
                    }
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
            let written = status
                .last_update_time
                .as_ref()
                .and_then(from_time)
                .map(|t| t.min(now));
            restored
                .entry(key)
                .and_modify(|w| *w = w.zip(written).map(|(a, b)| a.min(b)))
                .or_insert(written);
        }
        for (key, written) in restored {
            let (Some(t), Some(index)) = (written, self.vpas.get(&key).map(|e| e.index)) else {
                continue;
            };
            let shapes = shapes_of(&self.model.aggregate_state_by_container_name(index));
            if let Some(e) = self.vpas.get_mut(&key) {
                e.last_checkpoint = Some(t);
                e.checkpoint_shapes = Some(shapes);
            }
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
}
