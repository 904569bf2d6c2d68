//! The `tailor-admission` daemon, built from validated [`Settings`]: the index (manifests or the cluster's
//! caches, [`crate::caches`]), the serving certificate (files or self-managed), then the HTTPS webhook and
//! the operations endpoints ([`crate::server`]) until SIGTERM and the drain.

use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use tailor_kube::client::ClientError;
use tailor_kube::index::Index;
use tailor_kube::scale_cache::{ScaleCache, ScaleCacheSettings};
use tailor_kube::shutdown::Shutdown;

use crate::caches;
use crate::certs::{self, CertError, CertResolver, Reloader};
use crate::job_retries::{FAILED_POD_READS, LiveJobOoms};
use crate::live_owners::{LiveOwners, OWNER_READS};
use crate::metrics::Metrics;
use crate::pod::RetryBump;
use crate::quota_report::QuotaReport;
use crate::selfmanaged::{SelfManaged, SelfManagedError};
use crate::server::{AppState, LargeReviews, Readiness, Server, ServerError};
use crate::settings::{CertSource, IndexSource, SelfManagedPlace, Settings};
use crate::standalone::{self, StandaloneError};
use crate::status_lease::{StatusLease, StatusLeaseSettings};
use crate::vpa_events::VpaEvents;
use crate::webhook::Webhook;

