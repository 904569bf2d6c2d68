//! Clamping recommendations to a container policy's `minAllowed` / `maxAllowed`.
//!
//! A zero or absent bound is ignored. The recommender clamps `target`, `lowerBound` and `upperBound` with
//! [`apply_vpa_policy`] (per-container maximums win over the global maximum; `uncappedTarget` is left
//! alone). The admission webhook uses [`cap_to_policy`] and [`cap_to_limits`] per field and keeps the
//! annotations they return for `target`.

use std::cmp::Ordering;

use crate::policy::container_policy;
use crate::quantity::{self, QuantityError};
use tailor_crds::vpa::{
    ContainerResourcePolicy, PodResourcePolicy, RecommendedContainerResources,
    RecommendedPodResources, ResourceList,
};

/// Raises each resource in `values` to the policy's non-zero `minAllowed`, then lowers it to the non-zero
/// `maxAllowed`. Returns annotations such as `cpu capped to minAllowed`, in resource order.
pub fn cap_to_policy(
    values: &mut ResourceList,
    min_allowed: Option<&ResourceList>,
    max_allowed: Option<&ResourceList>,
) -> Result<Vec<String>, QuantityError> {
    let mut notes = Vec::new();
    for (resource, value) in values.iter_mut() {
        if let Some(min) = non_zero(min_allowed, resource)?
            && quantity::cmp(value, min)? == Ordering::Less
        {
            *value = min.clone();
            notes.push(format!("{resource} capped to minAllowed"));
        }
        if let Some(max) = non_zero(max_allowed, resource)?
            && quantity::cmp(value, max)? == Ordering::Greater
        {
            *value = max.clone();
            notes.push(format!("{resource} capped to maxAllowed"));
        }
    }
    Ok(notes)
}

/// Lowers each resource in `values` that has a limit in `limits` to that limit when it is above it
/// (`RequestsOnly`: the request may not exceed the limit the user set). Compared in thousandths.
pub fn cap_to_limits(
    values: &mut ResourceList,
    limits: &ResourceList,
) -> Result<Vec<String>, QuantityError> {
    let mut notes = Vec::new();
    for (resource, value) in values.iter_mut() {
        let Some(limit) = limits.get(resource) else {
            continue;
        };
        if quantity::milli_value(value)? > quantity::milli_value(limit)? {
            *value = limit.clone();
            notes.push(format!("{resource} capped to container limit"));
        }
    }
    Ok(notes)
}

fn non_zero<'a>(
    bounds: Option<&'a ResourceList>,
    resource: &str,
) -> Result<Option<&'a k8s_openapi::apimachinery::pkg::api::resource::Quantity>, QuantityError> {
    match bounds.and_then(|b| b.get(resource)) {
        Some(q) if !quantity::is_zero(q)? => Ok(Some(q)),
        _ => Ok(None),
    }
}

/// The maximum for a container: its policy's `maxAllowed`, with resources it does not name filled in from
/// the global maximum (`--container-recommendation-max-allowed-*`).
pub fn effective_max_allowed(
    policy: Option<&ContainerResourcePolicy>,
    global_max: Option<&ResourceList>,
) -> Option<ResourceList> {
    let own = policy.and_then(|p| p.max_allowed.as_ref());
    match (own, global_max) {
        (None, None) => None,
        (Some(own), None) => Some(own.clone()),
        (None, Some(global)) => Some(global.clone()),
        (Some(own), Some(global)) => {
            let mut merged = global.clone();
            merged.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
            Some(merged)
        }
    }
}

/// Clamps one container's `target`, `lowerBound` and `upperBound`; returns the annotations for `target`.
pub fn apply_container_policy(
    rec: &mut RecommendedContainerResources,
    policy: Option<&ContainerResourcePolicy>,
    global_max: Option<&ResourceList>,
) -> Result<Vec<String>, QuantityError> {
    let min = policy.and_then(|p| p.min_allowed.as_ref());
    let max = effective_max_allowed(policy, global_max);
    let notes = cap_to_policy(&mut rec.target, min, max.as_ref())?;
    for bound in [&mut rec.lower_bound, &mut rec.upper_bound]
        .into_iter()
        .flatten()
    {
        cap_to_policy(bound, min, max.as_ref())?;
    }
    Ok(notes)
}

/// The recommender's capping post-processor: every container clamped to its policy (exact name, then `*`)
/// and the global maximum. `uncappedTarget` is untouched; the input is not modified.
pub fn apply_vpa_policy(
    recommendation: Option<&RecommendedPodResources>,
    policy: Option<&PodResourcePolicy>,
    global_max: Option<&ResourceList>,
) -> Result<Option<RecommendedPodResources>, QuantityError> {
    let Some(recommendation) = recommendation else {
        return Ok(None);
    };
    let mut out = recommendation.clone();
    for rec in out.container_recommendations.iter_mut().flatten() {
        let name = rec.container_name.clone().unwrap_or_default();
        apply_container_policy(rec, container_policy(policy, &name), global_max)?;
    }
    Ok(Some(out))
}
