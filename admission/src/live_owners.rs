//! Live reads of well-known controllers the reflector caches do not hold yet. The first pods of a new
//! ReplicaSet (a rollout) or Job (a CronJob run) reach the webhook before the watch event of their owner;
//! without this they would be admitted unsized. One bounded `GET` answers, and its answer is remembered
//! briefly.
//!
//! Bounds, since the webhook's port has no client authentication and owner references come from the review:
//! each read waits at most [`ReadSettings::timeout`], at most [`ReadSettings::in_flight`] reads run
//! at once and [`ReadSettings::per_second`] start per second (a lookup over either bound is answered
//! "unknown" at once), answers — "absent" included — are remembered for [`ReadSettings::ttl`], and at
//! most [`MAX_REMEMBERED`] of them. Lookups of an owner already being read wait for that read instead of
//! starting their own (or being shed): a burst of pods of one new ReplicaSet costs one read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ReplicationController;
use kube::{Api, Client};

use tailor_core::target::{WorkloadInfo, workload_info};
use tailor_core::workload::{SlimWorkload, WorkloadKind};
use tailor_kube::index::{OwnerAnswer, OwnerFallback};

use crate::live_reads::{AnswerMemo, ReadGate, ReadSettings, can_block};

/// Answers remembered at most.
pub const MAX_REMEMBERED: usize = 4_096;

/// The owner reads' bounds: a second per read, two at once, twenty a second, answers reused for 30 s.
pub const OWNER_READS: ReadSettings = ReadSettings {
    timeout: Duration::from_secs(1),
    in_flight: 2,
    per_second: 20,
    ttl: Duration::from_secs(30),
};

/// What the live reads did, for metrics and logs.
#[derive(Debug, Default)]
pub struct LiveOwnerStats {
    /// Reads that found the controller.
    pub found: AtomicU64,
    /// Reads that found it absent (404).
    pub absent: AtomicU64,
    /// Reads that failed or timed out.
    pub failed: AtomicU64,
    /// Lookups not read because a bound was reached.
    pub shed: AtomicU64,
    /// Lookups answered by a read already in flight for the same owner.
    pub joined: AtomicU64,
}

/// A read in flight: its answer once done.
#[derive(Default)]
struct Flight {
    answer: Mutex<Option<OwnerAnswer>>,
    done: Condvar,
}

type Key = (String, String, String);

/// The fallback: cheap to share behind an `Arc`.
pub struct LiveOwners {
    client: Client,
    runtime: tokio::runtime::Handle,
    settings: ReadSettings,
    remembered: AnswerMemo<Key, Option<WorkloadInfo>>,
    flights: Mutex<HashMap<Key, Arc<Flight>>>,
    gate: ReadGate,
    stats: LiveOwnerStats,
}

impl LiveOwners {
    /// Reads through `client` on `runtime` (the server's runtime: reviews block their own thread only).
    pub fn new(client: Client, runtime: tokio::runtime::Handle, settings: ReadSettings) -> Self {
        Self {
            client,
            runtime,
            settings,
            remembered: AnswerMemo::new(settings.ttl, MAX_REMEMBERED),
            flights: Mutex::default(),
            gate: ReadGate::new(&settings),
            stats: LiveOwnerStats::default(),
        }
    }

    /// Found / absent / failed / shed counts.
    pub fn stats(&self) -> &LiveOwnerStats {
        &self.stats
    }

