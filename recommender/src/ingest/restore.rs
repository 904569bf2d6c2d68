//! Checkpoints into the model: the restored aggregates of VPAs new to the model with their open memory
//! windows added back (windows listed by pod are continued in containers that still run).
//! The checkpoints are read from the API server when needed (the watch keeps only which exist,
//! [`crate::views::checkpoint_index`]): page by page when many are due (at start), one by one otherwise.

use std::collections::{BTreeSet, HashMap};

use kube::api::ListParams;

use crate::error::Error;
use crate::ingest::VpaKey;
use crate::run_loop::{LoopReport, Recommender};
use crate::time::from_time;
use crate::views::stored_checkpoint::StoredCheckpoint;
use crate::writers::checkpoint::{self, OpenWindow, StoredWindows};
use crate::writers::written::shapes_of;
use tailor_engine::model::{AggregateContainerState, ContainerId, Sample};
use tailor_engine::units::{Nanos, Resource};

/// Up to this many due checkpoints are read one by one (`get`); more are read by listing them.
const GET_AT_MOST: usize = 16;
/// Checkpoints per page of a list.
const PAGE: u32 = 250;

/// One checkpoint read back, not yet in the model.
struct Loaded {
    key: VpaKey,
    name: String,
    container: String,
    /// `None`: the checkpoint has no status or cannot be loaded (its VPA's checkpoints are written in
    /// the first loop).
    state: Option<(AggregateContainerState, StoredWindows, Option<Nanos>)>,
    /// Why the checkpoint was skipped (it cannot be decoded or loaded), for the VPA's condition.
    skipped: Option<String>,
}

