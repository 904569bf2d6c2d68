//! The JSON patch: resource operations, Tailor's annotations and the whole pod patch
//! (docs/design/upstream-admission.md §3.7, §3.1 steps 6–8).

use std::cmp::Ordering;

use json_patch::{Patch, PatchOperation};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use num_bigint::BigInt;
use serde_json::{Value, json};
use tailor_core::policy::{container_policy, controlled_values, scaling_mode, update_mode};
use tailor_core::quantity::Amount;
use tailor_core::quota::{Charged, Quota, QuotaFit, fit_to_quotas, limits_tracked};
use tailor_core::sizing::{
    CPU, ContainerResources, EnvelopeRefused, LimitPolicy, OBSERVED_CONTAINERS_ANNOTATION,
    PatchOptions, PodError, STARTUP_BOOST_ANNOTATION_PREFIX, Slot, UPDATES_ANNOTATION,
    UPSTREAM_UPDATES_ANNOTATION, add_annotation_op, add_op, boost_annotation_value, boosted_limit,
    envelope_ops, escape, leave_pod_level_alone, parse, parse_opt, pod_envelope, pod_level_note,
    pod_level_resources, remove_annotation_op, remove_op, resources_for_slots, slots,
};
use tailor_crds::{
    ContainerResourcePolicy, ContainerScalingMode, ControlledValues, GenericStartupBoost,
    UpdateMode, VerticalPodAutoscaler,
};

use super::boost::boosted_cpu;
use super::{ContainerUpdate, PodPatch, SkipReason};

/// The resource patches for given per-slot resources (docs/design/upstream-admission.md §3.7–§3.8): operations
/// in container order and the per-container updates. `resources` is indexed like `slots`.
/// A start-up CPU boost is not applied where the pod budgets CPU at pod level (`pod_level`).
/// Per container, in this order: the start-up boost, the new requests and limits, the limits the limit policy
/// unsets.
pub fn resource_patches(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    resources: &[ContainerResources],
    pod_level: &[&str],
    options: &PatchOptions,
) -> Result<(Vec<PatchOperation>, Vec<ContainerUpdate>), PodError> {
    let policy = vpa.spec.resource_policy.as_ref();
    let vpa_off = update_mode(&vpa.spec) == UpdateMode::Off;
    let max_boost = parse_opt(options.max_allowed_cpu_boost.as_ref(), || {
        "--max-allowed-cpu-boost".into()
    })?;
    let limit_policy = LimitPolicy::or_keep_ratio(vpa);
    let mut ops = Vec::new();
    let mut updates = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let mut res = resources.get(i).cloned().unwrap_or_default();
        let container_policy = container_policy(policy, slot.name());
        let mut container_ops = Vec::new();
        if vpa_off {
            // Matched only for its boost: never apply the recommendation.
            res = ContainerResources::default();
        }
        if options.cpu_startup_boost && !pod_level.contains(&CPU) {
            if scaling_mode(container_policy) == ContainerScalingMode::Off {
                continue;
            }
            let boost = container_policy
                .and_then(|p| p.startup_boost.as_ref())
                .or(vpa.spec.startup_boost.as_ref())
                .and_then(|b| b.cpu.as_ref());
            if let Some(boost) = boost {
                container_ops.push(startup_boost(
                    slot,
                    container_policy,
                    boost,
                    &limit_policy,
                    max_boost.as_ref(),
                    &mut res,
                )?);
            }
        }
        let mut items = res.annotations.clone();
        let base = slot.path();
        let spec_resources = slot.container.resources.as_ref();
        request_and_limit_ops(&base, spec_resources, &res, &mut container_ops, &mut items);
        removed_limit_ops(&base, spec_resources, &res, &mut container_ops, &mut items);
        if container_ops.is_empty() {
            continue;
        }
        ops.extend(container_ops);
        updates.push(ContainerUpdate {
            index: slot.index,
            name: slot.name().to_owned(),
            init: slot.init,
            items,
        });
    }
    Ok((ops, updates))
}

