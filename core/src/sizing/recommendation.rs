//! Step A: recommendation processing (docs/design/upstream-admission.md §3.3).

use super::limit_range_caps::cap_to_container_limit_range;
use super::{
    CPU_AND_MEMORY, Field, PodError, PodFloor, Slot, apply_pod_limit_range, floor_recommendations,
};
use crate::capping;
use crate::policy::container_policy;
use crate::policy::controlled_values;
use crate::quantity::Amount;
use k8s_openapi::api::core::v1::LimitRangeItem;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use tailor_crds::ControlledValues;
use tailor_crds::RecommendedContainerResources;
use tailor_crds::RecommendedPodResources;
use tailor_crds::VerticalPodAutoscaler;

/// The processed recommendation and the annotations per container name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Processed {
    /// Recommendations for pod containers only, capped.
    pub recommendation: RecommendedPodResources,
    /// Annotations per container name, in the order produced.
    pub annotations: BTreeMap<String, Vec<String>>,
}

/// Processes the VPA's recommendation for `slots` (docs/design/upstream-admission.md §3.3 step A). `None` when the VPA
/// has no
/// recommendation.
pub fn process_recommendation(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    container_item: Option<&LimitRangeItem>,
    pod_item: Option<&LimitRangeItem>,
) -> Result<Option<Processed>, PodError> {
    process_recommendation_floored(vpa, slots, container_item, pod_item, None)
}

/// [`process_recommendation`], with the recommendation first raised to `floor` ([`floor_recommendations`];
/// Tailor, docs/decisions/pod-floor.md) and then capped as usual.
pub fn process_recommendation_floored(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    container_item: Option<&LimitRangeItem>,
    pod_item: Option<&LimitRangeItem>,
    floor: Option<&PodFloor>,
) -> Result<Option<Processed>, PodError> {
    let Some(recommendation) = vpa.status.as_ref().and_then(|s| s.recommendation.as_ref()) else {
        return Ok(None);
    };
    // Only recommendations for the pod's containers take part (the others are skipped below and matched
    // to no container by the LimitRange sums), so only those are copied.
    let mut recs: Vec<RecommendedContainerResources> = recommendation
        .container_recommendations
        .iter()
        .flatten()
        .filter(|r| {
            r.container_name
                .as_deref()
                .is_some_and(|name| slots.iter().any(|s| s.name() == name))
        })
        .cloned()
        .collect();
    for rec in &mut recs {
        drop_unusable(rec);
    }
    let raised = match floor {
        Some(floor) => floor_recommendations(&mut recs, floor, slots.len())?,
        None => BTreeMap::new(),
    };

    if let Some(pod_item) = pod_item {
        // Containers with requests but no recommendation take part with their requests.
        for slot in slots {
            let has_rec = recs
                .iter()
                .any(|r| r.container_name.as_deref() == Some(slot.name()));
            let requests = slot.current.requests.filter(|r| !r.is_empty());
            if let (false, Some(requests)) = (has_rec, requests) {
                recs.push(RecommendedContainerResources {
                    container_name: Some(slot.name().to_owned()),
                    target: requests.clone(),
                    ..Default::default()
                });
            }
        }
        for field in [Field::UpperBound, Field::Target, Field::LowerBound] {
            for resource in CPU_AND_MEMORY {
                apply_pod_limit_range(&mut recs, slots, pod_item, resource, field)?;
            }
        }
    }

    let policy = vpa.spec.resource_policy.as_ref();
    let mut out = Vec::new();
    let mut annotations: BTreeMap<String, Vec<String>> = raised;
    for rec in recs {
        let Some(slot) = slots
            .iter()
            .find(|s| rec.container_name.as_deref() == Some(s.name()))
        else {
            continue;
        };
        let container_policy = container_policy(policy, slot.name());
        let requests_only = controlled_values(container_policy) == ControlledValues::RequestsOnly;
        let min = container_policy.and_then(|p| p.min_allowed.as_ref());
        let max = container_policy.and_then(|p| p.max_allowed.as_ref());
        let mut rec = rec;
        let mut notes = Vec::new();
        for field in [Field::Target, Field::LowerBound, Field::UpperBound] {
            let Some(values) = field.get_mut(&mut rec) else {
                continue;
            };
            let mut field_notes = Vec::new();
            if let Some(item) = container_item {
                field_notes.extend(cap_to_container_limit_range(values, &slot.current, item)?);
            }
            let in_policy = |source| PodError::Quantity {
                context: format!("resource policy bounds for {}", slot.name()),
                source,
            };
            field_notes.extend(capping::cap_to_policy(values, min, max).map_err(in_policy)?);
            if requests_only && let Some(limits) = slot.current.limits {
                let at_limit = |source| PodError::Quantity {
                    context: format!("current limits of {}", slot.name()),
                    source,
                };
                field_notes.extend(capping::cap_to_limits(values, limits).map_err(at_limit)?);
            }
            if field == Field::Target {
                notes = field_notes;
            }
        }
        if !notes.is_empty() {
            annotations
                .entry(slot.name().to_owned())
                .or_default()
                .extend(notes);
        }
        out.push(rec);
    }
    Ok(Some(Processed {
        recommendation: RecommendedPodResources {
            container_recommendations: Some(out),
        },
        annotations,
    }))
}

/// Removes recommended values no pod can be given: negative ones, and a zero target (no recommender measures
/// zero; a zero request would make the container best-effort for that resource). Another writer of the status
/// may have put them there; the VPA validation refuses negative values, this keeps older objects harmless.
fn drop_unusable(rec: &mut RecommendedContainerResources) {
    // Text that does not parse is left for the processing below to report. Only text with a leading minus
    // sign can be negative, so the exact parse is skipped for the rest.
    let negative = |q: &Quantity| {
        q.0.trim_start().starts_with('-') && Amount::parse(q).is_ok_and(|a| a.is_negative())
    };
    let usable_target =
        |q: &Quantity| Amount::parse(q).map_or(true, |a| !a.is_negative() && !a.is_zero());
    // Lists are rebuilt only when they hold something to drop (the usual list holds nothing).
    if !rec.target.values().all(usable_target) {
        rec.target.retain(|_, q| usable_target(q));
    }
    for list in [
        &mut rec.lower_bound,
        &mut rec.upper_bound,
        &mut rec.uncapped_target,
    ]
    .into_iter()
    .flatten()
    {
        if list.values().any(negative) {
            list.retain(|_, q| !negative(q));
        }
    }
}
