//! Checkpoint writer: which VPAs get their checkpoints written this loop and in which order
//! ([`checkpoint_plan`], [`may_start`]), what each checkpoint holds ([`desired_checkpoints`], from the
//! model's [`ClusterState::checkpoint_states`](tailor_engine::model::ClusterState::checkpoint_states)),
//! and one server-side apply per checkpoint; plus the removal of checkpoints whose VPA is gone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tailor_crds::condition as cond;
use tailor_crds::{VerticalPodAutoscalerCheckpoint, VerticalPodAutoscalerCondition};
use tailor_kube::leader::Fence;
use tokio::time::Instant;

use crate::error::Error;
use crate::ingest::{VpaKey, key_of};
use crate::run_loop::{LoopReport, Recommender};
use crate::views::checkpoint_index::CheckpointIndex;
use crate::views::watched_vpa::WatchedVpa;
use crate::writers::checkpoint::{self, WindowAggregate};
use crate::writers::edge::Writes;
use crate::writers::ratelimit::RateLimiter;
pub use crate::writers::written::{HistogramShape, WrittenShapes, shapes_of};
use tailor_engine::model::VpaCheckpoint;
use tailor_engine::units::Nanos;

/// How far a VPA's histograms moved since the write that stored `old`: the largest [`HistogramShape::distance`]
/// over its containers and both resources; 1 when the set of containers changed.
pub fn movement(old: &WrittenShapes, new: &WrittenShapes) -> f64 {
    if old.len() != new.len() || old.iter().zip(new).any(|(a, b)| a.0 != b.0) {
        return 1.0;
    }
    old.iter()
        .zip(new)
        .map(|(a, b)| a.1.distance(&b.1).max(a.2.distance(&b.2)))
        .fold(0.0, f64::max)
}

/// Whether a VPA's checkpoints are rewritten this loop: when never written, when the last write is
/// `max_age` old, or when its histograms moved at least `min_change` since (`moved` is only asked then).
pub fn checkpoint_due(
    last_written: Option<Nanos>,
    now: Nanos,
    max_age: Nanos,
    min_change: f64,
    moved: impl FnOnce() -> f64,
) -> bool {
    match last_written {
        None => true,
        Some(t) if now.saturating_sub(t) >= max_age || min_change <= 0.0 => true,
        Some(_) => moved() >= min_change,
    }
}

/// A VPA that may get its checkpoints written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointCandidate<K> {
    /// Which VPA.
    pub key: K,
    /// When its checkpoints were last written without error (`None`: never).
    pub last_written: Option<Nanos>,
    /// Whether its usage history is still being loaded ([`fetching_history`]).
    pub fetching_history: bool,
}

/// Whether a VPA's `FetchingHistory` condition is `True`.
pub fn fetching_history(conditions: &[VerticalPodAutoscalerCondition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == cond::FETCHING_HISTORY && c.status == "True")
}

/// The order in which VPAs get their checkpoints written: oldest successful write first, never written
/// first of all, ties by key; VPAs still fetching history are left out.
pub fn checkpoint_plan<K: Ord>(candidates: Vec<CheckpointCandidate<K>>) -> Vec<K> {
    let mut c: Vec<CheckpointCandidate<K>> = candidates
        .into_iter()
        .filter(|c| !c.fetching_history)
        .collect();
    c.sort_by(|a, b| {
        a.last_written
            .unwrap_or(i64::MIN)
            .cmp(&b.last_written.unwrap_or(i64::MIN))
            .then_with(|| a.key.cmp(&b.key))
    });
    c.into_iter().map(|c| c.key).collect()
}

/// Whether the next VPA of the plan may start: always while fewer than `workers` started (each worker
/// writes at least one VPA, all of its containers), otherwise only before the deadline.
pub fn may_start(started: usize, workers: usize, past_deadline: bool) -> bool {
    started < workers || !past_deadline
}

/// One checkpoint object to apply.
#[derive(Debug, Clone)]
pub struct DesiredCheckpoint {
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// The whole object, as the writer owns it.
    pub object: VerticalPodAutoscalerCheckpoint,
}

