//! Tailor's admission webhook: sets pod requests (and limits, in proportion) from a Tailor VPA's
//! recommendation at pod creation, and validates and defaults Tailor VPA objects.
//!
//! The pure core (`pod`, `vpa`, and the matching of `tailor_kube::index`) never touches a socket or a clock;
//! `server` and `review` carry it over HTTPS. The caches only the webhook keeps are here too: the compact VPA
//! cache (`vpa_cache`) and the live reads of owners the watches have not delivered yet (`live_owners`).
//!
//! The binary is flags (`flags`) → validated `settings` → the `daemon` (cluster mode's caches, or
//! `standalone` mode's manifests; the certificate; the listeners) → run.

mod body_text;
pub mod caches;
pub mod certs;
pub mod daemon;
pub mod flags;
pub mod job_retries;
pub mod live_owners;
pub mod live_reads;
pub mod manifests;
pub mod metrics;
pub mod quota_report;
pub mod review;
pub mod review_budgets;
mod review_wire;
pub mod selfmanaged;
pub mod server;
pub mod settings;
pub mod slim_pod;
pub mod standalone;
pub mod status_lease;
pub mod webhook;

pub mod pod;
pub mod preview;
pub mod vpa;
pub mod vpa_cache;
pub mod vpa_events;
