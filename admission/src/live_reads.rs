//! What the webhook's live reads of the API server share (owners missing from the caches, a Job's failed pods):
//! the bounds on reads ([`ReadGate`]: reads at once and started per second), the memo of their answers
//! ([`AnswerMemo`]: reused for a while, bounded in entries), and whether a review's thread may wait for a read
//! at all ([`can_block`]). A review waits for a read on its own thread, so every bound is checked before it
//! starts, and a read over a bound is not made.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Whether this thread may wait for a read: not on a current-thread runtime, whose only thread would have
/// to run the read itself.
pub fn can_block() -> bool {
    tokio::runtime::Handle::try_current().map_or(true, |h| {
        h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread
    })
}

/// Bounds of one kind of live read.
#[derive(Clone, Copy, Debug)]
pub struct ReadSettings {
    /// Longest wait for one read (the review waits this long at most).
    pub timeout: Duration,
    /// Reads at once.
    pub in_flight: usize,
    /// Reads started per second.
    pub per_second: u32,
    /// How long an answer is reused.
    pub ttl: Duration,
}

/// At most `in_flight` reads at once and `per_second` started per second.
pub struct ReadGate {
    running: AtomicUsize,
    in_flight: usize,
    limiter: governor::DefaultDirectRateLimiter,
}

impl ReadGate {
    /// A gate letting `settings.in_flight` reads run at once, `settings.per_second` (at least 1) start per
    /// second.
    pub fn new(settings: &ReadSettings) -> Self {
        let per_second = NonZeroU32::new(settings.per_second).unwrap_or(NonZeroU32::MIN);
        Self {
            running: AtomicUsize::new(0),
            in_flight: settings.in_flight,
            limiter: governor::RateLimiter::direct(governor::Quota::per_second(per_second)),
        }
    }

    /// A slot for one read, held until dropped; `None` when a bound is reached.
    pub fn enter(&self) -> Option<ReadSlot<'_>> {
        if self.limiter.check().is_err() {
            return None;
        }
        (self.running)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.in_flight).then_some(n + 1)
            })
            .ok()
            .map(|_| ReadSlot(&self.running))
    }
}

/// One read's place among those at once; freed when dropped.
pub struct ReadSlot<'a>(&'a AtomicUsize);

impl Drop for ReadSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers reused for `ttl`, at most `max` of them: when full, the expired ones are forgotten, and a new
/// answer that still finds no room is not kept.
pub struct AnswerMemo<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
    ttl: Duration,
    max: usize,
}

impl<K: Eq + Hash, V: Clone> AnswerMemo<K, V> {
    /// An empty memo.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            entries: Mutex::default(),
            ttl,
            max,
        }
    }

    /// The answer for `key`, when given less than `ttl` ago.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        (entries.get(key))
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `value` for `key`, room permitting.
    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= self.max {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
            if entries.len() >= self.max {
                return;
            }
        }
        entries.insert(key, (Instant::now(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(in_flight: usize, per_second: u32) -> ReadSettings {
        ReadSettings {
            timeout: Duration::from_secs(1),
            in_flight,
            per_second,
            ttl: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_gate_holds_reads_at_once_and_frees_a_slot_when_dropped() {
        let gate = ReadGate::new(&settings(2, 1_000));
        let (a, b) = (gate.enter(), gate.enter());
        assert!(a.is_some() && b.is_some());
        assert!(gate.enter().is_none(), "two at once");
        drop(a);
        assert!(gate.enter().is_some(), "a slot was freed");
    }

    #[test]
    fn the_gate_holds_reads_per_second() {
        let gate = ReadGate::new(&settings(100, 2));
        let begun = Instant::now();
        let started = (0..10).filter_map(|_| gate.enter()).count();
        // Two at once, one more per half second the loop took (on however slow a machine).
        let allowed = 2 + (begun.elapsed().as_secs_f64() * 2.0).floor() as usize;
        assert!(
            (2..=allowed).contains(&started),
            "{started} started, {allowed} allowed"
        );
    }

    #[test]
    fn the_memo_forgets_after_its_ttl_and_keeps_at_most_max() {
        let memo = AnswerMemo::new(Duration::from_secs(60), 2);
        memo.put("a", 1);
        memo.put("b", 2);
        memo.put("c", 3);
        assert_eq!(
            (memo.get(&"a"), memo.get(&"b"), memo.get(&"c")),
            (Some(1), Some(2), None)
        );
        let expired = AnswerMemo::new(Duration::ZERO, 2);
        expired.put("a", 1);
        assert_eq!(expired.get(&"a"), None);
        expired.put("b", 2);
        expired.put("c", 3);
        let len = expired.entries.lock().map(|e| e.len()).unwrap_or(0);
        assert_eq!(len, 1, "full of expired entries: forgotten to make room");
    }
}
