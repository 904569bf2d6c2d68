//! Cluster plumbing both binaries share (feature `kube`): reflectors over the well-known workload kinds
//! in their slim form ([`crate::workload`]), the `/scale` lookup for other kinds ([`scale`]), pod → VPA matching ([`index`],
//! shared by the webhook and the updater), and the flag
//! groups for the Kubernetes client, logging, the listen address and shutdown.

pub mod client;
pub mod index;
pub mod leader;
pub mod listen;
pub mod live_owners;
pub mod log;
pub mod reflectors;
pub mod scale;
pub mod scale_cache;
pub mod shelf;
pub mod shutdown;
pub mod vpa_cache;
pub mod workload_cache;
