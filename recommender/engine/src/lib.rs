//! Tailor's recommendation engine: sparse decaying histograms, the cluster model, upstream's estimators, policy
//! capping, deterministic replay of usage traces, and trace parsing.
//!
//! Pure: data flows one way (samples → [`model`] → [`estimate`] → [`policy`]) and nothing here reads a clock, a
//! socket or a kube client — time is always a parameter. The crate has no tokio, hyper or kube client
//! dependency; clap only behind the `flags` feature ([`estimate_flags`]).

pub mod backtest;
pub mod backtest_workloads;
pub mod bench_workload;
pub mod day_plan;
pub mod estimate;
#[cfg(feature = "flags")]
pub mod estimate_flags;
pub mod histogram;
pub mod model;
pub mod policy;
pub mod profile;
pub mod quantity;
pub mod replay;
pub mod risk_price;
pub mod samples;
pub mod stable_memory;
pub mod trace;
pub mod units;
