//! Integration tests of the API crate, one binary: conformance vectors, CRD drift, and the examples against
//! the CRD schema and the webhook rules.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod conformance;
mod crd_drift;
mod examples;
