//! Reflector stores for everything the loop reads, the field stripping applied before objects enter them,
//! and the watch tasks that feed them (including the OOM observer on pod updates and eviction events).
//! The workload kinds come from the reflectors shared with the webhook
//! ([`tailor_kube::reflectors`]).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use tailor_kube::reflector_set::ReflectorSet;
use tailor_kube::reflectors::{
    OnWatchError, WorkloadStores, WorkloadWriters, api, workload_stores,
};
use tailor_kube::shelf::CacheStopped;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::process::metrics::Metrics;
use crate::views::checkpoint_index::{CheckpointHead, CheckpointIndex, CheckpointIndexWriter};
use crate::views::oom::{OomQueue, eviction_ooms, pod_ooms};
use crate::views::pod_store::{PodStore, StoredPod};
use crate::views::slim::WatchedPod;
use crate::views::watched_vpa::WatchedVpa;

/// Read handles of every store.
#[derive(Clone)]
pub struct Stores {
    /// Tailor VPAs, with their status reduced to what the loop reads.
    pub vpas: Store<WatchedVpa>,
    /// Which Tailor VPA checkpoints exist (without their histograms).
    pub checkpoints: CheckpointIndex,
    /// Pods that are not Pending, compact.
    pub pods: PodStore,
    /// The well-known workload kinds, slim (shared with the webhook).
    pub workloads: WorkloadStores,
}

/// Write handles of every store. Tests feed them directly.
pub struct Writers {
    /// VPAs.
    pub vpas: Writer<WatchedVpa>,
    /// Checkpoints.
    pub checkpoints: CheckpointIndexWriter,
    /// Pods, through the OOM observer.
    pub pods: PodFeed,
    /// The workload kinds.
    pub workloads: WorkloadWriters,
}

/// Creates empty stores and their writers; pod updates report OOMs to `ooms`.
pub fn new_stores(ooms: OomQueue) -> (Stores, Writers) {
    let vpas = Writer::default();
    let checkpoints = CheckpointIndexWriter::default();
    let (pods, ready) = PodStore::new();
    let (workloads, workload_writers) = workload_stores();
    let stores = Stores {
        vpas: vpas.as_reader(),
        checkpoints: checkpoints.as_reader(),
        pods: pods.clone(),
        workloads,
    };
    let writers = Writers {
        vpas,
        checkpoints,
        pods: PodFeed {
            store: pods,
            ready,
            ooms,
        },
        workloads: workload_writers,
    };
    (stores, writers)
}

/// The pod store's writer plus the OOM observer: every update is compared with the stored copy first.
pub struct PodFeed {
    store: PodStore,
    ready: tokio::sync::watch::Sender<bool>,
    ooms: OomQueue,
}

impl PodFeed {
    /// Handles one pod watch event: compacts the object, detects OOMs against the stored copy (which a
    /// relist keeps until `InitDone`) and stores it.
    pub fn handle(&mut self, event: watcher::Event<WatchedPod>) {
        let mut inner = self.store.write();
        match event {
            watcher::Event::Apply(o) => {
                if let Some(new) = StoredPod::of(o, &mut inner.interner) {
                    self.ooms.push(pod_ooms(
                        inner.get(&new.namespace, &new.name).map(|p| &**p),
                        &new,
                    ));
                    inner.apply(new);
                }
            }
            watcher::Event::InitApply(o) => {
                if let Some(new) = StoredPod::of(o, &mut inner.interner) {
                    self.ooms.push(pod_ooms(
                        inner.get(&new.namespace, &new.name).map(|p| &**p),
                        &new,
                    ));
                    inner.init_apply(new);
                }
            }
            watcher::Event::Delete(o) => inner.delete(
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default(),
            ),
            watcher::Event::Init => inner.init(),
            watcher::Event::InitDone => {
                inner.init_done();
                self.ready.send_replace(true);
            }
        }
    }
}

/// Starts a watch per store (pods without Pending ones; `namespace` empty = all) plus the eviction-event
/// observer; returns their tasks. Stores become ready after their first list.
pub fn spawn_watchers(
    client: &Client,
    namespace: &str,
    writers: Writers,
    ooms: OomQueue,
    metrics: Arc<Metrics>,
) -> Vec<JoinHandle<()>> {
    let m = metrics.clone();
    // Reflectors log their failures; here they are only counted.
    let on_error: OnWatchError = Arc::new(move |e| {
        m.record(&Error::Watch {
            kind: "workload",
            message: e.to_string(),
        })
    });
    let mut reflectors = ReflectorSet::new(client, namespace, watcher::Config::default(), on_error);
    // Reduced while decoding (`WatchedVpa: From<VerticalPodAutoscaler>`).
    reflectors.reflect(writers.vpas, std::convert::identity);
    let mut index = writers.checkpoints;
    reflectors.watch::<CheckpointHead>(move |event| index.apply_watcher_event(&event));
    reflectors.workloads(writers.workloads);
    let mut tasks = reflectors.into_tasks();
    tasks.push(spawn_pod_watch(
        client,
        namespace,
        writers.pods,
        metrics.clone(),
    ));
    tasks.push(spawn_eviction_watch(client, namespace, ooms, metrics));
    tasks
}

