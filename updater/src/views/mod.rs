//! What the updater reads of the cluster: the binary's reflector caches and the compact pods in them, the
//! iteration's reads over them, and the webhook's status Lease.

pub mod cache_view;
pub mod caches;
pub mod lease;
pub mod pods;
