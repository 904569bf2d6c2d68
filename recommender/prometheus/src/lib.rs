//! Usage history from Prometheus-compatible stores (Prometheus, VictoriaMetrics, Thanos, Mimir, …).
//!
//! - [`client`]: the HTTP API client (TLS, auth, timeouts, retries) with a streaming response decoder.
//! - [`stream`]: the incremental JSON splitter behind it, one series at a time.
//! - [`history`]: the PromQL, batching and windowing plan that loads history through the client.
//! - [`feeder`]: the pure step of a load: series in, samples out (CPU counter differencing, watermarks).
//! - [`owners`]: workloads from kube-state-metrics owner series.
//! - `flags` (feature `flags`): `PrometheusFlags`, the flag group both front ends share.
//! - [`sigv4`]: AWS SigV4 request signing (Amazon Managed Prometheus) with the standard credential chain.
//! - [`model_sink`]: feeding loaded samples into the engine's model.
//! - [`run_peak`]: the peak of one finished run of a container (a Job's pod), one query at its end.

pub mod client;
pub mod feeder;
#[cfg(feature = "flags")]
pub mod flags;
pub mod history;
pub mod model_sink;
pub mod owners;
mod proxy;
pub mod run_peak;
pub mod sigv4;
pub mod stream;
