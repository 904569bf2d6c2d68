//! Shared helpers for Tailor cross-component tests: the stand-in API server ([`standin`]) that lets the real
//! binaries run here, the harness that starts them against it ([`process`]), a stub Prometheus HTTP API
//! with faults ([`prom_stub`], for the recommender's and the CLI's tests), and workloads of realistic size
//! for benchmarks ([`workload_objects`]).

pub mod process;
pub mod prom_stub;
pub mod small_workload;
pub mod standin;
pub mod workload_objects;
