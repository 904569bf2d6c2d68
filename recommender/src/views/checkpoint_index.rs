//! The checkpoints that exist, without their histograms: the VPA and container of each, fed by a watch
//! that skips every checkpoint's status unread. Restoring reads the few checkpoints it needs from the API
//! server (`crate::ingest::restore`); garbage collection needs only this index.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use serde::Deserialize;
use tailor_crds::VerticalPodAutoscalerCheckpointSpec;
use tailor_kube::shelf::{ShelfReader, ShelfWriter, Sym};

/// A checkpoint as the watch decodes it: metadata and spec. The status (the histograms, most of each
/// object) is not a field, so serde skips it without building anything.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CheckpointHead {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Which VPA and container.
    #[serde(default)]
    pub spec: VerticalPodAutoscalerCheckpointSpec,
}

tailor_core::trimmed_resource!(CheckpointHead: "autoscaling.tailor.dev", "v1", "VerticalPodAutoscalerCheckpoint", "verticalpodautoscalercheckpoints", Namespaced);

/// What the index keeps of one checkpoint (under its namespace and name).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointRef {
    /// `spec.vpaObjectName` (empty when unset).
    pub vpa: Sym,
    /// `spec.containerName` (empty when unset).
    pub container: Sym,
}

/// Read handle of the index (namespace → checkpoint name → [`CheckpointRef`]); cheap to clone.
pub type CheckpointIndex = ShelfReader<CheckpointRef>;

/// Write handle: applies watch events (the watch task owns it; tests feed it directly).
pub struct CheckpointIndexWriter {
    shelf: ShelfWriter<CheckpointRef>,
}

impl Default for CheckpointIndexWriter {
    fn default() -> Self {
        Self {
            shelf: ShelfWriter::new("VerticalPodAutoscalerCheckpoint"),
        }
    }
}

impl CheckpointIndexWriter {
    /// A read handle.
    pub fn as_reader(&self) -> CheckpointIndex {
        self.shelf.reader()
    }

    /// Applies one watch event.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<CheckpointHead>) {
        self.shelf.apply(event, |interner, c| {
            Some(CheckpointRef {
                vpa: interner.intern(c.spec.vpa_object_name.as_deref().unwrap_or_default()),
                container: interner.intern(c.spec.container_name.as_deref().unwrap_or_default()),
            })
        });
    }
}

/// `(namespace, name)` of checkpoints under upstream's name ([`crate::writers::checkpoint::legacy_checkpoint_name`]) whose
/// (VPA, container) also has one under Tailor's ([`crate::writers::checkpoint::checkpoint_name`]), in namespaces `watched`:
/// superseded, read no more and deleted by GC. An object under a name two pairs share is superseded only
/// for the pair its spec names.
pub fn superseded_checkpoints(
    checkpoints: &CheckpointIndex,
    watched: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let mut current: std::collections::HashSet<(String, String, String)> =
        std::collections::HashSet::new();
    let mut legacy = Vec::new();
    checkpoints.each(|ns, name, c| {
        if !watched(ns) {
            return;
        }
        let pair = (ns.to_owned(), c.vpa.to_string(), c.container.to_string());
        if name == crate::writers::checkpoint::checkpoint_name(&pair.1, &pair.2) {
            current.insert(pair);
        } else if name == crate::writers::checkpoint::legacy_checkpoint_name(&pair.1, &pair.2) {
            legacy.push((pair, name.to_owned()));
        }
    });
    let mut out: Vec<(String, String)> = legacy
        .into_iter()
        .filter(|(pair, _)| current.contains(pair))
        .map(|((ns, _, _), name)| (ns, name))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn head(name: &str, vpa: &str, container: &str) -> CheckpointHead {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscalerCheckpoint",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
            "spec": {"vpaObjectName": vpa, "containerName": container},
            "status": {"version": "v3", "totalSamplesCount": 9,
                "cpuHistogram": {"bucketWeights": {"0": 10000, "7": 120}, "totalWeight": 3.5,
                    "referenceTimestamp": "2026-11-01T00:00:00Z"}}
        }))
        .unwrap()
    }

    fn listed(index: &CheckpointIndex) -> Vec<(String, String, String, String)> {
        let mut out = Vec::new();
        index.each(|ns, name, r| {
            out.push((
                ns.into(),
                name.into(),
                r.vpa.to_string(),
                r.container.to_string(),
            ))
        });
        out.sort();
        out
    }

    #[test]
    fn the_kind_and_url_are_the_crds() {
        use kube::Resource as _;
        assert_eq!(
            CheckpointHead::url_path(&(), Some("ns")),
            tailor_crds::VerticalPodAutoscalerCheckpoint::url_path(&(), Some("ns"))
        );
        assert_eq!(
            CheckpointHead::kind(&()),
            tailor_crds::VerticalPodAutoscalerCheckpoint::kind(&())
        );
    }

    #[test]
    fn keeps_each_checkpoints_vpa_and_container_until_it_is_deleted() {
        let mut w = CheckpointIndexWriter::default();
        let index = w.as_reader();
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(head("web-app", "web", "app")));
        w.apply_watcher_event(&watcher::Event::InitApply(head("web-log", "web", "log")));
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(
            listed(&index),
            [
                ("ns".into(), "web-app".into(), "web".into(), "app".into()),
                ("ns".into(), "web-log".into(), "web".into(), "log".into()),
            ]
        );
        w.apply_watcher_event(&watcher::Event::Delete(head("web-app", "web", "app")));
        assert_eq!(listed(&index).len(), 1);
        // A relist drops what it no longer lists.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert!(index.is_empty());
    }
}
