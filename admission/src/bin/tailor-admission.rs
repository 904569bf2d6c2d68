//! `tailor-admission`: the Tailor admission webhook server.
//!
//! In a cluster it keeps reflector caches of Tailor VPAs, the workload kinds and LimitRanges, and answers pod
//! and VPA admission reviews from memory. With `--vpa-dir` it runs standalone from manifest files instead.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{ArgAction, Parser};
use tailor_admission::live_owners::{LiveOwnerSettings, LiveOwners};
use tailor_admission::quota_report::QuotaReport;
use tailor_admission::vpa_events::VpaEvents;
use tailor_admission::{
    caches as cluster,
    certs::{self, CertFiles, MinTlsVersion, Reloader},
    manifests,
    metrics::Metrics,
    selfmanaged::SelfManaged,
    server::{
        AppState, ConnectionLimits, DEFAULT_HANDSHAKES_PER_SECOND, DEFAULT_MAX_CONNECTIONS,
        LargeReviews, Readiness, Server, ShutdownTiming,
    },
    status_lease::{self, StatusLease, StatusLeaseSettings},
    webhook::Webhook,
};
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::FeatureGates;
use tailor_kube::{
    client::ClientFlags,
    index::Index,
    listen::ListenFlags,
    log::LogFlags,
    scale_cache::{ScaleCache, ScaleCacheSettings},
    shutdown::Shutdown,
    shutdown::ShutdownFlags,
};

/// mimalloc returns freed pages to the system within milliseconds: after a multi-megabyte review the webhook's
/// resident memory falls back instead of keeping the peak, as glibc's arenas would (issue 15).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tailor admission webhook: sets pod requests and limits from Tailor VPA recommendations and validates
/// Tailor VPAs.
#[derive(Debug, Parser)]
#[command(name = "tailor-admission", version, about)]
#[command(mut_arg("address", |a| a.default_value(":8944")
    .help("Listen address of the metrics and health endpoints (/metrics, /healthz, /readyz); `:PORT` means all interfaces")))]
struct Args {
    /// HTTPS port of the webhook (every path is the webhook).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// IP address the webhook listens on (with --port).
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: std::net::IpAddr,
    /// `--address` of the metrics and health endpoints.
    #[command(flatten)]
    listen: ListenFlags,
    /// Serving certificate chain (PEM).
    #[arg(long, default_value = "/etc/tls-certs/tls.crt")]
    tls_cert_file: PathBuf,
    /// Serving private key (PEM).
    #[arg(long, default_value = "/etc/tls-certs/tls.key")]
    tls_private_key: PathBuf,
    /// CA bundle of the serving certificate. As upstream, it does not enable client authentication; Tailor
    /// does not register its webhook from this file (the chart or `--self-signed-certs` sets `caBundle`).
    #[arg(long, default_value = "/etc/tls-certs/ca.crt")]
    client_ca_file: PathBuf,
    /// Reload the certificate when the files change (watches their directory, so Secret volume updates are seen).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    reload_cert: bool,
    /// With --reload-cert: also re-read the files this often, in seconds, in case a change event is missed.
    #[arg(long, default_value_t = 60)]
    reload_cert_poll_seconds: u64,
    /// Minimum TLS version: tls1_2 or tls1_3 (TLS 1.3 is always preferred).
    #[arg(long, default_value = "tls1_2")]
    min_tls_version: MinTlsVersion,
    /// TLS 1.2 cipher suites (IANA names, `,` or `:` separated); unknown names are ignored, empty means the
    /// rustls defaults, TLS 1.3 suites are always on.
    #[arg(long, default_value = "")]
    tls_ciphers: String,
    /// Deadline, in seconds, for receiving one review request body (the webhook configuration's timeoutSeconds
    /// bounds the whole call on the API server side).
    #[arg(long, default_value_t = 30)]
    webhook_timeout_seconds: u64,

    /// Generate a CA and serving certificate, keep them in --cert-secret and write the CA into the caBundle of
    /// --webhook-config-name (instead of reading --tls-cert-file).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    self_signed_certs: bool,
    /// Secret (in --namespace) holding the self-managed certificate.
    #[arg(long, default_value = "tailor-admission-tls")]
    cert_secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the self-managed CA.
    #[arg(long, default_value = "tailor-admission")]
    webhook_config_name: String,
    /// Service name the self-managed certificate is issued for.
    #[arg(long, default_value = "tailor-admission")]
    webhook_service: String,
    /// Namespace of the webhook's Service and certificate Secret.
    #[arg(long, env = "NAMESPACE", default_value = "default")]
    namespace: String,