/// The start-up CPU boost of one container (docs/design/upstream-admission.md §3.8): its CPU request in `res`
/// raised by `boost` (at most to `max`, `--max-allowed-cpu-boost`) from the new request, else the spec's; its
/// CPU limit by the same limit rule as the assembly's unless `RequestsOnly` keeps the limit. Returns the
/// annotation that keeps the spec's resources.
fn startup_boost(
    slot: &Slot<'_>,
    container_policy: Option<&ContainerResourcePolicy>,
    boost: &GenericStartupBoost,
    limit_policy: &LimitPolicy,
    max: Option<&Amount>,
    res: &mut ContainerResources,
) -> Result<PatchOperation, PodError> {
    let name = slot.name();
    let spec_resources = slot.container.resources.as_ref();
    let spec_request = spec_resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(CPU));
    let spec_limit = spec_resources
        .and_then(|r| r.limits.as_ref())
        .and_then(|m| m.get(CPU));
    let base = match res.requests.get(CPU).or(spec_request) {
        Some(q) => parse(q, || format!("cpu request of {name}"))?,
        None => Amount::zero(),
    };
    let boosted = boosted_cpu(&base, boost, max)?;
    let mut request = boosted.to_quantity();
    if controlled_values(container_policy) == ControlledValues::RequestsOnly {
        if let Some(limit) = spec_limit {
            request = under_limit(&boosted, limit, name)?.unwrap_or(request);
        }
    } else if !res.removed_limits.contains(&CPU) {
        // The same limit rule as the assembly's (docs/limit-policy.md), from the boosted request.
        let rule = limit_policy.rule(name, CPU);
        let limit = boosted_limit(rule, spec_limit, spec_request, &request)?;
        if let Some(limit) = limit {
            res.limits.insert(CPU.to_owned(), limit);
        }
    }
    res.requests.insert(CPU.to_owned(), request);
    let key = format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{name}");
    Ok(add_annotation_op(
        &key,
        &boost_annotation_value(spec_resources),
    ))
}

/// Under `RequestsOnly` the CPU limit stays, so a boosted request above it becomes one millicore less than
/// the limit (the limit itself when that is at most 1m); `None` when the boosted request is not above it.
fn under_limit(
    boosted: &Amount,
    limit: &Quantity,
    name: &str,
) -> Result<Option<Quantity>, PodError> {
    let limit = parse(limit, || format!("cpu limit of {name}"))?;
    if boosted.cmp_value(&limit) != Ordering::Greater {
        return Ok(None);
    }
    let lm = limit.millis();
    Ok(Some(if lm <= BigInt::from(1) {
        limit.to_quantity()
    } else {
        Amount::from_millis(lm - 1, limit.format).to_quantity()
    }))
}

/// `add` operations for the container's new requests, then its new limits, under `base` (its path), each map
/// the spec lacks (and `resources` itself) added empty first; an item per value (`cpu request`, …).
fn request_and_limit_ops(
    base: &str,
    spec_resources: Option<&ResourceRequirements>,
    res: &ContainerResources,
    ops: &mut Vec<PatchOperation>,
    items: &mut Vec<String>,
) {
    let needs_requests = !res.requests.is_empty();
    let needs_limits = !res.limits.is_empty();
    if (needs_requests || needs_limits) && spec_resources.is_none() {
        ops.push(add_op(&format!("{base}/resources"), json!({})));
    }
    for (field, values, has_map, label) in [
        (
            "requests",
            &res.requests,
            spec_resources.is_some_and(|r| r.requests.is_some()),
            "request",
        ),
        (
            "limits",
            &res.limits,
            spec_resources.is_some_and(|r| r.limits.is_some()),
            "limit",
        ),
    ] {
        if values.is_empty() {
            continue;
        }
        if !has_map {
            ops.push(add_op(&format!("{base}/resources/{field}"), json!({})));
        }
        for (resource, q) in values {
            ops.push(resource_value_op(base, field, resource, q));
            items.push(format!("{resource} {label}"));
        }
    }
}

