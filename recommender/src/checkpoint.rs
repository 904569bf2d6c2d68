//! Checkpoints: conversion between the engine's aggregate checkpoints and the
//! `VerticalPodAutoscalerCheckpoint` resource, and the open memory windows Tailor keeps alongside.
//!
//! The status holds what upstream holds (the merged aggregate minus the open memory windows). Tailor adds
//! the open windows themselves as the annotation [`OPEN_WINDOWS_ANNOTATION`], so that after a restart a
//! still-running container continues its window, and the peak of a container that went away is kept as a
//! finished window. Upstream-compatible readers ignore the annotation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};
use tailor_crds::{
    HistogramCheckpoint as ApiHistogram, VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint,
    VerticalPodAutoscalerCheckpointSpec, VerticalPodAutoscalerCheckpointStatus,
};

use crate::time::{from_time, to_time, to_time_secs};
use tailor_engine::histogram::HistogramCheckpoint;
use tailor_engine::model::AggregateCheckpoint;
use tailor_engine::units::{Nanos, ResourceAmount};

/// Annotation holding the open memory windows of the checkpointed containers (JSON list of [`OpenWindow`]).
pub const OPEN_WINDOWS_ANNOTATION: &str = "tailor.dev/open-memory-windows";

/// The open memory window of one container instance at checkpoint time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenWindow {
    /// Pod name.
    pub pod: String,
    /// Window end (ns since the Unix epoch).
    pub end: Nanos,
    /// Peak of the window so far (bytes).
    pub peak: ResourceAmount,
}

impl From<tailor_engine::model::OpenWindow> for OpenWindow {
    fn from(w: tailor_engine::model::OpenWindow) -> Self {
        OpenWindow {
            pod: w.pod,
            end: w.end,
            peak: w.peak,
        }
    }
}

/// Checkpoint object name for a (VPA, container) pair, as upstream names it.
pub fn checkpoint_name(vpa: &str, container: &str) -> String {
    format!("{vpa}-{container}")
}

fn histogram_to_api(h: &HistogramCheckpoint) -> ApiHistogram {
    ApiHistogram {
        reference_timestamp: h.reference_timestamp.and_then(to_time),
        bucket_weights: h
            .bucket_weights
            .iter()
            .filter_map(|(&b, &w)| u32::try_from(b).ok().map(|b| (b, w)))
            .collect(),
        total_weight: h.total_weight,
    }
}

fn histogram_from_api(h: Option<&ApiHistogram>) -> HistogramCheckpoint {
    let Some(h) = h else {
        return HistogramCheckpoint::default();
    };
    HistogramCheckpoint {
        reference_timestamp: h.reference_timestamp.as_ref().and_then(from_time),
        bucket_weights: h
            .bucket_weights
            .iter()
            .map(|(&b, &w)| (i64::from(b), w))
            .collect(),
        total_weight: h.total_weight,
    }
}

/// The resource status for an engine checkpoint written at `now`.
pub fn to_api_status(
    cp: &AggregateCheckpoint,
    now: Nanos,
) -> VerticalPodAutoscalerCheckpointStatus {
    VerticalPodAutoscalerCheckpointStatus {
        last_update_time: to_time_secs(now),
        version: Some(cp.version.clone()),
        cpu_histogram: Some(histogram_to_api(&cp.cpu_histogram)),
        memory_histogram: Some(histogram_to_api(&cp.memory_histogram)),
        first_sample_start: cp.first_sample_start.and_then(to_time),
        last_sample_start: cp.last_sample_start.and_then(to_time),
        total_samples_count: i64::try_from(cp.total_samples_count).ok(),
    }
}

/// The engine checkpoint stored in a resource status (the version is checked when loading).
pub fn from_api_status(s: &VerticalPodAutoscalerCheckpointStatus) -> AggregateCheckpoint {
    AggregateCheckpoint {
        version: s.version.clone().unwrap_or_default(),
        first_sample_start: s.first_sample_start.as_ref().and_then(from_time),
        last_sample_start: s.last_sample_start.as_ref().and_then(from_time),
        total_samples_count: s
            .total_samples_count
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        cpu_histogram: histogram_from_api(s.cpu_histogram.as_ref()),
        memory_histogram: histogram_from_api(s.memory_histogram.as_ref()),
    }
}

/// The open windows recorded on a checkpoint (empty if absent or unreadable).
pub fn open_windows(cp: &VerticalPodAutoscalerCheckpoint) -> Vec<OpenWindow> {
    cp.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OPEN_WINDOWS_ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// A complete checkpoint object for `container` of `vpa`, owned by the VPA (so the API server also
/// removes it when the VPA goes).
pub fn build(
    vpa: &VerticalPodAutoscaler,
    container: &str,
    status: VerticalPodAutoscalerCheckpointStatus,
    windows: &[OpenWindow],
) -> Result<VerticalPodAutoscalerCheckpoint, serde_json::Error> {
    let vpa_name = vpa.metadata.name.clone().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    annotations.insert(
        OPEN_WINDOWS_ANNOTATION.to_string(),
        serde_json::to_string(windows)?,
    );
    let owner = vpa.metadata.uid.as_ref().map(|uid| OwnerReference {
        api_version: "autoscaling.tailor.dev/v1".into(),
        kind: "VerticalPodAutoscaler".into(),
        name: vpa_name.clone(),
        uid: uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    });
    Ok(VerticalPodAutoscalerCheckpoint {
        metadata: ObjectMeta {
            name: Some(checkpoint_name(&vpa_name, container)),
            namespace: vpa.metadata.namespace.clone(),
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: VerticalPodAutoscalerCheckpointSpec {
            vpa_object_name: Some(vpa_name),
            container_name: Some(container.into()),
        },
        status: Some(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_engine::model::{AggregateContainerState, AggregationsConfig, SampleSink};

    #[test]
    fn status_round_trip_preserves_the_aggregate() {
        let cfg = AggregationsConfig::default();
        let t = 1_700_000_000_000_000_000;
        let mut a = AggregateContainerState::new(&cfg, t);
        for i in 0..100 {
            a.add_cpu(100 + i, t + i * 60_000_000_000);
            a.add_memory(200_000_000 + i * 1000, t + 86_400_000_000_000);
        }
        let cp = a.save_to_checkpoint();
        let back = from_api_status(&to_api_status(&cp, t));
        assert_eq!(back.version, cp.version);
        assert_eq!(back.total_samples_count, cp.total_samples_count);
        assert_eq!(
            back.cpu_histogram.bucket_weights,
            cp.cpu_histogram.bucket_weights
        );
        assert_eq!(back.memory_histogram, cp.memory_histogram);
        assert_eq!(back.first_sample_start, cp.first_sample_start);
    }
}
