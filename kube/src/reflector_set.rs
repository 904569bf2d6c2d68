//! One binary's reflectors, wired in one place: a [`ReflectorSet`] holds what each binary chooses once —
//! the client, the namespace, the list and watch settings and what a failed watch does — and starts every
//! cache from them. The updater, the webhook and the recommender start their watches through it.

use std::fmt::Debug;
use std::hash::Hash;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::quota_cache::{QuotaCache, spawn_quota_cache};
use crate::reflectors::{OnWatchError, WorkloadWriters, api, spawn_reflector, spawn_watch};

/// Drops what no lookup reads and what makes objects big: managed fields and the last-applied annotation.
pub fn strip_managed<K: Resource>(mut o: K) -> K {
    o.managed_fields_mut().clear();
    o.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    o
}

/// The reflectors of one binary: each watches `namespace` (empty = all namespaces; cluster-scoped kinds
/// always all) with one [`watcher::Config`], logs a failed attempt, reports it to one [`OnWatchError`] and
/// retries with backoff. Must be used inside a Tokio runtime.
pub struct ReflectorSet {
    client: Client,
    namespace: String,
    config: watcher::Config,
    on_error: OnWatchError,
    tasks: Vec<JoinHandle<()>>,
}

impl ReflectorSet {
    /// A set watching `namespace` with `config`, failed attempts reported to `on_error`.
    pub fn new(
        client: &Client,
        namespace: &str,
        config: watcher::Config,
        on_error: OnWatchError,
    ) -> Self {
        ReflectorSet {
            client: client.clone(),
            namespace: namespace.to_owned(),
            config,
            on_error,
            tasks: Vec::new(),
        }
    }

    /// Feeds `writer` from a watch of `K`, objects passed through `strip` first.
    pub fn reflect<K>(&mut self, writer: Writer<K>, strip: fn(K) -> K)
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let api = api::<K>(&self.client, &self.namespace);
        self.reflect_api(api, self.config.clone(), writer, strip);
    }

    /// Feeds `writer` from a watch of the cluster-scoped `K` (every object), through `strip` first.
    pub fn reflect_cluster<K>(&mut self, writer: Writer<K>, strip: fn(K) -> K)
    where
        K: Resource<Scope = ClusterResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let api = Api::<K>::all(self.client.clone());
        self.reflect_api(api, self.config.clone(), writer, strip);
    }

    /// A store of `K` fed by a reflector, objects passed through `strip` first.
    pub fn store<K>(&mut self, strip: fn(K) -> K) -> Store<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.store_where("", strip)
    }

    /// [`ReflectorSet::store`] of the objects matching the field selector `fields` (empty = all).
    pub fn store_where<K>(&mut self, fields: &str, strip: fn(K) -> K) -> Store<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let config = match fields {
            "" => self.config.clone(),
            fields => self.config.clone().fields(fields),
        };
        let writer = Writer::default();
        let store = writer.as_reader();
        let api = api::<K>(&self.client, &self.namespace);
        self.reflect_api(api, config, writer, strip);
        store
    }

    /// A store of the cluster-scoped `K` (every object, whatever the namespace), through `strip`.
    pub fn cluster_store<K>(&mut self, strip: fn(K) -> K) -> Store<K>
    where
        K: Resource<Scope = ClusterResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let writer = Writer::default();
        let store = writer.as_reader();
        self.reflect_cluster(writer, strip);
        store
    }

    /// Hands every event of a watch of `K` to `apply` (caches other than a kube-rs [`Store`]).
    pub fn watch<K>(&mut self, apply: impl FnMut(watcher::Event<K>) + Send + 'static)
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let api = api::<K>(&self.client, &self.namespace);
        let task = spawn_watch(api, self.config.clone(), apply, self.on_error.clone());
        self.tasks.push(task);
    }

    /// Feeds the workload caches of `writers`, one watch per well-known kind.
    pub fn workloads(&mut self, writers: WorkloadWriters) {
        let tasks = writers.spawn(&self.client, &self.namespace, &self.config, &self.on_error);
        self.tasks.extend(tasks);
    }

    /// The ResourceQuota cache quota fit reads (docs/decisions/quota-fit.md).
    pub fn quotas(&mut self) -> QuotaCache {
        spawn_quota_cache(
            &self.client,
            &self.namespace,
            self.config.clone(),
            self.on_error.clone(),
        )
    }

    /// The watch tasks started so far (the quota watch's excepted), to abort them.
    pub fn into_tasks(self) -> Vec<JoinHandle<()>> {
        self.tasks
    }

    fn reflect_api<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        writer: Writer<K>,
        strip: fn(K) -> K,
    ) where
        K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let task = spawn_reflector(api, config, writer, strip, self.on_error.clone());
        self.tasks.push(task);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use tailor_testkit::scenario::{ApiServer, Reply, api_server};

    use super::*;

    /// Answers the first request (a list) with an empty list of `K` and returns its URI.
    async fn answer_list<K>(api: &mut ApiServer) -> String
    where
        K: Resource + serde::Serialize,
        K::DynamicType: Default,
    {
        let list = api.next().await;
        let uri = list.received.uri();
        list.reply(Reply::list::<K>(&[], "1"));
        uri
    }

    #[tokio::test]
    async fn a_store_lists_its_namespace_with_its_field_selector_and_becomes_ready() {
        let (client, mut api) = api_server("default");
        let config = watcher::Config::default();
        let mut set = ReflectorSet::new(&client, "team", config, Arc::new(|_| {}));
        let pods = set.store_where::<Pod>("spec.nodeName!=", std::convert::identity);
        let uri = answer_list::<Pod>(&mut api).await;
        assert!(uri.starts_with("/api/v1/namespaces/team/pods?"), "{uri}");
        assert!(uri.contains("fieldSelector=spec.nodeName"), "{uri}");
        let ready = tokio::time::timeout(Duration::from_secs(5), pods.wait_until_ready()).await;
        assert!(
            ready.is_ok_and(|r| r.is_ok()),
            "the store is ready after its first list"
        );
        assert_eq!(set.into_tasks().len(), 1);
    }

    #[tokio::test]
    async fn cluster_scoped_kinds_are_watched_everywhere() {
        let (client, mut api) = api_server("default");
        let config = watcher::Config::default();
        let mut set = ReflectorSet::new(&client, "team", config, Arc::new(|_| {}));
        let _namespaces = set.cluster_store::<Namespace>(strip_managed);
        let uri = answer_list::<Namespace>(&mut api).await;
        assert!(uri.starts_with("/api/v1/namespaces?"), "{uri}");
        assert!(!uri.contains("fieldSelector"), "{uri}");
    }

    #[test]
    fn strip_managed_drops_managed_fields_and_the_last_applied_annotation() {
        let mut ns = Namespace::default();
        ns.metadata.managed_fields = Some(vec![Default::default()]);
        ns.metadata.annotations = Some(
            [
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                ("kept", "yes"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        let ns = strip_managed(ns);
        assert_eq!(ns.metadata.managed_fields, Some(vec![]));
        let annotations = ns.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["kept"]);
    }
}
