//! The webhook's status Lease: a `coordination.k8s.io/v1` Lease renewed on a fixed interval, so the updater
//! can tell that the webhook is alive before it evicts or resizes pods (upstream's admission controller keeps
//! the same kind of Lease).
//!
//! Every replica renews the same Lease; a renewal that loses a race (409 Conflict or AlreadyExists) is not an
//! error, because another live replica has just written it. A failed renewal is retried twice with backoff
//! (100 ms, then 300 ms), each attempt bounded by one interval. The read and the write are
//! [`tailor_kube::lease`]'s; this module adds the interval, the retries and the readiness gate.

use std::{future::Future, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tailor_kube::lease::{LeaseError, LeaseWriter, Stamp, Written};

/// Default name of the status Lease (upstream's is `vpa-admission-controller`, so both can run side by side).
pub const DEFAULT_NAME: &str = "tailor-admission";
/// Namespace of the Lease when neither the flag nor `$NAMESPACE` gives one.
pub const FALLBACK_NAMESPACE: &str = "kube-system";
/// Default time between renewals.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Attempts per renewal.
pub const ATTEMPTS: u32 = 3;
/// Wait before the first retry; each further retry waits three times longer.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest accepted Lease name, namespace or holder identity (a DNS subdomain's limit).
pub const MAX_NAME_LEN: usize = 253;

/// Errors of the status Lease.
#[derive(Debug, thiserror::Error)]
pub enum StatusLeaseError {
    /// A setting is unusable.
    #[error("status lease: {0}")]
    Invalid(String),
    /// An API call failed.
    #[error("status lease {namespace}/{name}: {source}")]
    Api {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// An attempt did not finish within one interval.
    #[error("status lease {namespace}/{name}: no answer within {after:?}")]
    Timeout {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The bound that was exceeded.
        after: Duration,
    },
}

/// What the Lease is and who writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusLeaseSettings {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// `holderIdentity` written on each renewal (the pod name).
    pub holder: String,
    /// Time between renewals; also `leaseDurationSeconds` and the bound of one attempt.
    pub interval: Duration,
}

/// `s` trimmed, or `None` when absent or blank.
fn non_blank(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

impl StatusLeaseSettings {
    /// Settings from the binary's flags and environment: the namespace is `namespace_flag` when not empty,
    /// else `namespace_env` when not empty, else `kube-system`; the holder is the first non-empty of
    /// `holder_candidates` (pod name, host name), else the Lease name. Rejects an empty or over-long name,
    /// namespace or holder, and a zero interval.
    pub fn resolve(
        name: &str,
        namespace_flag: &str,
        namespace_env: Option<&str>,
        holder_candidates: &[Option<&str>],
        interval: Duration,
    ) -> Result<Self, StatusLeaseError> {
        let namespace = non_blank(Some(namespace_flag))
            .or_else(|| non_blank(namespace_env))
            .unwrap_or(FALLBACK_NAMESPACE);
        let holder = holder_candidates
            .iter()
            .find_map(|c| non_blank(*c))
            .unwrap_or(name);
        for (what, value) in [("name", name), ("namespace", namespace), ("holder", holder)] {
            if value.is_empty() || value.len() > MAX_NAME_LEN {
                return Err(StatusLeaseError::Invalid(format!(
                    "{what} {value:?} must have 1 to {MAX_NAME_LEN} characters"
                )));
            }
        }
        if interval.is_zero() {
            return Err(StatusLeaseError::Invalid(
                "--status-lease-update-interval must be greater than zero".into(),
            ));
        }
        Ok(StatusLeaseSettings {
            name: name.to_string(),
            namespace: namespace.to_string(),
            holder: holder.to_string(),
            interval,
        })
    }

    /// `leaseDurationSeconds`: the interval in whole seconds, at least 1.
    pub fn duration_seconds(&self) -> i32 {
        tailor_kube::lease::duration_seconds(self.interval)
    }
}

/// Keeps the status Lease fresh.
pub struct StatusLease {
    writer: LeaseWriter,
    settings: StatusLeaseSettings,
}

impl StatusLease {
    /// A writer of the Lease in `settings` through `client`.
    pub fn new(client: Client, settings: StatusLeaseSettings) -> Self {
        StatusLease {
            writer: LeaseWriter::new(client, &settings.namespace, &settings.name),
            settings,
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &StatusLeaseSettings {
        &self.settings
    }

    /// One attempt at time `now`: reads the Lease, creates it when missing, otherwise sets the holder,
    /// duration and `renewTime` and replaces it (with its `resourceVersion`). A 409 (another replica renewed
    /// or created it first) counts as success.
    pub async fn renew_once(&self, now: Timestamp) -> Result<(), StatusLeaseError> {
        let stamp = Stamp {
            holder: Some(self.settings.holder.clone()),
            duration_seconds: self.settings.duration_seconds(),
            renew_time: Some(MicroTime(now)),
        };
        match self.writer.renew(&stamp).await {
            Ok(Written::Created(_) | Written::Replaced(_)) => Ok(()),
            Ok(Written::Conflict(_)) => {
                tracing::debug!(lease = %self.settings.name, "status lease written by another replica first");
                Ok(())
            }
            Err(LeaseError::Api { source, .. }) => Err(StatusLeaseError::Api {
                namespace: self.settings.namespace.clone(),
                name: self.settings.name.clone(),
                source,
            }),
            // Calls are not bounded one by one here (a whole attempt is, in `renew`).
            Err(LeaseError::Timeout { after, .. }) => Err(StatusLeaseError::Timeout {
                namespace: self.settings.namespace.clone(),
                name: self.settings.name.clone(),
                after,
            }),
        }
    }

    /// One renewal: up to [`ATTEMPTS`] attempts at the current wall time, each bounded by one interval,
    /// with 100 ms then 300 ms between them. Returns the last error when all fail.
    pub async fn renew(&self) -> Result<(), StatusLeaseError> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let outcome =
                tokio::time::timeout(self.settings.interval, self.renew_once(Timestamp::now()))
                    .await
                    .unwrap_or_else(|_| {
                        Err(StatusLeaseError::Timeout {
                            namespace: self.settings.namespace.clone(),
                            name: self.settings.name.clone(),
                            after: self.settings.interval,
                        })
                    });
            match outcome {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, attempt, "status lease renewal failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(3);
                    attempt += 1;
                }
            }
        }
    }

    /// Until `shutdown` resolves, renews the Lease every interval while `may_renew` says the webhook can
    /// size pods (caches synced and current, not shutting down; upstream starts renewing only after its
    /// caches synced), checked every second (or every interval, when shorter) so that renewals start as
    /// soon as it can: a webhook that cannot size pods lets the Lease go stale, so the updater does not
    /// evict pods that would come back unsized. Failures are logged and the next interval tries again.
    pub async fn run(
        self,
        may_renew: impl Fn(Duration) -> bool,
        shutdown: impl Future<Output = ()>,
    ) {
        tracing::info!(lease = %self.settings.name, namespace = %self.settings.namespace,
            holder = %self.settings.holder, interval = ?self.settings.interval,
            "renewing the status lease whenever the caches are synced");
        let interval = self.settings.interval;
        let mut ticks = tokio::time::interval(interval.min(Duration::from_secs(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let mut renewing = false;
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = ticks.tick() => {}
            }
            let allowed = may_renew(interval);
            if allowed != renewing {
                renewing = allowed;
                if allowed {
                    tracing::info!(lease = %self.settings.name, "caches synced: renewing the status lease");
                } else {
                    tracing::warn!(lease = %self.settings.name,
                        "caches not synced or a watch failing: the status lease is not renewed");
                }
            }
            if !allowed || last.is_some_and(|t| t.elapsed() < interval) {
                continue;
            }
            last = Some(tokio::time::Instant::now());
            tokio::select! {
                _ = &mut shutdown => return,
                r = self.renew() => if let Err(e) = r {
                    tracing::warn!(error = %e, "status lease not renewed");
                },
            }
        }
    }
}
