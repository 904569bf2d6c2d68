//! Warning Events the webhook writes on VPAs: `QuotaFit` (quota fit changed a pod's patch,
//! docs/decisions/quota-fit.md), `PodAdmittedUnsized` (a pod the VPA probably covers was admitted without
//! its requests, docs/decisions/unsized-admissions.md) and `LimitPolicyInvalid` (its limit-policy annotation
//! does not parse, docs/limit-policy.md) and `PodLevelEnvelopeRefused` (a pod could not take its pod-level
//! envelope, docs/pod-level-resources.md), and `OOMRetryBump` (a Job pod's retry got more memory after an OOM
//! kill, docs/jobs.md). The pod
//! may have no name yet, so the VPA carries them. A burst of pod creations must not become a burst of Events:
//! at most one per VPA and reason per [`EVENT_PERIOD`], the next one counting the pods in between; events
//! wait in a bounded queue written by one task, and a review never waits for it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tailor_kube::vpa_event::VpaEvent;
use tokio::sync::mpsc;

/// The reason of the Event on a VPA whose limit-policy annotation does not parse.
pub const LIMIT_POLICY_INVALID: &str = "LimitPolicyInvalid";
/// The reason of the Event on a VPA whose pod-level envelope a pod could not take (docs/pod-level-resources.md).
pub const POD_LEVEL_ENVELOPE_REFUSED: &str = "PodLevelEnvelopeRefused";
/// The reason of the Event on a VPA whose Job pod's retry was admitted with more memory after an OOM kill
/// (docs/jobs.md). One per retry: the Job controller's back-off spaces them, so they are not paced.
pub const OOM_RETRY_BUMP: &str = "OOMRetryBump";
/// At most one Event per VPA and reason in this period.
pub const EVENT_PERIOD: Duration = Duration::from_secs(60);
/// Most Events waiting to be written; more are dropped (and counted).
pub const EVENT_QUEUE: usize = 64;
/// Most (VPA, reason) pairs remembered by the rate limit; beyond it, entries older than [`EVENT_PERIOD`]
/// are forgotten.
pub const GATE_ENTRIES: usize = 4096;

/// The queue of Events to write, and the count of those dropped because it was full.
#[derive(Clone, Debug)]
pub struct VpaEvents {
    tx: mpsc::Sender<Queued>,
    dropped: Counter,
}

impl VpaEvents {
    /// Starts the writer (as `tailor-admission`, through `client`) and registers
    /// `tailor_admission_vpa_events_dropped_total` in `registry`. Must run inside a Tokio runtime.
    pub fn start(client: Client, registry: &mut Registry) -> Self {
        let dropped = Counter::default();
        registry.register(
            "vpa_events_dropped",
            "Events on VPAs (QuotaFit, PodAdmittedUnsized, LimitPolicyInvalid, PodLevelEnvelopeRefused, OOMRetryBump) not written because their queue was full",
            dropped.clone(),
        );
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "tailor-admission".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        tokio::spawn(write_events(rx, recorder));
        VpaEvents { tx, dropped }
    }

    /// Queues `event` without waiting; a full queue drops it and counts it.
    pub fn send(&self, event: VpaEvent) {
        self.send_related(event, None);
    }

    /// [`VpaEvents::send`] with the Event's `related` object.
    pub fn send_related(&self, event: VpaEvent, related: Option<ObjectReference>) {
        if self.tx.try_send(Queued { event, related }).is_err() {
            self.dropped.inc();
        }
    }
}

/// An Event waiting to be written.
#[derive(Debug)]
struct Queued {
    event: VpaEvent,
    related: Option<ObjectReference>,
}

/// One Event per VPA and reason per [`EVENT_PERIOD`]; the ones in between are counted into the next.
#[derive(Debug, Default)]
pub struct EventGate {
    last: HashMap<(String, String, &'static str), (Instant, u64)>,
}

impl EventGate {
    /// Whether to write an Event `reason` for `namespace/name` at `now`: `Some(n)` with the `n` Events
    /// held back since the last one written, `None` to hold this one back.
    pub fn admit(
        &mut self,
        namespace: &str,
        name: &str,
        reason: &'static str,
        now: Instant,
    ) -> Option<u64> {
        if self.last.len() >= GATE_ENTRIES {
            self.last
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < EVENT_PERIOD);
        }
        let key = (namespace.to_owned(), name.to_owned(), reason);
        let room = self.last.len() < GATE_ENTRIES;
        match self.last.get_mut(&key) {
            Some((at, held)) if now.saturating_duration_since(*at) < EVENT_PERIOD => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                *at = now;
                Some(std::mem::take(held))
            }
            None if room => {
                self.last.insert(key, (now, 0));
                Some(0)
            }
            // Full of recent entries: write without remembering (bounded memory over strict pacing).
            None => Some(0),
        }
    }
}

async fn write_events(mut rx: mpsc::Receiver<Queued>, recorder: Recorder) {
    let mut gate = EventGate::default();
    while let Some(Queued {
        event: mut e,
        related,
    }) = rx.recv().await
    {
        let held = match e.reason {
            OOM_RETRY_BUMP => 0,
            reason => match gate.admit(&e.namespace, &e.name, reason, Instant::now()) {
                Some(held) => held,
                None => continue,
            },
        };
        if held > 0 {
            e.note
                .push_str(&format!(" (and {held} more pods since the last event)"));
        }
        e.publish_related(&recorder, "Admit", related).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "QuotaFit";

    #[test]
    fn one_event_per_vpa_per_period_counting_the_rest() {
        let mut gate = EventGate::default();
        let t0 = Instant::now();
        assert_eq!(gate.admit("ns", "a", Q, t0), Some(0));
        assert_eq!(gate.admit("ns", "a", Q, t0 + Duration::from_secs(1)), None);
        assert_eq!(gate.admit("ns", "a", Q, t0 + Duration::from_secs(2)), None);
        assert_eq!(
            gate.admit("ns", "b", Q, t0),
            Some(0),
            "another VPA has its own pace"
        );
        assert_eq!(gate.admit("ns", "a", Q, t0 + EVENT_PERIOD), Some(2));
        assert_eq!(gate.admit("ns", "a", Q, t0 + EVENT_PERIOD), None);
    }

    #[test]
    fn each_reason_has_its_own_pace() {
        let mut gate = EventGate::default();
        let t0 = Instant::now();
        assert_eq!(gate.admit("ns", "a", Q, t0), Some(0));
        assert_eq!(gate.admit("ns", "a", "PodAdmittedUnsized", t0), Some(0));
        assert_eq!(gate.admit("ns", "a", Q, t0), None);
    }
}
