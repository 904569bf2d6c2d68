//! Evicted pods come back through the webhook: the updater watches what comes back.
//!
//! The status Lease says that the webhook's process runs, not that the API server reaches it; and it goes
//! stale only a lease period after the webhook goes away. An eviction whose replacement is admitted without
//! Tailor's webhook (failurePolicy `Ignore`) brings the pod back with its old requests, to be evicted again:
//! an eviction storm that sizes nothing. So after a workload's eviction, its new pods (pods whose UID the
//! workload did not have when it was evicted) are its replacements, and each is judged when first seen:
//!
//! - a replacement carrying Tailor's observed-containers annotation (or a mark of upstream VPA's webhook)
//!   went through a webhook: the watch ends, and with it any pause of other workloads that began before
//!   that eviction (the webhook sizes pods again);
//! - a replacement without it was admitted unsized: the workload's evictions pause. After a probe interval
//!   ([`PROBE_AFTER`] by default) one eviction is let through as a probe, whose replacement decides again.
//!
//! Once [`MAX_PAUSED_WORKLOADS`] workloads are paused, every eviction pauses: the webhook is down for all.
//! Bounds: a workload is evicted at most one iteration's budget (its disruption tolerance) before its first
//! unsized replacement is seen, then once per probe interval while replacements keep coming back unsized.
//! Resizes in place need no webhook and go on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::decisions::calculator::add;
use crate::views::pods::{self, CachedPod};

/// Default time after a workload's pause begins before one probe eviction is let through
/// (`--unsized-replacement-probe-interval`).
pub const PROBE_AFTER: Duration = Duration::from_secs(120);
/// Paused workloads from which every eviction pauses.
pub const MAX_PAUSED_WORKLOADS: usize = 3;

/// A VPA by namespace and name.
pub type Key = (String, String);

#[derive(Debug, Clone)]
enum Watch {
    /// Evicted at `at`; pods whose UID is not in `before` are replacements. A `probe` lets no other eviction
    /// through until its replacement is judged.
    Waiting {
        at: Timestamp,
        before: HashSet<Arc<str>>,
        probe: bool,
    },
    /// Replacement `pod` came back unsized (seen at `since`); pods whose UID is not in `before` are newer.
    Paused {
        pod: String,
        since: Timestamp,
        before: HashSet<Arc<str>>,
    },
}

/// What the updater knows of the replacements of the pods it evicted.
#[derive(Debug, Default)]
pub struct ReplacementWatch {
    watches: HashMap<Key, Watch>,
    /// Replacements seen unsized, for the metric.
    unsized_seen: u64,
}

/// Whether a pod went through a webhook that sizes pods: Tailor's (observed-containers) or upstream's.
fn went_through_a_webhook(pod: &CachedPod) -> bool {
    pods::observed_containers(pod).is_some() || pods::sized_by_upstream(pod)
}

fn uids(pods: &[Arc<CachedPod>]) -> HashSet<Arc<str>> {
    pods.iter().map(|p| Arc::from(pods::uid(p))).collect()
}

impl ReplacementWatch {
    /// Judges the replacements among `key`'s live `pods` at `now`: ends a watch whose replacement was
    /// sized, pauses one whose replacement was not. Returns the name of a replacement newly seen unsized.
    pub fn observe(
        &mut self,
        key: &Key,
        pods: &[Arc<CachedPod>],
        now: Timestamp,
    ) -> Option<String> {
        let watch = self.watches.get(key)?;
        let (before, waiting_since) = match watch {
            Watch::Waiting { at, before, .. } => (before, Some(*at)),
            Watch::Paused { before, .. } => (before, None),
        };
        let fresh: Vec<&Arc<CachedPod>> = pods
            .iter()
            .filter(|p| !before.contains(pods::uid(p)))
            .collect();
        let unsized_pod = fresh
            .iter()
            .find(|p| !went_through_a_webhook(p))
            .map(|p| pods::name(p).to_owned());
        let any_sized = fresh.iter().any(|p| went_through_a_webhook(p));
        match unsized_pod {
            Some(pod) => {
                self.unsized_seen += 1;
                self.watches.insert(
                    key.clone(),
                    Watch::Paused {
                        pod: pod.clone(),
                        since: now,
                        before: uids(pods),
                    },
                );
                waiting_since.is_some().then_some(pod)
            }
            None if any_sized => {
                self.watches.remove(key);
                if let Some(at) = waiting_since {
                    // The webhook sized a pod created after `at`: pauses that began before are over.
                    self.watches
                        .retain(|_, w| !matches!(w, Watch::Paused { since, .. } if *since <= at));
                }
                None
            }
            None => None,
        }
    }

