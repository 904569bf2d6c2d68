//! Cross-component tests that run here: the stand-in API server against a real kube-rs client
//! ([`standin`]), and the real binaries against the stand-in ([`binaries`], [`lease`], [`updater`],
//! [`custom_kinds`], [`admission_paths`]), and ARCHITECTURE.md, README.md's Layout and what the prose says
//! depends on what against the repository and its Cargo manifests ([`architecture`]). The e2e suite is the
//! separate `e2e` test binary (it needs a cluster).
//!
//! ```sh
//! cargo build -p tailor-recommender -p tailor-admission -p tailor-updater   # the binaries the tests start
//! cargo test -p tailor-tests --test it
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod admission_paths;
mod architecture;
mod bad_checkpoints;
mod binaries;
mod custom_kinds;
mod dashboard;
mod dry_run;
mod fleet;
mod job_retries;
mod job_runs;
mod lease;
mod plan_parity;
mod recommend_parity;
mod standin;
mod updater;