/// The limit policy's `unset` (docs/limit-policy.md): a `remove` operation and an item per limit in
/// `res.removed_limits` that the spec has (only those can be removed).
fn removed_limit_ops(
    base: &str,
    spec_resources: Option<&ResourceRequirements>,
    res: &ContainerResources,
    ops: &mut Vec<PatchOperation>,
    items: &mut Vec<String>,
) {
    let spec_limits = spec_resources.and_then(|r| r.limits.as_ref());
    for resource in &res.removed_limits {
        if spec_limits.is_some_and(|l| l.contains_key(*resource)) {
            ops.push(remove_op(&format!(
                "{base}/resources/limits/{}",
                escape(resource)
            )));
            items.push(format!("{resource} limit removed"));
        }
    }
}

/// `add <container>/resources/<field>/<resource> "<quantity>"` with the quantity in canonical form;
/// `container` is the container's path, e.g. `/spec/containers/0`.
pub fn resource_value_op(
    container: &str,
    field: &str,
    resource: &str,
    quantity: &Quantity,
) -> PatchOperation {
    add_op(
        &format!("{container}/resources/{field}/{}", escape(resource)),
        Value::String(canonical(quantity).0),
    )
}

/// The canonical string form of a quantity (Go's `Quantity.String()`); unparsable text is kept as is.
fn canonical(q: &Quantity) -> Quantity {
    Amount::parse(q)
        .map(|a| a.to_quantity())
        .unwrap_or_else(|_| q.clone())
}

/// The text of the updates annotation: `Pod resources updated by <vpa>: container 0: …; container 1: …`,
/// then a note per resource left alone because the pod budgets it at pod level, then `notes` (quota fit).
fn updates_annotation_value(
    vpa_name: &str,
    updates: &[ContainerUpdate],
    pod_level: &[&str],
    notes: &[String],
) -> String {
    let mut parts: Vec<String> = updates
        .iter()
        .map(|u| {
            let kind = if u.init {
                "init container"
            } else {
                "container"
            };
            format!("{kind} {}: {}", u.index, u.items.join(", "))
        })
        .collect();
    parts.extend(pod_level.iter().map(|r| pod_level_note(r)));
    parts.extend(notes.iter().cloned());
    format!("Pod resources updated by {vpa_name}: {}", parts.join("; "))
}