/// The checkpoints of one VPA at `now`: per container name, the merged aggregate minus open memory windows,
/// with those windows in the annotation ([`WindowAggregate`]: listed by pod within a text budget, the rest
/// aggregated; bounded whatever the number of pods).
pub fn desired_checkpoints(
    vpa: &ObjectMeta,
    content: VpaCheckpoint,
    now: Nanos,
) -> Vec<Result<DesiredCheckpoint, Error>> {
    let namespace = vpa.namespace.clone().unwrap_or_default();
    let vpa_name = vpa.name.clone().unwrap_or_default();
    let mut windows: BTreeMap<String, Vec<(String, Nanos, i64)>> = BTreeMap::new();
    for w in content.open_windows {
        windows
            .entry(w.container)
            .or_default()
            .push((w.pod, w.end, w.peak));
    }
    content
        .states
        .into_iter()
        .map(|(container, agg)| {
            let status = checkpoint::to_api_status(&agg.save_to_checkpoint(), now);
            let aggregate = windows.remove(&container).and_then(|ws| {
                WindowAggregate::of(
                    ws,
                    agg.memory.histogram().options(),
                    agg.memory.half_life(),
                    checkpoint::LISTED_WINDOW_BYTES,
                )
            });
            let name = checkpoint::checkpoint_name(&vpa_name, &container);
            match checkpoint::build(vpa, &container, status, aggregate.as_ref()) {
                Ok(object) => Ok(DesiredCheckpoint {
                    namespace: namespace.clone(),
                    name,
                    object,
                }),
                Err(source) => Err(Error::CheckpointBuild {
                    namespace: namespace.clone(),
                    checkpoint: name,
                    source,
                }),
            }
        })
        .collect()
}

/// What applying one VPA's checkpoints did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Names of the checkpoints written.
    pub written: Vec<String>,
    /// Failures.
    pub errors: Vec<Error>,
}