impl Recommender {
    /// Loads checkpoints of VPAs new to the model (all of them at start), except those this process wrote.
    ///
    /// A VPA whose checkpoints were all restored counts them as its last write (at the oldest
    /// `lastUpdateTime`, with the histograms as restored), so that after a restart they are rewritten
    /// when they move or reach `--checkpoints-max-age`, as before it, not all in the first loop.
    ///
    /// Nothing enters the model unless every due checkpoint was read: when the API server fails, the VPAs
    /// stay due (their checkpoints are neither overwritten nor their history fetched meanwhile) and the
    /// read is tried again in the next loop.
    pub(crate) async fn restore_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
        if !self.vpas.values().any(|e| e.restore_pending) {
            return;
        }
        let due = self.due_checkpoints();
        let loaded = match self.read_checkpoints(&due, now).await {
            Ok(loaded) => loaded,
            Err(source) => {
                self.record_error(&Error::CheckpointRead { source });
                return;
            }
        };
        let interval = self.model.config.memory_aggregation_interval;
        // Per VPA: the oldest `lastUpdateTime` of its restored checkpoints (`None` when one has none or
        // could not be loaded: that VPA's checkpoints are written in the first loop).
        let mut restored: HashMap<VpaKey, Option<Nanos>> = HashMap::new();
        let mut events = Vec::new();
        for Loaded {
            key,
            name,
            container,
            state,
            skipped,
        } in loaded
        {
            // The VPA the checkpoint names as read (its spec may have changed since the index saw it).
            let Some(entry) = self.vpas.get_mut(&key).filter(|e| e.restore_pending) else {
                continue;
            };
            let index = entry.index;
            if let Some(why) = skipped {
                let message = format!(
                    "Checkpoint {name} was skipped ({why}): container {container} starts without its history"
                );
                if events.len() < crate::writers::events::EVENTS_PER_LOOP {
                    events.push(tailor_kube::vpa_event::VpaEvent {
                        namespace: key.0.to_string(),
                        name: key.1.to_string(),
                        uid: entry.uid.clone(),
                        reason: "CheckpointSkipped",
                        note: message.clone(),
                    });
                }
                entry.skipped_checkpoint = Some((now, message));
                report.checkpoints_skipped += 1;
            }
            let Some((mut agg, windows, written)) = state else {
                restored.insert(key, None);
                continue;
            };
            let listed = match windows {
                StoredWindows::None => Vec::new(),
                StoredWindows::Aggregated(windows) => {
                    windows.add_to(&mut agg.memory);
                    windows.listed().collect()
                }
                StoredWindows::PerPod(windows) => windows,
            };
            // A listed window whose container still runs is continued (later samples raise the same
            // peak, as without the restart); any other is added back as ended.
            for w in listed {
                let continued =
                    now < w.end && self.continue_window(&key.0, &w, &container, interval);
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
                e.restored_at = Some(t);
            }
        }
        for e in self.vpas.values_mut() {
            e.restore_pending = false;
        }
        // The condition names the checkpoint for a day; the event tells whoever watches events now.
        if !events.is_empty() && self.fence.allows_writes() {
            crate::writers::events::record(self.writes.as_ref(), &events, "Restore").await;
        }
    }

    /// `(namespace, name)` of the checkpoints of VPAs due a restore, except those this process wrote, and
    /// except an object under upstream's name when the pair also has one under Tailor's
    /// ([`checkpoint::legacy_checkpoint_name`]: the older copy, not yet deleted).
    fn due_checkpoints(&self) -> BTreeSet<(String, String)> {
        let mut due = BTreeSet::new();
        self.stores.checkpoints.each(|ns, name, r| {
            let pending = self
                .vpas
                .get(&(ns.to_owned(), r.vpa.to_string()))
                .is_some_and(|e| e.restore_pending);
            let key = (ns.to_owned(), name.to_owned());
            if pending && !self.written_checkpoints.contains(&key) {
                due.insert(key);
            }
        });
        let namespaces: std::collections::HashSet<&str> =
            due.iter().map(|(ns, _)| ns.as_str()).collect();
        let superseded = crate::views::checkpoint_index::superseded_checkpoints(
            &self.stores.checkpoints,
            |ns| namespaces.contains(ns),
        );
        for key in superseded {
            due.remove(&key);
        }
        due
    }

    /// Reads the `due` checkpoints and loads each one's aggregate (in name order): one by one when they
    /// are few, else by listing every checkpoint page by page and keeping the due ones (only a page of
    /// whole objects is held at a time).
    async fn read_checkpoints(
        &self,
        due: &BTreeSet<(String, String)>,
        now: Nanos,
    ) -> Result<Vec<Loaded>, kube::Error> {
        let mut loaded = Vec::new();
        if due.len() <= GET_AT_MOST {
            for (ns, name) in due {
                self.limiter.acquire().await;
                if let Some(cp) = self.reads.checkpoint(ns, name).await? {
                    loaded.extend(self.load(cp, now));
                }
            }
            return Ok(loaded);
        }
        let mut params = ListParams::default().limit(PAGE);
        loop {
            self.limiter.acquire().await;
            let page = self.reads.checkpoint_page(&params).await?;
            for cp in page.items {
                let key = (
                    cp.metadata.namespace.clone().unwrap_or_default(),
                    cp.metadata.name.clone().unwrap_or_default(),
                );
                if due.contains(&key) {
                    loaded.extend(self.load(cp, now));
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        loaded.sort_by(|a, b| (&a.key.0, &a.name).cmp(&(&b.key.0, &b.name)));
        Ok(loaded)
    }

    /// One checkpoint's aggregate, windows and `lastUpdateTime`; `None` when it names no VPA or container.
    /// A checkpoint that cannot be decoded or loaded is skipped (counted, logged once, bounded) and costs
    /// only its own container's history.
    fn load(&self, stored: StoredCheckpoint, now: Nanos) -> Option<Loaded> {
        let ns = stored.metadata.namespace.clone().unwrap_or_default();
        let name = stored.metadata.name.clone().unwrap_or_default();
        let (Some(vpa_name), Some(container)) = (stored.vpa, stored.container) else {
            return None;
        };
        let mut loaded = Loaded {
            key: (ns.clone(), vpa_name),
            name: name.clone(),
            container,
            state: None,
            skipped: None,
        };
        let cp = match stored.decoded {
            Ok(cp) => cp,
            Err(message) => {
                loaded.skipped = Some(message.clone());
                self.record_error(&Error::CheckpointInvalid {
                    namespace: ns,
                    checkpoint: name,
                    message,
                });
                return Some(loaded);
            }
        };
        let Some(status) = cp.status.as_ref() else {
            return Some(loaded);
        };
        let mut agg = AggregateContainerState::new(&self.model.config, now);
        let mut stored_cp = checkpoint::from_api_status(status);
        let config = &self.model.config;
        let max_ahead = config
            .memory_aggregation_interval
            .saturating_add(config.memory_histogram_decay_half_life);
        let half_lives = (
            config.cpu_histogram_decay_half_life,
            config.memory_histogram_decay_half_life,
        );
        match checkpoint::sanitize(&mut stored_cp, now, max_ahead, half_lives) {
            Ok(moved) if moved.is_empty() => {}
            Ok(moved) => tracing::warn!(namespace = %ns, checkpoint = %name, histograms = ?moved,
                "checkpoint referenceTimestamp far in the future: weights taken as of now"),
            Err(message) => {
                loaded.skipped = Some(message.clone());
                self.record_error(&Error::CheckpointInvalid {
                    namespace: ns,
                    checkpoint: name,
                    message,
                });
                return Some(loaded);
            }
        }
        if let Err(source) = agg.load_from_checkpoint(&stored_cp) {
            loaded.skipped = Some(tailor_core::text::cut(
                &source.to_string(),
                crate::views::stored_checkpoint::MESSAGE_LEN,
            ));
            self.record_error(&Error::CheckpointLoad {
                namespace: ns,
                checkpoint: name,
                source,
            });
            return Some(loaded);
        }
        let written = status
            .last_update_time
            .as_ref()
            .and_then(from_time)
            .map(|t| t.min(now));
        let windows = if self.cfg.restore_open_windows {
            checkpoint::open_windows(&cp)
        } else {
            checkpoint::StoredWindows::None
        };
        loaded.state = Some((agg, windows, written));
        Some(loaded)
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
