//! In-cluster caches: Tailor VPAs in the compact [`VpaCache`], LimitRanges (managed fields and the
//! last-applied annotation dropped), ResourceQuotas (quota fit; only what the fit reads) and the shared
//! compact workload caches
//! ([`tailor_kube::workload_cache`]), feeding the [`Index`](tailor_kube::index::Index). Readiness
//! turns true once every cache has completed its initial list.

use std::sync::Arc;

use crate::vpa_cache::{VpaCache, VpaCacheWriter};
use k8s_openapi::api::core::v1::LimitRange;
use kube::Client;
use kube::runtime::watcher;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::reflector_set::{ReflectorSet, strip_managed};
use tailor_kube::reflectors::{OnWatchError, workload_stores};
use tailor_kube::shelf::CacheStopped;

use crate::server::Readiness;
use tailor_kube::index::IndexStores;
use tailor_kube::quota_cache::QuotaCache;

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
    let mut reflectors = ReflectorSet::new(&client, namespace, config, on_error);
    let mut vpas = VpaCacheWriter::default();
    let vpa_cache: VpaCache = vpas.as_reader();
    reflectors.watch::<VerticalPodAutoscaler>(move |event| vpas.apply_watcher_event(&event));
    let limit_ranges = reflectors.store::<LimitRange>(strip_managed);
    let quotas = quota_fit.then(|| reflectors.quotas());
    let (workloads, workload_writers) = workload_stores();
    reflectors.workloads(workload_writers);
    let stores = IndexStores {
        vpas: Arc::new(vpa_cache.clone()),
        workloads,
        limit_ranges,
    };
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
