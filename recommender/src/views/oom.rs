//! OOM observer: OOM kills found in pod status transitions and memory evictions found in `Evicted`
//! events, queued until the loop records them with their own timestamps.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Event;

use crate::time::from_time;
use crate::views::pod_store::StoredPod;
use tailor_engine::units::Nanos;

/// Where an OOM record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OomSource {
    /// A container status that turned `OOMKilled`.
    PodStatus,
    /// An `Evicted` event naming memory as the starved resource.
    Eviction,
}

impl OomSource {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            OomSource::PodStatus => "pod_status",
            OomSource::Eviction => "eviction",
        }
    }
}

/// One OOM, to be recorded against a container of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomRecord {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// When it happened (termination time or event creation time).
    pub time: Nanos,
    /// The memory the bump starts from: the container's memory request, or the eviction's usage.
    pub memory_bytes: i64,
    /// Source.
    pub source: OomSource,
}

/// OOMs visible in the change from `old` to `new` (upstream's rules): a container that is now terminated
/// with `OOMKilled` (newly terminated or restarted since), or one running again after a restart whose last
/// state is `OOMKilled`. The memory is the container's memory request (status before spec).
pub fn pod_ooms(old: Option<&StoredPod>, new: &StoredPod) -> Vec<OomRecord> {
    let Some(old) = old else { return Vec::new() };
    let mut out = Vec::new();
    for cs in new.statuses.iter() {
        let Some(prev) = old.status(&cs.name) else {
            continue;
        };
        let record = |time, memory_bytes| OomRecord {
            namespace: new.namespace.to_string(),
            pod: new.name.to_string(),
            container: cs.name.to_string(),
            time,
            memory_bytes,
            source: OomSource::PodStatus,
        };
        if let Some(t) = cs.terminated
            && t.oom_killed
            && (prev.terminated.is_none() || cs.restart_count > prev.restart_count)
        {
            if let Some(time) = t.finished_at {
                out.push(record(time, cs.memory_request));
            }
            continue;
        }
        if cs.running
            && prev.running
            && cs.restart_count > prev.restart_count
            && let Some(t) = cs.last_terminated
            && t.oom_killed
            && let Some(time) = t.finished_at
        {
            out.push(record(time, prev.memory_request));
        }
    }
    out
}

/// Memory OOMs carried by an `Evicted` event on a pod: the annotations `offending_containers`,
/// `offending_containers_usage` and `starved_resource` are parallel comma-separated lists.
pub fn eviction_ooms(ev: &Event) -> Vec<OomRecord> {
    if ev.reason.as_deref() != Some("Evicted") || ev.involved_object.kind.as_deref() != Some("Pod")
    {
        return Vec::new();
    }
    let Some(ann) = ev.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    let list = |k: &str| -> Vec<&str> {
        ann.get(k)
            .map(|v| v.split(',').collect())
            .unwrap_or_default()
    };
    let (containers, usages, starved) = (
        list("offending_containers"),
        list("offending_containers_usage"),
        list("starved_resource"),
    );
    if containers.len() != usages.len() || containers.len() != starved.len() {
        return Vec::new();
    }
    let Some(time) = ev.metadata.creation_timestamp.as_ref().and_then(from_time) else {
        return Vec::new();
    };
    let namespace = ev
        .involved_object
        .namespace
        .clone()
        .or_else(|| ev.metadata.namespace.clone())
        .unwrap_or_default();
    let pod = ev.involved_object.name.clone().unwrap_or_default();
    let mut out = Vec::new();
    for ((c, u), s) in containers.iter().zip(&usages).zip(&starved) {
        if s.trim() != "memory" {
            continue;
        }
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(u.trim().to_string());
        let Ok(bytes) = tailor_core::quantity::amount("memory", &q) else {
            continue;
        };
        out.push(OomRecord {
            namespace: namespace.clone(),
            pod: pod.clone(),
            container: c.trim().to_string(),
            time,
            memory_bytes: bytes,
            source: OomSource::Eviction,
        });
    }
    out
}

/// A bounded queue of OOM records shared by the observers (producers) and the loop (consumer). When full,
/// the oldest record is dropped and counted.
#[derive(Debug, Clone)]
pub struct OomQueue {
    inner: Arc<Mutex<(VecDeque<OomRecord>, u64)>>,
    capacity: usize,
}

impl Default for OomQueue {
    fn default() -> Self {
        OomQueue::new(100_000)
    }
}

impl OomQueue {
    /// A queue holding at most `capacity` records.
    pub fn new(capacity: usize) -> Self {
        OomQueue {
            inner: Arc::new(Mutex::new((VecDeque::new(), 0))),
            capacity: capacity.max(1),
        }
    }

    /// Adds records.
    pub fn push(&self, records: impl IntoIterator<Item = OomRecord>) {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for r in records {
            if g.0.len() >= self.capacity {
                g.0.pop_front();
                g.1 += 1;
            }
            g.0.push_back(r);
        }
    }

    /// Takes every queued record, and the number dropped since the last drain.
    pub fn drain(&self) -> (Vec<OomRecord>, u64) {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let dropped = std::mem::take(&mut g.1);
        (g.0.drain(..).collect(), dropped)
    }
}
