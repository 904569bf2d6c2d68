//! Integration tests of the recommender controller, one binary: the loop against the stand-in API server,
//! the leader lease, the history bootstrap against a faulty Prometheus stub, and the recommender conformance
//! vectors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod checkpoint_faults;
mod checkpoint_names;
mod clock;
mod controller;
mod fleet;
mod harness;
mod history_faults;
mod history_restored;
mod job_runs;
mod lease;
mod restarts;
mod retarget;
mod unit_vectors;
mod writes;
