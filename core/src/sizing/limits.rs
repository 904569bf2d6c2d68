//! Limits kept in proportion to requests (docs/design/upstream-admission.md §3.6).

use super::{CPU, CPU_AND_MEMORY, CurrentResources, PodError, parse_opt};
use crate::quantity;
use crate::quantity::Amount;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_crds::ResourceList;

/// The limit that keeps `original_limit / original_request` for `recommended_request`
/// (docs/design/upstream-admission.md §3.6),
/// with `default_limit` standing in for a missing or zero original limit. Returns the limit (if any) and
/// an explanatory annotation (if any).
pub fn proportional_limit(
    resource: &str,
    original_limit: Option<&Quantity>,
    original_request: Option<&Quantity>,
    recommended_request: Option<&Quantity>,
    default_limit: Option<&Quantity>,
) -> Result<(Option<Quantity>, Option<String>), PodError> {
    let ctx = |what: &str| format!("{resource} {what}");
    let mut limit = parse_opt(original_limit, || ctx("limit"))?;
    if limit.as_ref().is_none_or(Amount::units_zero) {
        limit = parse_opt(default_limit, || ctx("default limit"))?;
    }
    let Some(limit) = limit.filter(|l| !l.units_zero()) else {
        return Ok((
            None,
            Some(format!(
                "{resource}: limit NOT set since originalLimit is nil or 0"
            )),
        ));
    };
    let recommended = parse_opt(recommended_request, || ctx("recommended request"))?;
    let Some(recommended) = recommended.filter(|r| !r.units_zero()) else {
        return Ok((
            None,
            Some(format!(
                "{resource}: limit NOT set since recommendedRequest is nil or 0"
            )),
        ));
    };
    let request = parse_opt(original_request, || ctx("request"))?;
    // A negative limit or request (a pod the API server refuses anyway) must not turn into a negative limit.
    if limit.is_negative() || request.as_ref().is_some_and(Amount::is_negative) {
        return Ok((
            None,
            Some(format!(
                "{resource}: limit NOT set since originalLimit or originalRequest is negative"
            )),
        ));
    }
    let Some(request) = request.filter(|r| !r.units_zero()) else {
        return Ok((Some(recommended.to_quantity()), None));
    };
    let same = match (request.millis_i128(), limit.millis_i128()) {
        (Some(r), Some(l)) => r == l,
        _ => request.millis() == limit.millis(),
    };
    if same {
        return Ok((Some(recommended.to_quantity()), None));
    }
    if let Some(done) = scaled_in_128_bits(resource, &limit, &recommended, &request) {
        return Ok(done);
    }
    let (l, n, r) = if resource == CPU {
        (limit.millis(), recommended.millis(), request.millis())
    } else {
        (limit.units(), recommended.units(), request.units())
    };
    // `r` is non-zero here: a request whose amount is zero was handled above, except a negative one.
    let Some(scaled) = quantity::mul_div_floor(&l, &n, &r) else {
        return Ok((Some(recommended.to_quantity()), None));
    };
    if scaled > quantity::int64_max() {
        let capped = Amount::from_amount(resource, quantity::int64_max(), limit.format);
        return Ok(capped_to_int64(resource, &capped));
    }
    Ok((
        Some(Amount::from_amount(resource, scaled, limit.format).to_quantity()),
        None,
    ))
}

/// The limit capped at the largest 64-bit amount, with upstream's message (both arithmetic paths).
fn capped_to_int64(resource: &str, capped: &Amount) -> (Option<Quantity>, Option<String>) {
    (
        Some(capped.to_quantity()),
        Some(format!(
            "{resource}: failed to keep limit to request ratio; capping limit to int64"
        )),
    )
}

/// The end of [`proportional_limit`] in 128-bit arithmetic: `None` when an amount or the product does not
/// fit (the exact path then computes the same result with big integers).
fn scaled_in_128_bits(
    resource: &str,
    limit: &Amount,
    recommended: &Amount,
    request: &Amount,
) -> Option<(Option<Quantity>, Option<String>)> {
    let l = limit.amount_i128(resource)?;
    let n = recommended.amount_i128(resource)?;
    let r = request.amount_i128(resource)?;
    if r == 0 {
        return Some((Some(recommended.to_quantity()), None));
    }
    let scaled = quantity::mul_div_floor_i128(l, n, r)?;
    if scaled > i128::from(i64::MAX) {
        let capped = Amount::from_amount_i128(resource, i128::from(i64::MAX), limit.format);
        return Some(capped_to_int64(resource, &capped));
    }
    Some((
        Some(Amount::from_amount_i128(resource, scaled, limit.format).to_quantity()),
        None,
    ))
}

/// Proportional limits for cpu and memory (docs/design/upstream-admission.md §3.6). Returns the limits that got
/// a value and the annotations; an empty map means "no limits" (the caller then drops the annotations).
pub(crate) fn proportional_limits(
    current: &CurrentResources<'_>,
    new_requests: &ResourceList,
    defaults: Option<&ResourceList>,
) -> Result<(ResourceList, Vec<String>), PodError> {
    let mut limits = ResourceList::new();
    let mut notes = Vec::new();
    for resource in CPU_AND_MEMORY {
        let (limit, note) = proportional_limit(
            resource,
            current.limit(resource),
            current.request(resource),
            new_requests.get(resource),
            defaults.and_then(|d| d.get(resource)),
        )?;
        if let Some(limit) = limit {
            limits.insert(resource.to_owned(), limit);
        }
        notes.extend(note);
    }
    Ok((limits, notes))
}
