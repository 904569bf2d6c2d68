//! Integration tests of tailor-updater (its conformance with upstream's updater vectors is in tailor-conformance).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod budgets;
mod fixtures;
mod limit_policy;
mod loop_api;
mod quota_fit;
mod resize_refusals;
mod snapshot_scope;
mod upstream_sized;