    /// Whether `key`'s pods may be evicted at `now`; the reason (the `UpdatesBlocked` message) when not.
    /// A paused workload gets one probe eviction every `probe_after`.
    pub fn may_evict(
        &self,
        key: &Key,
        now: Timestamp,
        probe_after: Duration,
    ) -> Result<(), String> {
        let probe = probe_after.as_secs();
        match self.watches.get(key) {
            Some(Watch::Paused { since, .. }) if add(*since, probe_after) <= now => return Ok(()),
            Some(Watch::Paused { pod, .. }) => {
                return Err(format!(
                    "pod {pod}, which replaced an evicted pod, was admitted without Tailor's webhook (it does \
                     not carry tailor.dev/observed-containers): evictions are paused until a new pod comes \
                     back sized, with one probe eviction every {probe}s; resizes in place go on"
                ));
            }
            Some(Watch::Waiting { probe: true, .. }) => {
                return Err(
                    "a probe eviction waits for its replacement: no other pod is evicted until it is seen"
                        .into(),
                );
            }
            _ => {}
        }
        let paused = self.paused();
        if paused >= MAX_PAUSED_WORKLOADS {
            return Err(format!(
                "replacements of evicted pods of {paused} workloads were admitted without Tailor's webhook: \
                 no pod is evicted until a replacement comes back sized (each paused workload is probed with \
                 one eviction every {probe}s); resizes in place go on"
            ));
        }
        Ok(())
    }

    /// Records an eviction of one of `key`'s pods at `now`; `pods` are its live pods before the eviction.
    /// Evictions of one iteration share one watch (its UIDs are those before the first).
    pub fn evicted(&mut self, key: &Key, pods: &[Arc<CachedPod>], now: Timestamp) {
        let probe = match self.watches.get(key) {
            Some(Watch::Waiting { .. }) => return,
            Some(Watch::Paused { .. }) => true,
            None => false,
        };
        // A probe starts the watch over: its replacement decides.
        self.watches.insert(
            key.clone(),
            Watch::Waiting {
                at: now,
                before: uids(pods),
                probe,
            },
        );
    }

    /// Whether no workload is watched.
    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// Workloads whose evictions are paused.
    pub fn paused(&self) -> usize {
        self.watches
            .values()
            .filter(|w| matches!(w, Watch::Paused { .. }))
            .count()
    }

    /// Replacements seen unsized since start.
    pub fn unsized_seen(&self) -> u64 {
        self.unsized_seen
    }