/// Why the webhook could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The Kubernetes client could not be made.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A mode that needs the cluster has no client.
    #[error("no Kubernetes client")]
    NoClient,
    /// Standalone mode could not start.
    #[error(transparent)]
    Standalone(#[from] StandaloneError),
    /// The self-managed certificate could not be set up.
    #[error("self-managed certificates")]
    SelfManaged(#[source] SelfManagedError),
    /// The certificate files do not load.
    #[error("loading the serving certificate")]
    LoadCertificate(#[source] CertError),
    /// The certificate directory cannot be watched.
    #[error("watching the certificate directory")]
    WatchCertificate(#[source] CertError),
    /// The TLS settings are unusable.
    #[error(transparent)]
    Tls(CertError),
    /// The listeners failed.
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// The webhook as its binary runs it.
pub struct Daemon {
    settings: Settings,
    client: Option<Client>,
    metrics: Metrics,
    readiness: Readiness,
}

/// Process-wide set-up before anything else runs: the TLS crypto provider, a check of the allocator's
/// options, and an open-file limit with room for `max_connections`.
pub fn prepare_process(max_connections: u32) {
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
        Ok(limit) if limit < u64::from(max_connections) + 64 => tracing::warn!(
            limit,
            max_connections,
            "the open-file limit is below --max-connections; accepting will fail before the limit sheds"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

impl Daemon {
    /// The daemon, with a Kubernetes client when its modes need one.
    pub async fn new(settings: Settings) -> Result<Daemon, DaemonError> {
        let client = match settings.needs_client() {
            true => Some(settings.client.client().await?),
            false => None,
        };
        Ok(Daemon {
            settings,
            client,
            metrics: Metrics::new(),
            readiness: Readiness::new(),
        })
    }

    /// Starts the index and the certificate, then serves until `shutdown` and the drain that follows.
    pub async fn run(mut self, shutdown: &Shutdown) -> Result<(), DaemonError> {
        let webhook = self.webhook(shutdown)?;
        let resolver = self.certificate(shutdown).await?;
        let s = &self.settings;
        if s.client_ca_file.exists() {
            tracing::debug!(file = %s.client_ca_file.display(), "client CA file present (not used for client auth)");
        }
        let tls =
            certs::server_config_with_ciphers(resolver.clone(), s.min_tls_version, &s.tls_ciphers)
                .map_err(DaemonError::Tls)?;
        let metrics = Arc::new(self.metrics);
        if let CertSource::SelfManaged(place) = &s.certs {
            let sm = self_managed(place, self.client.as_ref())?;
            tokio::spawn(sm.run(resolver, metrics.clone(), shutdown.wait()));
        }
        let state = Arc::new(AppState {
            reviewer: webhook,
            metrics,
            readiness: self.readiness,
            body_timeout: s.body_timeout,
            large_reviews: LargeReviews::default(),
            connections: s.connections,
        });
        let server = Server::bind(
            s.webhook_addr,
            Some(s.metrics_addr),
            Arc::new(tls),
            state,
            s.shutdown,
        )
        .await?;
        let shown = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(webhook = %shown(server.webhook_addr()), metrics = %shown(server.ops_addr()), "serving");
        server.run(shutdown.wait()).await?;
        Ok(())
    }

    /// The webhook over the manifests, or over the cluster's caches, its metrics registered.
    fn webhook(&mut self, shutdown: &Shutdown) -> Result<Arc<Webhook>, DaemonError> {
        let webhook = self.indexed_webhook(shutdown)?;
        webhook.register_metrics(self.metrics.registry_mut());
        Ok(webhook)
    }

    /// The webhook over the manifests, or over the cluster's caches.
    fn indexed_webhook(&mut self, shutdown: &Shutdown) -> Result<Arc<Webhook>, DaemonError> {
        let (gates, options) = (self.settings.gates, self.settings.options.clone());
        let memo_bytes = self.settings.patch_memo_bytes;
        match &self.settings.index {
            IndexSource::Manifests(dir) => {
                let webhook = standalone::start(dir, gates, options, memo_bytes, shutdown.wait())?;
                self.readiness.set_synced();
                Ok(webhook)
            }
            IndexSource::Cluster {
                namespace,
                quota_fit,
                oom_retry,
                lease,
            } => {
                let client = self.client.clone().ok_or(DaemonError::NoClient)?;
                let mode = ClusterMode {
                    client: client.clone(),
                    namespace,
                    quota_fit: *quota_fit,
                    lease: lease.clone(),
                };
                let index = mode.start(&mut self.metrics, &self.readiness, shutdown);
                let mut webhook = Webhook::new(index.index, gates, options)
                    .with_patch_memo_bytes(memo_bytes)
                    .with_events(index.events);
                if let Some(rule) = oom_retry {
                    let history = LiveJobOoms::new(
                        client,
                        tokio::runtime::Handle::current(),
                        FAILED_POD_READS,
                    );
                    history.register(self.metrics.registry_mut());
                    webhook = webhook.with_retry_bump(RetryBump {
                        history: Arc::new(history),
                        rule: *rule,
                    });
                }
                Ok(Arc::new(match index.report {
                    Some(report) => webhook.with_quota_report(report),
                    None => webhook,
                }))
            }
        }
    }

    /// The serving certificate: self-managed (bootstrapped now), or read from the files (and watched).
    async fn certificate(&self, shutdown: &Shutdown) -> Result<Arc<CertResolver>, DaemonError> {
        let (files, reload_poll) = match &self.settings.certs {
            CertSource::SelfManaged(place) => {
                let sm = self_managed(place, self.client.as_ref())?;
                let bootstrapped = sm.bootstrap(&self.metrics).await;
                return bootstrapped.map_err(DaemonError::SelfManaged);
            }
            CertSource::Files { files, reload_poll } => (files, reload_poll),
        };
        let (resolver, reloader) =
            Reloader::load(files.clone(), None).map_err(DaemonError::LoadCertificate)?;
        if let Some(poll) = reload_poll {
            reloader
                .spawn(*poll, shutdown.wait())
                .map_err(DaemonError::WatchCertificate)?;
            tracing::info!(cert = %files.cert.display(), "certificate reload enabled");
        }
        Ok(resolver)
    }
}

/// The self-managed certificate at `place`, kept through `client`.
fn self_managed(
    place: &SelfManagedPlace,
    client: Option<&Client>,
) -> Result<SelfManaged, DaemonError> {
    Ok(SelfManaged {
        client: client.cloned().ok_or(DaemonError::NoClient)?,
        namespace: place.namespace.clone(),
        secret: place.secret.clone(),
        webhook_config: place.webhook_config.clone(),
        service: place.service.clone(),
    })
}

/// Cluster mode: the caches the index reads, with the status Lease renewed while they are healthy.
struct ClusterMode<'a> {
    client: Client,
    namespace: &'a str,
    quota_fit: bool,
    lease: StatusLeaseSettings,
}

/// What cluster mode's webhook is made of.
struct ClusterIndex {
    index: Index,
    events: VpaEvents,
    report: Option<QuotaReport>,
}

impl ClusterMode<'_> {
    /// Starts the status Lease, the caches, the `/scale` cache and the Event writer.
    fn start(
        self,
        metrics: &mut Metrics,
        readiness: &Readiness,
        shutdown: &Shutdown,
    ) -> ClusterIndex {
        let client = self.client;
        let gate = readiness.clone();
        tokio::spawn(
            StatusLease::new(client.clone(), self.lease)
                .run(move |quiet| gate.may_renew_lease(quiet), shutdown.wait()),
        );
        let (stores, quotas) = caches::start_caches(
            client.clone(),
            self.namespace,
            readiness.clone(),
            self.quota_fit,
        );
        // Controllers of other kinds (Argo Rollouts, custom controllers) through their `/scale`
        // subresource, fetched in the background: a review never waits on the API server.
        let scale = ScaleCache::default();
        tokio::spawn(scale.clone().run(
            client.clone(),
            stores.vpas.clone(),
            ScaleCacheSettings::default(),
            shutdown.wait(),
        ));
        // Owners created a moment ago (a rollout's new ReplicaSet) are read live, within bounds.
        let live = LiveOwners::new(
            client.clone(),
            tokio::runtime::Handle::current(),
            OWNER_READS,
        );
        let mut index = Index::from_stores(stores)
            .with_scale_lookup(Arc::new(scale))
            .with_owner_fallback(Arc::new(live));
        // Events on VPAs: pods admitted unsized, and quota fit's cuts.
        let events = VpaEvents::start(client, metrics.registry_mut());
        let mut report = None;
        if let Some(quotas) = quotas {
            index = index.with_quotas(Arc::new(quotas));
            report = Some(QuotaReport::new(metrics.registry_mut()).with_events(events.clone()));
        }
        ClusterIndex {
            index,
            events,
            report,
        }
    }
}
