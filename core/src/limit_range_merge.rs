//! The effective LimitRange item of a namespace (docs/design/upstream-admission.md §3.5).
//!
//! All items of one type (`Container` or `Pod`) that set `min`, `max` or `default` are merged: `max` takes
//! the lowest value per resource, `min` the highest (only cpu and memory are merged; the first item's lists
//! are taken whole), and `default` comes wholesale from the last item that has one; `maxLimitRequestRatio`
//! is carried (lowest per resource) for Tailor's opt-in ratio support. `defaultRequest` and
//! `maxLimitRequestRatio` take no part in upstream's computation (Tailor can honour the ratio, see
//! [`crate::sizing::PatchOptions`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::Amount;

/// LimitRange item type for per-container bounds.
pub const CONTAINER: &str = "Container";
/// LimitRange item type for per-pod sums.
pub const POD: &str = "Pod";

/// Resources whose bounds are merged across items.
const MERGED: [&str; 2] = ["cpu", "memory"];

fn non_empty(map: &Option<BTreeMap<String, Quantity>>) -> bool {
    map.as_ref().is_some_and(|m| !m.is_empty())
}

/// The LimitRanges that apply to a pod in `namespace`: those in that namespace, or without one.
pub fn in_namespace<'a>(
    limit_ranges: &'a [LimitRange],
    namespace: &'a str,
) -> impl Iterator<Item = &'a LimitRange> {
    limit_ranges.iter().filter(move |lr| {
        lr.metadata
            .namespace
            .as_deref()
            .is_none_or(|ns| ns == namespace)
    })
}

/// The merged item of type `kind` (`Container` or `Pod`) over `limit_ranges`, or `None` when no item of
/// that type sets `min`, `max` or `default`.
pub fn merged_item<'a>(
    limit_ranges: impl IntoIterator<Item = &'a LimitRange>,
    kind: &str,
) -> Option<LimitRangeItem> {
    merged_item_with_ratio(limit_ranges, kind, false)
}

/// Like [`merged_item`]; with `with_ratio`, items that only set `maxLimitRequestRatio` count too (Tailor's
/// opt-in ratio support). The merged ratio is the lowest per resource.
pub fn merged_item_with_ratio<'a>(
    limit_ranges: impl IntoIterator<Item = &'a LimitRange>,
    kind: &str,
    with_ratio: bool,
) -> Option<LimitRangeItem> {
    let items = limit_ranges
        .into_iter()
        .filter_map(|lr| lr.spec.as_ref())
        .flat_map(|spec| spec.limits.iter())
        .filter(|item| item.type_ == kind)
        .filter(|item| {
            non_empty(&item.min)
                || non_empty(&item.max)
                || non_empty(&item.default)
                || (with_ratio && non_empty(&item.max_limit_request_ratio))
        });
    merge_items(items, kind)
}

/// Merges LimitRange items as upstream does (see the module documentation).
pub fn merge_items<'a>(
    items: impl IntoIterator<Item = &'a LimitRangeItem>,
    kind: &str,
) -> Option<LimitRangeItem> {
    let mut result: Option<LimitRangeItem> = None;
    for item in items {
        let Some(acc) = result.as_mut() else {
            result = Some(LimitRangeItem {
                type_: kind.to_owned(),
                min: item.min.clone(),
                max: item.max.clone(),
                default: item.default.clone(),
                max_limit_request_ratio: item.max_limit_request_ratio.clone(),
                ..Default::default()
            });
            continue;
        };
        for resource in MERGED {
            merge_bound(&mut acc.max, item.max.as_ref(), resource, Ordering::Less);
            merge_bound(&mut acc.min, item.min.as_ref(), resource, Ordering::Greater);
            merge_bound(
                &mut acc.max_limit_request_ratio,
                item.max_limit_request_ratio.as_ref(),
                resource,
                Ordering::Less,
            );
        }
        if item.default.is_some() {
            acc.default = item.default.clone();
        }
    }
    result
}

/// Keeps in `acc[resource]` whichever of the two values compares as `keep` (Less → lowest).
fn merge_bound(
    acc: &mut Option<BTreeMap<String, Quantity>>,
    other: Option<&BTreeMap<String, Quantity>>,
    resource: &str,
    keep: Ordering,
) {
    let Some(candidate) = other.and_then(|m| m.get(resource)) else {
        return;
    };
    let map = acc.get_or_insert_with(BTreeMap::new);
    let replace = match map.get(resource) {
        None => true,
        Some(current) => match (Amount::parse(candidate), Amount::parse(current)) {
            (Ok(c), Ok(cur)) => c.cmp_value(&cur) == keep,
            // An unparsable value never wins over a valid one.
            (Ok(_), Err(_)) => true,
            _ => false,
        },
    };
    if replace {
        map.insert(resource.to_owned(), candidate.clone());
    }
}

/// `item.<field>[resource]` for a LimitRange bound map.
pub fn bound<'a>(
    map: Option<&'a BTreeMap<String, Quantity>>,
    resource: &str,
) -> Option<&'a Quantity> {
    map.and_then(|m| m.get(resource))
}