/// The value of the observed-containers annotation: `spec.containers` names joined by `", "`.
pub fn observed_containers_value(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// The patch for a pod that `vpa` governs (docs/design/upstream-admission.md §3.1 steps 6–8): resources of
/// every container, then the updates and observed-containers annotations. LimitRanges of other namespaces are
/// ignored.
///
/// Two cases leave the pod's resources alone ([`PodPatch::skipped`]):
/// - it carries upstream's `vpaUpdates` annotation: upstream's webhook sized it. When the API server
///   called Tailor first (webhooks run in the order of their configurations' names, and `tailor-…` comes
///   before upstream's `vpa-webhook-config`) and calls it again after upstream's patch (the chart's
///   `reinvocationPolicy: IfNeeded`), Tailor's own annotations from the first call are removed: upstream's
///   numbers stand, and the pod says so.
/// - it already carries Tailor's updates annotation: Tailor sized it earlier in this admission and is
///   called again because a later webhook changed the pod; the first answer stands.
pub fn patch_pod(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
    limit_ranges: &[LimitRange],
    options: &PatchOptions,
) -> Result<PodPatch, PodError> {
    patch_pod_within(pod, vpa, limit_ranges, &[], options)
}

/// [`patch_pod`] with the namespace's ResourceQuotas (quota fit, docs/decisions/quota-fit.md): raises are cut
/// to the quotas' headroom ([`fit_to_quotas`]), or every change dropped when the pod without them does not fit,
/// and the updates annotation says which quota held what back. No quota: exactly [`patch_pod`].
pub fn patch_pod_within(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
    limit_ranges: &[LimitRange],
    quotas: &[Quota],
    options: &PatchOptions,
) -> Result<PodPatch, PodError> {
    let annotations = pod.metadata.annotations.as_ref();
    let has = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
    if has(UPSTREAM_UPDATES_ANNOTATION) {
        let withdrawn = [UPDATES_ANNOTATION, OBSERVED_CONTAINERS_ANNOTATION]
            .into_iter()
            .filter(|key| has(key))
            .map(remove_annotation_op)
            .collect();
        return Ok(PodPatch {
            patch: Patch(withdrawn),
            skipped: Some(SkipReason::UpstreamManaged),
            ..Default::default()
        });
    }
    if has(UPDATES_ANNOTATION) {
        return Ok(PodPatch {
            skipped: Some(SkipReason::AlreadySized),
            ..Default::default()
        });
    }
    let slots = slots(pod, options);
    let quota_limits = limits_tracked(quotas, pod);
    let mut resources =
        resources_for_slots(pod, &slots, vpa, limit_ranges, &quota_limits, options)?;
    let mut pod_level = leave_pod_level_alone(pod, &mut resources);
    // A VPA in mode Off is matched only for its start-up boost: its recommendation is not applied, so
    // there is nothing to fit.
    let quota = if quotas.is_empty() || update_mode(&vpa.spec) == UpdateMode::Off {
        QuotaFit::default()
    } else {
        fit_to_quotas(pod, &slots, &mut resources, quotas, Charged::New)?
    };
    let governed = pod_level_resources(pod);
    let (resource_ops, updates) = resource_patches(vpa, &slots, &resources, &governed, options)?;
    let mut ops = Vec::new();
    if annotations.is_none() {
        ops.push(add_op("/metadata/annotations", json!({})));
    }
    ops.extend(resource_ops);
    let mut quota_notes = quota.notes();
    let envelope_refused =
        if options.pod_level_resources && update_mode(&vpa.spec) != UpdateMode::Off {
            envelope(pod, vpa, &mut ops, &mut pod_level, &mut quota_notes)
        } else {
            None
        };
    if !updates.is_empty() || !pod_level.is_empty() || !quota_notes.is_empty() {
        let name = vpa.metadata.name.as_deref().unwrap_or_default();
        ops.push(add_annotation_op(
            UPDATES_ANNOTATION,
            &updates_annotation_value(name, &updates, &pod_level, &quota_notes),
        ));
    }
    ops.push(add_annotation_op(
        OBSERVED_CONTAINERS_ANNOTATION,
        &observed_containers_value(pod),
    ));
    Ok(PodPatch {
        patch: Patch(ops),
        skipped: None,
        updates,
        pod_level,
        quota,
        limit_policy: LimitPolicy::of(vpa).err(),
        envelope_refused,
    })
}

/// The pod-level envelope (docs/pod-level-resources.md): its operations appended to `ops`, its items to
/// `notes`, and the resources it sized taken out of `pod_level` (they are no longer left alone). A refusal
/// leaves the pod's pod-level resources and its containers' requests of them as they are, and is returned.
fn envelope(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
    ops: &mut Vec<PatchOperation>,
    pod_level: &mut Vec<&'static str>,
    notes: &mut Vec<String>,
) -> Option<EnvelopeRefused> {
    let current = pod.spec.as_ref().and_then(|s| s.resources.as_ref())?;
    match pod_envelope(pod, vpa) {
        Ok(envelope) => {
            let (envelope_ops, items) = envelope_ops(current, &envelope);
            ops.extend(envelope_ops);
            notes.extend(items);
            pod_level.retain(|r| !envelope.iter().any(|e| e.resource == *r));
            None
        }
        Err(refused) => Some(refused),
    }
}
