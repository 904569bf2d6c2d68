//! Step B: requests and limits from the processed recommendation (docs/design/upstream-admission.md §3.3, §3.6);
//! limits by the VPA's limit policy where it has one ([`policy_limits`], docs/limit-policy.md).

use super::limits::proportional_limits;
use super::{
    CPU_AND_MEMORY, LimitBounds, LimitContext, LimitPolicy, PatchOptions, PodError, Processed,
    Slot, parse, policy_limits,
};
use crate::policy::container_policy;
use crate::policy::controlled_values;
use crate::policy::update_mode;
use crate::quantity;
use crate::quantity::Amount;
use k8s_openapi::api::core::v1::LimitRangeItem;
use num_bigint::BigInt;
use std::collections::BTreeMap;
use tailor_crds::ControlledValues;
use tailor_crds::RecommendedPodResources;
use tailor_crds::ResourceList;
use tailor_crds::UpdateMode;
use tailor_crds::VerticalPodAutoscaler;

/// New requests and limits for one container; `None` maps mean "nothing to set".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerResources {
    /// Requests to set.
    pub requests: ResourceList,
    /// Limits to set.
    pub limits: ResourceList,
    /// Limits to remove: the limit policy's `unset` (docs/limit-policy.md), only for limits the container
    /// has and never in place ([`LimitContext::in_place`]).
    pub removed_limits: Vec<&'static str>,
    /// Annotations (capping notes, limit notes).
    pub annotations: Vec<String>,
}

/// Extra behaviour of [`container_resources`] for callers other than the webhook.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblyOptions {
    /// Back-fill cpu/memory the recommendation does not name from the current values (upstream's
    /// in-place updater path; the webhook leaves it off).
    pub add_all: bool,
}

/// Requests and limits per slot (docs/design/upstream-admission.md §3.3 step B), from the processed recommendation.
/// A limit policy is applied without LimitRange or quota bounds: the webhook and the updater give those
/// through [`container_resources_from`].
pub fn container_resources(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    processed: Option<&Processed>,
    container_item: Option<&LimitRangeItem>,
    assembly: AssemblyOptions,
    options: &PatchOptions,
) -> Result<Vec<ContainerResources>, PodError> {
    let from = Assembly {
        recommendation: processed.map(|p| &p.recommendation),
        annotations: processed.map(|p| &p.annotations),
        container_item,
        assembly,
        limits: LimitContext::default(),
    };
    container_resources_from(vpa, slots, &from, options)
}

/// What [`container_resources_from`] assembles from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Assembly<'a> {
    /// The processed recommendation ([`Processed::recommendation`]); `None`: nothing to set.
    pub recommendation: Option<&'a RecommendedPodResources>,
    /// The capping notes per container ([`Processed::annotations`]); `None`: no notes.
    pub annotations: Option<&'a BTreeMap<String, Vec<String>>>,
    /// The namespace's merged Container-type LimitRange item.
    pub container_item: Option<&'a LimitRangeItem>,
    /// Extra behaviour for callers other than the webhook.
    pub assembly: AssemblyOptions,
    /// What decides limits besides the VPA's limit policy (read only when the VPA has one).
    pub limits: LimitContext<'a>,
}

/// [`container_resources`] from a processed recommendation held apart from its notes (the updater keeps
/// the recommendation it processed for priorities and sizes its resizes from it, without processing
/// again).
pub fn container_resources_from(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    from: &Assembly<'_>,
    options: &PatchOptions,
) -> Result<Vec<ContainerResources>, PodError> {
    let (container_item, assembly) = (from.container_item, from.assembly);
    let policy = vpa.spec.resource_policy.as_ref();
    let vpa_off = update_mode(&vpa.spec) == UpdateMode::Off;
    let defaults = container_item.and_then(|i| i.default.as_ref());
    // A VPA without a limit policy (or one that does not parse, which its callers report) keeps the ratio
    // everywhere, exactly as upstream.
    let limit_policy = LimitPolicy::or_keep_ratio(vpa);
    let bounds = (!limit_policy.is_keep_ratio()).then(|| LimitBounds::of(&from.limits));
    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        let rec = from.recommendation.and_then(|r| {
            r.container_recommendations
                .iter()
                .flatten()
                .find(|r| r.container_name.as_deref() == Some(slot.name()))
        });
        let Some(rec) = rec else {
            out.push(ContainerResources::default());
            continue;
        };
        let mut resources = ContainerResources {
            annotations: from
                .annotations
                .and_then(|a| a.get(slot.name()))
                .cloned()
                .unwrap_or_default(),
            ..Default::default()
        };
        resources.requests = rec.target.clone();
        let values = if vpa_off {
            ControlledValues::RequestsAndLimits
        } else {
            controlled_values(container_policy(policy, slot.name()))
        };
        if values == ControlledValues::RequestsAndLimits {
            let limits = Limits {
                defaults,
                container_item,
                policy: &limit_policy,
                bounds: bounds.as_ref(),
            };
            assemble_limits(&mut resources, slot, &limits, options)?;
        }
        if assembly.add_all {
            add_current(&mut resources, slot);
        }
        resources.requests.remove("");
        resources.limits.remove("");
        out.push(resources);
    }
    Ok(out)
}

