//! A Warning Event on a Tailor VPA (events.k8s.io, through kube-runtime's recorder), as the recommender and
//! the webhook write them: the note cut to what the API allows, each write within a timeout.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// How long one event may take before it is given up.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest note kept (the API allows 1 KiB).
pub const NOTE_BYTES: usize = 1000;

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

impl VpaEvent {
    /// Writes the event through `recorder` with `action` (e.g. `Restore`, `Admit`), within a timeout;
    /// whether it was recorded (failures are logged at debug level).
    pub async fn publish(&self, recorder: &Recorder, action: &str) -> bool {
        self.publish_related(recorder, action, None).await
    }

    /// [`VpaEvent::publish`] with a `related` object (the Event's second object). The recorder folds events
    /// with the same VPA, reason, action and related object into one series, so a related object also keeps
    /// events about different objects apart.
    pub async fn publish_related(
        &self,
        recorder: &Recorder,
        action: &str,
        related: Option<ObjectReference>,
    ) -> bool {
        let reference = ObjectReference {
            api_version: Some("autoscaling.tailor.dev/v1".into()),
            kind: Some("VerticalPodAutoscaler".into()),
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: (!self.uid.is_empty()).then(|| self.uid.clone()),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: self.reason.into(),
            note: Some(cut(&self.note, NOTE_BYTES)),
            action: action.into(),
            secondary: related,
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &reference)).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::debug!(%error, vpa = %self.name, reason = self.reason, "event not recorded");
                false
            }
            Err(_) => {
                tracing::debug!(vpa = %self.name, reason = self.reason, "event not recorded in time");
                false
            }
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

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut(&"x".repeat(2000), NOTE_BYTES).len(), NOTE_BYTES);
    }
}
