//! Integration tests of the admission webhook, one binary: conformance against upstream's vectors, pod-patch
//! properties, and the real HTTPS server (admission, HTTP rules, reflectors, self-managed certificates,
//! certificate rotation, the binary itself).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod conformance_diff;
mod conformance_support;
mod conformance_unit;
mod fuzz;
mod proptest_pod;
mod server_admission;
mod server_binary;
mod server_common;
mod server_http;
mod server_live_owner;
mod server_reflectors;
mod server_scale;
mod server_selfmanaged;
mod slim_pod;
mod status_lease;
mod tls_rotation;
