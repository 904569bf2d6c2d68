//! Reflectors: one watch per kind feeding a kube-rs [`Store`](kube::runtime::reflector::Store), and the seven
//! compact workload caches ([`crate::workload_cache`]) every binary matches targets against.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ReplicationController;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::shelf::CacheStopped;
use crate::workload_cache::{WorkloadCache, WorkloadCacheWriter};
use tailor_core::workload::{SlimWorkload, WorkloadKind};

/// Called after each failed watch attempt (the error is already logged); the watch retries with backoff.
pub type OnWatchError = Arc<dyn Fn(&watcher::Error) + Send + Sync>;

/// An [`Api`] over `namespace`, or over all namespaces when it is empty.
pub fn api<K>(client: &Client, namespace: &str) -> Api<K>
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

/// Watches `api` and applies every event to `writer`, objects passed through `strip` first. Watch errors
/// are logged, reported to `on_error` and retried with backoff. Must run inside a Tokio runtime.
pub fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    mut writer: Writer<K>,
    strip: fn(K) -> K,
    on_error: OnWatchError,
) -> JoinHandle<()>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_watch(
        api,
        config,
        move |event| apply_stripped(&mut writer, event, strip),
        on_error,
    )
}

/// Watches the workloads of `api` into `cache`. Must run inside a Tokio runtime.
pub fn spawn_workload_watch<K: WorkloadKind + Debug + 'static>(
    api: Api<SlimWorkload<K>>,
    config: watcher::Config,
    mut cache: WorkloadCacheWriter<K>,
    on_error: OnWatchError,
) -> JoinHandle<()> {
    spawn_watch(
        api,
        config,
        move |event| cache.apply_watcher_event(&event),
        on_error,
    )
}

/// Watches `api` and hands every event to `apply`; errors are logged, reported to `on_error` and
/// retried with backoff. Must run inside a Tokio runtime.
pub fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    mut apply: impl FnMut(watcher::Event<K>) + Send + 'static,
    on_error: OnWatchError,
) -> JoinHandle<()>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => apply(event),
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "watch failed; retrying");
                    on_error(&e);
                }
            }
        }
    })
}

/// Maps the objects of a watch event.
trait MapObjects<K> {
    fn map_objects(self, f: fn(K) -> K) -> Self;
}

impl<K> MapObjects<K> for watcher::Event<K> {
    fn map_objects(self, f: fn(K) -> K) -> Self {
        match self {
            watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
            watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
            other => other,
        }
    }
}

/// Applies one watch event to `writer`, objects passed through `strip` first.
pub fn apply_stripped<K>(writer: &mut Writer<K>, event: watcher::Event<K>, strip: fn(K) -> K)
where
    K: Resource + Clone,
    K::DynamicType: Eq + Hash + Clone,
{
    writer.apply_watcher_event(&event.map_objects(strip));
}

macro_rules! workload_stores {
    ($($field:ident: $kind:ty),+ $(,)?) => {
        /// Read handles of the workload caches, one per well-known kind.
        #[derive(Clone)]
        pub struct WorkloadStores {
            $(
                #[doc = concat!("`", stringify!($kind), "` objects.")]
                pub $field: WorkloadCache<$kind>,
            )+
        }

        /// Write handles of the workload stores: [`WorkloadWriters::spawn`] feeds them from the cluster,
        /// tests apply events directly.
        pub struct WorkloadWriters {
            $(
                #[doc = concat!("`", stringify!($kind), "` objects.")]
                pub $field: WorkloadCacheWriter<$kind>,
            )+
        }

        /// Empty workload stores and their writers.
        pub fn workload_stores() -> (WorkloadStores, WorkloadWriters) {
            let writers = WorkloadWriters { $($field: WorkloadCacheWriter::default(),)+ };
            let stores = WorkloadStores { $($field: writers.$field.as_reader(),)+ };
            (stores, writers)
        }

        impl WorkloadStores {
            /// Waits until every store has seen its first complete list.
            pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
                $(self.$field.wait_until_ready().await?;)+
                Ok(())
            }
        }

        impl WorkloadWriters {
            /// Starts one watch per kind (`namespace` empty = all namespaces) feeding these stores. Must
            /// run inside a Tokio runtime.
            pub fn spawn(
                self,
                client: &Client,
                namespace: &str,
                config: &watcher::Config,
                on_error: &OnWatchError,
            ) -> Vec<JoinHandle<()>> {
                vec![$(
                    spawn_workload_watch(
                        api::<SlimWorkload<$kind>>(client, namespace),
                        config.clone(),
                        self.$field,
                        on_error.clone(),
                    ),
                )+]
            }
        }
    };
}

workload_stores!(
    deployments: Deployment,
    replica_sets: ReplicaSet,
    stateful_sets: StatefulSet,
    daemon_sets: DaemonSet,
    jobs: Job,
    cron_jobs: CronJob,
    replication_controllers: ReplicationController,
);
