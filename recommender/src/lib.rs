//! The running recommender: watches over VPAs, pods and workloads and an index of the checkpoints; the
//! OOM observer; the loop that feeds the engine ([`tailor_engine`]) and writes VPA status; checkpoints; the
//! leader lease; metrics and health; the `metrics.k8s.io` source and the Prometheus history bootstrap.
//!
//! The modules by role: [`views`] holds what the recommender reads of the cluster (stores, usage sources,
//! OOMs, the cluster view), [`writers`] what it writes (statuses, checkpoints, Events, and their pacing),
//! [`process`] the shell around the loop (flags, settings, the daemon, probes, metrics); the loop itself
//! ([`run_loop`]) with the state its steps share ([`tracked`], [`selection`]) and its first step
//! ([`ingest`]: VPAs, pods, checkpoints, usage and OOMs into the one model, the engine's `ClusterState`)
//! sit at the top, beside fleet onboarding ([`fleet`]) and the dashboard ([`dashboard`]).
//!
//! Each step of the loop plans purely and then applies: [`ingest`], then the status and checkpoint
//! writers ([`writers::status_writer`], [`writers::checkpoint_writer`]); [`run_loop`] runs them in order.
//! Time enters the loop only as a parameter ([`Recommender::run_once`]), so every step can be driven by a
//! test with fixed clocks and a mocked API server. The binary runs them as the [`process::daemon`].

pub mod dashboard;
pub mod error;
pub mod fleet;
pub mod ingest;
pub mod process;
pub mod run_loop;
pub mod selection;
pub mod time;
pub mod tracked;
pub mod views;
pub mod writers;

pub use error::Error;
pub use process::config::ControllerConfig;
pub use process::metrics::Metrics;
pub use run_loop::{LoopReport, Phases, Recommender, Stopped};
pub use views::stores::{Stores, Writers};