    /// Standalone mode: read Tailor VPAs, LimitRanges and workloads from the manifests in this directory
    /// (or file) instead of watching the cluster. Re-read when files change.
    #[arg(long)]
    vpa_dir: Option<PathBuf>,
    /// Watch VPAs and workloads in this namespace only (default: all namespaces).
    #[arg(long, default_value = "")]
    vpa_object_namespace: String,
    /// `--kubeconfig`.
    #[command(flatten)]
    client: ClientFlags,

    /// Name of the status Lease renewed while the webhook runs (the updater acts only while it is fresh).
    /// Cluster mode only.
    #[arg(long, default_value = status_lease::DEFAULT_NAME)]
    status_lease_name: String,
    /// Namespace of the status Lease (default: `$NAMESPACE`, else `kube-system`).
    #[arg(long, default_value = "")]
    status_lease_namespace: String,
    /// Time between renewals of the status Lease (also its duration and each renewal's timeout).
    #[arg(long, default_value = "10s", value_parser = duration)]
    status_lease_update_interval: Duration,

    /// Feature gates, `Name=bool` separated by commas: CPUStartupBoost, InPlace, PerVPAConfig.
    #[arg(long, default_value = "")]
    feature_gates: String,
    /// Ceiling of a start-up-boosted CPU request (a quantity; unset: none).
    #[arg(long)]
    max_allowed_cpu_boost: Option<String>,
    /// Tailor improvement: lower proportional limits to respect LimitRange maxLimitRequestRatio.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    honor_max_limit_request_ratio: bool,
    /// Tailor improvement: also size native sidecars (init containers with restartPolicy: Always).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set)]
    native_sidecars: bool,
    #[command(flatten)]
    floor: tailor_kube::floor_flags::PodFloorFlags,
    /// Quota fit (issue 28): cut a patch's raises to the namespace's ResourceQuota headroom, or leave the
    /// pod alone when even its own requests exceed it (the reason in the updates annotation, the metric
    /// `tailor_admission_quota_fit_pods_total` and a `QuotaFit` Event on the VPA). Watches ResourceQuotas
    /// (needs get/list/watch on them). No effect in namespaces without a ResourceQuota. Cluster mode only.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = ArgAction::Set)]
    quota_fit: bool,

    /// Most webhook connections open at once (at least 1). At the limit the connection idle longest is closed
    /// for a new one. The API server needs a few per replica; keep it below the process's file limit.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Close a webhook connection after this long without traffic or a request in progress (TLS before the
    /// first byte, HTTP/1.1 keep-alive, idle HTTP/2). Longer than the API server's 90 s idle timeout.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    connection_idle_timeout: Duration,
    /// New webhook connections (TLS handshakes) let in per second, sustained, once the burst is spent
    /// (1 to 1,000,000). Beyond it a new connection is closed before its handshake and counted in
    /// `tailor_admission_connections_closed_total{reason="too_fast"}`; a webhook call that needed it fails
    /// (under failurePolicy Ignore: a pod admitted unchanged). The default caps handshake CPU at about a
    /// fifth of a core with an ECDSA P-256 key (BENCHMARKS.md, issue 32).
    #[arg(long, default_value_t = DEFAULT_HANDSHAKES_PER_SECOND,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    handshakes_per_second: u32,
    /// New webhook connections let in at once before --handshakes-per-second applies (1 to 1,000,000; the
    /// allowance refills at that rate). Default: --max-connections, so that every connection of a reconnect
    /// storm (a webhook rollout, an API server restart) gets its handshake.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    handshake_burst: Option<u32>,
    /// Threads serving webhook connections (0 to 256), each with its own single-threaded runtime, so that a
    /// review wakes one thread (about 10 µs of CPU less per review at a steady rate); 0 (the default) serves
    /// them on the process's multi-threaded runtime. Not for clusters: with these threads an owner missing
    /// from the caches is not read live, so the first pods of a new ReplicaSet are admitted unsized.
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=256))]
    connection_threads: Option<u16>,

    /// `--shutdown-delay-seconds`, `--shutdown-timeout-seconds`.
    #[command(flatten)]
    shutdown: ShutdownFlags,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    log: LogFlags,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}