    async fn read(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<WorkloadInfo>, kube::Error> {
        async fn get<K: WorkloadKind + std::fmt::Debug>(
            client: &Client,
            namespace: &str,
            name: &str,
        ) -> Result<Option<WorkloadInfo>, kube::Error>
        where
            SlimWorkload<K>: serde::de::DeserializeOwned,
        {
            let api: Api<SlimWorkload<K>> = Api::namespaced(client.clone(), namespace);
            Ok(api.get_opt(name).await?.map(|o| workload_info(&o)))
        }
        let c = &self.client;
        match kind {
            "Deployment" => get::<Deployment>(c, namespace, name).await,
            "ReplicaSet" => get::<ReplicaSet>(c, namespace, name).await,
            "StatefulSet" => get::<StatefulSet>(c, namespace, name).await,
            "DaemonSet" => get::<DaemonSet>(c, namespace, name).await,
            "Job" => get::<Job>(c, namespace, name).await,
            "CronJob" => get::<CronJob>(c, namespace, name).await,
            "ReplicationController" => get::<ReplicationController>(c, namespace, name).await,
            _ => Ok(None),
        }
    }
}

impl LiveOwners {
    /// Looks up the well-known `kind` `namespace/name` missing from the caches: remembered, else read
    /// within the bounds (joining a read of the same owner already in flight), with why it was not found.
    pub fn answer(&self, kind: &str, namespace: &str, name: &str) -> OwnerAnswer {
        let key = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        if let Some(info) = self.remembered.get(&key) {
            return info.map_or(OwnerAnswer::Absent, OwnerAnswer::Found);
        }
        if !can_block() {
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            return OwnerAnswer::Shed;
        }
        let (flight, slot) = {
            let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
            match flights.get(&key) {
                Some(flight) => (flight.clone(), None),
                None => {
                    let Some(slot) = self.gate.enter() else {
                        self.stats.shed.fetch_add(1, Ordering::Relaxed);
                        return OwnerAnswer::Shed;
                    };
                    let flight = Arc::new(Flight::default());
                    flights.insert(key.clone(), flight.clone());
                    (flight, Some(slot))
                }
            }
        };
        let Some(slot) = slot else {
            self.stats.joined.fetch_add(1, Ordering::Relaxed);
            return self.wait_for(&flight);
        };
        let answer = self.read_bounded(kind, namespace, name, &key);
        drop(slot);
        *flight.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer.clone());
        flight.done.notify_all();
        self.flights
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        answer
    }

    /// Waits (at most a read's timeout, and a little) for the answer of a read another lookup started.
    fn wait_for(&self, flight: &Flight) -> OwnerAnswer {
        let wait = self.settings.timeout + Duration::from_millis(100);
        tokio::task::block_in_place(|| {
            let answer = flight.answer.lock().unwrap_or_else(PoisonError::into_inner);
            let (answer, _) = flight
                .done
                .wait_timeout_while(answer, wait, |a| a.is_none())
                .unwrap_or_else(PoisonError::into_inner);
            answer.clone().unwrap_or(OwnerAnswer::Failed)
        })
    }

    /// One admitted read, bounded by the timeout; counted, logged and remembered.
    fn read_bounded(&self, kind: &str, namespace: &str, name: &str, key: &Key) -> OwnerAnswer {
        let read = async {
            tokio::time::timeout(self.settings.timeout, self.read(kind, namespace, name)).await
        };
        // Blocks this review's thread only: on a runtime worker the others take over its tasks meanwhile.
        let answer = tokio::task::block_in_place(|| self.runtime.block_on(read));
        let target = || format!("{kind} {namespace}/{name}");
        match answer {
            Ok(Ok(info)) => {
                let counter = if info.is_some() {
                    &self.stats.found
                } else {
                    &self.stats.absent
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(controller = %tailor_core::text::capped(&target()), found = info.is_some(),
                    "owner missing from the cache; read it from the API server");
                self.remembered.put(key.clone(), info.clone());
                info.map_or(OwnerAnswer::Absent, OwnerAnswer::Found)
            }
            Ok(Err(e)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(controller = %tailor_core::text::capped(&target()), error = %e, "owner read failed");
                OwnerAnswer::Failed
            }
            Err(_) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(controller = %tailor_core::text::capped(&target()), "owner read timed out");
                OwnerAnswer::Failed
            }
        }
    }
}

impl OwnerFallback for LiveOwners {
    fn lookup(&self, kind: &str, namespace: &str, name: &str) -> OwnerAnswer {
        self.answer(kind, namespace, name)
    }
}
