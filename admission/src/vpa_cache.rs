//! The webhook's VPA cache. Per VPA it keeps what matching reads — the target's kind and name and whether
//! the VPA takes part ([`is_active`]) — and the rest as compact JSON: name, namespace, uid, resourceVersion
//! and creation time, `spec`, and `status.recommendation` (conditions, labels, annotations and managed
//! fields dropped). Only the VPAs a pod's controller matches are decoded, once per review. A kube-rs `Store`
//! keeps a VPA with one container's recommendation as about 3.7 KiB (an `ObjectMeta`, one B-tree node per
//! resource list, the store's key); this keeps it in about 0.6 KiB.

use std::sync::Arc;

use kube::api::ObjectMeta;
use kube::runtime::watcher;

use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerStatus};
use tailor_kube::index::{VpaSource, is_active};
use tailor_kube::shelf::{CacheStopped, Interner, ShelfReader, ShelfWriter, Sym};

/// One cached VPA.
#[derive(Debug)]
pub struct CompactVpa {
    /// `spec.targetRef`: API version (empty when missing), kind and name.
    target: Option<[Sym; 3]>,
    /// Whether the VPA takes part in matching.
    active: bool,
    /// The kept object as JSON.
    json: Box<[u8]>,
}

/// The part of `vpa` the webhook reads.
fn kept(vpa: &VerticalPodAutoscaler) -> VerticalPodAutoscaler {
    let meta = &vpa.metadata;
    VerticalPodAutoscaler {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            // The version the webhook's patch memo tells answers apart by (`crate::pod::Version`).
            resource_version: meta.resource_version.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: vpa.spec.clone(),
        status: vpa.status.as_ref().map(|s| VerticalPodAutoscalerStatus {
            recommendation: s.recommendation.clone(),
            ..VerticalPodAutoscalerStatus::default()
        }),
    }
}

fn compact(interner: &mut Interner, vpa: &VerticalPodAutoscaler) -> Option<CompactVpa> {
    let json = match serde_json::to_vec(&kept(vpa)) {
        Ok(json) => json.into_boxed_slice(),
        Err(e) => {
            tracing::warn!(error = %e, "a VerticalPodAutoscaler cannot be cached; it is skipped");
            return None;
        }
    };
    Some(CompactVpa {
        target: vpa.spec.target_ref.as_ref().map(|t| {
            [
                interner.intern(t.api_version.as_deref().unwrap_or_default()),
                interner.intern(&t.kind),
                interner.intern(&t.name),
            ]
        }),
        active: is_active(vpa),
        json,
    })
}

impl CompactVpa {
    fn decode(&self) -> Option<Arc<VerticalPodAutoscaler>> {
        match serde_json::from_slice(&self.json) {
            Ok(vpa) => Some(Arc::new(vpa)),
            Err(e) => {
                tracing::warn!(error = %e, "a cached VerticalPodAutoscaler cannot be decoded");
                None
            }
        }
    }
}

/// Read handle; cheap to clone.
#[derive(Clone)]
pub struct VpaCache {
    shelf: ShelfReader<CompactVpa>,
}

impl VpaCache {
    /// The VPA `namespace/name` as the cache keeps it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<VerticalPodAutoscaler>> {
        self.shelf
            .with(namespace, name, CompactVpa::decode)
            .flatten()
    }

    /// How many VPAs are cached.
    pub fn len(&self) -> usize {
        self.shelf.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.shelf.is_empty()
    }

    /// Waits until the writer has applied its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.shelf.wait_until_ready().await
    }
}

impl VpaSource for VpaCache {
    fn has_active(&self, namespace: &str) -> bool {
        let mut found = false;
        self.shelf.each_in(namespace, |_, v| {
            found = v.active;
            !found
        });
        found
    }

    fn active_targeting(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<Arc<VerticalPodAutoscaler>> {
        let mut out = Vec::new();
        self.shelf.each_in(namespace, |_, v| {
            let targets = v
                .target
                .as_ref()
                .is_some_and(|[_, k, n]| &**k == kind && &**n == name);
            if v.active && targets {
                out.extend(v.decode());
            }
            true
        });
        out
    }

    fn each_target(&self, f: &mut dyn FnMut(&str, &str, &str, &str)) {
        self.shelf.each(|namespace, _, v| {
            if let Some([api_version, kind, name]) = &v.target {
                f(namespace, api_version, kind, name);
            }
        });
    }
}

/// Write handle: applies watch events (the watch task owns it).
pub struct VpaCacheWriter {
    shelf: ShelfWriter<CompactVpa>,
}

impl Default for VpaCacheWriter {
    fn default() -> Self {
        Self {
            shelf: ShelfWriter::new("VerticalPodAutoscaler"),
        }
    }
}

impl VpaCacheWriter {
    /// A read handle.
    pub fn as_reader(&self) -> VpaCache {
        VpaCache {
            shelf: self.shelf.reader(),
        }
    }

    /// Applies one watch event.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<VerticalPodAutoscaler>) {
        self.shelf.apply(event, compact);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vpa(name: &str, target: &str, mode: &str) -> VerticalPodAutoscaler {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": "ns", "uid": "u", "resourceVersion": "9",
                "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"team": "a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "updatePolicy": {"updateMode": mode},
                "resourcePolicy": {"containerPolicies": [{"containerName": "*", "minAllowed": {"cpu": "10m"}}]}},
            "status": {"recommendation": {"containerRecommendations": [{"containerName": "app",
                "target": {"cpu": "250m", "memory": "300Mi"}, "lowerBound": {"cpu": "200m"},
                "upperBound": {"cpu": "1"}, "uncappedTarget": {"cpu": "250m"}}]},
                "conditions": [{"type": "RecommendationProvided", "status": "True"}]}
        }))
        .unwrap()
    }

    #[test]
    fn keeps_what_the_webhook_reads_and_drops_the_rest() {
        let mut writer = VpaCacheWriter::default();
        let cache = writer.as_reader();
        let full = vpa("a", "web", "Recreate");
        writer.apply_watcher_event(&watcher::Event::Apply(full.clone()));
        let got = cache.get("ns", "a").unwrap();
        assert_eq!(got.spec, full.spec);
        let status = got.status.as_ref().unwrap();
        assert_eq!(
            status.recommendation,
            full.status.as_ref().unwrap().recommendation
        );
        assert!(status.conditions.is_none());
        assert_eq!(
            got.metadata.creation_timestamp,
            full.metadata.creation_timestamp
        );
        assert_eq!(got.metadata.uid.as_deref(), Some("u"));
        assert!(got.metadata.labels.is_none() && got.metadata.annotations.is_none());
    }

    #[test]
    fn matching_reads_target_and_activity_without_decoding_others() {
        let mut writer = VpaCacheWriter::default();
        let cache = writer.as_reader();
        for v in [
            vpa("a", "web", "Recreate"),
            vpa("b", "web", "Off"),
            vpa("c", "api", "Initial"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(v));
        }
        assert!(cache.has_active("ns"));
        assert!(!cache.has_active("other"));
        let web = cache.active_targeting("ns", "Deployment", "web");
        assert_eq!(web.len(), 1);
        assert_eq!(web[0].metadata.name.as_deref(), Some("a"));
        assert!(
            cache
                .active_targeting("ns", "StatefulSet", "web")
                .is_empty()
        );
        writer.apply_watcher_event(&watcher::Event::Delete(vpa("a", "web", "Recreate")));
        assert!(cache.active_targeting("ns", "Deployment", "web").is_empty());
        assert_eq!(cache.len(), 2);
    }
}
