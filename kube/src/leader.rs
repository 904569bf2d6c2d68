//! Leader election on a `coordination.k8s.io/v1` Lease (create when absent, renew while held, take over
//! when expired; optimistic concurrency through `resourceVersion`).
//!
//! Expiry is judged the way client-go judges it: by the **local** monotonic time at which this replica last
//! saw the lease record change, never by comparing the holder's `renewTime` with the local wall clock (two
//! clocks that disagree by more than the lease duration would otherwise give two leaders, or none).
//!
//! Every API call has a timeout of its own ([`LeaseSettings::call_timeout`]), and a renewal attempt never
//! outlives the renew deadline, so a hung connection trips the deadline instead of keeping a stale leader.
//! The [`Fence`] of an elector tells writers whether they may write: it allows writes only until the renew
//! deadline of the last successful renewal, and stops allowing them the moment the lease is lost or released.
//!
//! The reads and writes themselves are [`crate::lease`]'s; this module adds the holder, expiry and fencing.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

pub use crate::lease::LeaseError;
use crate::lease::{LeaseWriter, Stamp, Written};

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
        source: LeaseError,
    },
}

/// Settings that cannot work together.
#[derive(Debug, thiserror::Error)]
#[error(
    "leader election needs lease duration ({lease_duration:?}) > renew deadline ({renew_deadline:?}) > retry period ({retry_period:?}) > 0"
)]
pub struct InvalidLeaseSettings {
    /// `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: Duration,
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

impl LeaseSettings {
    /// Checks `lease duration > renew deadline > retry period > 0` (client-go's rule): a leader must give up
    /// before another replica may take over.
    pub fn validate(&self) -> Result<(), InvalidLeaseSettings> {
        if self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero()
        {
            Ok(())
        } else {
            Err(InvalidLeaseSettings {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            })
        }
    }

    /// Timeout of each API call: the retry period, at most the renew deadline, at least 1 s.
    pub fn call_timeout(&self) -> Duration {
        self.retry_period
            .max(Duration::from_secs(1))
            .min(self.renew_deadline.max(Duration::from_millis(1)))
    }
}

/// The leader-election flag group of every binary that elects a leader, with upstream's names
/// (`--leader-elect-resource-name` and `--leader-elect-resource-namespace` are aliases). The lease name and
/// the identity default to [`DEFAULT_LEASE_NAME`]; a binary with a lease of its own sets both defaults with
/// clap's `mut_arg`.
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderFlags {
    /// Run only while holding the leader lease.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the Lease object.
    #[arg(long, alias = "leader-elect-resource-name", default_value = DEFAULT_LEASE_NAME)]
    pub leader_elect_lease_name: String,
    /// Namespace of the Lease (default: `$NAMESPACE`, else `kube-system`).
    #[arg(
        long,
        alias = "leader-elect-resource-namespace",
        env = "NAMESPACE",
        default_value = "kube-system"
    )]
    pub leader_elect_lease_namespace: String,
    /// Lease validity after a renewal.
    #[arg(long, value_parser = flag_duration, default_value = "15s")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before giving up.
    #[arg(long, value_parser = flag_duration, default_value = "10s")]
    pub leader_elect_renew_deadline: Duration,
    /// Time between lease attempts.
    #[arg(long, value_parser = flag_duration, default_value = "2s")]
    pub leader_elect_retry_period: Duration,
    /// Identity in the lease (default: `$POD_NAME`).
    #[arg(long, env = "POD_NAME", default_value = DEFAULT_LEASE_NAME)]
    pub leader_elect_identity: String,
}

/// A duration flag (`15s`, `1m30s`); zero is refused by [`LeaseSettings::validate`], not here.
fn flag_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

