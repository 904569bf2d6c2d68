//! The VPA as the recommender's store keeps it: metadata and spec as listed, the status reduced to what
//! the status writer reads. The watch decodes each object and converts it at once, so the stored
//! recommendation's maps (four `BTreeMap`s per container, about 2.5 KB, most of a VPA object's memory) are
//! never kept: the writer compares digests, keeps the conditions' transition times, and reads the old
//! recommendation only while the metrics API fails.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use tailor_crds::{
    RecommendedPodResources, VerticalPodAutoscaler, VerticalPodAutoscalerCondition,
    VerticalPodAutoscalerSpec,
};

use crate::writers::written::StatusDigest;

/// Metadata as the VPA store keeps it: managed fields and every label but the managed-by one (which, with
/// the fleet's annotation, marks the VPAs the fleet created) go; annotations stay (post-processor switches).
fn stored_metadata(m: ObjectMeta) -> ObjectMeta {
    let managed_by = (m.labels.as_ref())
        .and_then(|l| l.get_key_value(tailor_core::fleet::MANAGED_BY_LABEL))
        .map(|(k, v)| std::collections::BTreeMap::from([(k.clone(), v.clone())]));
    ObjectMeta {
        labels: managed_by,
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        annotations: m.annotations,
        owner_references: m.owner_references,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    }
}

/// What the status writer needs of a stored status.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStatus {
    /// The digest of the whole status ([`StatusDigest::of`]).
    pub digest: StatusDigest,
    /// Its conditions.
    pub conditions: Vec<VerticalPodAutoscalerCondition>,
    /// Its recommendation, as JSON text.
    recommendation: Option<Box<str>>,
}

impl StoredStatus {
    /// The stored recommendation (read back from its JSON text; `None` if there is none).
    pub fn recommendation(&self) -> Option<RecommendedPodResources> {
        let text = self.recommendation.as_ref()?;
        serde_json::from_str(text).ok()
    }
}

/// A watched VPA: metadata (without labels and managed fields), spec, and the status as
/// [`StoredStatus`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "VerticalPodAutoscaler")]
pub struct WatchedVpa {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: VerticalPodAutoscalerSpec,
    /// Status.
    pub status: Option<StoredStatus>,
}

impl WatchedVpa {
    /// The stored status's conditions (none without a status).
    pub fn conditions(&self) -> &[VerticalPodAutoscalerCondition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }

    /// The digest of the stored status ([`StatusDigest::of`]`(None)` without one).
    pub fn status_digest(&self) -> StatusDigest {
        self.status
            .as_ref()
            .map_or_else(|| StatusDigest::of(None), |s| s.digest)
    }
}

impl From<VerticalPodAutoscaler> for WatchedVpa {
    fn from(v: VerticalPodAutoscaler) -> Self {
        let status = v.status.map(|s| StoredStatus {
            digest: StatusDigest::of(Some(&s)),
            recommendation: s
                .recommendation
                .as_ref()
                .and_then(|r| serde_json::to_string(r).ok())
                .map(String::into_boxed_str),
            conditions: s.conditions.unwrap_or_default(),
        });
        WatchedVpa {
            metadata: stored_metadata(v.metadata),
            spec: v.spec,
            status,
        }
    }
}

tailor_core::trimmed_resource!(WatchedVpa: "autoscaling.tailor.dev", "v1", "VerticalPodAutoscaler", "verticalpodautoscalers", Namespaced);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    #[test]
    fn the_kind_is_the_crds() {
        let url = |r: &str| r.to_string();
        assert_eq!(
            url(&WatchedVpa::url_path(&(), Some("ns"))),
            url(&VerticalPodAutoscaler::url_path(&(), Some("ns")))
        );
        assert_eq!(WatchedVpa::kind(&()), VerticalPodAutoscaler::kind(&()));
        assert_eq!(
            WatchedVpa::api_version(&()),
            VerticalPodAutoscaler::api_version(&())
        );
    }

    #[test]
    fn a_listed_vpa_keeps_what_the_loop_reads() {
        let json = serde_json::json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "generation": 3,
                "labels": {"a": "b", "app.kubernetes.io/managed-by": "tailor"},
                "annotations": {"tailor.dev/x": "y"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "recommenders": [{"name": "default"}]},
            "status": {"recommendation": {"containerRecommendations": [{"containerName": "app",
                    "target": {"cpu": "250m", "memory": "268435456"},
                    "lowerBound": {"cpu": "100m", "memory": "100Mi"}}]},
                "conditions": [{"type": "RecommendationProvided", "status": "True",
                    "lastTransitionTime": "2023-11-14T22:13:20Z"}],
                "observedGeneration": 3}
        });
        let full: VerticalPodAutoscaler = serde_json::from_value(json.clone()).unwrap();
        let w: WatchedVpa = serde_json::from_value(json).unwrap();
        assert_eq!(w.metadata.name.as_deref(), Some("web"));
        assert_eq!(w.metadata.generation, Some(3));
        assert!(w.metadata.managed_fields.is_none());
        // Of the labels only the managed-by one stays (the fleet's mark).
        let labels = w.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "tailor".to_owned()
            )]
        );
        assert_eq!(w.metadata.annotations, full.metadata.annotations);
        assert_eq!(w.spec, full.spec);
        let s = w.status.as_ref().unwrap();
        let stored = full.status.as_ref().unwrap();
        assert_eq!(s.digest, StatusDigest::of(Some(stored)));
        assert_eq!(w.status_digest(), StatusDigest::of(Some(stored)));
        assert_eq!(Some(&s.conditions), stored.conditions.as_ref());
        assert_eq!(w.conditions(), s.conditions.as_slice());
        assert_eq!(s.recommendation(), stored.recommendation);

        let bare = WatchedVpa::from(VerticalPodAutoscaler::new("v", Default::default()));
        assert_eq!(bare.status, None);
        assert!(bare.conditions().is_empty());
        assert_eq!(bare.status_digest(), StatusDigest::of(None));
    }
}
