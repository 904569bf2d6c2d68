//! The in-place resize: the `pods/resize` JSON Patch and the pod annotation patch
//! (docs/design/upstream-updater.md §5.5, §5.8 un-boost).

use std::borrow::Cow;
use std::collections::BTreeSet;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::LimitRange;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_core::limit_range_merge;
use tailor_core::policy::update_mode;
use tailor_core::quantity::Amount;
use tailor_core::sizing::{
    Assembly, ContainerResources, IN_PLACE_UPDATED_ANNOTATION, KEPT_IN_PLACE, LimitContext,
    PatchOptions, PodError, add_annotation_op, add_op, container_resources_from, escape,
    leave_alone, parse_boost_annotation, remove_annotation_op,
};
use tailor_crds::{RecommendedPodResources, ResourceList, UpdateMode, VerticalPodAutoscaler};

use crate::decisions::sizing;
use crate::views::pods::{self, CachedPod};

/// The two patches of one in-place update.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResizePlan {
    /// Operations for the `resize` subresource (requests and limits).
    pub resize: Vec<PatchOperation>,
    /// Operations on the pod itself (the in-place-updated annotation, removal of expired boosts).
    pub annotations: Vec<PatchOperation>,
    /// What the resize could not do and keeps instead, for its event: a limit the VPA's limit policy unsets
    /// stays in proportion, since the API server refuses removing a limit in place (docs/limit-policy.md).
    pub notes: Vec<String>,
}

/// Why no resize can be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResizeError {
    /// Sizing the pod failed (a quantity, a boost annotation).
    #[error(transparent)]
    Sizing(#[from] PodError),
    /// Processing the recommendation for the pod failed (the message of the sizing error).
    #[error("{0}")]
    Processing(String),
    /// A boost annotation does not hold the JSON the webhook writes.
    #[error("{0}")]
    BoostAnnotation(String),
    /// Nothing would change.
    #[error("no resource patches were calculated to apply")]
    NothingToApply,
    /// The API server would refuse the resize (see [`crate::decisions::resize_check`]).
    #[error("{0}")]
    Refused(String),
}

/// What the recommendation provider gives each container of the pod (index-aligned with
/// `spec.containers`): the webhook's sizing, requests from the processed target and limits in proportion
/// or by the VPA's limit policy (docs/limit-policy.md) — never removed: the API server refuses removing a
/// limit in place, so a limit the policy unsets keeps its ratio until the pod is recreated.
/// `processed` is the pod's processed recommendation (the capping processor's,
/// docs/design/upstream-updater.md §2.1: the webhook's processing with the same LimitRanges), so it is not
/// processed again here.
pub fn provider_resources(
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    processed: Option<&RecommendedPodResources>,
    limit_ranges: &[LimitRange],
) -> Result<Vec<ContainerResources>, PodError> {
    let options = PatchOptions::default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let container_item = limit_range_merge::merged_item_with_ratio(
        limit_range_merge::in_namespace(limit_ranges, namespace),
        limit_range_merge::CONTAINER,
        options.honor_max_limit_request_ratio,
    );
    let containers = sizing::containers(pod);
    let slots = sizing::slots(pod, &containers);
    let from = Assembly {
        recommendation: processed,
        container_item: container_item.as_ref(),
        limits: LimitContext {
            limit_ranges,
            namespace,
            quota_limits: &[],
            in_place: true,
        },
        ..Assembly::default()
    };
    let mut resources = container_resources_from(vpa, &slots, &from, &options)?;
    leave_alone(pods::pod_level(pod), &mut resources);
    Ok(resources)
}

