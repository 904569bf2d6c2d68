//! Cross-component tests that run here: the stand-in API server against a real kube-rs client
//! ([`standin`]). The kind e2e suite is the separate `e2e` test binary (it needs a cluster).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod standin;
