//! The pod annotations Tailor writes at admission and reads back in the updater, with their parsers.

use super::CPU_AND_MEMORY;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Annotation listing what Tailor changed (upstream: `vpaUpdates`).
pub const UPDATES_ANNOTATION: &str = "tailor.dev/updates";
/// Annotation listing the containers Tailor saw at admission (upstream: `vpaObservedContainers`).
pub const OBSERVED_CONTAINERS_ANNOTATION: &str = "tailor.dev/observed-containers";
/// Upstream's updates annotation: a pod carrying it was already sized by the upstream webhook.
pub const UPSTREAM_UPDATES_ANNOTATION: &str = "vpaUpdates";
/// Prefix of the per-container annotation that keeps the resources a start-up boost replaced
/// (upstream: `vpaCpuStartupBoost/<container>`).
pub const STARTUP_BOOST_ANNOTATION_PREFIX: &str = "cpu-startup-boost.tailor.dev/";
/// Annotation the updater sets after an in-place resize (upstream: `vpaInPlaceUpdated`).
pub const IN_PLACE_UPDATED_ANNOTATION: &str = "tailor.dev/in-place-updated";

/// Parses an observed-containers annotation value (`"a, b"`); every name must be a DNS-1123 label. The
/// webhook writes it, the updater reads it.
pub fn parse_observed_containers(value: &str) -> Result<Vec<String>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(", ")
        .map(|name| {
            if is_dns1123_label(name) {
                Ok(name.to_owned())
            } else {
                Err(format!("container name {name:?} is not a DNS-1123 label"))
            }
        })
        .collect()
}

/// Whether `s` is a DNS-1123 label (lowercase alphanumerics and `-`, at most 63, alphanumeric at both ends).
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// The boost annotation value: the container's spec cpu/memory requests and limits as JSON.
pub fn boost_annotation_value(resources: Option<&ResourceRequirements>) -> String {
    let pick =
        |m: Option<&BTreeMap<String, Quantity>>| -> serde_json::Map<String, serde_json::Value> {
            m.into_iter()
                .flatten()
                .filter(|(k, _)| CPU_AND_MEMORY.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.0.clone())))
                .collect()
        };
    let requests = pick(resources.and_then(|r| r.requests.as_ref()));
    let limits = pick(resources.and_then(|r| r.limits.as_ref()));
    format!(
        "{{\"requests\":{},\"limits\":{}}}",
        serde_json::Value::Object(requests),
        serde_json::Value::Object(limits)
    )
}

/// The resources a start-up boost replaced, from the boost annotation of `container` (`None` when the
/// pod has no such annotation; an error names the annotation when its value is not the JSON the webhook
/// writes).
pub fn parse_boost_annotation(
    annotations: Option<&BTreeMap<String, String>>,
    container: &str,
) -> Result<Option<ResourceRequirements>, String> {
    let key = format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{container}");
    let Some(text) = annotations.and_then(|a| a.get(&key)) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| format!("annotation {key}: {e}"))
}
