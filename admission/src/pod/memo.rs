//! The last answer per VPA: pods a controller creates from one template get the same patch, so a review
//! whose sizing inputs equal those of the last pod reviewed against the same version of the same VPA answers
//! with that pod's patch instead of sizing again.
//!
//! An answer is reused only when everything the patch is computed from is the same:
//! - the version of the VPA and of each of the namespace's LimitRanges ([`Version`]): `metadata.uid` and
//!   `metadata.resourceVersion`, which every write to an object changes (in a cluster the webhook's VPA cache
//!   decodes a new object for every review, so the object's address says nothing there); objects without a
//!   resourceVersion (standalone manifests) by identity: the index replaces an object's `Arc` on every
//!   reload, and an entry keeps the old allocation (a `Weak`), so an address is never reused while an entry
//!   names it;
//! - the pod's sizing inputs, compared byte for byte ([`sizing_key`]): its namespace, whether it has
//!   annotations and Tailor's or upstream's, and the text of every field of its `spec` and `status` that sizing
//!   reads (containers' names, resources and restart policies, pod-level resources; [`PodText`]), as sent: a
//!   pod that is answered from here is never decoded further;
//! - the patch options.
//!
//! One entry per VPA (by namespace and name): a new version of a VPA replaces its entry at the next miss.
//! Pods in a namespace with ResourceQuotas are never answered from here (quota fit reads the quotas' usage,
//! which changes with every pod). Memory is bounded: [`MEMO_SHARDS`] shards of at most a sixteenth of the
//! memo's bytes each; a shard that would pass its share is emptied first.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, Weak};

use k8s_openapi::api::core::v1::LimitRange;
use kube::Resource;
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use prometheus_client::registry::Registry;
use tailor_core::sizing::PatchOptions;
use tailor_crds::VerticalPodAutoscaler;

use crate::review::EncodedPatch;
use crate::slim_pod::{PodText, key_bytes};

/// Shards, each with its own lock and share of the memo's bytes.
const MEMO_SHARDS: usize = 1 << SHARD_BITS;
const SHARD_BITS: u32 = 4;
/// Pods whose sizing inputs take more than this are not memoised (their reviews are sized every time).
pub const MAX_KEY_BYTES: usize = 16 << 10;
/// Bookkeeping per entry, on top of its key and patch: the map's slot, the VPA's version, and at most the
/// VPA allocation a `Weak` keeps (the object's fields are freed with its last `Arc`, the allocation only with
/// its last `Weak`).
const ENTRY_OVERHEAD: usize = 192 + std::mem::size_of::<VerticalPodAutoscaler>();
/// The same per LimitRange an entry names.
const LIMIT_RANGE_OVERHEAD: usize = 96 + std::mem::size_of::<LimitRange>();

/// What the review answered, without the parts that differ per pod (uid, warnings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The JSON patch, encoded as the response sends it.
    pub patch: EncodedPatch,
    /// Whether the patch only carried the updates annotation (every resource budgeted at pod level).
    pub pod_level_only: bool,
}

/// Which version of an object an answer was computed from.
pub enum Version<K> {
    /// An object from the API server: its uid and resourceVersion.
    Stamped {
        /// `metadata.uid` (empty when absent).
        uid: Box<str>,
        /// `metadata.resourceVersion`.
        resource_version: Box<str>,
    },
    /// An object without a resourceVersion (standalone manifests): the object itself.
    Object(Weak<K>),
}

impl<K: Resource> Version<K> {
    /// The version of `object`.
    pub fn of(object: &Arc<K>) -> Self {
        let meta = object.meta();
        match meta.resource_version.as_deref() {
            Some(rv) if !rv.is_empty() => Version::Stamped {
                uid: meta.uid.as_deref().unwrap_or_default().into(),
                resource_version: rv.into(),
            },
            _ => Version::Object(Arc::downgrade(object)),
        }
    }

    /// Whether `object` is this version.
    pub fn is(&self, object: &Arc<K>) -> bool {
        let meta = object.meta();
        match self {
            Version::Stamped {
                uid,
                resource_version,
            } => {
                meta.resource_version.as_deref() == Some(&**resource_version)
                    && meta.uid.as_deref().unwrap_or_default() == &**uid
            }
            Version::Object(held) => Weak::as_ptr(held) == Arc::as_ptr(object),
        }
    }
}

