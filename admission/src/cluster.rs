//! In-cluster caches: reflectors for Tailor VPAs and LimitRanges (managed fields and the last-applied
//! annotation dropped) and the shared workload reflectors ([`tailor_crds::cluster::reflectors`], slim
//! objects), feeding the [`Index`](crate::index::Index). Readiness turns true once every reflector has
//! completed its initial list.

use std::sync::Arc;

use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use tailor_crds::VerticalPodAutoscaler;
use tailor_crds::cluster::reflectors::{OnWatchError, api, spawn_reflector, workload_stores};
use tailor_crds::cluster::workload_cache::CacheStopped;

use crate::{index::IndexStores, server::Readiness};

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
    // Lists may be served from the API server's cache.
    let config = watcher::Config::default().any_semantic();
    let on_error: OnWatchError = Arc::new(|_| {});
    let vpas = Writer::default();
    let limit_ranges = Writer::default();
    let (workloads, workload_writers) = workload_stores();
    let stores = IndexStores {
        vpas: vpas.as_reader(),
        workloads,
        limit_ranges: limit_ranges.as_reader(),
    };
    spawn_reflector(
        api::<VerticalPodAutoscaler>(&client, namespace),
        config.clone(),
        vpas,
        strip,
        on_error.clone(),
    );
    spawn_reflector(
        api::<LimitRange>(&client, namespace),
        config.clone(),
        limit_ranges,
        strip,
        on_error.clone(),
    );
    workload_writers.spawn(&client, namespace, &config, &on_error);
    let ready = stores.clone();
    tokio::spawn(async move {
        let synced = async {
            let stopped = |kind| move |_| CacheStopped(kind);
            ready
                .vpas
                .wait_until_ready()
                .await
                .map_err(stopped("VerticalPodAutoscaler"))?;
            ready
                .limit_ranges
                .wait_until_ready()
                .await
                .map_err(stopped("LimitRange"))?;
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
    stores
}
