//! The binary's caches: the reflectors an iteration reads (VPAs, LimitRanges, ResourceQuotas, the workload
//! kinds, the controllers whose replica counts bound evictions, the scheduled pods and, when the webhook
//! selects namespaces by label, Namespaces), started through one [`ReflectorSet`], the background reads
//! of controllers of other kinds through their `/scale` subresource, and upstream VPAs
//! ([`crate::decisions::upstream`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{LimitRange, Namespace};
use kube::Client;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexStores, ScaleLookup};
use tailor_kube::reflector_set::{ReflectorSet, strip_managed};
use tailor_kube::reflectors::workload_stores;
use tailor_kube::scale_cache::{ScaleCache, ScaleCacheSettings};
use tokio::sync::watch;

use crate::views::cache_view::{
    NamespaceLabels, ReplicaStores, ScaleReplicas, governed_creator, strip_controller,
};
use crate::views::pods::CachedPod;

/// The pods an iteration looks at: scheduled and not finished.
const POD_FIELDS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// Read handles of the caches, as the iteration's [`CacheView`](crate::views::cache_view::CacheView) takes them.
pub struct Caches {
    /// Pod → VPA matching, LimitRanges, `/scale` and (with quota fit) ResourceQuotas.
    pub index: Index,
    /// Replica counts of the controllers that create pods.
    pub replicas: ReplicaStores,
    /// Namespace labels, when the webhook selects namespaces by them.
    pub namespaces: Option<NamespaceLabels>,
    /// Tailor VPAs.
    pub vpas: Store<VerticalPodAutoscaler>,
    /// Scheduled pods that have not finished, compact.
    pub pods: Store<CachedPod>,
    /// Upstream VPAs (`autoscaling.k8s.io`), trimmed, when the API serves them.
    pub upstream: tailor_kube::upstream_vpa::UpstreamVpas,
}

/// What the caches watch and how often the replica counts of other kinds are read.
pub struct CacheSettings<'a> {
    /// The namespace watched (empty: all).
    pub namespace: &'a str,
    /// Whether ResourceQuotas are cached (quota fit).
    pub quota_fit: bool,
    /// Whether Namespaces are cached (the webhook selects namespaces by label).
    pub namespace_labels: bool,
    /// Time between two reads of the replica counts of other kinds.
    pub replica_period: Duration,
}

impl Caches {
    /// Starts every watch; `synced` turns true once the VPAs and the pods have listed. Watch failures are
    /// logged and retried, nothing more. Must run inside a Tokio runtime.
    pub fn start(client: &Client, settings: &CacheSettings<'_>, synced: Arc<AtomicBool>) -> Caches {
        let config = watcher::Config::default().any_semantic();
        let mut reflectors =
            ReflectorSet::new(client, settings.namespace, config, Arc::new(|_| {}));
        let vpas = reflectors.store::<VerticalPodAutoscaler>(strip_managed);
        let limit_ranges = reflectors.store::<LimitRange>(strip_managed);
        let quotas = settings.quota_fit.then(|| reflectors.quotas());
        let (workloads, workload_writers) = workload_stores();
        reflectors.workloads(workload_writers);
        let replicas = ReplicaStores {
            replica_sets: reflectors.store(strip_controller),
            stateful_sets: reflectors.store(strip_controller),
            replication_controllers: reflectors.store(strip_controller),
            daemon_sets: reflectors.store(strip_controller),
            scaled: ScaleReplicas::default(),
        };
        let pods = reflectors.store_where::<CachedPod>(POD_FIELDS, std::convert::identity);
        let stores = IndexStores {
            vpas: Arc::new(vpas.clone()),
            workloads,
            limit_ranges,
        };
        let ready = signal_synced(vpas.clone(), pods.clone(), synced);
        let scale: Arc<dyn ScaleLookup> =
            Arc::new(start_scale_cache(client, &stores, ready.clone()));
        let refresh = ReplicaRefresh {
            replicas: replicas.scaled.clone(),
            index: Index::from_stores(stores.clone()).with_scale_lookup(scale.clone()),
            vpas: vpas.clone(),
            pods: pods.clone(),
            period: settings.replica_period,
        };
        tokio::spawn(refresh.run(client.clone(), ready));
        let mut index = Index::from_stores(stores).with_scale_lookup(scale);
        if let Some(quotas) = quotas {
            index = index.with_quotas(Arc::new(quotas));
        }
        let namespaces = settings
            .namespace_labels
            .then(|| NamespaceLabels::Store(reflectors.cluster_store::<Namespace>(strip_managed)));
        Caches {
            index,
            replicas,
            namespaces,
            vpas,
            pods,
            upstream: tailor_kube::upstream_vpa::UpstreamVpas::start(client, settings.namespace),
        }
    }
}