/// Watches the pods that are not Pending into `feed`; failures are counted as `Pod` watch errors.
fn spawn_pod_watch(
    client: &Client,
    namespace: &str,
    mut feed: PodFeed,
    metrics: Arc<Metrics>,
) -> JoinHandle<()> {
    let pods = api::<WatchedPod>(client, namespace);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("status.phase!=Pending");
        let mut stream = watcher(pods, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => feed.handle(ev),
                Err(e) => {
                    let e = Error::Watch {
                        kind: "Pod",
                        message: e.to_string(),
                    };
                    metrics.record(&e);
                    tracing::warn!("{e}; retrying");
                }
            }
        }
    })
}

/// Watches the `Evicted` events and queues the OOMs they report (each event once); stops for good when
/// events may not be listed.
fn spawn_eviction_watch(
    client: &Client,
    namespace: &str,
    ooms: OomQueue,
    metrics: Arc<Metrics>,
) -> JoinHandle<()> {
    let events = api::<Event>(client, namespace);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("reason=Evicted");
        let mut seen = SeenEvents::default();
        let mut stream = watcher(events, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(e)) | Ok(watcher::Event::InitApply(e)) => {
                    let records = eviction_ooms(&e);
                    let time = records.iter().map(|r| r.time).max().unwrap_or_default();
                    if seen.first_time(e.metadata.uid.as_deref().unwrap_or_default(), time) {
                        ooms.push(records);
                    }
                }
                Ok(_) => {}
                Err(e) if is_forbidden(&e) => {
                    metrics.record(&Error::Watch {
                        kind: "Event",
                        message: e.to_string(),
                    });
                    tracing::warn!(
                        error = %e,
                        "not allowed to list/watch events: OOMs from evictions are not observed \
                         (grant list and watch on events to enable them)"
                    );
                    return;
                }
                Err(e) => {
                    let e = Error::Watch {
                        kind: "Event",
                        message: e.to_string(),
                    };
                    metrics.record(&e);
                    tracing::warn!("{e}; retrying");
                }
            }
        }
    })
}

/// The `Evicted` events already turned into OOM records (a relist replays them), by uid. Bounded: past
/// [`SeenEvents::MAX`] entries, those more than [`SeenEvents::KEEP`] older than the newest are forgotten
/// (the API server keeps events an hour by default), never all at once.
#[derive(Debug, Default)]
pub struct SeenEvents {
    times: HashMap<String, i64>,
    newest: i64,
}

impl SeenEvents {
    /// Entries kept before old ones are forgotten.
    pub const MAX: usize = 100_000;
    /// How far behind the newest event an entry is kept once over [`SeenEvents::MAX`] (ns).
    pub const KEEP: i64 = 2 * 3_600_000_000_000;

    /// Whether the event `uid` at `time` is seen for the first time (it is remembered).
    pub fn first_time(&mut self, uid: &str, time: i64) -> bool {
        self.newest = self.newest.max(time);
        if self.times.contains_key(uid) {
            return false;
        }
        if self.times.len() >= Self::MAX {
            let horizon = self.newest.saturating_sub(Self::KEEP);
            self.times.retain(|_, t| *t >= horizon);
        }
        if self.times.len() >= Self::MAX {
            // A flood within the horizon: the older half goes.
            let mut times: Vec<i64> = self.times.values().copied().collect();
            let middle = times.len() / 2;
            let (_, median, _) = times.select_nth_unstable(middle);
            let median = *median;
            self.times.retain(|_, t| *t > median);
        }
        self.times.insert(uid.to_owned(), time);
        true
    }
}

pub(crate) fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// Waits until every store has seen its first complete list.
pub async fn wait_until_ready(stores: &Stores) -> Result<(), CacheStopped> {
    let vpas = stores.vpas.wait_until_ready().await;
    vpas.map_err(|_| CacheStopped("VerticalPodAutoscaler"))?;
    stores.checkpoints.wait_until_ready().await?;
    let pods = stores.pods.wait_until_ready().await;
    pods.map_err(|_| CacheStopped("Pod"))?;
    stores.workloads.wait_until_ready().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_events_skip_replays_and_stay_bounded() {
        const HOUR: i64 = 3_600_000_000_000;
        let mut seen = SeenEvents::default();
        assert!(seen.first_time("a", HOUR));
        assert!(!seen.first_time("a", HOUR));
        // A flood: never more than MAX remembered, and the newest are kept.
        for i in 0..(SeenEvents::MAX as i64 + 10) {
            seen.first_time(&format!("e{i}"), 2 * HOUR + i);
        }
        assert!(seen.times.len() <= SeenEvents::MAX);
        let last = format!("e{}", SeenEvents::MAX as i64 + 9);
        assert!(!seen.first_time(&last, 3 * HOUR));
    }
}