struct Entry {
    vpa: Version<VerticalPodAutoscaler>,
    limit_ranges: Vec<Version<LimitRange>>,
    key: Box<[u8]>,
    answer: Answer,
}

impl Entry {
    fn bytes(&self) -> usize {
        entry_bytes(
            self.key.len(),
            self.answer.patch.as_base64().len(),
            self.limit_ranges.len(),
        )
    }

    fn holds_for(
        &self,
        vpa: &Arc<VerticalPodAutoscaler>,
        limit_ranges: &[Arc<LimitRange>],
    ) -> bool {
        self.vpa.is(vpa)
            && self.limit_ranges.len() == limit_ranges.len()
            && self
                .limit_ranges
                .iter()
                .zip(limit_ranges)
                .all(|(held, now)| held.is(now))
    }
}

fn entry_bytes(key: usize, patch: usize, limit_ranges: usize) -> usize {
    key + patch + ENTRY_OVERHEAD + limit_ranges * LIMIT_RANGE_OVERHEAD
}

#[derive(Default)]
struct Shard {
    /// By a hash of the VPA's namespace and name ([`PatchMemo::slot`]); two VPAs whose names collide share
    /// an entry, and each misses on the other's version.
    entries: HashMap<u64, Entry, SlotHasher>,
    bytes: usize,
}

/// The last answer per VPA (see the module's documentation).
pub struct PatchMemo {
    options: PatchOptions,
    max_bytes: usize,
    slots: SlotHasher,
    shards: Vec<Mutex<Shard>>,
    hits: Counter,
    misses: Counter,
    bytes: Gauge<i64>,
}

impl std::fmt::Debug for PatchMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchMemo").finish_non_exhaustive()
    }
}

/// The hasher of the slots and of the shards' maps: foldhash, seeded per process. Every review hashes a VPA's
/// names and looks its slot up; SipHash made that several times dearer, for no gain here: a VPA's names are
/// chosen by whoever may create VPAs, and two that collide only share an entry.
type SlotHasher = foldhash::fast::RandomState;

/// The shard of an entry: the slot's high bits.
fn shard_of(slot: u64) -> usize {
    (slot >> (64 - SHARD_BITS)) as usize
}

/// The bytes a memoised answer is looked up by: everything of the pod that its patch is computed from (see the
/// module's documentation): its namespace, whether it has annotations and Tailor's or upstream's updates
/// annotation, and the sizing fields of its spec and status as sent (all read from `text`). `None` when they
/// pass [`MAX_KEY_BYTES`].
pub fn sizing_key(text: &PodText<'_>, namespace: &str) -> Option<Vec<u8>> {
    let (tailor, upstream) = text.updates_annotations();
    let mut key = Vec::with_capacity(512);
    key_bytes(&mut key, namespace.as_bytes());
    key.extend_from_slice(&[
        u8::from(text.has_annotations()),
        u8::from(tailor),
        u8::from(upstream),
    ]);
    text.write_key(&mut key);
    (key.len() <= MAX_KEY_BYTES).then_some(key)
}

impl PatchMemo {
    /// An empty memo of at most `max_bytes` (0: none) for reviews made with `options` (reviews with other
    /// options are not memoised).
    pub fn new(options: PatchOptions, max_bytes: usize) -> Self {
        PatchMemo {
            options,
            max_bytes,
            slots: SlotHasher::default(),
            shards: (0..MEMO_SHARDS).map(|_| Mutex::default()).collect(),
            hits: Counter::default(),
            misses: Counter::default(),
            bytes: Gauge::default(),
        }
    }