/// One waiter on the stores' readiness: a reflector store wakes only one of several concurrent
/// `wait_until_ready` callers (its readiness is a oneshot channel), so the others wait on the signal this
/// returns. Also sets `synced` (what `/readyz` reads).
fn signal_synced(
    vpas: Store<VerticalPodAutoscaler>,
    pods: Store<CachedPod>,
    synced: Arc<AtomicBool>,
) -> watch::Receiver<bool> {
    let (synced_tx, synced_rx) = watch::channel(false);
    tokio::spawn(async move {
        if vpas.wait_until_ready().await.is_ok() && pods.wait_until_ready().await.is_ok() {
            synced.store(true, Ordering::Relaxed);
            synced_tx.send_replace(true);
            tracing::info!("caches synced");
        }
    });
    synced_rx
}

/// Controllers of other kinds (Argo Rollouts, custom controllers) through their `/scale` subresource,
/// fetched in the background as the webhook fetches them: one decision path with `tailor plan`, whose
/// snapshot stands in for `/scale` (docs/decisions/scale-lookups.md). The cache looks up VPA targets and the
/// owners matching asked for; matching asks only in namespaces with a VPA the iteration selected. Started once
/// the VPAs are listed, so that its first refresh reads their targets.
fn start_scale_cache(
    client: &Client,
    stores: &IndexStores,
    mut ready: watch::Receiver<bool>,
) -> ScaleCache {
    let scale = ScaleCache::default();
    let (cache, client, vpas) = (scale.clone(), client.clone(), stores.vpas.clone());
    tokio::spawn(async move {
        if ready.wait_for(|synced| *synced).await.is_ok() {
            tracing::debug!("/scale cache started");
            let settings = ScaleCacheSettings::default();
            cache
                .run(client, vpas, settings, std::future::pending())
                .await;
        }
    });
    scale
}

/// Replica counts of controllers of other kinds, off the iteration's path: only the creators of pods some
/// VPA governs, answers (also "none") remembered, a bounded number of reads per refresh.
struct ReplicaRefresh {
    replicas: ScaleReplicas,
    index: Index,
    vpas: Store<VerticalPodAutoscaler>,
    pods: Store<CachedPod>,
    period: Duration,
}

impl ReplicaRefresh {
    /// Refreshes every `period` once `ready` turns true.
    async fn run(self, client: Client, mut ready: watch::Receiver<bool>) {
        if ready.wait_for(|synced| *synced).await.is_err() {
            return;
        }
        loop {
            let vpa_list = self.vpas.state();
            let wanted = ScaleReplicas::wanted(&self.pods.state(), |creator, api_version| {
                governed_creator(&self.index, &vpa_list, creator, api_version)
            });
            let wanted_count = wanted.len();
            let fetched = self
                .replicas
                .refresh(&client, wanted, Duration::from_secs(2))
                .await;
            tracing::debug!(
                controllers = wanted_count,
                fetched,
                "replica counts of other kinds refreshed"
            );
            tokio::time::sleep(self.period).await;
        }
    }
}
