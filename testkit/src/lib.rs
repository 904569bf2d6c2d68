//! Test support that every crate's tests share, and that no shipped crate links (only dev-dependencies):
//! fluent builders for the objects tests are made of ([`fixtures`]), and typed API scenarios (module
//! `scenario`, behind feature `scenario`).
//!
//! It depends on no Tailor crate but the API types (`tailor-crds`; `kube`'s client only for the scenarios), so
//! the unit tests of `tailor-core` and of every crate above it can use it without a second copy of their own
//! types, and without building kube's client unless they ask for the scenarios.

/// The conformance figures, printed and kept for the suite's summary.
pub mod conformance;
pub mod fixtures;
/// Typed API scenarios: a `kube::Client` whose API server is the test (named scenarios, steps, stateful fakes).
#[cfg(feature = "scenario")]
pub mod scenario;
