//! Usage sources for the running recommender. `metrics_api` reads `metrics.k8s.io` (metrics-server);
//! `prometheus` is a Prometheus HTTP API client and `prometheus_history` loads usage history through it.

pub mod metrics_api;
pub mod prometheus;
pub mod prometheus_history;
pub mod prometheus_model;
pub mod prometheus_stream;
