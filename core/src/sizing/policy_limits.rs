//! The limit policy applied ([`LimitPolicy`], docs/limit-policy.md): one container's limits from its new
//! requests, by the rule the VPA's annotation gives each resource. Every place that computes limits comes
//! through here — the webhook's patch and the updater's resize through [`container_resources_from`], the
//! start-up boost through [`boosted_limit`].
//!
//! The namespace still wins over the policy:
//! - a limit the rule computes is capped by the container LimitRange's `max` and `maxLimitRequestRatio`
//!   (always, whatever `PatchOptions::honor_max_limit_request_ratio` says: the LimitRanger would refuse the
//!   pod otherwise), and never left below the request;
//! - where a Pod-type LimitRange bounds the pod's limits of a resource (`max`, `maxLimitRequestRatio`), that
//!   resource keeps its ratio: the recommendation was already processed so that proportional limits fit
//!   (docs/design/upstream-admission.md §3.4);
//! - `unset` removes a limit only where nothing requires one: not under a container LimitRange `max` or
//!   `maxLimitRequestRatio` of that resource, nor a ResourceQuota that tracks its `limits.*` (the API server
//!   refuses such a pod without the limit), nor in place (the API server refuses removing a limit from a
//!   running pod). There the limit keeps its ratio, capped as above, and a note says why.

use std::cmp::Ordering;

use super::assembly::cap_to_max_ratio;
use super::{
    CPU, CPU_AND_MEMORY, LimitPolicy, LimitRule, PatchOptions, PodError, Slot, parse, parse_opt,
    proportional_limit,
};
use crate::limit_range_merge;
use crate::quantity;
use crate::quantity::Amount;
use k8s_openapi::api::core::v1::LimitRange;
use k8s_openapi::api::core::v1::LimitRangeItem;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use num_bigint::BigInt;
use tailor_crds::ResourceList;

/// The end of the note on a limit `unset` keeps because the pod is resized in place (the updater repeats
/// such notes in its resize event).
pub const KEPT_IN_PLACE: &str = "the API server refuses removing a limit in place";

/// What decides a container's limits besides the policy and the recommendation.
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitContext<'a> {
    /// LimitRanges; those of namespaces other than `namespace` are ignored.
    pub limit_ranges: &'a [LimitRange],
    /// The pod's namespace.
    pub namespace: &'a str,
    /// Resources whose `limits.*` a ResourceQuota that charges the pod tracks
    /// ([`crate::quota::limits_tracked`]): a pod without such a limit is refused.
    pub quota_limits: &'a [&'static str],
    /// The pod is running and resized in place: a limit it has cannot be removed.
    pub in_place: bool,
}

/// The namespace's LimitRange items as the policy reads them (with their `maxLimitRequestRatio`), and the
/// rest of the [`LimitContext`]. Built once per pod, only for a VPA with a policy.
#[derive(Clone, Debug, Default)]
pub struct LimitBounds {
    container: Option<LimitRangeItem>,
    pod: Option<LimitRangeItem>,
    quota_limits: Vec<&'static str>,
    in_place: bool,
}

impl LimitBounds {
    /// The bounds of `context`.
    pub fn of(context: &LimitContext<'_>) -> Self {
        let merged = |kind| {
            limit_range_merge::merged_item_with_ratio(
                limit_range_merge::in_namespace(context.limit_ranges, context.namespace),
                kind,
                true,
            )
        };
        LimitBounds {
            container: merged(limit_range_merge::CONTAINER),
            pod: merged(limit_range_merge::POD),
            quota_limits: context.quota_limits.to_vec(),
            in_place: context.in_place,
        }
    }
}

/// Whether `item` bounds limits of `resource`: `max` or `maxLimitRequestRatio`, which the LimitRanger
/// enforces on limits (and which need a limit to be there).
fn bounds_limits(item: Option<&LimitRangeItem>, resource: &str) -> bool {
    item.is_some_and(|i| {
        limit_range_merge::bound(i.max.as_ref(), resource).is_some()
            || limit_range_merge::bound(i.max_limit_request_ratio.as_ref(), resource).is_some()
    })
}

