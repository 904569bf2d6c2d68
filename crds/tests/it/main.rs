//! Integration tests of the API crate, one binary: the committed CRD YAML against the Rust types.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod crd_drift;
