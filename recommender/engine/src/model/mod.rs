//! The cluster model: per-container windows, per-key aggregates, VPAs and garbage collection. Pure: time is
//! always a parameter.

pub mod aggregate;
pub mod cluster_state;
pub mod container;
pub mod fxhash;
mod pod_groups;
pub mod selector;
pub mod time_of_day;

pub use aggregate::{
    AggregateCheckpoint, AggregateContainerState, AggregationsConfig, CheckpointError, SampleSink,
};
pub use cluster_state::{
    ClusterState, ContainerId, ContainerRef, FEED_SAMPLES, ModelError, OomBump, OpenWindow,
    PodPhase, SAMPLE_BATCH, Sample, UsagePair, VpaCheckpoint, VpaState,
};
pub use container::{ContainerState, SampleRejected};
pub use selector::{Labels, Selector};
pub use time_of_day::{DailyPattern, HourlyCpu};