/// Applies each checkpoint through `writes` (one server-side apply PATCH each, field manager
/// [`FIELD_MANAGER`](crate::run_loop::FIELD_MANAGER), forced), each only if `fence` allows it when its turn comes ([`Error::NotLeader`]
/// otherwise).
pub async fn apply_checkpoints(
    writes: &dyn Writes,
    limiter: RateLimiter,
    fence: Fence,
    checkpoints: Vec<Result<DesiredCheckpoint, Error>>,
) -> Applied {
    let mut out = Applied::default();
    for c in checkpoints {
        let c = match c {
            Ok(c) => c,
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        limiter.acquire().await;
        if !fence.allows_writes() {
            out.errors.push(Error::NotLeader {
                what: format!("checkpoint {}/{}", c.namespace, c.name),
            });
            continue;
        }
        let applied = writes.apply_checkpoint(&c.namespace, &c.name, &c.object);
        match applied.await {
            Ok(_) => out.written.push(c.name),
            Err(source) => out.errors.push(Error::CheckpointWrite {
                namespace: c.namespace,
                checkpoint: c.name,
                source,
            }),
        }
    }
    out
}

/// Checkpoints (namespace, name) in watched namespaces whose VPA no longer exists, sorted.
pub fn orphaned_checkpoints(
    checkpoints: &CheckpointIndex,
    vpas: &HashSet<VpaKey>,
    watched: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    checkpoints.each(|ns, name, c| {
        if watched(ns) && !vpas.contains(&(ns.to_owned(), c.vpa.to_string())) {
            out.push((ns.to_owned(), name.to_owned()));
        }
    });
    out.sort();
    out
}

/// Whether checkpoint GC is due: never ran, or `interval` passed since it last finished.
pub fn gc_due(last: Option<Nanos>, now: Nanos, interval: i64) -> bool {
    last.is_none_or(|t| now.saturating_sub(t) >= interval)
}

/// What deleting orphaned checkpoints did.
#[derive(Debug, Default)]
pub struct Deleted {
    /// Checkpoints deleted now.
    pub deleted: Vec<(String, String)>,
    /// Checkpoints that were already gone.
    pub missing: Vec<(String, String)>,
    /// Failures.
    pub errors: Vec<Error>,
    /// Whether every checkpoint was handled before the deadline and without error.
    pub finished: bool,
}

/// Deletes `doomed` checkpoints through `writes` one by one until `deadline`, while `fence` allows writes.
pub async fn delete_checkpoints(
    writes: &dyn Writes,
    limiter: RateLimiter,
    fence: &Fence,
    doomed: Vec<(String, String)>,
    deadline: Instant,
) -> Deleted {
    let mut out = Deleted {
        finished: true,
        ..Default::default()
    };
    for (ns, name) in doomed {
        if Instant::now() >= deadline {
            out.finished = false;
            break;
        }
        limiter.acquire().await;
        if !fence.allows_writes() {
            out.finished = false;
            out.errors.push(Error::NotLeader {
                what: format!("checkpoint {ns}/{name} (delete)"),
            });
            break;
        }
        match writes.delete_checkpoint(&ns, &name).await {
            Ok(true) => out.deleted.push((ns, name)),
            Ok(false) => out.missing.push((ns, name)),
            Err(source) => {
                out.finished = false;
                out.errors.push(Error::CheckpointDelete {
                    namespace: ns,
                    checkpoint: name,
                    source,
                });
            }
        }
    }
    out
}

impl Recommender {
    /// Writes checkpoints in [`checkpoint_plan`] order with `--update-worker-count` workers, until the
    /// `--checkpoints-timeout` deadline ([`may_start`]); unless `all`, only those [`checkpoint_due`].
    pub(crate) async fn maintain_checkpoints(
        &mut self,
        owned: &[Arc<WatchedVpa>],
        now: Nanos,
        all: bool,
        report: &mut LoopReport,
    ) {
        if !self.fence.allows_writes() {
            tracing::warn!("not holding the leader lease: no checkpoint is written");
            return;
        }
        let deadline = Instant::now() + self.cfg.checkpoints_timeout;
        let max_age = i64::try_from(self.cfg.checkpoints_max_age.as_nanos()).unwrap_or(i64::MAX);
        let min_change = if all {
            0.0
        } else {
            self.cfg.checkpoints_min_change
        };
        let mut unchanged = 0u64;
        // Shapes the movement check computed, kept for the write of the same VPA in this loop.
        let mut measured: HashMap<VpaKey, WrittenShapes> = HashMap::new();
        let candidates = owned
            .iter()
            .filter_map(|v| {
                let key = key_of(v);
                let e = self.vpas.get(&key)?;
                // Its stored checkpoints could not be read yet: not overwritten meanwhile.
                if e.restore_pending {
                    return None;
                }
                let mut shapes = None;
                let moved = || match &e.checkpoint_shapes {
                    Some(old) => {
                        let new = shapes_of(&self.model.aggregate_state_by_container_name(e.index));
                        let d = movement(old, &new);
                        shapes = Some(new);
                        d
                    }
                    None => 1.0,
                };
                if !checkpoint_due(e.last_checkpoint, now, max_age, min_change, moved) {
                    unchanged += 1;
                    return None;
                }
                if let Some(shapes) = shapes {
                    measured.insert(key.clone(), shapes);
                }
                Some(CheckpointCandidate {
                    last_written: e.last_checkpoint,
                    fetching_history: fetching_history(v.conditions()),
                    key,
                })
            })
            .collect();
        report.checkpoints_unchanged += unchanged;
        if unchanged > 0 {
            self.metrics
                .checkpoint_writes
                .get_or_create(&vec![("op", "apply"), ("result", "unchanged")])
                .inc_by(unchanged);
        }
        let vpas: HashMap<VpaKey, &Arc<WatchedVpa>> =
            owned.iter().map(|v| (key_of(v), v)).collect();
        let workers = self.cfg.update_worker_count.max(1);
        let mut pending = checkpoint_plan(candidates).into_iter();
        let mut in_flight = FuturesUnordered::new();
        let mut started = 0usize;
        loop {
            while in_flight.len() < workers
                && may_start(started, workers, Instant::now() >= deadline)
            {
                let Some(key) = pending.next() else {
                    break;
                };
                let (Some(vpa), Some(e)) = (vpas.get(&key), self.vpas.get(&key)) else {
                    continue;
                };
                let content = self.model.checkpoint_states(e.index, now);
                let shapes = measured.remove(&key).unwrap_or_else(|| {
                    shapes_of(&self.model.aggregate_state_by_container_name(e.index))
                });
                let checkpoints = desired_checkpoints(&vpa.metadata, content, now);
                let (writes, limiter) = (self.writes.clone(), self.limiter.clone());
                let fence = self.fence.clone();
                in_flight.push(async move {
                    (
                        key,
                        shapes,
                        apply_checkpoints(&*writes, limiter, fence, checkpoints).await,
                    )
                });
                started += 1;
            }
            let Some((key, shapes, applied)) = in_flight.next().await else {
                break;
            };
            self.record_applied(&key, applied, shapes, now, report);
        }
    }

    fn record_applied(
        &mut self,
        key: &VpaKey,
        applied: Applied,
        shapes: WrittenShapes,
        now: Nanos,
        report: &mut LoopReport,
    ) {
        let (written, errors) = (applied.written.len() as u64, applied.errors.len() as u64);
        report.checkpoints_written += written;
        report.checkpoint_errors += errors;
        let m = &self.metrics.checkpoint_writes;
        m.get_or_create(&vec![("op", "apply"), ("result", "ok")])
            .inc_by(written);
        if errors > 0 {
            m.get_or_create(&vec![("op", "apply"), ("result", "error")])
                .inc_by(errors);
        }
        for e in &applied.errors {
            self.record_error(e);
        }
        for name in applied.written {
            self.written_checkpoints.insert((key.0.clone(), name));
        }
        if errors == 0
            && let Some(e) = self.vpas.get_mut(key)
        {
            e.last_checkpoint = Some(now);
            e.checkpoint_shapes = Some(shapes);
        }
    }

    /// Deletes checkpoints whose VPA no longer exists (any recommender's VPAs count), every
    /// `--checkpoints-gc-interval`, with its own deadline; a pass that does not finish is retried next loop.
    pub(crate) async fn collect_checkpoints(&mut self, now: Nanos, report: &mut LoopReport) {
        let interval =
            i64::try_from(self.cfg.checkpoints_gc_interval.as_nanos()).unwrap_or(i64::MAX);
        if !gc_due(self.last_checkpoint_gc, now, interval) || !self.fence.allows_writes() {
            return;
        }
        let deadline = Instant::now() + self.cfg.checkpoints_timeout;
        let existing: HashSet<VpaKey> =
            self.stores.vpas.state().iter().map(|v| key_of(v)).collect();
        let mut doomed = orphaned_checkpoints(&self.stores.checkpoints, &existing, |ns| {
            self.cfg.namespace_watched(ns)
        });
        doomed.extend(crate::views::checkpoint_index::superseded_checkpoints(
            &self.stores.checkpoints,
            |ns| self.cfg.namespace_watched(ns),
        ));
        doomed.sort();
        doomed.dedup();
        let out = delete_checkpoints(
            &*self.writes,
            self.limiter.clone(),
            &self.fence,
            doomed,
            deadline,
        )
        .await;
        let deleted = out.deleted.len() as u64;
        report.checkpoints_deleted += deleted;
        if deleted > 0 {
            self.metrics
                .checkpoint_writes
                .get_or_create(&vec![("op", "delete"), ("result", "ok")])
                .inc_by(deleted);
        }
        for k in out.deleted.iter().chain(&out.missing) {
            self.written_checkpoints.remove(k);
        }
        for e in &out.errors {
            self.record_error(e);
        }
        if out.finished {
            self.last_checkpoint_gc = Some(now);
        }
    }

    /// Deletes the stored checkpoints of VPAs whose target changed (the old workload's history), except
    /// those this process wrote since; a VPA is done once all of its were handled.
    pub(crate) async fn purge_retargeted(&mut self, report: &mut LoopReport) {
        if self.retargeted.is_empty() || !self.fence.allows_writes() {
            return;
        }
        let deadline = Instant::now() + self.cfg.checkpoints_timeout;
        let mut doomed = Vec::new();
        self.stores.checkpoints.each(|ns, name, c| {
            let key = (ns.to_owned(), name.to_owned());
            if self
                .retargeted
                .contains(&(ns.to_owned(), c.vpa.to_string()))
                && !self.written_checkpoints.contains(&key)
            {
                doomed.push(key);
            }
        });
        doomed.sort();
        let out = delete_checkpoints(
            &*self.writes,
            self.limiter.clone(),
            &self.fence,
            doomed,
            deadline,
        )
        .await;
        report.checkpoints_deleted += out.deleted.len() as u64;
        for e in &out.errors {
            self.record_error(e);
        }
        if out.finished {
            self.retargeted.clear();
        }
    }

    /// Writes every owned VPA's checkpoints once more (on shutdown), within the checkpoint deadline, and only
    /// while the fence allows writes: nothing at all once the leader lease is lost.
    pub async fn final_checkpoints(&mut self, now: Nanos) -> LoopReport {
        let mut report = LoopReport::default();
        if !self.cfg.checkpoints_enabled {
            return report;
        }
        if !self.fence.allows_writes() {
            tracing::warn!("not holding the leader lease: no final checkpoints");
            return report;
        }
        let owned: Vec<Arc<WatchedVpa>> = self
            .stores
            .vpas
            .state()
            .into_iter()
            .filter(|v| self.vpas.contains_key(&key_of(v)))
            .collect();
        self.maintain_checkpoints(&owned, now, true, &mut report)
            .await;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::checkpoint_index::{CheckpointHead, CheckpointIndexWriter};

    #[test]
    fn the_pod_level_aggregate_is_checkpointed_and_restored_like_a_container_one() {
        use tailor_core::sizing::POD_ROW;
        use tailor_engine::model::{AggregateContainerState, AggregationsConfig};
        let config = AggregationsConfig::default();
        let now = 1_700_000_000_000_000_000;
        let mut agg = AggregateContainerState::new(&config, now);
        for i in 0..100 {
            agg.add_cpu_cores(
                0.5 + f64::from(i % 3) * 0.1,
                0.1,
                now + i64::from(i) * 60_000_000_000,
            );
        }
        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let content = VpaCheckpoint {
            states: BTreeMap::from([(POD_ROW.to_owned(), agg.clone())]),
            open_windows: Vec::new(),
        };
        let desired = desired_checkpoints(&meta, content, now + 6_000_000_000_000);
        let [Ok(cp)] = desired.as_slice() else {
            panic!("{desired:?}");
        };
        assert_eq!(cp.name, checkpoint::checkpoint_name("web", POD_ROW));
        assert_eq!(cp.object.spec.container_name.as_deref(), Some(POD_ROW));
        let status = cp.object.status.as_ref().expect("status");
        let mut restored = AggregateContainerState::new(&config, now);
        restored
            .load_from_checkpoint(&checkpoint::from_api_status(status))
            .expect("restored");
        assert_eq!(restored.total_samples_count, agg.total_samples_count);
        for p in [0.5, 0.9, 0.95] {
            let (a, b) = (agg.cpu.percentile(p), restored.cpu.percentile(p));
            assert!((a - b).abs() <= a * 0.01, "p{p}: {a} vs {b}");
        }
    }

    fn checkpoint(ns: &str, name: &str, vpa: &str) -> CheckpointHead {
        let mut c = CheckpointHead::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some(ns.into());
        c.spec.vpa_object_name = Some(vpa.into());
        c.spec.container_name = Some("app".into());
        c
    }

    #[test]
    fn orphans_are_checkpoints_of_missing_vpas_in_watched_namespaces() {
        let mut index = CheckpointIndexWriter::default();
        for c in [
            checkpoint("a", "web-app", "web"),
            checkpoint("a", "gone-app", "gone"),
            checkpoint("skip", "gone-app", "gone"),
        ] {
            index.apply_watcher_event(&kube::runtime::watcher::Event::Apply(c));
        }
        let vpas = HashSet::from([("a".to_string(), "web".to_string())]);
        let out = orphaned_checkpoints(&index.as_reader(), &vpas, |ns| ns != "skip");
        assert_eq!(out, [("a".to_string(), "gone-app".to_string())]);
    }

    #[test]
    fn gc_runs_first_then_every_interval() {
        assert!(gc_due(None, 0, 10));
        assert!(!gc_due(Some(100), 109, 10));
        assert!(gc_due(Some(100), 110, 10));
    }

    #[test]
    fn plan_puts_never_written_first_and_breaks_ties_by_key() {
        let c = |key: &'static str, last_written| CheckpointCandidate {
            key,
            last_written,
            fetching_history: false,
        };
        let plan = checkpoint_plan(vec![c("b", Some(5)), c("c", None), c("a", Some(5))]);
        assert_eq!(plan, ["c", "a", "b"]);
    }

    fn shape(w: &[(i64, u32)]) -> HistogramShape {
        HistogramShape(w.to_vec().into_boxed_slice())
    }

    #[test]
    fn distance_is_the_share_of_mass_that_moved() {
        let a = shape(&[(1, 10_000), (2, 10_000)]);
        assert_eq!(a.distance(&a), 0.0);
        // Same shape at another scale: nothing moved.
        assert_eq!(a.distance(&shape(&[(1, 5_000), (2, 5_000)])), 0.0);
        // Half of the mass went from bucket 2 to bucket 3.
        assert!((a.distance(&shape(&[(1, 10_000), (3, 10_000)])) - 0.5).abs() < 1e-12);
        assert_eq!(a.distance(&shape(&[(7, 1)])), 1.0);
        assert_eq!(a.distance(&shape(&[])), 1.0);
        assert_eq!(shape(&[]).distance(&shape(&[])), 0.0);
    }

    #[test]
    fn movement_is_the_largest_distance_and_total_when_containers_change() {
        let s = |c: &str, cpu: &[(i64, u32)], mem: &[(i64, u32)]| {
            (c.to_string(), shape(cpu), shape(mem))
        };
        let old = vec![
            s("a", &[(1, 100)], &[(5, 100)]),
            s("b", &[(1, 100)], &[(5, 100)]),
        ];
        assert_eq!(movement(&old, &old), 0.0);
        let moved = vec![
            s("a", &[(1, 100)], &[(5, 100)]),
            s("b", &[(1, 100)], &[(5, 100), (6, 100)]),
        ];
        assert!((movement(&old, &moved) - 0.5).abs() < 1e-12);
        assert_eq!(movement(&old, &old[..1].to_vec()), 1.0);
        let renamed = vec![
            s("a", &[(1, 100)], &[(5, 100)]),
            s("c", &[(1, 100)], &[(5, 100)]),
        ];
        assert_eq!(movement(&old, &renamed), 1.0);
    }

    #[test]
    fn checkpoints_are_due_when_new_old_or_moved() {
        let (min, hour) = (60_000_000_000i64, 3_600_000_000_000i64);
        let never = || -> f64 { unreachable!("not asked") };
        assert!(checkpoint_due(None, 0, 10 * min, 0.05, never));
        assert!(checkpoint_due(Some(0), 10 * min, 10 * min, 0.05, never));
        assert!(checkpoint_due(Some(0), min, hour, 0.0, never));
        assert!(!checkpoint_due(Some(0), min, 10 * min, 0.05, || 0.049));
        assert!(checkpoint_due(Some(0), min, 10 * min, 0.05, || 0.05));
    }
}
