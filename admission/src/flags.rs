//! The `tailor-admission` command line ([`Flags`]), which [`crate::settings`] validates.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use tailor_kube::{
    client::ClientFlags, listen::ListenFlags, log::LogFlags, shutdown::ShutdownFlags,
};

use crate::certs::MinTlsVersion;
use crate::server::{DEFAULT_HANDSHAKES_PER_SECOND, DEFAULT_MAX_CONNECTIONS};
use crate::status_lease;

/// Tailor admission webhook: sets pod requests and limits from Tailor VPA recommendations and validates
/// Tailor VPAs.
#[derive(Debug, Parser)]
#[command(name = "tailor-admission", version, about)]
#[command(mut_arg("address", |a| a.default_value(":8944")
    .help("Listen address of the metrics and health endpoints (/metrics, /healthz, /readyz); `:PORT` means all interfaces")))]
pub struct Flags {
    /// HTTPS port of the webhook (every path is the webhook).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// IP address the webhook listens on (with --port).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,
    /// `--address` of the metrics and health endpoints.
    #[command(flatten)]
    pub listen: ListenFlags,
    /// Serving certificate chain (PEM).
    #[arg(long, default_value = "/etc/tls-certs/tls.crt")]
    pub tls_cert_file: PathBuf,
    /// Serving private key (PEM).
    #[arg(long, default_value = "/etc/tls-certs/tls.key")]
    pub tls_private_key: PathBuf,
    /// CA bundle of the serving certificate. As upstream, it does not enable client authentication; Tailor
    /// does not register its webhook from this file (the chart or `--self-signed-certs` sets `caBundle`).
    #[arg(long, default_value = "/etc/tls-certs/ca.crt")]
    pub client_ca_file: PathBuf,
    /// Reload the certificate when the files change (watches their directory, so Secret volume updates are seen).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    pub reload_cert: bool,
    /// With --reload-cert: also re-read the files this often, in seconds, in case a change event is missed.
    #[arg(long, default_value_t = 60)]
    pub reload_cert_poll_seconds: u64,
    /// Minimum TLS version: tls1_2 or tls1_3 (TLS 1.3 is always preferred).
    #[arg(long, default_value = "tls1_2")]
    pub min_tls_version: MinTlsVersion,
    /// TLS 1.2 cipher suites (IANA names, `,` or `:` separated); unknown names are ignored, empty means the
    /// rustls defaults, TLS 1.3 suites are always on.
    #[arg(long, default_value = "")]
    pub tls_ciphers: String,
    /// Deadline, in seconds, for receiving one review request body (the webhook configuration's timeoutSeconds
    /// bounds the whole call on the API server side).
    #[arg(long, default_value_t = 30)]
    pub webhook_timeout_seconds: u64,

    /// Generate a CA and serving certificate, keep them in --cert-secret and write the CA into the caBundle of
    /// --webhook-config-name (instead of reading --tls-cert-file).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    pub self_signed_certs: bool,
    /// Secret (in --namespace) holding the self-managed certificate.
    #[arg(long, default_value = "tailor-admission-tls")]
    pub cert_secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the self-managed CA.
    #[arg(long, default_value = "tailor-admission")]
    pub webhook_config_name: String,
    /// Service name the self-managed certificate is issued for.
    #[arg(long, default_value = "tailor-admission")]
    pub webhook_service: String,
    /// Namespace of the webhook's Service and certificate Secret.
    #[arg(long, env = "NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// Standalone mode: read Tailor VPAs, LimitRanges and workloads from the manifests in this directory
    /// (or file) instead of watching the cluster. Re-read when files change.
    #[arg(long)]
    pub vpa_dir: Option<PathBuf>,
    /// Watch VPAs and workloads in this namespace only (default: all namespaces).
    #[arg(long, default_value = "")]
    pub vpa_object_namespace: String,
    /// `--kubeconfig`.
    #[command(flatten)]
    pub client: ClientFlags,

    /// Name of the status Lease renewed while the webhook runs (the updater acts only while it is fresh).
    /// Cluster mode only.
    #[arg(long, default_value = status_lease::DEFAULT_NAME)]
    pub status_lease_name: String,
    /// Namespace of the status Lease (default: `$NAMESPACE`, else `kube-system`).
    #[arg(long, default_value = "")]
    pub status_lease_namespace: String,
    /// Time between renewals of the status Lease (also its duration and each renewal's timeout).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub status_lease_update_interval: Duration,

