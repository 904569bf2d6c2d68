//! Per-VPA counter handles kept across iterations: the same VPAs come back every iteration, and looking
//! their two counter series up in the families (label vectors built and hashed each time) was ~9 k
//! instructions per VPA, more than sizing it. The counter families never drop series, so a handle stays
//! its series' for the life of the process.

use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use prometheus_client::metrics::counter::Counter;

use super::{VpaLabel, size_log2};
use crate::FastMap;

/// One VPA's counters with the labels they were looked up by.
#[derive(Debug)]
struct Entry {
    namespace: Box<str>,
    name: Box<str>,
    mode: Box<str>,
    size_log2: u32,
    evicted: Counter,
    resized: Counter,
}

impl Entry {
    fn is(&self, vpa: &VpaLabel<'_>, size: u32) -> bool {
        self.size_log2 == size
            && *self.name == *vpa.name
            && *self.namespace == *vpa.namespace
            && *self.mode == *vpa.mode
    }
}

/// The evicted and in-place-updated counters of every VPA label set seen (as many as the families hold),
/// found by a hash of the labels.
#[derive(Debug, Default)]
pub(super) struct CounterHandles {
    by_hash: Mutex<FastMap<u64, Vec<Entry>>>,
    state: foldhash::fast::RandomState,
}

impl CounterHandles {
    /// The counters of `vpa`, from `create` (the families' lookups) the first time its labels are seen.
    pub(super) fn get_or_insert(
        &self,
        vpa: &VpaLabel<'_>,
        create: impl FnOnce() -> (Counter, Counter),
    ) -> (Counter, Counter) {
        let size = size_log2(vpa.size);
        let hash = self
            .state
            .hash_one((vpa.namespace, vpa.name, vpa.mode, size));
        let mut map = self.by_hash.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = map.entry(hash).or_default();
        if let Some(e) = bucket.iter().find(|e| e.is(vpa, size)) {
            return (e.evicted.clone(), e.resized.clone());
        }
        let (evicted, resized) = create();
        bucket.push(Entry {
            namespace: vpa.namespace.into(),
            name: vpa.name.into(),
            mode: vpa.mode.into(),
            size_log2: size,
            evicted: evicted.clone(),
            resized: resized.clone(),
        });
        (evicted, resized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_per_label_set() {
        let handles = CounterHandles::default();
        let vpa = |name, size| VpaLabel {
            size,
            name,
            namespace: "ns",
            mode: "Recreate",
        };
        let (a, _) = handles.get_or_insert(&vpa("a", 3), Default::default);
        a.inc();
        let (again, _) = handles.get_or_insert(&vpa("a", 2), || unreachable!("same labels"));
        assert_eq!(again.get(), 1, "size 2 and 3 share vpa_size_log2 1");
        let (other, _) = handles.get_or_insert(&vpa("a", 4), Default::default);
        assert_eq!(other.get(), 0, "another size bucket is another series");
        let (b, _) = handles.get_or_insert(&vpa("b", 3), Default::default);
        assert_eq!(b.get(), 0);
    }
}