/// The resize operations (docs/design/upstream-updater.md §5.5 calculator 1) for `provided` (from
/// [`provider_resources`]) and the boost keys that expired (`expired`, from [`pods::expired_boost_keys`]).
pub fn resize_operations(
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    provided: &[ContainerResources],
    expired: &[String],
) -> Result<Vec<PatchOperation>, ResizeError> {
    let off = update_mode(&vpa.spec) == UpdateMode::Off;
    let annotations = pods::boost_annotations(pod);
    let mut ops = Vec::new();
    let empty = ContainerResources::default();
    for (i, container) in pods::containers(pod).iter().enumerate() {
        // The boost key is only built for pods with expired boosts or boost annotations.
        let key = (!expired.is_empty() || annotations.is_some())
            .then(|| pods::boost_key(&container.name));
        let key = key.as_ref();
        let given = provided.get(i).unwrap_or(&empty);
        let (requests, limits): (Cow<'_, ResourceList>, Cow<'_, ResourceList>) =
            if key.is_some_and(|k| expired.contains(k)) {
                if !given.requests.is_empty() || !given.limits.is_empty() {
                    (Cow::Borrowed(&given.requests), Cow::Borrowed(&given.limits))
                } else {
                    let original = parse_boost_annotation(annotations, &container.name)
                        .map_err(ResizeError::BoostAnnotation)?
                        .unwrap_or_default();
                    (
                        Cow::Owned(original.requests.unwrap_or_default()),
                        Cow::Owned(original.limits.unwrap_or_default()),
                    )
                }
            } else if key.is_some_and(|k| annotations.is_some_and(|a| a.contains_key(k))) || off {
                continue;
            } else {
                (Cow::Borrowed(&given.requests), Cow::Borrowed(&given.limits))
            };
        let base = format!("/spec/containers/{i}/resources");
        if !container.spec_requests && !container.spec_limits {
            ops.push(add_op(&base, json!({})));
        }
        for (field, target, present) in [
            ("requests", &*requests, container.spec_requests),
            ("limits", &*limits, container.spec_limits),
        ] {
            if !present && !target.is_empty() {
                ops.push(add_op(&format!("{base}/{field}"), json!({})));
            }
            for (resource, value) in target {
                let text = canonical(value);
                let resource = escape(resource);
                let mut path = String::with_capacity(base.len() + field.len() + resource.len() + 2);
                for part in [base.as_str(), "/", field, "/", resource.as_str()] {
                    path.push_str(part);
                }
                ops.push(add_op(&path, Value::String(text)));
            }
        }
    }
    Ok(ops)
}

/// Most quantity texts [`canonical`] remembers (per thread) before it starts over.
const CANONICAL_ENTRIES: usize = 4096;

thread_local! {
    static CANONICAL: std::cell::RefCell<std::collections::HashMap<String, String>> =
        std::cell::RefCell::default();
}

/// A quantity in canonical form (as the API server stores it; the text itself when it does not parse).
/// The same few values recur across thousands of resizes: each text is parsed once per thread.
fn canonical(value: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> String {
    CANONICAL.with(|memo| {
        if let Some(hit) = memo.borrow().get(value.0.as_str()) {
            return hit.clone();
        }
        let text = Amount::parse(value)
            .map(|a| a.to_quantity().0)
            .unwrap_or_else(|_| value.0.clone());
        let mut memo = memo.borrow_mut();
        if memo.len() >= CANONICAL_ENTRIES {
            memo.clear();
        }
        memo.insert(value.0.clone(), text.clone());
        text
    })
}

/// The pod patch of an in-place update (docs/design/upstream-updater.md §5.5 calculators 2 and 3): the
/// in-place-updated annotation and the removal of expired boost annotations.
pub fn annotation_operations(pod: &CachedPod, expired: &[String]) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if !pods::has_annotations(pod) {
        ops.push(add_op("/metadata/annotations", json!({})));
    }
    ops.push(add_annotation_op(IN_PLACE_UPDATED_ANNOTATION, "true"));
    let unique: BTreeSet<&String> = expired.iter().collect();
    ops.extend(unique.into_iter().map(|k| remove_annotation_op(k)));
    ops
}

/// Both patches of an in-place update of `pod` to `vpa`'s recommendation at `now`, from the pod's processed
/// recommendation `processed` (see [`provider_resources`]).
pub fn plan_resize(
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    processed: Option<&RecommendedPodResources>,
    limit_ranges: &[LimitRange],
    boost_gate: bool,
    now: Timestamp,
) -> Result<ResizePlan, ResizeError> {
    let provided = provider_resources(pod, vpa, processed, limit_ranges)?;
    let expired = if boost_gate {
        pods::expired_boost_keys(pod, vpa, now)
    } else {
        Vec::new()
    };
    let resize = resize_operations(pod, vpa, &provided, &expired)?;
    if resize.is_empty() {
        return Err(ResizeError::NothingToApply);
    }
    let notes = provided
        .iter()
        .flat_map(|r| &r.annotations)
        .filter(|n| n.ends_with(KEPT_IN_PLACE))
        .cloned()
        .collect();
    Ok(ResizePlan {
        resize,
        annotations: annotation_operations(pod, &expired),
        notes,
    })
}
