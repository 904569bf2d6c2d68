//! What the webhook reports when quota fit (issue 28) changes a patch: the counter
//! `tailor_admission_quota_fit_pods_total{outcome}` (`scaled`, `dropped`, `left_alone`) and a Warning Event
//! `QuotaFit` on the VPA (the pod may have no name yet). A burst of pod creations must not become a burst
//! of Events: at most one per VPA per [`EVENT_PERIOD`], the next one counting the pods in between; events
//! wait in a bounded queue written by one task, and a review never waits for it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family};
use prometheus_client::registry::Registry;
use tailor_core::quota::QuotaFit;
use tokio::sync::mpsc;

/// At most one Event per VPA in this period.
pub const EVENT_PERIOD: Duration = Duration::from_secs(60);
/// Most Events waiting to be written; more are dropped (and counted).
pub const EVENT_QUEUE: usize = 64;
/// Most VPAs remembered by the rate limit; beyond it, entries older than [`EVENT_PERIOD`] are forgotten.
pub const GATE_ENTRIES: usize = 4096;
/// How long one Event may take before it is given up.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest note kept (the API allows 1 KiB).
const NOTE_BYTES: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// One Event to write on a VPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaEvent {
    /// The VPA's namespace.
    pub namespace: String,
    /// The VPA's name.
    pub name: String,
    /// The VPA's uid (empty when unknown).
    pub uid: String,
    /// What quota fit did, for the note.
    pub note: String,
}

/// The metric and the Event queue.
#[derive(Debug)]
pub struct QuotaReport {
    fitted: Family<OutcomeLabels, Counter>,
    events_dropped: Counter,
    events: Option<mpsc::Sender<QuotaEvent>>,
}

impl QuotaReport {
    /// Registers the counters in `registry` (prefixed `tailor_admission` by [`crate::metrics::Metrics`]).
    pub fn new(registry: &mut Registry) -> Self {
        let fitted = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "quota_fit_pods",
            "Pods whose patch quota fit changed to stay within the namespace's ResourceQuotas, by outcome (scaled, dropped, left_alone)",
            fitted.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "quota_fit_events_dropped",
            "QuotaFit Events not written because their queue was full",
            events_dropped.clone(),
        );
        QuotaReport {
            fitted,
            events_dropped,
            events: None,
        }
    }

    /// Writes Events through `client` (as `tailor-admission`). Must run inside a Tokio runtime.
    pub fn with_events(mut self, client: Client) -> Self {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "tailor-admission".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        tokio::spawn(write_events(rx, recorder));
        self.events = Some(tx);
        self
    }

    /// Records a pod whose patch quota fit changed: `vpa` is `namespace/name`, `pod` names the pod (or its
    /// `generateName`).
    pub fn record(&self, vpa: &str, vpa_uid: &str, pod: &str, fit: &QuotaFit) {
        self.fitted
            .get_or_create(&OutcomeLabels {
                outcome: fit.outcome.as_str(),
            })
            .inc();
        let Some(tx) = &self.events else {
            return;
        };
        let (namespace, name) = vpa.split_once('/').unwrap_or(("", vpa));
        let event = QuotaEvent {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: vpa_uid.to_owned(),
            note: format!("Pod {pod}: {}", fit.notes().join("; ")),
        };
        if tx.try_send(event).is_err() {
            self.events_dropped.inc();
        }
    }
}

/// One Event per VPA per [`EVENT_PERIOD`]; the ones in between are counted into the next.
#[derive(Debug, Default)]
pub struct EventGate {
    last: HashMap<(String, String), (Instant, u64)>,
}

impl EventGate {
    /// Whether to write an Event for `namespace/name` at `now`: `Some(n)` with the `n` Events held back
    /// since the last one written, `None` to hold this one back.
    pub fn admit(&mut self, namespace: &str, name: &str, now: Instant) -> Option<u64> {
        if self.last.len() >= GATE_ENTRIES {
            self.last
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < EVENT_PERIOD);
        }
        let key = (namespace.to_owned(), name.to_owned());
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

async fn write_events(mut rx: mpsc::Receiver<QuotaEvent>, recorder: Recorder) {
    let mut gate = EventGate::default();
    while let Some(e) = rx.recv().await {
        let Some(held) = gate.admit(&e.namespace, &e.name, Instant::now()) else {
            continue;
        };
        let mut note = e.note.clone();
        if held > 0 {
            note.push_str(&format!(" (and {held} more pods since the last event)"));
        }
        let reference = ObjectReference {
            api_version: Some("autoscaling.tailor.dev/v1".into()),
            kind: Some("VerticalPodAutoscaler".into()),
            name: Some(e.name.clone()),
            namespace: Some(e.namespace.clone()),
            uid: (!e.uid.is_empty()).then(|| e.uid.clone()),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "QuotaFit".into(),
            note: Some(cut(&note, NOTE_BYTES)),
            action: "Admit".into(),
            secondary: None,
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &reference)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, vpa = %e.name, "QuotaFit event not recorded"),
            Err(_) => tracing::debug!(vpa = %e.name, "QuotaFit event not recorded in time"),
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::quota::{Binding, QuotaOutcome};

    #[test]
    fn one_event_per_vpa_per_period_counting_the_rest() {
        let mut gate = EventGate::default();
        let t0 = Instant::now();
        assert_eq!(gate.admit("ns", "a", t0), Some(0));
        assert_eq!(gate.admit("ns", "a", t0 + Duration::from_secs(1)), None);
        assert_eq!(gate.admit("ns", "a", t0 + Duration::from_secs(2)), None);
        assert_eq!(
            gate.admit("ns", "b", t0),
            Some(0),
            "another VPA has its own pace"
        );
        assert_eq!(gate.admit("ns", "a", t0 + EVENT_PERIOD), Some(2));
        assert_eq!(gate.admit("ns", "a", t0 + EVENT_PERIOD), None);
    }

    #[test]
    fn counts_pods_by_outcome() {
        let mut registry = Registry::with_prefix("tailor_admission");
        let report = QuotaReport::new(&mut registry);
        let fit = QuotaFit {
            outcome: QuotaOutcome::Scaled,
            bindings: vec![Binding {
                resource: "cpu",
                quota: "q".into(),
                key: "requests.cpu",
                headroom: 300,
                share: 1 << 15,
            }],
        };
        report.record("ns/web", "", "web-", &fit);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"tailor_admission_quota_fit_pods_total{outcome="scaled"} 1"#),
            "{text}"
        );
    }
}