    /// Forgets the VPAs `keep` refuses (deleted, or no longer updated).
    pub fn retain(&mut self, keep: impl Fn(&Key) -> bool) {
        self.watches.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_testkit::fixtures::PodFixture;

    fn pod(name: &str, sized: bool) -> Arc<CachedPod> {
        let annotations = if sized {
            serde_json::json!({"tailor.dev/observed-containers": "app"})
        } else {
            serde_json::json!({})
        };
        let p = PodFixture::new("ns", name)
            .uid(&format!("uid-{name}"))
            .annotations(annotations)
            .container_resources("app", serde_json::Value::Null)
            .build();
        Arc::new(CachedPod::from(p))
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    #[test]
    fn an_unsized_replacement_pauses_the_workload_until_a_sized_one_comes_back() {
        let mut w = ReplacementWatch::default();
        let k = key("web");
        let before = [pod("a", true), pod("b", true), pod("c", true)];
        assert_eq!(w.may_evict(&k, at(0), PROBE_AFTER), Ok(()));
        w.evicted(&k, &before, at(0));
        // Within the iteration the budget decides: the watch lets the next eviction through.
        assert_eq!(w.may_evict(&k, at(0), PROBE_AFTER), Ok(()));
        // The replacement is not there yet: nothing is judged.
        assert_eq!(w.observe(&k, &before[1..], at(5)), None);
        let after = [pod("b", true), pod("c", true), pod("d", false)];
        assert_eq!(w.observe(&k, &after, at(10)), Some("d".to_string()));
        let why = w.may_evict(&k, at(11), PROBE_AFTER).unwrap_err();
        assert!(why.contains("pod d") && why.contains("paused"), "{why}");
        // Seen again: no new announcement, still paused.
        assert_eq!(w.observe(&k, &after, at(20)), None);
        assert!(w.may_evict(&k, at(20), PROBE_AFTER).is_err());
        // The probe is due after PROBE_AFTER: one eviction, then nothing until its replacement is seen.
        let due = 10 + PROBE_AFTER.as_secs() as i64;
        assert_eq!(w.may_evict(&k, at(due), PROBE_AFTER), Ok(()));
        w.evicted(&k, &after, at(due));
        assert!(
            w.may_evict(&k, at(due), PROBE_AFTER)
                .unwrap_err()
                .contains("probe")
        );
        let sized = [pod("b", true), pod("d", false), pod("e", true)];
        assert_eq!(w.observe(&k, &sized, at(due + 5)), None);
        assert_eq!(w.may_evict(&k, at(due + 5), PROBE_AFTER), Ok(()));
        assert_eq!(w.paused(), 0);
        assert_eq!(w.unsized_seen(), 1);
    }

    #[test]
    fn replacements_sized_by_upstream_count_as_sized() {
        let mut w = ReplacementWatch::default();
        let k = key("web");
        w.evicted(&k, &[pod("a", true)], at(0));
        let p = PodFixture::new("ns", "u")
            .uid("uid-u")
            .annotation("vpaUpdates", "Pod resources updated by x")
            .container_resources("app", serde_json::Value::Null)
            .build();
        assert_eq!(w.observe(&k, &[Arc::new(CachedPod::from(p))], at(5)), None);
        assert_eq!(w.paused(), 0);
    }

    #[test]
    fn enough_paused_workloads_pause_every_eviction_and_a_sized_replacement_ends_it() {
        let mut w = ReplacementWatch::default();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let k = key(name);
            let old = pod(&format!("{name}-old"), true);
            w.evicted(&k, std::slice::from_ref(&old), at(i as i64));
            assert!(
                w.observe(&k, &[pod(&format!("{name}-new"), false)], at(10))
                    .is_some()
            );
        }
        assert_eq!(w.paused(), MAX_PAUSED_WORKLOADS);
        let other = key("other");
        let why = w.may_evict(&other, at(11), PROBE_AFTER).unwrap_err();
        assert!(why.contains("3 workloads"), "{why}");
        // A workload evicted before the pause began whose replacement comes back sized (it was seen late):
        // it says nothing about the webhook now.
        w.evicted(&other, &[pod("o1", true)], at(5));
        assert_eq!(w.observe(&other, &[pod("o2", true)], at(12)), None);
        assert_eq!(w.paused(), MAX_PAUSED_WORKLOADS);
        // One evicted after the pauses began comes back sized: the webhook is back for everyone.
        let late = key("late");
        w.evicted(&late, &[pod("l1", true)], at(20));
        assert_eq!(w.observe(&late, &[pod("l2", true)], at(25)), None);
        assert_eq!(w.paused(), 0);
        assert_eq!(w.may_evict(&other, at(26), PROBE_AFTER), Ok(()));
    }
}
