//! The running recommender: watches over VPAs, pods and workloads and an index of the checkpoints; the
//! OOM observer; the loop that feeds the engine ([`tailor_engine`]) and writes VPA status; checkpoints; the
//! leader lease; metrics and health; the `metrics.k8s.io` source and the Prometheus history bootstrap.
//!
//! Each step of the loop plans purely and then applies: [`ingest`] (VPAs, pods, checkpoints, usage and
//! OOMs into the one model, the engine's `ClusterState`), [`status_writer`] and [`checkpoint_writer`];
//! [`run_loop`] runs them in order. Time enters the loop only as a parameter ([`Recommender::run_once`]),
//! so every step can be driven by a test with fixed clocks and a mocked API server. The binary runs
//! them as the [`daemon`].

pub mod checkpoint;
pub mod checkpoint_index;
pub mod checkpoint_writer;
pub mod cluster_view;
pub mod config;
pub mod daemon;
pub mod dashboard;
pub mod error;
pub mod events;
pub mod flags;
pub mod fleet;
pub mod history;
pub mod http;
pub mod ingest;
pub mod job_runs;
pub mod metrics;
pub mod metrics_api;
pub mod metrics_list;
pub mod oom;
pub mod pod_store;
pub mod ratelimit;
pub mod recommendation_metrics;
pub mod run_loop;
pub mod selection;
pub mod settings;
pub mod slim;
pub mod status_writer;
pub mod stores;
pub mod target;
pub mod time;
pub mod tracked;
pub mod watched_vpa;
pub mod write_request;
pub mod written;

pub use config::ControllerConfig;
pub use error::Error;
pub use metrics::Metrics;
pub use run_loop::{LoopReport, Phases, Recommender, Stopped};
pub use stores::{Stores, Writers};