fn parse_gates(s: &str) -> anyhow::Result<FeatureGates> {
    Ok(FeatureGates::parse(s)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    // The allocator reads its options at start; the image and the chart set these two.
    for (name, value) in [
        ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
        ("MIMALLOC_PURGE_DELAY", "0"),
    ] {
        if std::env::var(name).ok().as_deref() != Some(value) {
            tracing::warn!(
                "{name} is not {value}: the allocator keeps more memory than it needs (set it in the environment)"
            );
        }
    }
    // Room for --max-connections plus the process's own files: raise the soft file limit to the hard one.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < u64::from(args.max_connections) + 64 => tracing::warn!(
            limit,
            max_connections = args.max_connections,
            "the open-file limit is below --max-connections; accepting will fail before the limit sheds"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let gates = parse_gates(&args.feature_gates)?;
    let options = PatchOptions {
        cpu_startup_boost: gates.cpu_startup_boost,
        max_allowed_cpu_boost: args
            .max_allowed_cpu_boost
            .clone()
            .map(k8s_openapi::apimachinery::pkg::api::resource::Quantity),
        honor_max_limit_request_ratio: args.honor_max_limit_request_ratio,
        native_sidecars: args.native_sidecars,
        floor: args.floor.floor(),
    };
    let metrics_addr = args.listen.socket_addr()?;
    let webhook_addr = SocketAddr::new(args.bind_address, args.port);
    let mut metrics = Metrics::new();
    let readiness = Readiness::new();

    // Shutdown fan-out: the signal resolves every waiter.
    let shutdown = Shutdown::on_signal();
    let stopped = || shutdown.wait();

    let client = if args.vpa_dir.is_none() || args.self_signed_certs {
        Some(args.client.client().await?)
    } else {
        None
    };

    // The index: manifests or reflectors.
    let webhook = match &args.vpa_dir {
        Some(dir) => {
            let loaded =
                manifests::load_dir(dir).with_context(|| format!("--vpa-dir {}", dir.display()))?;
            tracing::info!(dir = %dir.display(), files = loaded.files, objects = loaded.count(),
                vpas = loaded.objects.vpas().len(), skipped = loaded.skipped, "standalone mode: manifests loaded");
            let webhook = Arc::new(Webhook::new(loaded.objects.into_index(), gates, options));
            readiness.set_synced();
            watch_manifests(dir.clone(), webhook.clone(), stopped())?;
            webhook
        }
        None => {
            let client = client.clone().context("no Kubernetes client")?;
            let env = |k: &str| std::env::var(k).ok();
            let lease = StatusLeaseSettings::resolve(
                &args.status_lease_name,
                &args.status_lease_namespace,
                env("NAMESPACE").as_deref(),
                &[env("POD_NAME").as_deref(), env("HOSTNAME").as_deref()],
                args.status_lease_update_interval,
            )?;
            let gate = readiness.clone();
            tokio::spawn(
                StatusLease::new(client.clone(), lease)
                    .run(move |quiet| gate.may_renew_lease(quiet), stopped()),
            );
            let (stores, quotas) = cluster::start_caches(
                client.clone(),
                &args.vpa_object_namespace,
                readiness.clone(),
                args.quota_fit,
            );
            // Controllers of other kinds (Argo Rollouts, custom controllers) through their `/scale`
            // subresource, fetched in the background: a review never waits on the API server.
            let scale = ScaleCache::default();
            tokio::spawn(scale.clone().run(
                client.clone(),
                stores.vpas.clone(),
                ScaleCacheSettings::default(),
                stopped(),
            ));
            // Owners created a moment ago (a rollout's new ReplicaSet) are read live, within bounds.
            let live = LiveOwners::new(
                client.clone(),
                tokio::runtime::Handle::current(),
                LiveOwnerSettings::default(),
            );
            let mut index = Index::from_stores(stores)
                .with_scale_lookup(Arc::new(scale))
                .with_owner_fallback(Arc::new(live));
            // Events on VPAs: pods admitted unsized, and quota fit's cuts.
            let events = VpaEvents::start(client.clone(), metrics.registry_mut());
            let mut report = None;
            if let Some(quotas) = quotas {
                index = index.with_quotas(Arc::new(quotas));
                report = Some(QuotaReport::new(metrics.registry_mut()).with_events(events.clone()));
            }
            let webhook = Webhook::new(index, gates, options).with_events(events);
            Arc::new(match report {
                Some(report) => webhook.with_quota_report(report),
                None => webhook,
            })
        }
    };

    // Certificates.
    let resolver = if args.self_signed_certs {
        let sm = SelfManaged {
            client: client.clone().context("no Kubernetes client")?,
            namespace: args.namespace.clone(),
            secret: args.cert_secret.clone(),
            webhook_config: args.webhook_config_name.clone(),
            service: args.webhook_service.clone(),
        };
        sm.bootstrap(&metrics)
            .await
            .context("self-managed certificates")?
    } else {
        let files = CertFiles {
            cert: args.tls_cert_file.clone(),
            key: args.tls_private_key.clone(),
        };
        let (resolver, reloader) =
            Reloader::load(files, None).context("loading the serving certificate")?;
        if args.reload_cert {
            reloader
                .spawn(
                    Duration::from_secs(args.reload_cert_poll_seconds.max(1)),
                    stopped(),
                )
                .context("watching the certificate directory")?;
            tracing::info!(cert = %args.tls_cert_file.display(), "certificate reload enabled");
        }
        resolver
    };
    if args.client_ca_file.exists() {
        tracing::debug!(file = %args.client_ca_file.display(), "client CA file present (not used for client auth)");
    }
    let tls = Arc::new(certs::server_config_with_ciphers(
        resolver.clone(),
        args.min_tls_version,
        &args.tls_ciphers,
    )?);

    let metrics = Arc::new(metrics);
    if args.self_signed_certs {
        let sm = SelfManaged {
            client: client.clone().context("no Kubernetes client")?,
            namespace: args.namespace.clone(),
            secret: args.cert_secret.clone(),
            webhook_config: args.webhook_config_name.clone(),
            service: args.webhook_service.clone(),
        };
        tokio::spawn(sm.run(resolver.clone(), metrics.clone(), stopped()));
    }

    let state = Arc::new(AppState {
        reviewer: webhook,
        metrics,
        readiness,
        body_timeout: Duration::from_secs(args.webhook_timeout_seconds.max(1)),
        large_reviews: LargeReviews::default(),
        connections: ConnectionLimits {
            max_connections: args.max_connections as usize,
            idle_timeout: args.connection_idle_timeout,
            handshakes_per_second: args.handshakes_per_second,
            handshake_burst: args.handshake_burst.unwrap_or(args.max_connections),
            threads: args
                .connection_threads
                .map_or_else(|| ConnectionLimits::default().threads, usize::from),
            ..ConnectionLimits::default()
        },
    });
    let timing = ShutdownTiming {
        delay: args.shutdown.delay(),
        drain: args.shutdown.drain(),
    };
    let server = Server::bind(webhook_addr, Some(metrics_addr), tls, state, timing).await?;
    let shown = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(webhook = %shown(server.webhook_addr()), metrics = %shown(server.ops_addr()), "serving");
    server.run(stopped()).await?;
    Ok(())
}

/// Re-reads the manifests when the directory changes (standalone mode); a bad edit keeps the previous index.
fn watch_manifests(
    dir: PathBuf,
    webhook: Arc<Webhook>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use notify::Watcher as _;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        // Reading the manifests produces access events; only changes matter.
        if e.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        let _watcher = watcher;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                e = rx.recv() => if e.is_none() { return },
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            while rx.try_recv().is_ok() {}
            let d = dir.clone();
            match tokio::task::spawn_blocking(move || manifests::load_dir(&d)).await {
                Ok(Ok(loaded)) => {
                    tracing::info!(
                        objects = loaded.count(),
                        vpas = loaded.objects.vpas().len(),
                        "manifests reloaded"
                    );
                    webhook.set_index(loaded.objects.into_index());
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "manifests not reloaded; keeping the previous ones")
                }
                Err(e) => tracing::warn!(error = %e, "manifest reload task failed"),
            }
        }
    });
    Ok(())
}
