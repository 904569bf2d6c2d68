//! `/scale` answers for controllers outside the well-known kinds (Argo Rollouts, custom controllers), kept in
//! memory and refreshed in the background, so that a lookup on the admission path never waits on the API
//! server.
//!
//! What is fetched: the target of every cached VPA whose kind is not well-known, plus any other controller a
//! lookup asked for and did not find (an intermediate owner in a pod's chain); an entry that is not a VPA's
//! target and was not read for a TTL is dropped. The first pod of a workload whose answer is not cached yet goes unmatched;
//! the fetch starts at once and the next pod matches.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::Client;

use crate::index::{ScaleInfo, ScaleLookup, VpaSource};
use crate::scale::scale_info;
use tailor_core::target::is_well_known;

/// Controllers remembered at most (VPA targets first); beyond it lookups of others stay unanswered.
pub const MAX_SCALE_ENTRIES: usize = 10_000;
/// Misses remembered between two refreshes.
const MAX_PENDING: usize = 1_024;
/// `/scale` reads in flight at once.
const CONCURRENCY: usize = 4;

/// When to fetch.
#[derive(Clone, Copy, Debug)]
pub struct ScaleCacheSettings {
    /// An answer older than this is fetched again (upstream keeps `/scale` answers 10 minutes).
    pub ttl: Duration,
    /// How often the cache looks for new targets and stale answers.
    pub period: Duration,
    /// Time allowed for one controller's discovery and `/scale` read.
    pub timeout: Duration,
}

impl Default for ScaleCacheSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
        }
    }
}

/// A controller: API version, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

struct Entry {
    /// `None`: the controller has no `/scale` subresource.
    info: Option<ScaleInfo>,
    fetched: Instant,
    /// Milliseconds after the cache's epoch of the last read (or of the fetch).
    read_at: AtomicU64,
}

/// Counters of the cache, for metrics.
#[derive(Debug, Default)]
pub struct ScaleCacheStats {
    /// Lookups answered from memory.
    pub hits: AtomicU64,
    /// Lookups of controllers not fetched yet (answered "no `/scale`").
    pub misses: AtomicU64,
    /// `/scale` reads that failed for a reason other than absence (kept the previous answer).
    pub errors: AtomicU64,
}

/// The cache: cheap to clone, shared between the index (reads) and [`ScaleCache::run`] (writes).
#[derive(Clone, Default)]
pub struct ScaleCache {
    inner: Arc<Inner>,
}

struct Inner {
    entries: RwLock<HashMap<Key, Arc<Entry>>>,
    pending: Mutex<HashSet<Key>>,
    wake: tokio::sync::Notify,
    stats: ScaleCacheStats,
    epoch: Instant,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            entries: RwLock::default(),
            pending: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            stats: ScaleCacheStats::default(),
            epoch: Instant::now(),
        }
    }
}

impl Inner {
    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

impl ScaleLookup for ScaleCache {
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<ScaleInfo> {
        let key = Key {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let entry = self
            .inner
            .entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(entry) = entry {
            entry
                .read_at
                .store(self.inner.millis(Instant::now()), Ordering::Relaxed);
            self.inner.stats.hits.fetch_add(1, Ordering::Relaxed);
            return entry.info.clone();
        }
        self.inner.stats.misses.fetch_add(1, Ordering::Relaxed);
        let mut pending = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if pending.len() < MAX_PENDING && pending.insert(key) {
            self.inner.wake.notify_one();
        }
        None
    }
}

impl ScaleCache {
    /// Hit, miss and error counts.
    pub fn stats(&self) -> &ScaleCacheStats {
        &self.inner.stats
    }

    /// Controllers with an answer in memory.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Key, Arc<Entry>>> {
        self.inner
            .entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the cache filled until `stop` resolves: the targets of `vpas` of other kinds, and what lookups
    /// missed, fetched at once; answers older than the TTL fetched again every period.
    pub async fn run(
        self,
        client: Client,
        vpas: Arc<dyn VpaSource>,
        settings: ScaleCacheSettings,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            self.refresh(&client, vpas.as_ref(), settings).await;
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(settings.period) => {}
                () = self.inner.wake.notified() => {
                    // Let a burst of pods of one new workload land in one refresh.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The controllers to hold: VPA targets of other kinds first, then what was missed or read within `ttl`.
    fn wanted(&self, vpas: &dyn VpaSource, ttl: Duration) -> HashSet<Key> {
        let mut wanted = HashSet::new();
        vpas.each_target(&mut |namespace, api_version, kind, name| {
            if is_well_known(kind) || wanted.len() >= MAX_SCALE_ENTRIES {
                return;
            }
            wanted.insert(Key {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        });
        let pending: Vec<Key> = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        let since = self
            .inner
            .millis(Instant::now())
            .saturating_sub(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let used: Vec<Key> = self
            .read()
            .iter()
            .filter(|(_, e)| e.read_at.load(Ordering::Relaxed) >= since)
            .map(|(k, _)| k.clone())
            .collect();
        for key in pending.into_iter().chain(used) {
            if wanted.len() >= MAX_SCALE_ENTRIES {
                break;
            }
            wanted.insert(key);
        }
        wanted
    }

    async fn refresh(&self, client: &Client, vpas: &dyn VpaSource, settings: ScaleCacheSettings) {
        let wanted = self.wanted(vpas, settings.ttl);
        let now = Instant::now();
        let stale: Vec<Key> = {
            let entries = self.read();
            wanted
                .iter()
                .filter(|k| {
                    entries
                        .get(*k)
                        .is_none_or(|e| now.duration_since(e.fetched) >= settings.ttl)
                })
                .cloned()
                .collect()
        };
        let fetched: Vec<(Key, Option<Option<ScaleInfo>>)> = futures::stream::iter(stale)
            .map(|key| async move {
                let fetch = scale_info(client, &key.api_version, &key.kind, &key.namespace, &key.name);
                let answer = match tokio::time::timeout(settings.timeout, fetch).await {
                    Ok(Ok(info)) => Some(Some(info)),
                    Ok(Err(e)) if e.is_absent() => Some(None),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "/scale read failed; keeping the previous answer");
                        None
                    }
                    Err(_) => {
                        tracing::warn!(controller = %format!("{} {}/{}", key.kind, key.namespace, key.name),
                            "/scale read timed out; keeping the previous answer");
                        None
                    }
                };
                (key, answer)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut entries = self
            .inner
            .entries
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        entries.retain(|k, _| wanted.contains(k));
        for (key, answer) in fetched {
            match answer {
                Some(info) => {
                    entries.insert(
                        key,
                        Arc::new(Entry {
                            info,
                            fetched: now,
                            read_at: AtomicU64::new(self.inner.millis(now)),
                        }),
                    );
                }
                None => {
                    self.inner.stats.errors.fetch_add(1, Ordering::Relaxed);
                    if !entries.contains_key(&key) {
                        // Not answered yet: try again at the next period.
                        let mut pending = self
                            .inner
                            .pending
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        if pending.len() < MAX_PENDING {
                            pending.insert(key);
                        }
                    }
                }
            }
        }
    }
}
