//! Integration tests of the shared rules, one binary: conformance vectors, and the examples against the CRD
//! schema and the webhook rules.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod conformance;
mod examples;