impl LeaderFlags {
    /// The lease the flags describe.
    pub fn settings(&self) -> LeaseSettings {
        LeaseSettings {
            name: self.leader_elect_lease_name.clone(),
            namespace: self.leader_elect_lease_namespace.clone(),
            identity: self.leader_elect_identity.clone(),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// With `--leader-elect`, the lease settings, validated; without it, `None` (no election).
    pub fn validated(&self) -> Result<Option<LeaseSettings>, InvalidLeaseSettings> {
        if !self.leader_elect {
            return Ok(None);
        }
        let settings = self.settings();
        settings.validate()?;
        Ok(Some(settings))
    }
}

/// What identifies one version of the lease record: when it changes, its holder is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<MicroTime>,
    acquire_time: Option<MicroTime>,
    transitions: Option<i32>,
    duration_secs: Option<i32>,
    resource_version: Option<String>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            renew_time: spec.renew_time,
            acquire_time: spec.acquire_time,
            transitions: spec.lease_transitions,
            duration_secs: spec.lease_duration_seconds,
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// The record last seen and the local time at which it was first seen in that version.
#[derive(Debug, Clone)]
struct Observed {
    record: Record,
    at: Instant,
}

/// Whether writes are allowed: `Some(until)` while the lease is held (until the renew deadline of the last
/// successful renewal), `None` otherwise.
type Holding = Option<Instant>;

/// Tells writers whether this replica may write. Cheap to clone; every clone sees the elector's changes.
#[derive(Clone, Debug)]
pub struct Fence {
    rx: Option<watch::Receiver<Holding>>,
}

impl Fence {
    /// A fence that always allows writes (no leader election).
    pub fn unfenced() -> Fence {
        Fence { rx: None }
    }

    /// Whether a write may go out now: always without leader election; otherwise only while the lease is
    /// held and its last renewal is younger than the renew deadline.
    pub fn allows_writes(&self) -> bool {
        match &self.rx {
            None => true,
            Some(rx) => rx.borrow().is_some_and(|until| Instant::now() < until),
        }
    }

    /// Resolves once writes are no longer allowed (the lease was lost, released, or not renewed in time);
    /// never without leader election.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let rx = self.rx.clone();
        async move {
            let Some(mut rx) = rx else {
                std::future::pending::<()>().await;
                return;
            };
            loop {
                let holding = *rx.borrow_and_update();
                let Some(until) = holding else {
                    return;
                };
                if Instant::now() >= until {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Acquires, renews and releases the lease.
pub struct LeaderElector {
    writer: LeaseWriter,
    settings: LeaseSettings,
    observed: Mutex<Option<Observed>>,
    holding: watch::Sender<Holding>,
}

/// The lease as written when this replica holds it after the write; `None` when another writer got there
/// first.
fn held(written: Written) -> Option<Lease> {
    match written {
        Written::Created(lease) | Written::Replaced(lease) => Some(lease),
        Written::Conflict(_) => None,
    }
}

fn wall_now() -> Nanos {
    from_timestamp(Timestamp::now()).unwrap_or(0)
}

impl LeaderElector {
    /// An elector for `settings` through `client`.
    pub fn new(client: Client, settings: LeaseSettings) -> Self {
        LeaderElector {
            writer: LeaseWriter::new(client, &settings.namespace, &settings.name)
                .with_call_timeout(settings.call_timeout()),
            settings,
            observed: Mutex::new(None),
            holding: watch::Sender::new(None),
        }
    }

    /// The fence writers check before each write.
    pub fn fence(&self) -> Fence {
        Fence {
            rx: Some(self.holding.subscribe()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// What this replica writes on each acquisition or renewal at `now`.
    fn stamp(&self, now: Nanos) -> Stamp {
        Stamp {
            holder: Some(self.settings.identity.clone()),
            duration_seconds: crate::lease::duration_seconds(self.settings.lease_duration),
            renew_time: to_micro_time(now),
        }
    }

    /// Writes are allowed until this long after the start of a successful renewal.
    fn holding_for(&self) -> Duration {
        self.settings
            .renew_deadline
            .min(self.settings.lease_duration)
    }

    fn stop_holding(&self) {
        self.holding.send_replace(None);
    }

    /// Remembers `lease` as seen at `at`; returns the local time since which its record is unchanged.
    fn observe(&self, lease: &Lease, at: Instant) -> Instant {
        let record = Record::of(lease);
        let mut observed = self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match observed.as_ref() {
            Some(o) if o.record == record => o.at,
            _ => {
                *observed = Some(Observed { record, at });
                at
            }
        }
    }

    /// One attempt; `now` (wall clock) is written as `renewTime` (and `acquireTime` on take-over): creates
    /// the lease if absent, renews it if held, takes it over if its holder is empty or its record has not
    /// changed for the record's lease duration of local time. Returns whether this replica holds the lease
    /// afterwards, and moves the [`Fence`] accordingly.
    pub async fn try_acquire_or_renew(&self, now: Nanos) -> Result<bool, LeaseError> {
        let start = Instant::now();
        let held = self.attempt(now, start).await;
        match &held {
            Ok(Some(lease)) => {
                self.observe(lease, Instant::now());
                self.holding.send_replace(Some(start + self.holding_for()));
            }
            Ok(None) => self.stop_holding(),
            Err(_) => {}
        }
        held.map(|l| l.is_some())
    }

    /// The attempt: the lease as written when this replica holds it afterwards.
    async fn attempt(&self, now: Nanos, start: Instant) -> Result<Option<Lease>, LeaseError> {
        let stamp = self.stamp(now);
        let Some(mut lease) = self.writer.read().await? else {
            let mut spec = LeaseSpec {
                acquire_time: stamp.renew_time.clone(),
                lease_transitions: Some(0),
                ..Default::default()
            };
            stamp.apply(&mut spec);
            return Ok(held(self.writer.write(None, spec).await?));
        };
        let unchanged_since = self.observe(&lease, start);
        let mut spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != self.settings.identity {
            let valid_for = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0)
                .map(Duration::from_secs)
                .unwrap_or(self.settings.lease_duration);
            if !holder.is_empty() && Instant::now() < unchanged_since + valid_for {
                return Ok(None);
            }
            spec.acquire_time = stamp.renew_time.clone();
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        stamp.apply(&mut spec);
        Ok(held(self.writer.write(Some(lease), spec).await?))
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew(wall_now()).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "lease attempt failed")
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the lease every retry period; returns when it could not be renewed within the renew
    /// deadline (a hung attempt is cut off at the deadline), or another replica took it. The [`Fence`]
    /// stops allowing writes no later than the deadline.
    pub async fn hold(&self) -> LeaseLost {
        let lost = self.hold_inner().await;
        self.stop_holding();
        lost
    }

    async fn hold_inner(&self) -> LeaseLost {
        let taken = || LeaseLost::Taken {
            namespace: self.settings.namespace.clone(),
            lease: self.settings.name.clone(),
        };
        let renewal = |source| LeaseLost::Renewal {
            namespace: self.settings.namespace.clone(),
            lease: self.settings.name.clone(),
            source,
        };
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            // The deadline is the end of the fence of the last successful renewal.
            let Some(deadline) = *self.holding.borrow() else {
                return taken();
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, self.try_acquire_or_renew(wall_now())).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return taken(),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "lease renewal failed");
                    if Instant::now() >= deadline {
                        return renewal(e);
                    }
                }
                Err(_) => {
                    return renewal(LeaseError::Timeout {
                        op: "renew",
                        namespace: self.settings.namespace.clone(),
                        lease: self.settings.name.clone(),
                        after: remaining,
                    });
                }
            }
        }
    }

    /// Stops allowing writes, then gives the lease up (holder cleared, 1s duration, renewed now) if this
    /// replica holds it, so another replica takes over at its next attempt.
    pub async fn release(&self) -> Result<(), LeaseError> {
        self.stop_holding();
        let Some(mut lease) = self.writer.read().await? else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        let released = Stamp {
            holder: None,
            duration_seconds: 1,
            renew_time: to_micro_time(wall_now()),
        };
        released.apply(&mut spec);
        match self.writer.write(Some(lease), spec).await? {
            Written::Conflict(e) => Err(e),
            Written::Created(_) | Written::Replaced(_) => Ok(()),
        }
    }

    /// [`LeaderElector::release`] within `budget` (part of the SIGTERM budget), its outcome logged: what
    /// every binary does on its way out.
    pub async fn release_within(&self, budget: Duration) {
        match tokio::time::timeout(budget, self.release()).await {
            Ok(Ok(())) => tracing::info!("leader lease released"),
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot release the leader lease"),
            Err(_) => tracing::warn!(?budget, "releasing the leader lease timed out"),
        }
    }

    /// Waits for the lease; `false` when `shutdown` came first, the lease then given up within `budget` (an
    /// attempt cut off may still have succeeded on the server).
    pub async fn acquire_or_release(
        &self,
        shutdown: &crate::shutdown::Shutdown,
        budget: Duration,
    ) -> bool {
        tokio::select! {
            _ = self.acquire() => {
                tracing::info!("leader lease acquired");
                true
            }
            _ = shutdown.wait() => {
                self.release_within(budget).await;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A binary that flattens the group, as the recommender and the updater do.
    #[derive(Debug, Parser)]
    struct Bin {
        #[command(flatten)]
        leader: LeaderFlags,
    }

    #[test]
    fn leader_flags_take_upstream_aliases_and_are_validated_only_when_electing() {
        let off = Bin::try_parse_from(["bin", "--leader-elect-retry-period", "0s"]).unwrap();
        assert!(off.leader.validated().unwrap().is_none());
        let on = Bin::try_parse_from([
            "bin",
            "--leader-elect",
            "--leader-elect-resource-name",
            "lease",
            "--leader-elect-resource-namespace",
            "ns",
            "--leader-elect-identity",
            "me",
        ])
        .unwrap();
        let s = on.leader.validated().unwrap().unwrap();
        assert_eq!(
            (s.name.as_str(), s.namespace.as_str(), s.identity.as_str()),
            ("lease", "ns", "me")
        );
        assert_eq!(s.lease_duration, Duration::from_secs(15));
        let bad = Bin::try_parse_from([
            "bin",
            "--leader-elect",
            "--leader-elect-renew-deadline",
            "20s",
        ])
        .unwrap();
        assert!(bad.leader.validated().is_err());
    }

    fn settings(lease: u64, renew: u64, retry: u64) -> LeaseSettings {
        LeaseSettings {
            name: "l".into(),
            namespace: "n".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        }
    }

    #[test]
    fn settings_must_order_duration_deadline_and_retry() {
        assert!(settings(15, 10, 2).validate().is_ok());
        assert!(settings(10, 10, 2).validate().is_err());
        assert!(settings(15, 2, 2).validate().is_err());
        assert!(settings(15, 10, 0).validate().is_err());
        assert_eq!(settings(15, 10, 2).call_timeout(), Duration::from_secs(2));
    }
}