    /// Feature gates, `Name=bool` separated by commas: CPUStartupBoost, InPlace, PerVPAConfig.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Ceiling of a start-up-boosted CPU request (a quantity; unset: none).
    #[arg(long)]
    pub max_allowed_cpu_boost: Option<String>,
    /// Tailor improvement: lower proportional limits to respect LimitRange maxLimitRequestRatio.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    pub honor_max_limit_request_ratio: bool,
    /// Tailor improvement: also size native sidecars (init containers with restartPolicy: Always).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    pub native_sidecars: bool,
    /// Size pods that declare pod-level resources (`spec.resources`): set their envelope from the VPA's
    /// `tailor.dev/pod` recommendation (published by a recommender run with the same flag) and scale the
    /// requests their containers declare down into it; a pod the envelope cannot hold is left as it is,
    /// with a `PodLevelEnvelopeRefused` Event on its VPA. Off: such pods are left alone
    /// (docs/pod-level-resources.md).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    pub pod_level_resources: bool,
    /// Job retries after an OOM kill: a pod that replaces an OOM-killed pod of the same Job gets that
    /// attempt's memory request bumped (the larger of request × `--oom-bump-up-ratio` and request +
    /// `--oom-min-bump-up-bytes`; under `PerVPAConfig` a container policy's `oomBumpUpRatio`/`oomMinBumpUp`
    /// win), so memory grows per retry up to the VPA's `maxAllowed`; each raise is an `OOMRetryBump` Event on
    /// the VPA. Reads the Job's
    /// failed pods once per wave of retries (needs list on pods). Cluster mode only (docs/jobs.md).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = ArgAction::Set)]
    pub oom_retry_bump: bool,
    /// The retry bump's ratio, as the recommender's flag of the same name (at least 1).
    #[arg(long, default_value_t = 1.2, value_parser = at_least_one)]
    pub oom_bump_up_ratio: f64,
    /// The retry bump's smallest increase in bytes, as the recommender's flag of the same name.
    #[arg(long, default_value_t = 104_857_600.0, value_parser = non_negative)]
    pub oom_min_bump_up_bytes: f64,
    #[command(flatten)]
    pub floor: tailor_kube::floor_flags::PodFloorFlags,
    /// Quota fit: cut a patch's raises to the namespace's ResourceQuota headroom, or leave the
    /// pod alone when even its own requests exceed it (the reason in the updates annotation, the metric
    /// `tailor_admission_quota_fit_pods_total` and a `QuotaFit` Event on the VPA). Watches ResourceQuotas
    /// (needs get/list/watch on them). No effect in namespaces without a ResourceQuota. Cluster mode only.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = ArgAction::Set)]
    pub quota_fit: bool,
    /// Memory, in MiB (0 to 1024), for the patch of the last pod reviewed per VPA: a pod whose containers,
    /// resources and sizing annotations equal that pod's, against the same version of the VPA and
    /// LimitRanges, gets the same patch without being sized again (pods of one ReplicaSet, Job or
    /// StatefulSet). Pods in namespaces with a ResourceQuota are always sized. 0 turns it off. Hits, misses
    /// and size: `tailor_admission_patch_memo_*`.
    #[arg(long, default_value_t = DEFAULT_PATCH_MEMO_MIB, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub patch_memo_mib: u32,

    /// Most webhook connections open at once (at least 1). At the limit the connection idle longest is closed
    /// for a new one. The API server needs a few per replica; keep it below the process's file limit.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Close a webhook connection after this long without traffic or a request in progress (TLS before the
    /// first byte, HTTP/1.1 keep-alive, idle HTTP/2). Longer than the API server's 90 s idle timeout.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    pub connection_idle_timeout: Duration,
    /// New webhook connections (TLS handshakes) let in per second, sustained, once the burst is spent
    /// (1 to 1,000,000). Beyond it a new connection is closed before its handshake and counted in
    /// `tailor_admission_connections_closed_total{reason="too_fast"}`; a webhook call that needed it fails
    /// (under failurePolicy Ignore: a pod admitted unchanged). The default caps handshake CPU at about a
    /// fifth of a core with an ECDSA P-256 key (BENCHMARKS.md, "Webhook under attack: handshake rate limit").
    #[arg(long, default_value_t = DEFAULT_HANDSHAKES_PER_SECOND,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub handshakes_per_second: u32,
    /// New webhook connections let in at once before --handshakes-per-second applies (1 to 1,000,000; the
    /// allowance refills at that rate). Default: --max-connections, so that every connection of a reconnect
    /// storm (a webhook rollout, an API server restart) gets its handshake.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub handshake_burst: Option<u32>,
    /// Threads serving webhook connections (0 to 256), each with its own single-threaded runtime, so that a
    /// review wakes one thread (about 10 µs of CPU less per review at a steady rate); 0 (the default) serves
    /// them on the process's multi-threaded runtime. Not for clusters: with these threads an owner missing
    /// from the caches is not read live, so the first pods of a new ReplicaSet are admitted unsized.
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub connection_threads: Option<u16>,
    /// Worker threads of the process's async runtime (0, the default: one per CPU; at most 256). With 1 every
    /// connection, watch and live read is served on one worker: a review at a steady rate wakes no other
    /// thread (about a sixth less CPU per review than two workers; BENCHMARKS.md), but TLS
    /// handshakes and large bodies then queue with the reviews (p99 5.6-5.9 ms instead of 4.0-4.3 ms under
    /// `hack/soak-webhook.sh`'s attacks) and one pod answers at most about 14,000 reviews/s of 8 KB pods.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub runtime_threads: u16,

    /// `--shutdown-delay-seconds`, `--shutdown-timeout-seconds`.
    #[command(flatten)]
    pub shutdown: ShutdownFlags,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    pub log: LogFlags,
}

/// `--patch-memo-mib` by default: about 2,000 VPAs' answers for pods of three containers.
pub const DEFAULT_PATCH_MEMO_MIB: u32 = 4;
/// [`DEFAULT_PATCH_MEMO_MIB`] in bytes.
pub const DEFAULT_PATCH_MEMO_BYTES: usize = (DEFAULT_PATCH_MEMO_MIB as usize) << 20;

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn at_least_one(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v),
        _ => Err("must be a number of at least 1".into()),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("must be a number of at least 0".into()),
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}
