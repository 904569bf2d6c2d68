//! Events the recommender records on VPAs (events.k8s.io, through kube-runtime's recorder): only for what
//! an operator must act on — today a checkpoint that could not be restored. Bounded per loop; a standby
//! (not holding the leader lease) records none.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Events recorded per loop at most; the rest are only counted in the loop's log line.
pub const EVENTS_PER_LOOP: usize = 16;
/// How long one event may take before it is given up.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest note kept (the API allows 1 KiB).
const NOTE_BYTES: usize = 1000;

/// A Warning event on a VPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VpaEvent {
    /// Namespace of the VPA.
    pub namespace: String,
    /// Name of the VPA.
    pub name: String,
    /// `metadata.uid` of the VPA (empty when unknown).
    pub uid: String,
    /// Machine-readable reason, e.g. `CheckpointSkipped`.
    pub reason: &'static str,
    /// Human-readable note (cut to [`NOTE_BYTES`]).
    pub note: String,
}

/// Records events as the recommender (`reportingController: tailor-recommender`).
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
}

impl EventSink {
    /// A sink reporting as this process (`POD_NAME` as the instance).
    pub fn new(client: Client) -> Self {
        EventSink {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "tailor-recommender".into(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            ),
        }
    }

    /// Records up to [`EVENTS_PER_LOOP`] of `events`, each within a timeout; returns how many were recorded.
    pub async fn record(&self, events: &[VpaEvent]) -> usize {
        let mut recorded = 0;
        for e in events.iter().take(EVENTS_PER_LOOP) {
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
                reason: e.reason.into(),
                note: Some(cut(&e.note, NOTE_BYTES)),
                action: "Restore".into(),
                secondary: None,
            };
            match tokio::time::timeout(PUBLISH_TIMEOUT, self.recorder.publish(&event, &reference))
                .await
            {
                Ok(Ok(())) => recorded += 1,
                Ok(Err(error)) => tracing::debug!(%error, vpa = %e.name, "event not recorded"),
                Err(_) => tracing::debug!(vpa = %e.name, "event not recorded in time"),
            }
        }
        recorded
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

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut(&"x".repeat(2000), NOTE_BYTES).len(), NOTE_BYTES);
    }
}
