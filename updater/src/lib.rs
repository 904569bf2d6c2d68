//! Tailor's updater: brings running pods to their recommendation, in place through `pods/resize` or by
//! eviction, within disruption budgets and rate limits (docs/design/upstream-updater.md).
//!
//! The modules by role. The decisions are pure (time is a parameter) and sit in [`decisions`]:
//! [`decisions::priority`] and [`decisions::calculator`] (which pods, in which order),
//! [`decisions::eviction_admission`] (`evictionRequirements`), [`decisions::restriction`] (budgets per
//! controller group, in-place decisions and fallbacks), [`decisions::resize`] (the resize and annotation
//! patches), with the token bucket (`tailor_kube::rate`). [`iteration`] runs one pass over injected lookups
//! and actions; what the binary reads sits in [`views`] ([`views::cache_view`] over its [`views::caches`];
//! [`views::lease`]: is the webhook alive), what it writes in [`writers`] ([`writers::api_actuator`]);
//! `tailor plan` supplies a snapshot instead ([`preview`]).
//!
//! The binary itself is in [`process`]: flags ([`process::flags::Flags`]) → validated
//! [`process::settings`] → the [`process::daemon`] (its caches and [`process::health`] endpoints) → run
//! ([`run_loop`]).

pub mod decisions;
pub mod iteration;
pub mod preview;
pub mod process;
pub mod run_loop;
pub mod views;
pub mod writers;

/// The hash map of the updater's per-iteration tables: foldhash, seeded per process (the default SipHash
/// took a fifth of an iteration).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