/// One container's limits under a policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyLimits {
    /// Limits to set.
    pub limits: ResourceList,
    /// Limits to remove (`unset`).
    pub removed: Vec<&'static str>,
    /// Notes for the updates annotation.
    pub notes: Vec<String>,
}

/// How one limit is decided.
enum Decision<'r> {
    /// Upstream's keep-ratio, untouched (with why, when the rule said otherwise).
    Upstream(Option<String>),
    /// The rule, then the container LimitRange's caps.
    Rule(&'r LimitRule),
    /// `unset` where a limit is required (why): keep-ratio, then the container LimitRange's caps.
    Kept(String),
}

fn decide<'r>(
    rule: &'r LimitRule,
    resource: &str,
    has_limit: bool,
    bounds: &LimitBounds,
) -> Decision<'r> {
    if *rule == LimitRule::KeepRatio {
        return Decision::Upstream(None);
    }
    if bounds_limits(bounds.pod.as_ref(), resource) {
        return Decision::Upstream(Some(format!(
            "{resource} limit kept in proportion: a Pod LimitRange bounds the pod's {resource} limits"
        )));
    }
    if *rule != LimitRule::Unset {
        return Decision::Rule(rule);
    }
    let why = if bounds_limits(bounds.container.as_ref(), resource) {
        "the container LimitRange requires one (max or maxLimitRequestRatio)".to_owned()
    } else if bounds.quota_limits.contains(&resource) {
        format!("a ResourceQuota tracks limits.{resource}")
    } else if bounds.in_place && has_limit {
        KEPT_IN_PLACE.to_owned()
    } else {
        return Decision::Rule(rule);
    };
    Decision::Kept(format!(
        "{resource} limit kept in proportion, not unset: {why}"
    ))
}

/// The limits of the container in `slot` for its new `requests` under `policy` (which is not keep-ratio
/// everywhere: see [`LimitPolicy::is_keep_ratio`]). `defaults` is the container LimitRange's `default`, keep-ratio's
/// stand-in for a missing limit; `upstream_item` the item whose `maxLimitRequestRatio` caps keep-ratio limits
/// when `options` say so, as without a policy.
pub fn policy_limits(
    policy: &LimitPolicy,
    slot: &Slot<'_>,
    requests: &ResourceList,
    defaults: Option<&ResourceList>,
    upstream_item: Option<&LimitRangeItem>,
    options: &PatchOptions,
    bounds: &LimitBounds,
) -> Result<PolicyLimits, PodError> {
    let mut out = PolicyLimits::default();
    let mut upstream = ResourceList::new();
    for resource in CPU_AND_MEMORY {
        let current_limit = slot.current.limit(resource);
        let rule = policy.rule(slot.name(), resource);
        let keep_ratio = || {
            proportional_limit(
                resource,
                current_limit,
                slot.current.request(resource),
                requests.get(resource),
                defaults.and_then(|d| d.get(resource)),
            )
        };
        match decide(rule, resource, current_limit.is_some(), bounds) {
            Decision::Upstream(why) => {
                let (limit, note) = keep_ratio()?;
                upstream.extend(limit.map(|l| (resource.to_owned(), l)));
                out.notes.extend(why.into_iter().chain(note));
            }
            Decision::Kept(why) => {
                let (limit, note) = keep_ratio()?;
                out.notes.push(why);
                out.notes.extend(note);
                let Some(limit) = limit else { continue };
                let limit = parse(&limit, || format!("{resource} limit"))?;
                let request = parse_opt(requests.get(resource), || format!("{resource} request"))?;
                let capped =
                    capped_limit(resource, limit, request.as_ref(), bounds, &mut out.notes)?;
                out.limits.insert(resource.to_owned(), capped);
            }
            Decision::Rule(rule) => {
                let request = parse_opt(requests.get(resource), || format!("{resource} request"))?;
                let Some(request) = request.filter(|r| !r.units_zero() && !r.is_negative()) else {
                    out.notes.push(format!(
                        "{resource}: limit NOT set since recommendedRequest is nil or 0"
                    ));
                    continue;
                };
                if *rule == LimitRule::Unset {
                    if current_limit.is_some() {
                        out.removed.push(resource);
                    }
                    continue;
                }
                let limit = rule_limit(rule, resource, &request, &mut out.notes);
                let capped = capped_limit(resource, limit, Some(&request), bounds, &mut out.notes)?;
                out.limits.insert(resource.to_owned(), capped);
            }
        }
    }
    if options.honor_max_limit_request_ratio
        && let Some(item) = upstream_item
    {
        out.notes
            .extend(cap_to_max_ratio(&mut upstream, requests, item)?);
    }
    out.limits.extend(upstream);
    Ok(out)
}

