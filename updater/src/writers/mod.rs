//! What the updater writes, at the edge: evictions and resizes through the API, and Events through a bounded
//! queue.

pub mod api_actuator;
pub mod event_queue;
pub mod events;
