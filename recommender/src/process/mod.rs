//! The process around the loop: flags validated into settings, the daemon that starts the watches, the
//! leader election and the loop, its probes, and the metrics it exports.

pub mod config;
pub mod daemon;
pub mod flags;
pub mod http;
pub mod metrics;
pub mod recommendation_metrics;
pub mod settings;
