//! Integration tests of the recommender controller, one binary: the loop against a mocked API server,
//! the leader lease, and the recommender conformance vectors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod controller;
mod lease;
mod support;
mod unit_vectors;
