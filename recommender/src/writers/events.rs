//! Events the recommender records on VPAs (Warning, events.k8s.io): only for what an operator must act on —
//! today a checkpoint that could not be restored. They go out through the loop's [`Writes`], like every
//! other write; bounded per loop; a standby (not holding the leader lease) records none.

use tailor_kube::vpa_event::VpaEvent;

use crate::writers::edge::Writes;

/// Events recorded per loop at most; the rest are only counted in the loop's log line.
pub const EVENTS_PER_LOOP: usize = 16;

/// Records up to [`EVENTS_PER_LOOP`] of `events` for `action` through `writes`; how many were recorded.
pub async fn record(writes: &dyn Writes, events: &[VpaEvent], action: &'static str) -> usize {
    let mut recorded = 0;
    for e in events.iter().take(EVENTS_PER_LOOP) {
        if writes.record_event(e, action).await {
            recorded += 1;
        }
    }
    recorded
}
