//! Leader election on a `coordination.k8s.io/v1` Lease (create when absent, renew while held, take over
//! when expired; optimistic concurrency through `resourceVersion`).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// Nanoseconds since the Unix epoch.
type Nanos = i64;

fn from_timestamp(t: Timestamp) -> Option<Nanos> {
    i64::try_from(t.as_nanosecond()).ok()
}

fn to_micro_time(t: Nanos) -> Option<MicroTime> {
    Timestamp::from_nanosecond(i128::from(t))
        .ok()
        .map(MicroTime)
}

/// The recommender's lease name (upstream's is `vpa-recommender-lease`, so both can run side by side).
pub const DEFAULT_LEASE_NAME: &str = "tailor-recommender";

/// How a held lease was lost.
#[derive(Debug, thiserror::Error)]
pub enum LeaseLost {
    /// Another replica holds the lease.
    #[error("leader election: lease {namespace}/{lease} taken by another replica")]
    Taken {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
    },
    /// The lease could not be renewed within the renew deadline.
    #[error("leader election: lease {namespace}/{lease} not renewed within the deadline: {source}")]
    Renewal {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
        /// The last renewal failure.
        #[source]
        source: kube::Error,
    },
}

/// Lease parameters.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// Lease object name.
    pub name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a lease is valid after its last renewal (15s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up (10s).
    pub renew_deadline: Duration,
    /// Time between attempts (2s).
    pub retry_period: Duration,
}

/// Acquires, renews and releases the lease.
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn wall_now() -> Nanos {
    from_timestamp(k8s_openapi::jiff::Timestamp::now()).unwrap_or(0)
}

impl LeaderElector {
    /// An elector for `settings` through `client`.
    pub fn new(client: Client, settings: LeaseSettings) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.settings.lease_duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1)
    }

    /// One attempt at time `now`: creates the lease if absent, renews it if held, takes it over if it
    /// expired. Returns whether this replica holds the lease afterwards.
    pub async fn try_acquire_or_renew(&self, now: Nanos) -> Result<bool, kube::Error> {
        let me = self.settings.identity.clone();
        let stamp = to_micro_time(now);
        let pp = PostParams::default();
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: stamp.clone(),
                    renew_time: stamp,
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&pp, &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != me {
            let renewed = spec
                .renew_time
                .as_ref()
                .and_then(|t| from_timestamp(t.0))
                .unwrap_or(0);
            let valid_for = i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1_000_000_000;
            if !holder.is_empty() && renewed.saturating_add(valid_for) > now {
                return Ok(false);
            }
            spec.holder_identity = Some(me);
            spec.acquire_time = stamp.clone();
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = stamp;
        spec.lease_duration_seconds = Some(self.duration_secs());
        lease.spec = Some(spec);
        match self.api.replace(&self.settings.name, &pp, &lease).await {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew(wall_now()).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.settings.name, "lease attempt failed")
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the lease every retry period; returns when it could not be renewed within the renew
    /// deadline, or another replica took it.
    pub async fn hold(&self) -> LeaseLost {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.try_acquire_or_renew(wall_now()).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    return LeaseLost::Taken {
                        namespace: self.settings.namespace.clone(),
                        lease: self.settings.name.clone(),
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lease renewal failed");
                    if last_ok.elapsed() > self.settings.renew_deadline {
                        return LeaseLost::Renewal {
                            namespace: self.settings.namespace.clone(),
                            lease: self.settings.name.clone(),
                            source: e,
                        };
                    }
                }
            }
        }
    }

    /// Gives the lease up (holder cleared, 1s duration) if this replica holds it.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = to_micro_time(wall_now());
        lease.spec = Some(spec);
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}
