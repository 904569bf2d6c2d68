//! Compact caches of the well-known workload kinds. A watch delivers [`SlimWorkload`]s; each is folded
//! into a [`CompactWorkload`] (controller owner and pod selector, strings interned per kind) kept in a
//! two-level map namespace → name. A cached ReplicaSet costs about 0.3 KiB where a kube-rs `Store` entry of
//! the slim object costs about 1.5 KiB (an `ObjectMeta`, B-tree selector maps, the store's `ObjectRef`
//! key and an `Arc`): at 5,000 Deployments × 10 revisions this is most of the webhook's memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::target::{WorkloadInfo, controller_owner};
use crate::workload::{SlimSpec, SlimWorkload, WorkloadKind};

/// An interned string: equal strings of one cache share one allocation.
type Sym = Arc<str>;

/// The controller owner of a cached workload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    api_version: Sym,
    kind: Sym,
    name: Sym,
    uid: Sym,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: Sym,
    operator: Sym,
    values: Option<Box<[Sym]>>,
}

/// A label selector with `None` and empty kept apart, as on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selector {
    labels: Option<Box<[(Sym, Sym)]>>,
    expressions: Option<Box<[Requirement]>>,
}

/// What target matching reads of one workload object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactWorkload {
    owner: Option<Owner>,
    /// The kept selector: `spec.selector` (ReplicationController: its map as `matchLabels`; CronJob: the
    /// job template's pod labels, `None` when the template has none).
    selector: Option<Selector>,
}

impl CompactWorkload {
    /// The controller owner as an `OwnerReference` (`controller: true`).
    pub fn owner_reference(&self) -> Option<OwnerReference> {
        self.owner.as_ref().map(|o| OwnerReference {
            api_version: o.api_version.to_string(),
            kind: o.kind.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
            controller: Some(true),
            block_owner_deletion: None,
        })
    }

    /// The selector as kept: `None` for a CronJob whose job template has no labels.
    pub fn kept_selector(&self) -> Option<LabelSelector> {
        self.selector.as_ref().map(|s| LabelSelector {
            match_labels: s.labels.as_ref().map(|l| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }),
            match_expressions: s.expressions.as_ref().map(|e| {
                e.iter()
                    .map(|r| LabelSelectorRequirement {
                        key: r.key.to_string(),
                        operator: r.operator.to_string(),
                        values: r
                            .values
                            .as_ref()
                            .map(|v| v.iter().map(|s| s.to_string()).collect()),
                    })
                    .collect()
            }),
        })
    }

    /// Owner and pod selector as [`crate::target::workload_info`] gives them for the full object of kind
    /// `K`.
    pub fn info<K: WorkloadKind>(&self) -> WorkloadInfo {
        WorkloadInfo {
            owner: self.owner_reference(),
            selector: K::SlimSpec::selector_from_kept(self.kept_selector()),
        }
    }
}

/// Equal strings share one allocation; strings no cached object holds any more are dropped by
/// [`Interner::sweep`], run when the set has doubled since the last sweep.
#[derive(Debug, Default)]
struct Interner {
    set: HashSet<Sym>,
    after_sweep: usize,
}

impl Interner {
    fn intern(&mut self, s: &str) -> Sym {
        if let Some(sym) = self.set.get(s) {
            return sym.clone();
        }
        if self.set.len() > 2 * self.after_sweep + 1024 {
            self.sweep();
        }
        let sym: Sym = Arc::from(s);
        self.set.insert(sym.clone());
        sym
    }

    /// Drops the strings only the interner holds.
    fn sweep(&mut self) {
        self.set.retain(|s| Arc::strong_count(s) > 1);
        self.set.shrink_to_fit();
        self.after_sweep = self.set.len();
    }

