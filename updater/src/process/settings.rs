//! The `tailor-updater` binary's validated configuration: [`Settings::from_flags`] turns its command line
//! ([`Flags`]) into the values the daemon ([`crate::process::daemon`]) runs with, and refuses what cannot work.

use std::net::SocketAddr;
use std::time::Duration;

use tailor_core::sizing::PodFloor;
use tailor_kube::client::ClientFlags;
use tailor_kube::leader::{InvalidLeaseSettings, LeaseSettings};
use tailor_kube::listen::ListenAddressError;

use crate::decisions::config::{FeatureGates, RestrictionConfig};
use crate::iteration::IterationConfig;
use crate::process::flags::Flags;
use tailor_kube::rate::RateSettings;

/// Why the command line cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Both namespace scopes were given.
    #[error("--vpa-object-namespace and --ignored-vpa-object-namespaces are mutually exclusive")]
    ExclusiveNamespaces,
    /// `--address` does not parse.
    #[error("--address")]
    Address(#[source] ListenAddressError),
    /// The leader-election flags contradict each other.
    #[error(transparent)]
    Lease(#[from] InvalidLeaseSettings),
}

/// Where the webhook's status Lease is read (`--use-admission-controller-status`).
#[derive(Clone, Debug)]
pub struct StatusLeaseRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// How long a renewal keeps the webhook alive.
    pub timeout: Duration,
}

/// Everything the updater binary runs with, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub address: SocketAddr,
    /// Period of the loop, and each iteration's deadline.
    pub interval: Duration,
    /// The namespace VPAs and the objects they need are watched in (empty: all).
    pub namespace: String,
    /// How the Kubernetes client is made.
    pub client: ClientFlags,
    /// Leader election (`None`: not asked for).
    pub lease: Option<LeaseSettings>,
    /// After SIGTERM, the leader lease is released within this long.
    pub shutdown_timeout: Duration,
    /// Whether the ResourceQuota cache is kept (quota fit).
    pub quota_fit: bool,
    /// Whether namespace labels are watched (the webhook selects namespaces by label).
    pub namespace_labels: bool,
    /// The webhook's status Lease (`None`: the updater does not check the webhook).
    pub status: Option<StatusLeaseRef>,
    /// What each iteration decides with.
    pub iteration: IterationConfig,
    /// The disruption budget.
    pub restriction: RestrictionConfig,
    /// Alpha features.
    pub gates: FeatureGates,
    /// The webhook's pod floor.
    pub floor: Option<PodFloor>,
    /// The eviction and resize rate limits.
    pub rate: RateSettings,
}

impl Settings {
    /// Checks `flags` and derives the settings (the status Lease's namespace may come from `$NAMESPACE`).
    pub fn from_flags(flags: Flags) -> Result<Self, SettingsError> {
        if !flags.vpa_object_namespace.is_empty() && !flags.ignored_vpa_object_namespaces.is_empty()
        {
            return Err(SettingsError::ExclusiveNamespaces);
        }
        let address = flags.listen.socket_addr().map_err(SettingsError::Address)?;
        let lease = flags.leader.validated()?;
        let u = &flags.updater;
        let status = flags
            .status
            .use_admission_controller_status
            .then(|| StatusLeaseRef {
                namespace: flags.status.namespace(),
                name: flags.status.admission_controller_status_lease_name.clone(),
                timeout: flags.status.admission_controller_status_lease_timeout,
            });
        Ok(Settings {
            address,
            interval: flags.updater_interval,
            quota_fit: u.quota_fit,
            namespace_labels: u.webhook_namespace_selector.0.is_some(),
            status,
            iteration: u.iteration_config(&flags.ignored_vpa_object_namespaces),
            restriction: u.restriction_config(),
            gates: u.gates(),
            floor: u.floor.floor(),
            rate: RateSettings::from_flags(u.eviction_rate_limit, u.eviction_rate_burst),
            lease,
            shutdown_timeout: flags.shutdown_timeout,
            client: flags.client,
            namespace: flags.vpa_object_namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn settings(args: &[&str]) -> Result<Settings, SettingsError> {
        let all = std::iter::once("tailor-updater").chain(args.iter().copied());
        Settings::from_flags(Flags::try_parse_from(all).expect("flags parse"))
    }

    #[test]
    fn the_defaults_are_valid() {
        let s = settings(&[]).expect("valid");
        assert_eq!(s.interval, Duration::from_secs(60));
        assert_eq!(s.address.port(), 8943);
        assert!(s.lease.is_none() && s.status.is_some() && s.quota_fit && !s.namespace_labels);
    }

    #[test]
    fn one_namespace_scope_at_a_time() {
        let e = settings(&[
            "--vpa-object-namespace=a",
            "--ignored-vpa-object-namespaces=b",
        ]);
        assert!(matches!(e, Err(SettingsError::ExclusiveNamespaces)));
    }

    #[test]
    fn an_unreadable_address_is_refused() {
        let e = settings(&["--address=nonsense"]);
        assert!(matches!(e, Err(SettingsError::Address(_))));
    }
}
