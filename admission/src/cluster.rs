//! In-cluster caches: kube-rs reflectors for Tailor VPAs, the workload kinds and LimitRanges, feeding the
//! [`Index`](crate::index::Index). `managedFields` and the last-applied annotation are dropped before storing.
//! Readiness turns true once every reflector has completed its initial list.

use futures::StreamExt as _;
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
    batch::v1::{CronJob, Job},
    core::v1::{LimitRange, ReplicationController},
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    runtime::{WatchStreamExt as _, reflector, watcher},
};
use tailor_crds::VerticalPodAutoscaler;

use crate::{index::IndexStores, server::Readiness};

fn api<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Starts a reflector for `K` (managedFields and the last-applied annotation stripped) and returns its store.
fn reflect<K>(
    api: Api<K>,
    ready: &mut Vec<futures::future::BoxFuture<'static, ()>>,
) -> reflector::Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|o: &mut K| {
            o.managed_fields_mut().clear();
            o.annotations_mut()
                .remove("kubectl.kubernetes.io/last-applied-configuration");
        })
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::warn!(%kind, error = %e, "watch error (retrying)");
            }
        }
    });
    let r = reader.clone();
    ready.push(Box::pin(async move {
        let _ = r.wait_until_ready().await;
    }));
    reader
}

/// Starts one reflector per cached kind (namespaced when `namespace` is not empty) and marks `readiness`
/// synced once all have listed. Must run inside a Tokio runtime.
pub fn start_reflectors(client: Client, namespace: &str, readiness: Readiness) -> IndexStores {
    let mut ready = Vec::new();
    let stores = IndexStores {
        vpas: reflect(api::<VerticalPodAutoscaler>(&client, namespace), &mut ready),
        deployments: reflect(api::<Deployment>(&client, namespace), &mut ready),
        replica_sets: reflect(api::<ReplicaSet>(&client, namespace), &mut ready),
        stateful_sets: reflect(api::<StatefulSet>(&client, namespace), &mut ready),
        daemon_sets: reflect(api::<DaemonSet>(&client, namespace), &mut ready),
        jobs: reflect(api::<Job>(&client, namespace), &mut ready),
        cron_jobs: reflect(api::<CronJob>(&client, namespace), &mut ready),
        replication_controllers: reflect(
            api::<ReplicationController>(&client, namespace),
            &mut ready,
        ),
        limit_ranges: reflect(api::<LimitRange>(&client, namespace), &mut ready),
    };
    tokio::spawn(async move {
        futures::future::join_all(ready).await;
        tracing::info!("caches synced; ready");
        readiness.set_synced();
    });
    stores
}