    fn selector(&mut self, s: &LabelSelector) -> Selector {
        Selector {
            labels: s.match_labels.as_ref().map(|m| {
                m.iter()
                    .map(|(k, v)| (self.intern(k), self.intern(v)))
                    .collect()
            }),
            expressions: s.match_expressions.as_ref().map(|e| {
                e.iter()
                    .map(|r| Requirement {
                        key: self.intern(&r.key),
                        operator: self.intern(&r.operator),
                        values: r
                            .values
                            .as_ref()
                            .map(|v| v.iter().map(|s| self.intern(s)).collect()),
                    })
                    .collect()
            }),
        }
    }

    fn compact<K: WorkloadKind>(&mut self, object: &SlimWorkload<K>) -> CompactWorkload {
        CompactWorkload {
            owner: controller_owner(object.metadata.owner_references.as_ref()).map(|o| Owner {
                api_version: self.intern(&o.api_version),
                kind: self.intern(&o.kind),
                name: self.intern(&o.name),
                uid: self.intern(&o.uid),
            }),
            selector: K::SlimSpec::kept_selector(object.spec.as_ref()).map(|s| self.selector(&s)),
        }
    }
}

/// A cached object and the list generation that last saw it.
#[derive(Debug)]
struct Entry {
    workload: CompactWorkload,
    generation: u32,
}

/// namespace → name → entry.
type Shelf = HashMap<Sym, HashMap<Box<str>, Entry>>;

/// Read handle of one kind's cache; cheap to clone.
pub struct WorkloadCache<K> {
    shelf: Arc<RwLock<Shelf>>,
    ready: watch::Receiver<bool>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for WorkloadCache<K> {
    fn clone(&self) -> Self {
        Self {
            shelf: self.shelf.clone(),
            ready: self.ready.clone(),
            kind: PhantomData,
        }
    }
}

/// The cache's writer was dropped before its first complete list.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the {0} cache stopped before its first complete list")]
pub struct CacheStopped(pub &'static str);

impl<K: WorkloadKind> WorkloadCache<K> {
    /// Runs `f` on the cached `namespace/name`, under the read lock.
    pub fn with<R>(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&CompactWorkload) -> R,
    ) -> Option<R> {
        let shelf = self.shelf.read().unwrap_or_else(|e| e.into_inner());
        shelf
            .get(namespace)
            .and_then(|names| names.get(name))
            .map(|e| f(&e.workload))
    }

    /// Owner and pod selector of the cached `namespace/name`.
    pub fn info(&self, namespace: &str, name: &str) -> Option<WorkloadInfo> {
        self.with(namespace, name, CompactWorkload::info::<K>)
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        let shelf = self.shelf.read().unwrap_or_else(|e| e.into_inner());
        shelf.values().map(HashMap::len).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the writer has applied its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| CacheStopped(K::KIND))
    }
}

/// Write handle of one kind's cache: applies watch events (the reflector task owns it).
pub struct WorkloadCacheWriter<K> {
    shelf: Arc<RwLock<Shelf>>,
    ready: watch::Sender<bool>,
    interner: Interner,
    /// Bumped at the start of each (re)list; entries the list did not refresh are dropped at its end.
    generation: u32,
    reader: WorkloadCache<K>,
}

impl<K: WorkloadKind> Default for WorkloadCacheWriter<K> {
    fn default() -> Self {
        let shelf = Arc::new(RwLock::new(Shelf::new()));
        let (ready, ready_rx) = watch::channel(false);
        Self {
            reader: WorkloadCache {
                shelf: shelf.clone(),
                ready: ready_rx,
                kind: PhantomData,
            },
            shelf,
            ready,
            interner: Interner::default(),
            generation: 0,
        }
    }
}

impl<K: WorkloadKind> WorkloadCacheWriter<K> {
    /// A read handle.
    pub fn as_reader(&self) -> WorkloadCache<K> {
        self.reader.clone()
    }

