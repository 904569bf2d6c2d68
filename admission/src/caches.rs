//! In-cluster caches: Tailor VPAs in the compact [`VpaCache`], LimitRanges (managed fields and the
//! last-applied annotation dropped), ResourceQuotas (quota fit; only what the fit reads) and the shared
//! compact workload caches
//! ([`tailor_kube::workload_cache`]), feeding the [`Index`](tailor_kube::index::Index). Readiness
//! turns true once every cache has completed its initial list.

use std::sync::Arc;

use crate::vpa_cache::{VpaCache, VpaCacheWriter};
use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::reflectors::{OnWatchError, api, spawn_reflector, spawn_watch, workload_stores};
use tailor_kube::shelf::CacheStopped;

use crate::server::Readiness;
use tailor_kube::index::IndexStores;
use tailor_kube::quota_cache::{QuotaCache, spawn_quota_cache};

/// Drops what no lookup reads and what makes objects big: managed fields and the last-applied annotation.
fn strip<K: kube::Resource>(mut o: K) -> K {
    o.managed_fields_mut().clear();
    o.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    o
}

/// Starts one reflector per cached kind (namespaced when `namespace` is not empty) and marks `readiness`
/// synced once all have listed. Must run inside a Tokio runtime.
pub fn start_reflectors(client: Client, namespace: &str, readiness: Readiness) -> IndexStores {
    start_caches(client, namespace, readiness, false).0
}

/// [`start_reflectors`], plus (with `quota_fit`) the ResourceQuota cache pods are fitted into; readiness
/// then also waits for its first list.
pub fn start_caches(
    client: Client,
    namespace: &str,
    readiness: Readiness,
    quota_fit: bool,
) -> (IndexStores, Option<QuotaCache>) {
    // Lists may be served from the API server's cache. Pages of 100: a page of ReplicaSets is about 600 KB
    // of JSON held while it is decoded, and nine kinds list at once at start-up (kube-rs leaves
    // `resourceVersion=0` out of paged lists: kube-apiserver's watch cache would answer it whole).
    let config = watcher::Config::default().any_semantic().page_size(100);
    // A failing watch holds back the status Lease (its cache may be going stale).
    let failing = readiness.clone();
    let on_error: OnWatchError = Arc::new(move |_| failing.record_watch_error());
    let mut vpas = VpaCacheWriter::default();
    let vpa_cache: VpaCache = vpas.as_reader();
    let limit_ranges = Writer::default();
    let (workloads, workload_writers) = workload_stores();
    let stores = IndexStores {
        vpas: Arc::new(vpa_cache.clone()),
        workloads,
        limit_ranges: limit_ranges.as_reader(),
    };
    spawn_watch(
        api::<VerticalPodAutoscaler>(&client, namespace),
        config.clone(),
        move |event| vpas.apply_watcher_event(&event),
        on_error.clone(),
    );
    spawn_reflector(
        api::<LimitRange>(&client, namespace),
        config.clone(),
        limit_ranges,
        strip,
        on_error.clone(),
    );
    let quotas =
        quota_fit.then(|| spawn_quota_cache(&client, namespace, config.clone(), on_error.clone()));
    workload_writers.spawn(&client, namespace, &config, &on_error);
    let ready = stores.clone();
    let quotas_ready = quotas.clone();
    tokio::spawn(async move {
        let synced = async {
            vpa_cache.wait_until_ready().await?;
            if let Some(quotas) = &quotas_ready {
                quotas.wait_until_ready().await?;
            }
            let limit_ranges = ready.limit_ranges.wait_until_ready().await;
            limit_ranges.map_err(|_| CacheStopped("LimitRange"))?;
            ready.workloads.wait_until_ready().await
        };
        match synced.await {
            Ok(()) => {
                tracing::info!("caches synced; ready");
                readiness.set_synced();
            }
            Err(e) => tracing::error!(error = %e, "a cache stopped before its first list"),
        }
    });
    (stores, quotas)
}