/// What one container's limits are assembled from.
struct Limits<'a> {
    /// The container LimitRange's `default`.
    defaults: Option<&'a ResourceList>,
    /// The merged Container-type LimitRange item.
    container_item: Option<&'a LimitRangeItem>,
    /// The VPA's limit policy.
    policy: &'a LimitPolicy,
    /// Its bounds; `None` when the policy keeps the ratio everywhere.
    bounds: Option<&'a LimitBounds>,
}

/// The limits of `resources` (whose requests are set) for `slot`: in proportion
/// (docs/design/upstream-admission.md §3.6), or by the VPA's limit policy when it has one.
fn assemble_limits(
    resources: &mut ContainerResources,
    slot: &Slot<'_>,
    from: &Limits<'_>,
    options: &PatchOptions,
) -> Result<(), PodError> {
    if let Some(bounds) = from.bounds {
        let decided = policy_limits(
            from.policy,
            slot,
            &resources.requests,
            from.defaults,
            from.container_item,
            options,
            bounds,
        )?;
        resources.limits = decided.limits;
        resources.removed_limits = decided.removed;
        resources.annotations.extend(decided.notes);
        return Ok(());
    }
    let (mut limits, notes) =
        proportional_limits(&slot.current, &resources.requests, from.defaults)?;
    if !limits.is_empty() {
        if options.honor_max_limit_request_ratio
            && let Some(item) = from.container_item
        {
            resources
                .annotations
                .extend(cap_to_max_ratio(&mut limits, &resources.requests, item)?);
        }
        resources.limits = limits;
        resources.annotations.extend(notes);
    }
    Ok(())
}

/// Upstream's in-place path ([`AssemblyOptions::add_all`]): cpu and memory the recommendation does not name
/// keep their current values (a limit the policy removes is not added back).
fn add_current(resources: &mut ContainerResources, slot: &Slot<'_>) {
    for resource in CPU_AND_MEMORY {
        if !resources.requests.contains_key(resource)
            && let Some(q) = slot.current.request(resource)
        {
            resources.requests.insert(resource.to_owned(), q.clone());
        }
        if !resources.limits.contains_key(resource)
            && !resources.removed_limits.contains(&resource)
            && let Some(q) = slot.current.limit(resource)
        {
            resources.limits.insert(resource.to_owned(), q.clone());
        }
    }
}

/// Tailor improvement: lowers each limit to `request · maxLimitRequestRatio` of the container LimitRange.
pub(super) fn cap_to_max_ratio(
    limits: &mut ResourceList,
    requests: &ResourceList,
    item: &LimitRangeItem,
) -> Result<Vec<String>, PodError> {
    let mut notes = Vec::new();
    let Some(ratios) = item.max_limit_request_ratio.as_ref() else {
        return Ok(notes);
    };
    for (resource, limit) in limits.iter_mut() {
        let (Some(ratio), Some(request)) = (ratios.get(resource), requests.get(resource)) else {
            continue;
        };
        let ratio = parse(ratio, || format!("maxLimitRequestRatio[{resource}]"))?;
        let request = parse(request, || format!("request[{resource}]"))?;
        let current = parse(limit, || format!("limit[{resource}]"))?;
        if ratio.is_zero() {
            continue;
        }
        // The same computation in 128 bits when everything fits (the usual case).
        let small = || {
            let allowed = quantity::mul_div_floor_i128(
                request.amount_i128(resource)?,
                ratio.millis_i128()?,
                1000,
            )?;
            Some((current.amount_i128(resource)? > allowed, allowed))
        };
        if let Some((over, allowed)) = small() {
            if over {
                *limit = Amount::from_amount_i128(resource, allowed, current.format).to_quantity();
                notes.push(format!("{resource} limit capped to maxLimitRequestRatio"));
            }
            continue;
        }
        // ceiling of request · ratio, in the resource's unit, computed from thousandths of the ratio.
        let allowed = quantity::mul_div_floor(
            &request.amount(resource),
            &ratio.millis(),
            &BigInt::from(1000),
        )
        .unwrap_or_default();
        if current.amount(resource) > allowed {
            *limit = Amount::from_amount(resource, allowed, current.format).to_quantity();
            notes.push(format!("{resource} limit capped to maxLimitRequestRatio"));
        }
    }
    Ok(notes)
}
