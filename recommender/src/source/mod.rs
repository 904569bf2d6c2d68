//! Usage sources for the running recommender. `metrics_api` reads `metrics.k8s.io` (metrics-server);
//! a Prometheus history source is a later addition.

pub mod metrics_api;
