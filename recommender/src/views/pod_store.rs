//! The pod store: every watched pod reduced to what the loop and the OOM observer read, with namespaces,
//! container names and label sets interned (pods of one ReplicaSet share one label set), in place of a
//! reflector store of whole objects. About 0.4 KiB per pod instead of 2.2 KiB (docs/decisions/recommender-memory.md; the test
//! `pod_store_bytes_per_pod_stay_under_the_bound` holds the bound).
//!
//! The writer ([`crate::views::stores::PodFeed`]) follows the watcher's protocol as kube's reflector writer does:
//! a relist fills a buffer that replaces the store at `InitDone`, so the store (and the OOM observer's
//! comparison) keeps the previous copies until then.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::ContainerState;
use tailor_engine::model::{Labels, PodPhase};
use tailor_engine::units::Nanos;
use tokio::sync::watch;

use tailor_core::sizing::{IN_PLACE_UPDATED_ANNOTATION, OBSERVED_CONTAINERS_ANNOTATION};

use crate::time::from_time;
use crate::views::slim::{SlimContainerStatus, WatchedPod};
use tailor_cluster_fit::node_fit::PodShape;

/// A terminated container state, as far as the OOM observer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminated {
    /// The reason is `OOMKilled`.
    pub oom_killed: bool,
    /// `finishedAt`.
    pub finished_at: Option<Nanos>,
}

/// A container status, as far as the OOM observer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSummary {
    /// Container name (interned).
    pub name: Arc<str>,
    /// Restarts so far.
    pub restart_count: i32,
    /// The current state is `running`.
    pub running: bool,
    /// The current state, when terminated.
    pub terminated: Option<Terminated>,
    /// The current terminated state's `startedAt`: with `finishedAt`, a finished run ([`crate::views::job_runs`]).
    pub run_started_at: Option<Nanos>,
    /// The last state, when terminated.
    pub last_terminated: Option<Terminated>,
    /// The container's memory request in bytes (status resources first, then the spec; 0 when absent or
    /// unreadable): what an OOM bump starts from.
    pub memory_request: i64,
}

/// A pod as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPod {
    /// Namespace (interned).
    pub namespace: Arc<str>,
    /// Name.
    pub name: Box<str>,
    /// `metadata.resourceVersion` (unchanged pods are skipped by the loop).
    pub resource_version: Option<Box<str>>,
    /// Labels (interned: equal sets share one allocation).
    pub labels: Arc<Labels>,
    /// Phase.
    pub phase: PodPhase,
    /// Regular container names (interned).
    pub containers: Box<[Arc<str>]>,
    /// Init container names (interned; their usage is not sampled).
    pub init_containers: Box<[Arc<str>]>,
    /// Regular container statuses.
    pub statuses: Box<[StatusSummary]>,
    /// What node fit reads (placement, requests, overhead; interned); `None` when unreadable or past its
    /// bounds.
    pub shape: Option<Arc<PodShape>>,
    /// `spec.nodeName` (interned), once scheduled.
    pub node: Option<Arc<str>>,
    /// Whether Tailor sized the pod: its webhook at admission (the observed-containers annotation) or its
    /// updater in place since (the in-place-updated annotation).
    pub sized_by_tailor: bool,
    /// Whether the pod declares pod-level resources (`spec.resources` with a CPU or memory request or limit):
    /// with `--pod-level-resources`, the model keeps its summed usage (docs/pod-level-resources.md).
    pub pod_level: bool,
}

/// The phase of `status.phase` (absent or unknown values are `Running`, as upstream reads them).
pub fn phase(p: Option<&str>) -> PodPhase {
    match p {
        Some("Pending") => PodPhase::Pending,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Running,
    }
}

/// Shares equal strings and label sets between pods.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    label_sets: HashSet<Arc<Labels>>,
    shapes: HashSet<Arc<PodShape>>,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        a
    }

    /// The shared copy of `labels`.
    pub fn labels(&mut self, labels: Labels) -> Arc<Labels> {
        if let Some(a) = self.label_sets.get(&labels) {
            return a.clone();
        }
        let a = Arc::new(labels);
        self.label_sets.insert(a.clone());
        a
    }

    /// The shared copy of `shape`.
    pub fn shape(&mut self, shape: PodShape) -> Arc<PodShape> {
        if let Some(a) = self.shapes.get(&shape) {
            return a.clone();
        }
        let a = Arc::new(shape);
        self.shapes.insert(a.clone());
        a
    }

    /// Forgets what no pod refers to any more.
    pub fn sweep(&mut self) {
        self.strings.retain(|a| Arc::strong_count(a) > 1);
        self.label_sets.retain(|a| Arc::strong_count(a) > 1);
        self.shapes.retain(|a| Arc::strong_count(a) > 1);
    }

    /// Distinct strings and label sets held.
    pub fn len(&self) -> (usize, usize) {
        (self.strings.len(), self.label_sets.len())
    }
}

fn terminated(s: Option<&ContainerState>) -> Option<Terminated> {
    let t = s?.terminated.as_ref()?;
    Some(Terminated {
        oom_killed: t.reason.as_deref() == Some("OOMKilled"),
        finished_at: t.finished_at.as_ref().and_then(from_time),
    })
}

