//! The `tailor-admission` binary's validated configuration: [`Settings::from_flags`] turns its command line
//! ([`Flags`]) into what the daemon ([`crate::daemon`]) runs with, and refuses what cannot work.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::{FeatureGateError, FeatureGates};
use tailor_kube::client::ClientFlags;
use tailor_kube::listen::ListenAddressError;

use crate::certs::{CertFiles, MinTlsVersion};
use crate::flags::Flags;
use crate::server::{ConnectionLimits, ShutdownTiming};
use crate::status_lease::{StatusLeaseError, StatusLeaseSettings};

/// Why the command line cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `--feature-gates` does not parse.
    #[error(transparent)]
    FeatureGates(#[from] FeatureGateError),
    /// `--address` does not parse.
    #[error(transparent)]
    Address(#[from] ListenAddressError),
    /// The status Lease's name or namespace is unusable.
    #[error(transparent)]
    StatusLease(#[from] StatusLeaseError),
}

/// Where the index of VPAs, workloads and LimitRanges comes from.
#[derive(Clone, Debug)]
pub enum IndexSource {
    /// Standalone mode (`--vpa-dir`): manifest files, re-read when they change.
    Manifests(PathBuf),
    /// Watches of the cluster.
    Cluster {
        /// The namespace watched (empty: all).
        namespace: String,
        /// Whether ResourceQuotas are watched and pods fitted into them.
        quota_fit: bool,
        /// `--oom-retry-bump`: the rule, when on.
        oom_retry: Option<tailor_core::sizing::OomBumpRule>,
        /// The status Lease renewed while the webhook runs.
        lease: StatusLeaseSettings,
    },
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// `--self-signed-certs`: generated, kept in a Secret, its CA written into the webhook configuration.
    SelfManaged(SelfManagedPlace),
    /// Files, re-read every `reload_poll` (and on change) when reloading is on.
    Files {
        /// Certificate chain and key.
        files: CertFiles,
        /// With `--reload-cert`: the poll period.
        reload_poll: Option<Duration>,
    },
}

/// Where the self-managed certificate lives and where its CA goes.
#[derive(Clone, Debug)]
pub struct SelfManagedPlace {
    /// Namespace of the Secret and the Service.
    pub namespace: String,
    /// The Secret.
    pub secret: String,
    /// The MutatingWebhookConfiguration.
    pub webhook_config: String,
    /// The Service the certificate is issued for.
    pub service: String,
}

/// Everything the webhook binary runs with, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    /// HTTPS address of the webhook.
    pub webhook_addr: SocketAddr,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: SocketAddr,
    /// Alpha features.
    pub gates: FeatureGates,
    /// How patches are computed.
    pub options: PatchOptions,
    /// Bytes for the patch memo (`--patch-memo-mib`; 0: off).
    pub patch_memo_bytes: usize,
    /// Manifests or the cluster.
    pub index: IndexSource,
    /// Files or self-managed.
    pub certs: CertSource,
    /// `--client-ca-file` (read by nobody; its presence is logged).
    pub client_ca_file: PathBuf,
    /// Minimum TLS version.
    pub min_tls_version: MinTlsVersion,
    /// TLS 1.2 cipher suites (empty: rustls' defaults).
    pub tls_ciphers: String,
    /// Deadline for receiving one review's body.
    pub body_timeout: Duration,
    /// Connection limits of the webhook port.
    pub connections: ConnectionLimits,
    /// Readiness delay and drain after SIGTERM.
    pub shutdown: ShutdownTiming,
    /// How the Kubernetes client is made.
    pub client: ClientFlags,
}

impl Settings {
    /// Checks `flags` and derives the settings. In cluster mode the status Lease's namespace and holder may
    /// come from `$NAMESPACE`, `$POD_NAME` and `$HOSTNAME`.
    pub fn from_flags(flags: Flags) -> Result<Self, SettingsError> {
        let gates = FeatureGates::parse(&flags.feature_gates)?;
        let options = PatchOptions {
            cpu_startup_boost: gates.cpu_startup_boost,
            max_allowed_cpu_boost: flags.max_allowed_cpu_boost.clone().map(Quantity),
            honor_max_limit_request_ratio: flags.honor_max_limit_request_ratio,
            native_sidecars: flags.native_sidecars,
            floor: flags.floor.floor(),
            pod_level_resources: flags.pod_level_resources,
        };
        let metrics_addr = flags.listen.socket_addr()?;
        Ok(Settings {
            webhook_addr: SocketAddr::new(flags.bind_address, flags.port),
            metrics_addr,
            gates,
            options,
            patch_memo_bytes: flags.patch_memo_mib as usize * (1 << 20),
            index: index_source(&flags, gates)?,
            certs: cert_source(&flags),
            body_timeout: Duration::from_secs(flags.webhook_timeout_seconds.max(1)),
            connections: connection_limits(&flags),
            shutdown: ShutdownTiming {
                delay: flags.shutdown.delay(),
                drain: flags.shutdown.drain(),
            },
            min_tls_version: flags.min_tls_version,
            tls_ciphers: flags.tls_ciphers,
            client_ca_file: flags.client_ca_file,
            client: flags.client,
        })
    }

    /// Whether a Kubernetes client is needed: in cluster mode, or to manage the certificate.
    pub fn needs_client(&self) -> bool {
        matches!(self.index, IndexSource::Cluster { .. })
            || matches!(self.certs, CertSource::SelfManaged(_))
    }
}

fn index_source(flags: &Flags, gates: FeatureGates) -> Result<IndexSource, StatusLeaseError> {
    if let Some(dir) = &flags.vpa_dir {
        return Ok(IndexSource::Manifests(dir.clone()));
    }
    let env = |k: &str| std::env::var(k).ok();
    let lease = StatusLeaseSettings::resolve(
        &flags.status_lease_name,
        &flags.status_lease_namespace,
        env("NAMESPACE").as_deref(),
        &[env("POD_NAME").as_deref(), env("HOSTNAME").as_deref()],
        flags.status_lease_update_interval,
    )?;
    Ok(IndexSource::Cluster {
        namespace: flags.vpa_object_namespace.clone(),
        quota_fit: flags.quota_fit,
        oom_retry: flags
            .oom_retry_bump
            .then_some(tailor_core::sizing::OomBumpRule {
                ratio: flags.oom_bump_up_ratio,
                min_bytes: flags.oom_min_bump_up_bytes,
                per_vpa_config: gates.per_vpa_config,
            }),
        lease,
    })
}

fn cert_source(flags: &Flags) -> CertSource {
    if flags.self_signed_certs {
        return CertSource::SelfManaged(SelfManagedPlace {
            namespace: flags.namespace.clone(),
            secret: flags.cert_secret.clone(),
            webhook_config: flags.webhook_config_name.clone(),
            service: flags.webhook_service.clone(),
        });
    }
    CertSource::Files {
        files: CertFiles {
            cert: flags.tls_cert_file.clone(),
            key: flags.tls_private_key.clone(),
        },
        reload_poll: flags
            .reload_cert
            .then(|| Duration::from_secs(flags.reload_cert_poll_seconds.max(1))),
    }
}

fn connection_limits(flags: &Flags) -> ConnectionLimits {
    ConnectionLimits {
        max_connections: flags.max_connections as usize,
        idle_timeout: flags.connection_idle_timeout,
        handshakes_per_second: flags.handshakes_per_second,
        handshake_burst: flags.handshake_burst.unwrap_or(flags.max_connections),
        threads: flags
            .connection_threads
            .map_or_else(|| ConnectionLimits::default().threads, usize::from),
        ..ConnectionLimits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn settings(args: &[&str]) -> Result<Settings, SettingsError> {
        let all = std::iter::once("tailor-admission").chain(args.iter().copied());
        Settings::from_flags(Flags::try_parse_from(all).expect("flags parse"))
    }

    #[test]
    fn standalone_needs_no_client_unless_it_manages_certificates() {
        let s = settings(&["--vpa-dir=/nowhere"]).expect("valid");
        assert!(!s.needs_client());
        assert_eq!(s.webhook_addr.port(), 8000);
        assert_eq!(s.metrics_addr.port(), 8944);
        let s = settings(&["--vpa-dir=/nowhere", "--self-signed-certs"]).expect("valid");
        assert!(s.needs_client());
    }

    #[test]
    fn impossible_values_are_refused() {
        assert!(matches!(
            settings(&["--vpa-dir=/d", "--feature-gates=NoSuchGate=true"]),
            Err(SettingsError::FeatureGates(_))
        ));
        assert!(matches!(
            settings(&["--vpa-dir=/d", "--address=nonsense"]),
            Err(SettingsError::Address(_))
        ));
    }

    #[test]
    fn the_handshake_burst_defaults_to_the_connection_limit() {
        let s = settings(&["--vpa-dir=/d", "--max-connections=7"]).expect("valid");
        assert_eq!(s.connections.handshake_burst, 7);
        assert_eq!(s.connections.max_connections, 7);
    }

    #[test]
    fn the_patch_memo_is_sized_in_mib_and_bounded() {
        let on = settings(&["--vpa-dir=/d"]).expect("valid");
        assert_eq!(on.patch_memo_bytes, 4 << 20);
        let off = settings(&["--vpa-dir=/d", "--patch-memo-mib=0"]).expect("valid");
        assert_eq!(off.patch_memo_bytes, 0);
        let all = ["tailor-admission", "--vpa-dir=/d", "--patch-memo-mib=4096"];
        assert!(Flags::try_parse_from(all).is_err());
    }

    #[test]
    fn one_runtime_worker_per_cpu_by_default_and_at_most_256() {
        let parse = |args: &[&str]| {
            let all = ["tailor-admission", "--vpa-dir=/d"]
                .into_iter()
                .chain(args.iter().copied());
            Flags::try_parse_from(all)
        };
        assert_eq!(parse(&[]).expect("valid").runtime_threads, 0);
        assert_eq!(
            parse(&["--runtime-threads=1"])
                .expect("valid")
                .runtime_threads,
            1
        );
        assert!(parse(&["--runtime-threads=257"]).is_err());
    }
}