/// `request+x` or `ratio:x` of `request` (in the request's format), at most the largest 64-bit amount as
/// upstream caps proportional limits. `rule` is neither keep-ratio nor unset.
fn rule_limit(
    rule: &LimitRule,
    resource: &str,
    request: &Amount,
    notes: &mut Vec<String>,
) -> Amount {
    let amount = request.amount(resource);
    let limit = match rule {
        LimitRule::RequestPlus(extra) => amount + extra.amount(resource),
        LimitRule::Ratio(thousandths) => {
            quantity::mul_div_floor(&amount, &BigInt::from(*thousandths), &BigInt::from(1000))
                .unwrap_or_else(|| amount.clone())
        }
        LimitRule::KeepRatio | LimitRule::Unset => amount,
    };
    if limit > quantity::int64_max() {
        notes.push(format!("{resource} limit capped to int64"));
        return Amount::from_amount(resource, quantity::int64_max(), request.format);
    }
    Amount::from_amount(resource, limit, request.format)
}

/// `limit` within the container LimitRange's `max` and `maxLimitRequestRatio` of `request`, then raised to
/// `request` if below it (a limit below the request is invalid); each change noted.
fn capped_limit(
    resource: &str,
    mut limit: Amount,
    request: Option<&Amount>,
    bounds: &LimitBounds,
    notes: &mut Vec<String>,
) -> Result<Quantity, PodError> {
    let item = bounds.container.as_ref();
    let ctx = |what: &str| format!("container LimitRange {what}[{resource}]");
    if let Some(max) = item.and_then(|i| limit_range_merge::bound(i.max.as_ref(), resource)) {
        let max = parse(max, || ctx("max"))?;
        if limit.cmp_value(&max) == Ordering::Greater {
            limit = max;
            notes.push(format!(
                "{resource} limit capped to fit Max in container LimitRange"
            ));
        }
    }
    let Some(request) = request else {
        return Ok(limit.to_quantity());
    };
    let ratio =
        item.and_then(|i| limit_range_merge::bound(i.max_limit_request_ratio.as_ref(), resource));
    if let Some(ratio) = ratio {
        let ratio = parse(ratio, || ctx("maxLimitRequestRatio"))?;
        let allowed = quantity::mul_div_floor(
            &request.amount(resource),
            &ratio.millis(),
            &BigInt::from(1000),
        )
        .unwrap_or_default();
        if !ratio.is_zero() && limit.amount(resource) > allowed {
            limit = Amount::from_amount(resource, allowed, limit.format);
            notes.push(format!("{resource} limit capped to maxLimitRequestRatio"));
        }
    }
    if limit.cmp_value(request) == Ordering::Less {
        limit = request.clone();
        notes.push(format!("{resource} limit raised to the request"));
    }
    Ok(limit.to_quantity())
}

/// The CPU limit of a container whose CPU request a start-up boost raised to `boosted`
/// (docs/design/upstream-admission.md §3.8), from its spec's `limit` and `request`: keep-ratio as upstream, or
/// the rule from the boosted request. `unset` keeps the ratio here: where the policy removed the limit the
/// caller adds none back.
pub fn boosted_limit(
    rule: &LimitRule,
    limit: Option<&Quantity>,
    request: Option<&Quantity>,
    boosted: &Quantity,
) -> Result<Option<Quantity>, PodError> {
    if matches!(rule, LimitRule::KeepRatio | LimitRule::Unset) {
        return Ok(proportional_limit(CPU, limit, request, Some(boosted), None)?.0);
    }
    let boosted = parse(boosted, || "boosted cpu request".into())?;
    if boosted.units_zero() || boosted.is_negative() {
        return Ok(None);
    }
    let limit = rule_limit(rule, CPU, &boosted, &mut Vec::new());
    Ok(Some(limit.to_quantity()))
}

#[cfg(test)]
mod tests;
