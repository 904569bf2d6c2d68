//! The webhook's VPA cache. Per VPA it keeps what matching reads — the target's kind and name and whether
//! the VPA takes part ([`is_active`]) — and the rest as compact JSON: name, namespace, uid, resourceVersion
//! and creation time, the limit-policy annotation (docs/limit-policy.md), `spec`, and
//! `status.recommendation` (conditions, labels, other annotations and managed fields dropped). Only the VPAs a pod's controller matches are decoded. A kube-rs `Store` keeps a VPA with
//! one container's recommendation as about 3.7 KiB (an `ObjectMeta`, one B-tree node per resource list, the
//! store's key); this keeps it in about 0.6 KiB. The last [`DECODED_SLOTS`] VPAs decoded are kept decoded, by
//! version, so that the pods of one workload decode their VPA once (about 5 µs of a review each).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kube::api::ObjectMeta;
use kube::runtime::watcher;

use tailor_core::sizing::LIMIT_POLICY_ANNOTATION;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerStatus};
use tailor_kube::index::{VpaSource, is_active};
use tailor_kube::shelf::{CacheStopped, Interner, ShelfReader, ShelfWriter, Sym};

/// Decoded VPAs kept for the next reviews (one slot each, by version): about 2 MiB at most with
/// [`MAX_DECODED_JSON_BYTES`], a few hundred KiB for VPAs of a few containers.
pub const DECODED_SLOTS: usize = 512;
/// VPAs kept as more JSON than this are decoded for every review instead (a decoded VPA takes about six
/// times its JSON).
pub const MAX_DECODED_JSON_BYTES: usize = 4 << 10;

/// Versions of cached VPAs: every applied watch event gets a new one.
static VERSIONS: AtomicU64 = AtomicU64::new(1);

/// One cached VPA.
#[derive(Debug)]
pub struct CompactVpa {
    /// `spec.targetRef`: API version (empty when missing), kind and name.
    target: Option<[Sym; 3]>,
    /// Whether the VPA takes part in matching.
    active: bool,
    /// The kept object as JSON.
    json: Box<[u8]>,
    /// This version's number in the process ([`VERSIONS`]).
    version: u64,
}

/// A decoded VPA and the version it was decoded from.
type DecodedSlot = Option<(u64, Arc<VerticalPodAutoscaler>)>;

/// The decoded VPAs of the last reviews, one per slot.
struct Decoded {
    slots: Vec<Mutex<DecodedSlot>>,
}

impl Default for Decoded {
    fn default() -> Self {
        Decoded {
            slots: (0..DECODED_SLOTS).map(|_| Mutex::new(None)).collect(),
        }
    }
}

impl Decoded {
    /// `v` decoded: the kept object when its slot holds this version, else decoded now (and kept when small).
    fn get(&self, v: &CompactVpa) -> Option<Arc<VerticalPodAutoscaler>> {
        if v.json.len() > MAX_DECODED_JSON_BYTES {
            return v.decode();
        }
        // Versions are consecutive: the remainder spreads them over the slots.
        let slot = &self.slots[(v.version % DECODED_SLOTS as u64) as usize];
        // A poisoned slot only means a review panicked while holding it; its content is whole.
        if let Some((version, vpa)) = &*slot.lock().unwrap_or_else(|p| p.into_inner())
            && *version == v.version
        {
            return Some(vpa.clone());
        }
        let vpa = v.decode()?;
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((v.version, vpa.clone()));
        Some(vpa)
    }
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
            // The one annotation sizing reads.
            annotations: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get_key_value(LIMIT_POLICY_ANNOTATION))
                .map(|(k, v)| [(k.clone(), v.clone())].into()),
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
        version: VERSIONS.fetch_add(1, Ordering::Relaxed),
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
    decoded: Arc<Decoded>,
}

