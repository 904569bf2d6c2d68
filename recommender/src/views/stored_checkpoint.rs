//! A checkpoint as a restore reads it back: decoded one object at a time, so that one object the typed
//! decoder refuses (a negative bucket weight, a key that is no bucket index) costs only its own history and
//! never fails the whole list (or logs its body: kube logs a body it cannot decode at WARN).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tailor_crds::VerticalPodAutoscalerCheckpoint;

/// Longest decoder message kept for a skipped checkpoint (logs, metrics and conditions stay bounded).
pub const MESSAGE_LEN: usize = 160;

/// One stored checkpoint: its metadata and spec as far as they decode, and the typed object or why it
/// could not be decoded.
#[derive(Clone, Debug)]
pub struct StoredCheckpoint {
    /// Standard object metadata (default when even that does not decode).
    pub metadata: ObjectMeta,
    /// `spec.vpaObjectName`, read without decoding the rest.
    pub vpa: Option<String>,
    /// `spec.containerName`, read without decoding the rest.
    pub container: Option<String>,
    /// The whole object, or the decoder's message (cut to [`MESSAGE_LEN`]).
    pub decoded: Result<VerticalPodAutoscalerCheckpoint, String>,
}

impl StoredCheckpoint {
    /// Reads `value` as a checkpoint; never fails.
    pub fn from_value(value: Value) -> StoredCheckpoint {
        let metadata = value
            .get("metadata")
            .and_then(|m| ObjectMeta::deserialize(m).ok())
            .unwrap_or_default();
        let text = |field: &str| {
            value
                .get("spec")
                .and_then(|s| s.get(field))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (vpa, container) = (text("vpaObjectName"), text("containerName"));
        let decoded = VerticalPodAutoscalerCheckpoint::deserialize(value)
            .map_err(|e| tailor_core::text::cut(&e.to_string(), MESSAGE_LEN));
        StoredCheckpoint {
            metadata,
            vpa,
            container,
            decoded,
        }
    }
}

impl<'de> Deserialize<'de> for StoredCheckpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(StoredCheckpoint::from_value)
    }
}

tailor_core::trimmed_resource!(StoredCheckpoint: "autoscaling.tailor.dev", "v1", "VerticalPodAutoscalerCheckpoint", "verticalpodautoscalercheckpoints", Namespaced);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checkpoint(weights: Value) -> Value {
        json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscalerCheckpoint",
            "metadata": {"name": "web-app", "namespace": "ns"},
            "spec": {"vpaObjectName": "web", "containerName": "app"},
            "status": {"version": "v3", "cpuHistogram": {"bucketWeights": weights, "totalWeight": 1.0}}
        })
    }

    #[test]
    fn a_bad_object_in_a_list_is_named_and_the_others_decode() {
        let list = json!([
            checkpoint(json!({"3": 10000})),
            checkpoint(json!({"16": -1}))
        ]);
        let items: Vec<StoredCheckpoint> = serde_json::from_value(list).unwrap();
        assert!(items[0].decoded.is_ok());
        let bad = &items[1];
        assert_eq!(bad.metadata.name.as_deref(), Some("web-app"));
        assert_eq!(
            (bad.vpa.as_deref(), bad.container.as_deref()),
            (Some("web"), Some("app"))
        );
        let message = bad.decoded.as_ref().unwrap_err();
        assert!(message.contains("-1"), "{message}");
    }

    #[test]
    fn the_message_is_bounded_whatever_the_object() {
        let key = "9".repeat(100_000);
        let value = checkpoint(json!({ key: 1 }));
        let stored = StoredCheckpoint::from_value(value);
        let message = stored.decoded.unwrap_err();
        assert!(message.len() <= MESSAGE_LEN + 32, "{} bytes", message.len());
    }
}
