//! Tailor's updater: brings running pods to their recommendation, in place through `pods/resize` or by
//! eviction, within disruption budgets and rate limits (docs/design/upstream-updater.md).
//!
//! The decisions are pure (time is a parameter): [`priority`] and [`calculator`] (which pods, in which
//! order), [`eviction_admission`] (`evictionRequirements`), [`restriction`] (budgets per controller group,
//! in-place decisions and fallbacks), [`resize`] (the resize and annotation patches), [`lease`] (is the
//! webhook alive), the token bucket (`tailor_kube::rate`). [`iteration`] runs one pass over injected lookups and actions; the
//! binary's [`cache_view`] and [`api_actuator`] supply the caches and the API, `tailor plan` a snapshot.
//!
//! The binary itself is flags ([`flags::Flags`]) → validated [`settings`] → the [`daemon`] (its [`caches`]
//! and [`health`] endpoints) → run.

pub mod api_actuator;
pub mod cache_view;
pub mod caches;
pub mod calculator;
pub mod conditions;
pub mod config;
pub mod conflicts;
pub mod daemon;
pub mod event_queue;
pub mod events;
pub mod eviction_admission;
pub mod flags;
pub mod gate;
pub mod health;
pub mod infeasible;
pub mod iteration;
pub mod lease;
pub mod metrics;
pub mod modes;
pub mod pods;
pub mod preview;
pub mod priority;
pub mod qos;
pub mod quota;
pub mod replacements;
pub mod resize;
pub mod resize_check;
pub mod restriction;
pub mod run_loop;
pub mod scope;
pub mod settings;
pub mod sizing;
pub mod skip;
pub mod upstream;

/// The hash map of the updater's per-iteration tables: foldhash, seeded per process (the default SipHash
/// took a fifth of an iteration).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
