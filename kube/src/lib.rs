//! Cluster plumbing the binaries share: watches feeding compact caches of the well-known workload kinds
//! ([`workload_cache`]) over one storage ([`shelf`]), started for each binary by one [`reflector_set`];
//! the `/scale` lookup for other kinds ([`scale`], [`scale_cache`]), pod → VPA matching ([`index`], shared
//! by the webhook and the updater), the one writer of Leases ([`lease`]: leader election, [`leader`], and the
//! webhook's status Lease), the one admin server of the daemons ([`admin`]), and the flag groups for the
//! Kubernetes client, logging, the listen address, shutdown and the pod floor; the one reader of manifest
//! files and snapshots ([`manifests`]).

pub mod admin;
pub mod client;
pub mod floor_flags;
pub mod index;
pub mod leader;
pub mod lease;
pub mod listen;
pub mod log;
pub mod manifests;
pub mod quota_cache;
pub mod rate;
pub mod reflector_set;
pub mod reflectors;
pub mod scale;
pub mod scale_cache;
pub mod shelf;
pub mod shutdown;
pub mod upstream_vpa;
pub mod vpa_event;
pub mod workload_cache;
