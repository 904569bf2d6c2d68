//! The process around the loop: flags validated into settings, the daemon that starts the caches and the
//! loop, its probes, and the metrics it exports.

pub mod daemon;
pub mod flags;
pub mod health;
pub mod metrics;
pub mod settings;