    /// Applies one watch event. A relist updates the cache in place (no second copy of the kind while
    /// it runs) and drops, when it completes, every object it did not list.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<SlimWorkload<K>>) {
        match event {
            watcher::Event::Init => self.generation = self.generation.wrapping_add(1),
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => self.insert(o),
            watcher::Event::Delete(o) => self.remove(o),
            watcher::Event::InitDone => {
                let generation = self.generation;
                {
                    let mut shelf = self.shelf.write().unwrap_or_else(|e| e.into_inner());
                    shelf.retain(|_, names| {
                        names.retain(|_, e| e.generation == generation);
                        names.shrink_to_fit();
                        !names.is_empty()
                    });
                }
                self.interner.sweep();
                self.ready.send_replace(true);
            }
        }
    }

    fn insert(&mut self, o: &SlimWorkload<K>) {
        let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
        let Some(name) = o.metadata.name.as_deref() else {
            return;
        };
        let entry = Entry {
            workload: self.interner.compact(o),
            generation: self.generation,
        };
        let mut shelf = self.shelf.write().unwrap_or_else(|e| e.into_inner());
        match shelf.get_mut(namespace) {
            Some(names) => match names.get_mut(name) {
                Some(slot) => *slot = entry,
                None => {
                    names.insert(name.into(), entry);
                }
            },
            None => {
                let namespace = self.interner.intern(namespace);
                shelf.insert(namespace, HashMap::from([(name.into(), entry)]));
            }
        }
    }

    fn remove(&mut self, o: &SlimWorkload<K>) {
        let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
        let Some(name) = o.metadata.name.as_deref() else {
            return;
        };
        let mut shelf = self.shelf.write().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = shelf.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                shelf.remove(namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::workload_info;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::batch::v1::CronJob;
    use serde_json::json;

    fn rs(name: &str, deployment: &str) -> SlimWorkload<ReplicaSet> {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment,
                    "uid": "u1", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": deployment, "pod-template-hash": name},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}
        }))
        .unwrap()
    }

    #[test]
    fn the_compact_form_answers_as_the_object_does() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        let cache = writer.as_reader();
        let object = rs("web-1", "web");
        writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));
        assert_eq!(cache.info("ns", "web-1"), Some(workload_info(&object)));
        assert_eq!(cache.info("ns", "web-2"), None);
        assert_eq!(cache.info("other", "web-1"), None);
        writer.apply_watcher_event(&watcher::Event::Delete(object));
        assert!(cache.is_empty());
    }

    #[tokio::test]
    async fn a_relist_drops_what_it_did_not_list_and_marks_ready() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        let cache = writer.as_reader();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(rs("a", "web")),
            watcher::Event::InitApply(rs("b", "web")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        cache.wait_until_ready().await.unwrap();
        assert_eq!(cache.len(), 2);
        // The second list no longer has `a`: it stays readable while the list runs, and goes at its end.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(rs("b", "web")));
        writer.apply_watcher_event(&watcher::Event::InitApply(rs("c", "api")));
        assert!(cache.info("ns", "a").is_some());
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(cache.info("ns", "a").is_none());
        assert_eq!(cache.len(), 2);
        // Strings of the dropped object that nothing else holds are gone from the interner.
        assert!(!writer.interner.set.contains("a"));
        assert!(writer.interner.set.contains("web"));
    }

    #[test]
    fn equal_strings_share_one_allocation() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        writer.apply_watcher_event(&watcher::Event::Apply(rs("web-1", "web")));
        writer.apply_watcher_event(&watcher::Event::Apply(rs("web-2", "web")));
        let shelf = writer.shelf.read().unwrap();
        let names = &shelf["ns"];
        let (a, b) = (&names["web-1"].workload, &names["web-2"].workload);
        let (oa, ob) = (a.owner.as_ref().unwrap(), b.owner.as_ref().unwrap());
        assert!(Arc::ptr_eq(&oa.name, &ob.name) && Arc::ptr_eq(&oa.kind, &ob.kind));
    }

    #[tokio::test]
    async fn a_dropped_writer_is_an_error_for_waiters() {
        let writer = WorkloadCacheWriter::<CronJob>::default();
        let cache = writer.as_reader();
        drop(writer);
        let err = cache.wait_until_ready().await.unwrap_err();
        assert!(err.to_string().contains("CronJob"), "{err}");
    }
}
