//! What the recommender writes, at the edge: VPA statuses, checkpoints (and their format), Events, the
//! write pacing, and what it remembers of its writes.

pub mod checkpoint;
pub mod checkpoint_writer;
pub mod edge;
pub mod events;
pub mod ratelimit;
pub mod status_writer;
pub mod write_request;
pub mod written;