impl VpaCache {
    /// The VPA `namespace/name` as the cache keeps it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<VerticalPodAutoscaler>> {
        self.shelf
            .with(namespace, name, |v| self.decoded.get(v))
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
                out.extend(self.decoded.get(v));
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
    decoded: Arc<Decoded>,
}

impl Default for VpaCacheWriter {
    fn default() -> Self {
        Self {
            shelf: ShelfWriter::new("VerticalPodAutoscaler"),
            decoded: Arc::default(),
        }
    }
}

impl VpaCacheWriter {
    /// A read handle.
    pub fn as_reader(&self) -> VpaCache {
        VpaCache {
            shelf: self.shelf.reader(),
            decoded: self.decoded.clone(),
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
    use tailor_crds::RecommendedContainerResources;
    use tailor_testkit::fixtures::VpaFixture;

    fn vpa(name: &str, target: &str, mode: &str) -> VerticalPodAutoscaler {
        VpaFixture::new("ns", name)
            .uid("u")
            .resource_version("9")
            .created("2026-01-01T00:00:00Z")
            .label("team", "a")
            .annotation("kubectl.kubernetes.io/last-applied-configuration", "{}")
            .target("Deployment", target)
            .mode(mode)
            .container_policy(json!({"containerName": "*", "minAllowed": {"cpu": "10m"}}))
            .recommendation_row(json!({"containerName": "app",
                "target": {"cpu": "250m", "memory": "300Mi"}, "lowerBound": {"cpu": "200m"},
                "upperBound": {"cpu": "1"}, "uncappedTarget": {"cpu": "250m"}}))
            .condition("RecommendationProvided", "True")
            .build()
    }

    #[test]
    fn a_vpa_is_decoded_once_per_version() {
        let mut writer = VpaCacheWriter::default();
        let cache = writer.as_reader();
        let mut v = vpa("a", "web", "Recreate");
        writer.apply_watcher_event(&watcher::Event::Apply(v.clone()));
        let first = cache.get("ns", "a").unwrap();
        assert!(Arc::ptr_eq(&first, &cache.get("ns", "a").unwrap()));
        let matched = cache.active_targeting("ns", "Deployment", "web");
        assert!(Arc::ptr_eq(&first, &matched[0]));
        // A new version (the recommender's status write) is decoded anew, with its content.
        v.metadata.resource_version = Some("10".into());
        v.spec.update_policy = None;
        writer.apply_watcher_event(&watcher::Event::Apply(v));
        let second = cache.get("ns", "a").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.metadata.resource_version.as_deref(), Some("10"));
        assert!(second.spec.update_policy.is_none());
        // A VPA kept as a lot of JSON is decoded for every review, not kept decoded.
        let mut large = vpa("b", "big", "Recreate");
        let recs = large
            .status
            .as_mut()
            .unwrap()
            .recommendation
            .as_mut()
            .unwrap();
        let one = recs.container_recommendations.as_ref().unwrap()[0].clone();
        recs.container_recommendations = Some(
            (0..100)
                .map(|i| RecommendedContainerResources {
                    container_name: Some(format!("c{i}")),
                    ..one.clone()
                })
                .collect(),
        );
        writer.apply_watcher_event(&watcher::Event::Apply(large));
        let b = cache.get("ns", "b").unwrap();
        assert!(!Arc::ptr_eq(&b, &cache.get("ns", "b").unwrap()));
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
        // The limit-policy annotation is kept (sizing reads it); the others are not.
        let mut annotated = full.clone();
        annotated
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(LIMIT_POLICY_ANNOTATION.into(), "cpu=unset".into());
        writer.apply_watcher_event(&watcher::Event::Apply(annotated));
        let got = cache.get("ns", "a").unwrap();
        let kept: Vec<_> = got.metadata.annotations.iter().flatten().collect();
        assert_eq!(
            kept,
            [(&LIMIT_POLICY_ANNOTATION.to_owned(), &"cpu=unset".to_owned())]
        );
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