    /// Registers the memo's hits, misses and size (`tailor_admission_patch_memo_*`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "patch_memo_hits",
            "Pod reviews answered with the patch of the last pod reviewed against the same VPA (same sizing inputs)",
            self.hits.clone(),
        );
        registry.register(
            "patch_memo_misses",
            "Pod reviews that could have been answered from the patch memo but were sized anew",
            self.misses.clone(),
        );
        registry.register_with_unit(
            "patch_memo_size",
            "Bytes held by the patch memo (keys, patches, bookkeeping; bounded)",
            prometheus_client::registry::Unit::Bytes,
            self.bytes.clone(),
        );
    }

    /// Whether reviews made with `options` may use this memo.
    pub fn serves(&self, options: &PatchOptions) -> bool {
        self.max_bytes > 0 && self.options == *options
    }

    /// The map key of a VPA's entry: a hash of its namespace and name.
    fn slot(&self, vpa: &VerticalPodAutoscaler) -> u64 {
        let meta = &vpa.metadata;
        self.slots
            .hash_one((meta.namespace.as_deref(), meta.name.as_deref()))
    }

    fn shard(&self, vpa: &VerticalPodAutoscaler) -> (u64, &Mutex<Shard>) {
        let slot = self.slot(vpa);
        (slot, &self.shards[shard_of(slot)])
    }

    /// The answer of the last review against this version of `vpa` and of `limit_ranges` whose pod had
    /// sizing inputs `key`.
    pub fn get(
        &self,
        vpa: &Arc<VerticalPodAutoscaler>,
        limit_ranges: &[Arc<LimitRange>],
        key: &[u8],
    ) -> Option<Answer> {
        let (slot, shard) = self.shard(vpa);
        // A poisoned lock only means another review panicked while holding it; the map is still whole.
        let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        let answer = shard
            .entries
            .get(&slot)
            .filter(|e| e.holds_for(vpa, limit_ranges) && *e.key == *key)
            .map(|e| e.answer.clone());
        match answer {
            Some(_) => self.hits.inc(),
            None => self.misses.inc(),
        };
        answer
    }

    /// Remembers `answer` as the last one against `vpa` (replacing the one before, whatever its version).
    pub fn put(
        &self,
        vpa: &Arc<VerticalPodAutoscaler>,
        limit_ranges: &[Arc<LimitRange>],
        key: Vec<u8>,
        answer: Answer,
    ) {
        let bytes = entry_bytes(
            key.len(),
            answer.patch.as_base64().len(),
            limit_ranges.len(),
        );
        let budget = self.max_bytes / MEMO_SHARDS;
        if bytes > budget {
            return;
        }
        let entry = Entry {
            vpa: Version::of(vpa),
            limit_ranges: limit_ranges.iter().map(Version::of).collect(),
            key: key.into_boxed_slice(),
            answer,
        };
        let (slot, shard) = self.shard(vpa);
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        let before = shard.bytes;
        if let Some(old) = shard.entries.remove(&slot) {
            shard.bytes -= old.bytes();
        }
        if shard.bytes + bytes > budget {
            // Entries of VPAs deleted since are dropped here too.
            shard.entries = HashMap::default();
            shard.bytes = 0;
        }
        shard.bytes += bytes;
        shard.entries.insert(slot, entry);
        let grown = shard.bytes as i64 - before as i64;
        drop(shard);
        self.bytes.inc_by(grown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpas_fill_every_shard_evenly() {
        let mut load = [0usize; MEMO_SHARDS];
        let memo = PatchMemo::new(PatchOptions::default(), 1 << 20);
        for i in 0..1600 {
            let mut vpa = VerticalPodAutoscaler::default();
            vpa.metadata.namespace = Some(format!("team-{}", i % 40));
            vpa.metadata.name = Some(format!("app-{i}"));
            load[shard_of(memo.slot(&vpa))] += 1;
        }
        let (min, max) = (load.iter().min().unwrap(), load.iter().max().unwrap());
        assert!(*min >= 60 && *max <= 140, "{load:?}");
    }

    #[test]
    fn a_version_is_its_uid_and_resource_version_or_the_object() {
        let stamped = |rv: &str| {
            let mut vpa = VerticalPodAutoscaler::default();
            vpa.metadata.uid = Some("u1".into());
            vpa.metadata.resource_version = Some(rv.into());
            Arc::new(vpa)
        };
        let version = Version::of(&stamped("7"));
        // Another decode of the same version (the cluster cache's way) is the same version.
        assert!(version.is(&stamped("7")));
        assert!(!version.is(&stamped("8")));
        let mut other = (*stamped("7")).clone();
        other.metadata.uid = Some("u2".into());
        assert!(!version.is(&Arc::new(other)));
        // Without a resourceVersion, only the object itself.
        let manifest = Arc::new(VerticalPodAutoscaler::default());
        let version = Version::of(&manifest);
        assert!(version.is(&manifest));
        assert!(!version.is(&Arc::new(VerticalPodAutoscaler::default())));
    }
}
