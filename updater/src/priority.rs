//! How much a pod needs an update (upstream-updater §2.3, §2.6, §2.8).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use tailor_crds::quantity::{self, QuantityError};
use tailor_crds::{RecommendedContainerResources, RecommendedPodResources, ResourceList};

use crate::pods;

/// The update priority of a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodPriority {
    /// Some request lies outside `[lowerBound, upperBound]` (or is missing).
    pub outside_recommended_range: bool,
    /// Some target is above its request (or the request is missing).
    pub scale_up: bool,
    /// Σ over resources of |request − target| / request, on totals over the pod's containers.
    pub resource_diff: f64,
}

impl PodPriority {
    /// Upstream's order: `self < other` when only `other` scales up, or both agree and `self` changes
    /// less. `OutsideRecommendedRange` plays no part.
    pub fn less(&self, other: &PodPriority) -> bool {
        if self.scale_up != other.scale_up {
            return other.scale_up;
        }
        self.resource_diff < other.resource_diff
    }

    /// Descending order for sorting (highest priority first).
    pub fn cmp_desc(&self, other: &PodPriority) -> Ordering {
        if other.less(self) {
            Ordering::Less
        } else if self.less(other) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }
}

/// The recommendation of `container`, if any.
pub fn container_recommendation<'a>(
    rec: Option<&'a RecommendedPodResources>,
    container: &str,
) -> Option<&'a RecommendedContainerResources> {
    rec?.container_recommendations
        .iter()
        .flatten()
        .find(|r| r.container_name.as_deref() == Some(container))
}

fn milli(
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Result<i64, QuantityError> {
    quantity::milli_value(q)
}

/// The priority of `pod` for the processed recommendation `rec` (§2.3). Only observed containers count.
pub fn pod_priority(
    pod: &Pod,
    rec: Option<&RecommendedPodResources>,
) -> Result<PodPriority, QuantityError> {
    let observed = pods::observed_containers(pod);
    let mut out = PodPriority::default();
    let mut total_request: BTreeMap<&str, f64> = BTreeMap::new();
    let mut total_recommended: BTreeMap<&str, f64> = BTreeMap::new();
    for container in pods::containers(pod) {
        if !pods::is_observed(observed.as_deref(), &container.name) {
            continue;
        }
        let Some(crec) = container_recommendation(rec, &container.name) else {
            continue;
        };
        let current = pods::current(pod, container);
        for (resource, target) in &crec.target {
            let target_milli = milli(target)?;
            *total_recommended.entry(resource.as_str()).or_default() += target_milli as f64;
            match current.request(resource) {
                Some(request) => {
                    let request_milli = milli(request)?;
                    *total_request.entry(resource.as_str()).or_default() += request_milli as f64;
                    if target_milli > request_milli {
                        out.scale_up = true;
                    }
                    if outside(
                        request,
                        crec.lower_bound.as_ref(),
                        crec.upper_bound.as_ref(),
                        resource,
                    )? {
                        out.outside_recommended_range = true;
                    }
                }
                None => {
                    out.scale_up = true;
                    out.outside_recommended_range = true;
                }
            }
        }
    }
    for (resource, recommended) in &total_recommended {
        let request = total_request.get(resource).copied().unwrap_or(0.0).max(1.0);
        out.resource_diff += (request - recommended).abs() / request;
    }
    Ok(out)
}

fn outside(
    request: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    lower: Option<&ResourceList>,
    upper: Option<&ResourceList>,
    resource: &str,
) -> Result<bool, QuantityError> {
    if let Some(lb) = lower.and_then(|l| l.get(resource))
        && quantity::cmp(request, lb)? == Ordering::Less
    {
        return Ok(true);
    }
    if let Some(ub) = upper.and_then(|u| u.get(resource))
        && quantity::cmp(request, ub)? == Ordering::Greater
    {
        return Ok(true);
    }
    Ok(false)
}

/// Whether `new` recommends less than `last` for some resource of some container both name (§2.8). False
/// when either is absent.
pub fn has_lower_resource(
    last: Option<&RecommendedPodResources>,
    new: Option<&RecommendedPodResources>,
) -> Result<bool, QuantityError> {
    let (Some(last), Some(new)) = (last, new) else {
        return Ok(false);
    };
    for crec in new.container_recommendations.iter().flatten() {
        let Some(name) = crec.container_name.as_deref() else {
            continue;
        };
        let Some(old) = container_recommendation(Some(last), name) else {
            continue;
        };
        if list_has_lower(&old.target, &crec.target)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `new` is lower than `old` for some resource both name.
pub fn list_has_lower(old: &ResourceList, new: &ResourceList) -> Result<bool, QuantityError> {
    for (resource, value) in new {
        if let Some(old_value) = old.get(resource)
            && quantity::cmp(value, old_value)? == Ordering::Less
        {
            return Ok(true);
        }
    }
    Ok(false)
}
