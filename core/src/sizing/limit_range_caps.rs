//! Recommendations capped by the effective LimitRange items ([`crate::limit_range_merge`]): Pod-type sums
//! (docs/design/upstream-admission.md §3.4) and Container-type bounds (§3.5).

use super::{
    CPU, CPU_AND_MEMORY, CurrentResources, Field, PodError, Slot, parse, proportional_limit,
};
use crate::limit_range_merge;
use crate::quantity;
use crate::quantity::Amount;
use crate::quantity::Format;
use k8s_openapi::api::core::v1::LimitRangeItem;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use num_bigint::BigInt;
use num_traits::Zero;
use tailor_crds::RecommendedContainerResources;
use tailor_crds::ResourceList;

fn amount_of(
    resource: &str,
    q: Option<&Quantity>,
    context: impl FnOnce() -> String,
) -> Result<BigInt, PodError> {
    Ok(match q {
        Some(q) => parse(q, context)?.amount(resource),
        None => BigInt::zero(),
    })
}

/// Applies the pod-sum rule of a Pod-type LimitRange item to one resource and one field of the
/// recommendations (docs/design/upstream-admission.md §3.4). Recommendations are matched to pod containers by name; a
/// container without one counts with its current request and is left unchanged.
pub fn apply_pod_limit_range(
    recommendations: &mut [RecommendedContainerResources],
    slots: &[Slot<'_>],
    item: &LimitRangeItem,
    resource: &str,
    field: Field,
) -> Result<(), PodError> {
    let ctx = |what: &str| format!("Pod LimitRange {what}[{resource}]");
    let min = amount_of(
        resource,
        limit_range_merge::bound(item.min.as_ref(), resource),
        || ctx("min"),
    )?;
    let max = amount_of(
        resource,
        limit_range_merge::bound(item.max.as_ref(), resource),
        || ctx("max"),
    )?;
    let default = limit_range_merge::bound(item.default.as_ref(), resource);

    // (recommendation index, recommended amount) per container, and the sums.
    let mut entries: Vec<(usize, BigInt, Format)> = Vec::new();
    let mut sum_rec = BigInt::zero();
    let mut sum_lim = BigInt::zero();
    for slot in slots {
        let idx = recommendations
            .iter()
            .position(|r| r.container_name.as_deref() == Some(slot.name()));
        // A container without a recommendation takes part with its current request and is not changed.
        let rec_q = match idx {
            Some(i) => field.get(&recommendations[i]).and_then(|m| m.get(resource)),
            None => slot.current.request(resource),
        };
        let rec_amount = amount_of(resource, rec_q, || {
            format!("recommendation for {}", slot.name())
        })?;
        let format = match rec_q {
            Some(q) => parse(q, || format!("recommendation for {}", slot.name()))?.format,
            None => Format::DecimalSi,
        };
        let (limit, _) = proportional_limit(
            resource,
            slot.current.limit(resource),
            slot.current.request(resource),
            rec_q,
            default,
        )?;
        let lim_amount = amount_of(resource, limit.as_ref(), || {
            format!("limit of {}", slot.name())
        })?;
        sum_rec += &rec_amount;
        sum_lim += lim_amount;
        if let Some(idx) = idx {
            entries.push((idx, rec_amount, format));
        }
    }

    let max_set = !max.is_zero();
    if min <= sum_lim && min <= sum_rec && (!max_set || max >= sum_lim) {
        return Ok(());
    }
    let (target, divisor, round_up) = if min > sum_rec && !sum_lim.is_zero() {
        (min.clone(), sum_rec.clone(), true)
    } else if sum_lim.is_zero() {
        return Ok(());
    } else {
        let mut target = if min > sum_lim {
            min.clone()
        } else {
            sum_lim.clone()
        };
        if max_set && max < sum_lim {
            target = max.clone();
        }
        (target, sum_lim.clone(), false)
    };
    for (idx, rec_amount, format) in entries {
        let scaled = if round_up && resource == CPU {
            quantity::mul_div_ceil(&rec_amount, &target, &divisor)
        } else {
            quantity::mul_div_floor(&rec_amount, &target, &divisor)
        };
        let Some(scaled) = scaled else { continue };
        if let Some(map) = field.get_mut(&mut recommendations[idx]) {
            map.insert(
                resource.to_owned(),
                Amount::from_amount(resource, scaled, format).to_quantity(),
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Container LimitRange (docs/design/upstream-admission.md §3.5)

/// Clamps `values` (cpu and memory) into the requests allowed by a Container-type LimitRange item for a
/// container whose current resources are `current` (docs/design/upstream-admission.md §3.5). Returns annotations.
pub(crate) fn cap_to_container_limit_range(
    values: &mut ResourceList,
    current: &CurrentResources<'_>,
    item: &LimitRangeItem,
) -> Result<Vec<String>, PodError> {
    let mut notes = Vec::new();
    for resource in CPU_AND_MEMORY {
        let Some(value) = values.get(resource) else {
            continue;
        };
        let ctx = |what: &str| format!("container LimitRange {what}[{resource}]");
        let value_amount = parse(value, || format!("recommendation[{resource}]"))?;
        let request = amount_of(resource, current.request(resource), || {
            format!("request[{resource}]")
        })?;
        let mut limit = amount_of(resource, current.limit(resource), || {
            format!("limit[{resource}]")
        })?;
        if limit.is_zero() {
            limit = amount_of(
                resource,
                limit_range_merge::bound(item.default.as_ref(), resource),
                || ctx("default"),
            )?;
        }
        let boundary = |bound: &BigInt| -> BigInt {
            if limit.is_zero() {
                BigInt::zero()
            } else if request.is_zero() {
                bound.clone()
            } else {
                quantity::mul_div_floor(&request, bound, &limit).unwrap_or_default()
            }
        };
        let min_q = limit_range_merge::bound(item.min.as_ref(), resource);
        let max_q = limit_range_merge::bound(item.max.as_ref(), resource);
        let min = amount_of(resource, min_q, || ctx("min"))?;
        let max = amount_of(resource, max_q, || ctx("max"))?;
        let max_request = boundary(&max);
        let min_request = boundary(&min).max(min.clone());
        let mut current_amount = value_amount.amount(resource);
        let mut new_value: Option<Quantity> = None;
        if !min_request.is_zero() && current_amount < min_request {
            let format = min_q
                .and_then(|q| Amount::parse(q).ok())
                .map(|a| a.format)
                .unwrap_or_default();
            new_value =
                Some(Amount::from_amount(resource, min_request.clone(), format).to_quantity());
            current_amount = min_request;
            notes.push(format!(
                "{resource} capped to fit Min in container LimitRange"
            ));
        }
        if !max_request.is_zero() && current_amount > max_request {
            let format = max_q
                .and_then(|q| Amount::parse(q).ok())
                .map(|a| a.format)
                .unwrap_or_default();
            new_value = Some(Amount::from_amount(resource, max_request, format).to_quantity());
            notes.push(format!(
                "{resource} capped to fit Max in container LimitRange"
            ));
        }
        if let Some(v) = new_value {
            values.insert(resource.to_owned(), v);
        }
    }
    Ok(notes)
}
