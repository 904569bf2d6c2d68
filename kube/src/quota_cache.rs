//! The ResourceQuota cache the webhook and the updater fit pods into (docs/decisions/quota-fit.md): per quota only
//! what [`tailor_core::quota::Quota`] keeps — the name, the scopes and hard/used of the six tracked keys —
//! in a namespace → name map, so a review reads its namespace's quotas without scanning the others.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Client;
use kube::runtime::watcher;
use tailor_core::quota::Quota;

use crate::reflectors::{OnWatchError, api, spawn_watch};
use crate::shelf::{CacheStopped, ShelfReader, ShelfWriter};

/// Where the quotas of a namespace come from.
pub trait QuotaSource: Send + Sync {
    /// The quotas of `namespace` that bound a tracked key.
    fn quotas(&self, namespace: &str) -> Vec<Quota>;
}

/// Read handle of the cache; cheap to clone.
#[derive(Clone)]
pub struct QuotaCache {
    shelf: ShelfReader<Quota>,
}

impl QuotaCache {
    /// Waits until the writer has applied its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.shelf.wait_until_ready().await
    }

    /// How many quotas are cached.
    pub fn len(&self) -> usize {
        self.shelf.len()
    }

    /// Whether none is cached.
    pub fn is_empty(&self) -> bool {
        self.shelf.is_empty()
    }
}

impl QuotaSource for QuotaCache {
    fn quotas(&self, namespace: &str) -> Vec<Quota> {
        let mut out = Vec::new();
        self.shelf.each_in(namespace, |_, q| {
            out.push(q.clone());
            true
        });
        out
    }
}

/// Write handle: applies watch events (the watch task owns it).
pub struct QuotaCacheWriter {
    shelf: ShelfWriter<Quota>,
}

impl Default for QuotaCacheWriter {
    fn default() -> Self {
        Self {
            shelf: ShelfWriter::new("ResourceQuota"),
        }
    }
}

impl QuotaCacheWriter {
    /// A read handle.
    pub fn as_reader(&self) -> QuotaCache {
        QuotaCache {
            shelf: self.shelf.reader(),
        }
    }

    /// Applies one watch event; a quota without a tracked key is not kept.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<ResourceQuota>) {
        self.shelf.apply(event, |_, quota| Quota::of(quota));
    }
}

/// Starts the watch of ResourceQuotas (in `namespace`, or everywhere when empty). Must run inside a Tokio
/// runtime.
pub fn spawn_quota_cache(
    client: &Client,
    namespace: &str,
    config: watcher::Config,
    on_error: OnWatchError,
) -> QuotaCache {
    let mut writer = QuotaCacheWriter::default();
    let cache = writer.as_reader();
    spawn_watch(
        api::<ResourceQuota>(client, namespace),
        config,
        move |event| writer.apply_watcher_event(&event),
        on_error,
    );
    cache
}

/// A fixed set of quotas (standalone mode, previews, tests).
#[derive(Clone, Debug, Default)]
pub struct StaticQuotas {
    by_namespace: Arc<[(Box<str>, Quota)]>,
}

impl StaticQuotas {
    /// The quotas among `objects` that bound a tracked key.
    pub fn new(objects: &[ResourceQuota]) -> Self {
        let kept: Vec<(Box<str>, Quota)> = objects
            .iter()
            .filter_map(|o| {
                let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
                Quota::of(o).map(|q| (namespace.into(), q))
            })
            .collect();
        Self {
            by_namespace: kept.into(),
        }
    }
}

impl QuotaSource for StaticQuotas {
    fn quotas(&self, namespace: &str) -> Vec<Quota> {
        self.by_namespace
            .iter()
            .filter(|(ns, _)| &**ns == namespace)
            .map(|(_, q)| q.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(namespace: &str, name: &str, hard: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}},
            "spec": {"hard": hard},
            "status": {"hard": hard, "used": {"requests.cpu": "100m", "pods": "3"}}
        }))
        .unwrap()
    }

    #[test]
    fn keeps_tracked_quotas_per_namespace() {
        let mut writer = QuotaCacheWriter::default();
        let cache = writer.as_reader();
        for q in [
            quota("a", "compute", json!({"requests.cpu": "1", "pods": "10"})),
            quota("a", "counts", json!({"pods": "10"})),
            quota("b", "compute", json!({"limits.memory": "1Gi"})),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(q));
        }
        let a = cache.quotas("a");
        assert_eq!(a.len(), 1, "a quota without a tracked key is not kept");
        assert_eq!(&*a[0].name, "compute");
        assert_eq!(a[0].bounds.len(), 1);
        assert_eq!(a[0].bounds[0].used, Some(100));
        assert_eq!(cache.quotas("b").len(), 1);
        assert!(cache.quotas("c").is_empty());
        writer.apply_watcher_event(&watcher::Event::Delete(quota(
            "a",
            "compute",
            json!({"requests.cpu": "1"}),
        )));
        assert!(cache.quotas("a").is_empty());
        let fixed = StaticQuotas::new(&[quota("x", "q", json!({"cpu": "2"}))]);
        assert_eq!(fixed.quotas("x").len(), 1);
        assert!(fixed.quotas("y").is_empty());
    }
}
