//! The storage under the compact caches ([`crate::workload_cache`],
//! the webhook's `tailor_admission::vpa_cache`): a two-level map namespace → name → value fed by watch events, with
//! strings interned per cache. A relist updates the map in place (no second copy while it runs) and
//! drops, when it completes, every entry it did not list.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

/// An interned string: equal strings of one cache share one allocation.
pub type Sym = Arc<str>;

/// Equal strings share one allocation; strings no cached value holds any more are dropped by
/// [`Interner::sweep`], run after each list and whenever the set has doubled since the last sweep.
#[derive(Debug, Default)]
pub struct Interner {
    set: HashSet<Sym>,
    after_sweep: usize,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn intern(&mut self, s: &str) -> Sym {
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
    pub fn sweep(&mut self) {
        self.set.retain(|s| Arc::strong_count(s) > 1);
        self.set.shrink_to_fit();
        self.after_sweep = self.set.len();
    }

    /// Whether `s` is interned (tests).
    #[cfg(test)]
    pub fn contains(&self, s: &str) -> bool {
        self.set.contains(s)
    }
}

/// A value and the list generation that last saw it.
#[derive(Debug)]
struct Slot<V> {
    value: V,
    generation: u32,
}

/// The maps' hasher: foldhash (randomly seeded per process) instead of SipHash. Matching looks a
/// workload up by namespace and name several times per controller, and SipHash was most of a lookup.
type Hasher = foldhash::fast::RandomState;

/// namespace → name → slot.
type Map<V> = HashMap<Sym, HashMap<Box<str>, Slot<V>, Hasher>, Hasher>;

/// The cache's writer was dropped before its first complete list.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the {0} cache stopped before its first complete list")]
pub struct CacheStopped(pub &'static str);

/// Read handle; cheap to clone.
pub struct ShelfReader<V> {
    map: Arc<RwLock<Map<V>>>,
    ready: watch::Receiver<bool>,
    kind: &'static str,
}

impl<V> Clone for ShelfReader<V> {
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
            ready: self.ready.clone(),
            kind: self.kind,
        }
    }
}

impl<V> ShelfReader<V> {
    fn read(&self) -> RwLockReadGuard<'_, Map<V>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the value of `namespace/name`, under the read lock.
    pub fn with<R>(&self, namespace: &str, name: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
        let map = self.read();
        map.get(namespace)
            .and_then(|names| names.get(name))
            .map(|slot| f(&slot.value))
    }

    /// Runs `f` on every value of `namespace` until it returns `false`, under the read lock.
    pub fn each_in(&self, namespace: &str, mut f: impl FnMut(&str, &V) -> bool) {
        let map = self.read();
        for (name, slot) in map.get(namespace).into_iter().flatten() {
            if !f(name, &slot.value) {
                break;
            }
        }
    }

    /// Runs `f` on every value, under the read lock.
    pub fn each(&self, mut f: impl FnMut(&str, &str, &V)) {
        let map = self.read();
        for (namespace, names) in map.iter() {
            for (name, slot) in names {
                f(namespace, name, &slot.value);
            }
        }
    }

    /// How many values are cached.
    pub fn len(&self) -> usize {
        self.read().values().map(HashMap::len).sum()
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
            .map_err(|_| CacheStopped(self.kind))
    }
}

/// Write handle: applies watch events (the watch task owns it).
pub struct ShelfWriter<V> {
    map: Arc<RwLock<Map<V>>>,
    ready: watch::Sender<bool>,
    /// Strings shared by this cache's values.
    pub interner: Interner,
    /// Bumped at the start of each (re)list.
    generation: u32,
    reader: ShelfReader<V>,
}

impl<V> ShelfWriter<V> {
    /// An empty shelf for objects of `kind` (named in errors).
    pub fn new(kind: &'static str) -> Self {
        let map = Arc::new(RwLock::new(Map::default()));
        let (ready, ready_rx) = watch::channel(false);
        Self {
            reader: ShelfReader {
                map: map.clone(),
                ready: ready_rx,
                kind,
            },
            map,
            ready,
            interner: Interner::default(),
            generation: 0,
        }
    }

    /// A read handle.
    pub fn reader(&self) -> ShelfReader<V> {
        self.reader.clone()
    }

    /// Applies one watch event, each object folded by `compact` (`None`: not kept).
    pub fn apply<O: Resource>(
        &mut self,
        event: &watcher::Event<O>,
        compact: impl Fn(&mut Interner, &O) -> Option<V>,
    ) {
        match event {
            watcher::Event::Init => self.generation = self.generation.wrapping_add(1),
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                match compact(&mut self.interner, o) {
                    Some(value) => self.insert(o, value),
                    None => self.remove(o),
                }
            }
            watcher::Event::Delete(o) => self.remove(o),
            watcher::Event::InitDone => {
                let generation = self.generation;
                self.map
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|_, names| {
                        names.retain(|_, slot| slot.generation == generation);
                        names.shrink_to_fit();
                        !names.is_empty()
                    });
                self.interner.sweep();
                self.ready.send_replace(true);
            }
        }
    }

    fn insert<O: Resource>(&mut self, o: &O, value: V) {
        let meta = o.meta();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        let slot = Slot {
            value,
            generation: self.generation,
        };
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(namespace) {
            Some(names) => match names.get_mut(name) {
                Some(old) => *old = slot,
                None => {
                    names.insert(name.into(), slot);
                }
            },
            None => {
                let namespace = self.interner.intern(namespace);
                let mut names = HashMap::default();
                names.insert(name.into(), slot);
                map.insert(namespace, names);
            }
        }
    }

    fn remove<O: Resource>(&mut self, o: &O) {
        let meta = o.meta();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = map.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                map.remove(namespace);
            }
        }
    }
}
