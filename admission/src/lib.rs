//! Tailor's admission webhook: sets pod requests (and limits, in proportion) from a Tailor VPA's
//! recommendation at pod creation, and validates and defaults Tailor VPA objects.
//!
//! The pure core (`pod`, `vpa`, `index` matching) never touches a socket or a clock; `server` and `review`
//! carry it over HTTPS.
pub mod certs;
pub mod cluster;
pub mod limits;
pub mod manifests;
pub mod metrics;
pub mod review;
pub mod selfmanaged;
pub mod server;
pub mod status_lease;
pub mod webhook;

pub use tailor_crds::cluster::index;
pub use tailor_crds::limitrange;
pub mod pod;
pub mod preview;
pub mod vpa;
