//! `VerticalPodAutoscalerCheckpoint`: the recommender's saved histograms for one (VPA, container).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

// Like upstream, the checkpoint CRD has no status subresource: `crate::crd` removes the one the derive
// adds, so the recommender writes spec and status in one request.
/// Which VPA and container a checkpoint belongs to.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.tailor.dev",
    version = "v1",
    kind = "VerticalPodAutoscalerCheckpoint",
    plural = "verticalpodautoscalercheckpoints",
    singular = "verticalpodautoscalercheckpoint",
    shortname = "tvpacheckpoint",
    category = "tailor",
    namespaced,
    status = "VerticalPodAutoscalerCheckpointStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "VerticalPodAutoscalerCheckpoint is the checkpoint of the internal state of the recommender for one container of one VerticalPodAutoscaler."
)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscalerCheckpointSpec {
    /// Name of the VPA object that stored this checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpa_object_name: Option<String>,
    /// Name of the checkpointed container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
}

/// The saved state of one container's aggregate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscalerCheckpointStatus {
    /// When the checkpoint was last written.
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub last_update_time: Option<Time>,
    /// Format version of the stored data (`v3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// CPU usage histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_histogram: Option<HistogramCheckpoint>,
    /// Memory peak histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_histogram: Option<HistogramCheckpoint>,
    /// Start of the first sample folded into the histograms.
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub first_sample_start: Option<Time>,
    /// Start of the last sample folded into the histograms.
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub last_sample_start: Option<Time>,
    /// Number of samples folded into the histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_samples_count: Option<i64>,
}

/// A histogram in checkpoint form: bucket index → weight scaled to at most 10000.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistogramCheckpoint {
    /// Reference time of the decaying weights.
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub reference_timestamp: Option<Time>,
    /// Bucket index (as a decimal string) → scaled weight.
    #[serde(default, deserialize_with = "bucket_weights")]
    #[schemars(schema_with = "schema::bucket_weights")]
    pub bucket_weights: BTreeMap<u32, u32>,
    /// Sum of the unscaled weights (never negative).
    #[serde(default)]
    #[schemars(extend("minimum" = 0))]
    pub total_weight: f64,
}

/// Reads `bucketWeights` (keys are decimal strings in JSON) as strings first: straight from the text serde
/// would parse them into `u32` itself, but buffered first (kube-rs reads a watch event whose `object` comes
/// before its `type` that way) they reach a `u32` key as plain strings and are refused. A key that is not a
/// bucket index is an error naming it; `null` is no weights.
fn bucket_weights<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<u32, u32>, D::Error> {
    use serde::de::Error as _;
    let raw: Option<BTreeMap<String, u32>> = serde::Deserialize::deserialize(d)?;
    raw.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            k.trim().parse::<u32>().map(|k| (k, v)).map_err(|_| {
                D::Error::custom(format!(
                    "bucketWeights key {:?} is not a bucket index",
                    shown(&k)
                ))
            })
        })
        .collect()
}

/// At most 32 bytes of a refused key (cut on a character boundary), with `…[N bytes]` giving the full length
/// when anything was cut: the rule of `tailor_core::text::cut`, which this crate cannot depend on.
fn shown(key: &str) -> String {
    const MAX: usize = 32;
    if key.len() <= MAX {
        return key.to_owned();
    }
    let mut end = MAX;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} bytes]", &key[..end], key.len())
}

#[cfg(test)]
mod bucket_weight_tests {
    use super::*;

    #[test]
    fn bucket_weights_decode_from_text_and_from_buffered_json() {
        let text = r#"{"referenceTimestamp": null, "bucketWeights": {"16": 10000, "3": 7}, "totalWeight": 2.5}"#;
        let direct: HistogramCheckpoint = serde_json::from_str(text).unwrap();
        assert_eq!(direct.bucket_weights, BTreeMap::from([(3, 7), (16, 10000)]));
        // Through an untagged enum, serde buffers the object first (as kube-rs does for some watch events).
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Buffered {
            Histogram(HistogramCheckpoint),
        }
        let Buffered::Histogram(buffered) = serde_json::from_str(text).unwrap();
        assert_eq!(buffered.bucket_weights, direct.bucket_weights);
        let bad = serde_json::from_str::<HistogramCheckpoint>(r#"{"bucketWeights": {"x": 1}}"#);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("\"x\" is not a bucket index")
        );
        let none: HistogramCheckpoint = serde_json::from_str(r#"{"bucketWeights": null}"#).unwrap();
        assert!(none.bucket_weights.is_empty());
    }
}