fn summary(pod: &WatchedPod, cs: &SlimContainerStatus, interner: &mut Interner) -> StatusSummary {
    StatusSummary {
        name: interner.str(&cs.name),
        restart_count: cs.restart_count,
        running: cs.state.as_ref().is_some_and(|s| s.running.is_some()),
        terminated: terminated(cs.state.as_ref()),
        run_started_at: (cs.state.as_ref())
            .and_then(|s| s.terminated.as_ref()?.started_at.as_ref())
            .and_then(from_time),
        last_terminated: terminated(cs.last_state.as_ref()),
        memory_request: pod
            .memory_request(&cs.name)
            .and_then(|q| tailor_core::quantity::amount("memory", q).ok())
            .unwrap_or(0),
    }
}

impl StoredPod {
    /// The compact form of `pod`, sharing strings and label sets through `interner`; `None` without a name.
    pub fn of(pod: WatchedPod, interner: &mut Interner) -> Option<StoredPod> {
        let name: Box<str> = pod.metadata.name.as_deref()?.into();
        let shape = PodShape::of(&pod.spec).ok().map(|s| interner.shape(s));
        let statuses = pod
            .status
            .container_statuses
            .iter()
            .map(|cs| summary(&pod, cs, interner))
            .collect();
        let sized_by_tailor = (pod.metadata.annotations.as_ref()).is_some_and(|a| {
            a.contains_key(OBSERVED_CONTAINERS_ANNOTATION)
                || a.contains_key(IN_PLACE_UPDATED_ANNOTATION)
        });
        let pod_level = pod.spec.resources.as_ref().is_some_and(|r| {
            [&r.requests, &r.limits]
                .into_iter()
                .flatten()
                .any(|m| m.contains_key("cpu") || m.contains_key("memory"))
        });
        Some(StoredPod {
            pod_level,
            node: pod.spec.node_name.as_deref().map(|n| interner.str(n)),
            sized_by_tailor,
            namespace: interner.str(pod.metadata.namespace.as_deref().unwrap_or_default()),
            name,
            resource_version: pod.metadata.resource_version.as_deref().map(Box::from),
            phase: phase(pod.status.phase.as_deref()),
            containers: pod
                .spec
                .containers
                .iter()
                .map(|c| interner.str(&c.name))
                .collect(),
            init_containers: pod
                .spec
                .init_containers
                .iter()
                .map(|c| interner.str(&c.name))
                .collect(),
            statuses,
            shape,
            labels: interner.labels(pod.metadata.labels.unwrap_or_default()),
        })
    }

    /// The status of container `name`.
    pub fn status(&self, name: &str) -> Option<&StatusSummary> {
        self.statuses.iter().find(|s| &*s.name == name)
    }
}

type Table = HashMap<Arc<str>, HashMap<Box<str>, Arc<StoredPod>>>;

/// What the store holds behind its lock.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    live: Table,
    relist: Option<Table>,
    pub(crate) interner: Interner,
    /// Removals since the interner was last swept.
    removed: usize,
}

fn insert(table: &mut Table, pod: StoredPod) {
    table
        .entry(pod.namespace.clone())
        .or_default()
        .insert(pod.name.clone(), Arc::new(pod));
}

impl Inner {
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&Arc<StoredPod>> {
        self.live.get(namespace).and_then(|m| m.get(name))
    }

    pub(crate) fn apply(&mut self, pod: StoredPod) {
        insert(&mut self.live, pod);
    }

    pub(crate) fn init_apply(&mut self, pod: StoredPod) {
        insert(self.relist.get_or_insert_with(Table::default), pod);
    }

    pub(crate) fn delete(&mut self, namespace: &str, name: &str) {
        if let Some(m) = self.live.get_mut(namespace) {
            m.remove(name);
            if m.is_empty() {
                self.live.remove(namespace);
            }
            self.removed += 1;
            if self.removed > 1024 {
                self.sweep();
            }
        }
    }

    pub(crate) fn init(&mut self) {
        self.relist = Some(Table::default());
    }

    pub(crate) fn init_done(&mut self) {
        self.live = self.relist.take().unwrap_or_default();
        self.sweep();
    }

    fn sweep(&mut self) {
        self.removed = 0;
        self.interner.sweep();
    }
}

/// Read handle of the pod store.
#[derive(Debug, Clone)]
pub struct PodStore {
    pub(crate) inner: Arc<RwLock<Inner>>,
    pub(crate) ready: watch::Receiver<bool>,
}

/// The writer of the pod store was dropped before its first list completed.
#[derive(Debug, thiserror::Error)]
#[error("the pod store's writer was dropped before its first list")]
pub struct PodWriterDropped;

impl PodStore {
    /// An empty store and the sender that marks it ready.
    pub(crate) fn new() -> (PodStore, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        (
            PodStore {
                inner: Arc::default(),
                ready: rx,
            },
            tx,
        )
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every stored pod.
    pub fn state(&self) -> Vec<Arc<StoredPod>> {
        self.read()
            .live
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// One pod.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<StoredPod>> {
        self.read().get(namespace, name).cloned()
    }

    /// Stored pods.
    pub fn len(&self) -> usize {
        self.read().live.values().map(HashMap::len).sum()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct interned strings and label sets.
    pub fn interned(&self) -> (usize, usize) {
        self.read().interner.len()
    }

    /// Waits until the first complete list is stored.
    pub async fn wait_until_ready(&self) -> Result<(), PodWriterDropped> {
        let mut rx = self.ready.clone();
        rx.wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| PodWriterDropped)
    }
}
