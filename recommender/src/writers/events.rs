//! Events the recommender records on VPAs (events.k8s.io, through kube-runtime's recorder): only for what
//! an operator must act on — today a checkpoint that could not be restored. Bounded per loop; a standby
//! (not holding the leader lease) records none.

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tailor_kube::vpa_event::VpaEvent;

/// Events recorded per loop at most; the rest are only counted in the loop's log line.
pub const EVENTS_PER_LOOP: usize = 16;

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
            if e.publish(&self.recorder, "Restore").await {
                recorded += 1;
            }
        }
        recorded
    }
}
