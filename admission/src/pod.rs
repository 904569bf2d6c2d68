//! The pod patch: a pod, the VPA that governs it and the namespace's LimitRanges in; a JSON Patch out
//! (upstream spec §3.3–§3.9).
//!
//! Order of work, as upstream:
//! 1. **Recommendation processing** ([`process_recommendation`]): Pod-type LimitRange sums (§3.4), then per
//!    container and per field (`target`, `lowerBound`, `upperBound`) the Container-type LimitRange bounds
//!    (§3.5), the policy's `minAllowed`/`maxAllowed`, and for `RequestsOnly` the cap at the current limit.
//! 2. **Assembly** ([`container_resources`]): requests from `target`; limits kept in proportion (§3.6).
//! 3. **Patch** ([`resource_patches`], [`patch_pod`]): `add` operations for every request and limit,
//!    Tailor's updates and observed-containers annotations.
//!
//! Everything here is pure. Tailor-only behaviour sits behind [`PatchOptions`] and is off by default.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{
    Container, LimitRange, LimitRangeItem, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use num_bigint::BigInt;
use num_traits::Zero;
use serde_json::{Value, json};
use tailor_crds::policy::{container_policy, controlled_values, scaling_mode, update_mode};
use tailor_crds::{
    ContainerScalingMode, ControlledValues, GenericStartupBoost, RecommendedContainerResources,
    RecommendedPodResources, ResourceList, StartupBoostType, UpdateMode, VerticalPodAutoscaler,
};

use crate::limitrange;
use tailor_crds::capping;
use tailor_crds::quantity::{self, Amount, Format, QuantityError};

/// Annotation listing what Tailor changed (upstream: `vpaUpdates`).
pub const UPDATES_ANNOTATION: &str = "tailor.dev/updates";
/// Annotation listing the containers Tailor saw at admission (upstream: `vpaObservedContainers`).
pub const OBSERVED_CONTAINERS_ANNOTATION: &str = "tailor.dev/observed-containers";
/// Upstream's updates annotation: a pod carrying it was already sized by the upstream webhook.
pub const UPSTREAM_UPDATES_ANNOTATION: &str = "vpaUpdates";
/// Prefix of the per-container annotation that keeps the resources a start-up boost replaced
/// (upstream: `vpaCpuStartupBoost/<container>`).
pub const STARTUP_BOOST_ANNOTATION_PREFIX: &str = "cpu-startup-boost.tailor.dev/";

/// Resources that get limits and LimitRange treatment.
const CPU: &str = "cpu";
const MEMORY: &str = "memory";
const CPU_AND_MEMORY: [&str; 2] = [CPU, MEMORY];

/// Knobs of the pod patch. The default reproduces upstream exactly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PatchOptions {
    /// Feature gate `CPUStartupBoost`: apply `startupBoost` at admission.
    pub cpu_startup_boost: bool,
    /// `--max-allowed-cpu-boost`: ceiling of a boosted CPU request (zero or absent: none).
    pub max_allowed_cpu_boost: Option<Quantity>,
    /// Tailor improvement: lower a proportional limit so that it respects the container LimitRange's
    /// `maxLimitRequestRatio` (upstream ignores it and the pod may then be rejected by the LimitRanger).
    pub honor_max_limit_request_ratio: bool,
    /// Tailor improvement: also size native sidecars (init containers with `restartPolicy: Always`).
    pub native_sidecars: bool,
}

/// Why a pod was left alone without looking at the recommendation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The pod carries upstream's `vpaUpdates` annotation: the upstream webhook already sized it.
    UpstreamManaged,
}

/// What Tailor changed in one container, for the updates annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerUpdate {
    /// Index in `spec.containers` (or `spec.initContainers` when `init`).
    pub index: usize,
    /// Container name.
    pub name: String,
    /// Whether this is a native sidecar in `spec.initContainers`.
    pub init: bool,
    /// Items such as `cpu capped to maxAllowed`, `cpu request`, `memory limit`.
    pub items: Vec<String>,
}

/// The result of [`patch_pod`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPatch {
    /// The JSON Patch to return to the API server (empty when skipped).
    pub patch: Patch,
    /// Set when the pod was deliberately left alone.
    pub skipped: Option<SkipReason>,
    /// Per-container changes, in container order (only containers that got operations).
    pub updates: Vec<ContainerUpdate>,
}

/// An error that leaves the pod unmodified (upstream admits such pods untouched).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PodError {
    /// A quantity in the pod, VPA or LimitRange is not a valid quantity.
    #[error("{context}: {source}")]
    Quantity {
        /// Where the quantity was read.
        context: String,
        /// The parse error.
        source: QuantityError,
    },
    /// The start-up boost is misconfigured.
    #[error("{0}")]
    Boost(String),
}

fn parse(q: &Quantity, context: impl FnOnce() -> String) -> Result<Amount, PodError> {
    Amount::parse(q).map_err(|source| PodError::Quantity {
        context: context(),
        source,
    })
}

fn parse_opt(
    q: Option<&Quantity>,
    context: impl FnOnce() -> String,
) -> Result<Option<Amount>, PodError> {
    q.map(|q| parse(q, context)).transpose()
}

/// One of the recommendation fields the processor visits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `target` (annotated).
    Target,
    /// `lowerBound`.
    LowerBound,
    /// `upperBound`.
    UpperBound,
}

impl Field {
    fn get(self, rec: &RecommendedContainerResources) -> Option<&ResourceList> {
        match self {
            Field::Target => Some(&rec.target),
            Field::LowerBound => rec.lower_bound.as_ref(),
            Field::UpperBound => rec.upper_bound.as_ref(),
        }
    }

    fn get_mut(self, rec: &mut RecommendedContainerResources) -> Option<&mut ResourceList> {
        match self {
            Field::Target => Some(&mut rec.target),
            Field::LowerBound => rec.lower_bound.as_mut(),
            Field::UpperBound => rec.upper_bound.as_mut(),
        }
    }

    /// The JSON name of the field.
    pub fn name(self) -> &'static str {
        match self {
            Field::Target => "target",
            Field::LowerBound => "lowerBound",
            Field::UpperBound => "upperBound",
        }
    }

    /// Parses a JSON field name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "target" => Some(Field::Target),
            "lowerBound" => Some(Field::LowerBound),
            "upperBound" => Some(Field::UpperBound),
            _ => None,
        }
    }
}

/// A container's current requests and limits; `None` = the map is absent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurrentResources {
    /// `resources.requests`.
    pub requests: Option<ResourceList>,
    /// `resources.limits`.
    pub limits: Option<ResourceList>,
}

impl CurrentResources {
    fn request(&self, resource: &str) -> Option<&Quantity> {
        self.requests.as_ref().and_then(|m| m.get(resource))
    }

    fn limit(&self, resource: &str) -> Option<&Quantity> {
        self.limits.as_ref().and_then(|m| m.get(resource))
    }
}

fn from_requirements(r: Option<&ResourceRequirements>) -> CurrentResources {
    CurrentResources {
        requests: r.and_then(|r| r.requests.clone()),
        limits: r.and_then(|r| r.limits.clone()),
    }
}

/// A container the webhook sizes: a regular container, or (opt-in) a native sidecar.
#[derive(Clone, Debug)]
pub struct Slot<'a> {
    /// The container spec.
    pub container: &'a Container,
    /// Index in its list.
    pub index: usize,
    /// Whether it is in `spec.initContainers`.
    pub init: bool,
    /// Current requests and limits: from `status` when it reports resources, else from the spec.
    pub current: CurrentResources,
}

impl Slot<'_> {
    fn name(&self) -> &str {
        &self.container.name
    }

    fn path(&self) -> String {
        let list = if self.init {
            "initContainers"
        } else {
            "containers"
        };
        format!("/spec/{list}/{}", self.index)
    }
}

/// Current resources of a container (upstream spec §3.3): `status.containerStatuses[name].resources` when
/// present, otherwise the spec.
pub fn current_resources(pod: &Pod, container: &Container, init: bool) -> CurrentResources {
    let statuses = pod.status.as_ref().and_then(|s| {
        if init {
            s.init_container_statuses.as_ref()
        } else {
            s.container_statuses.as_ref()
        }
    });
    let from_status = statuses
        .into_iter()
        .flatten()
        .find(|s| s.name == container.name)
        .and_then(|s| s.resources.as_ref());
    match from_status {
        Some(r) => from_requirements(Some(r)),
        None => from_requirements(container.resources.as_ref()),
    }
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`).
pub fn is_native_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The containers the webhook sizes, in order: `spec.containers`, then (with
/// [`PatchOptions::native_sidecars`]) native sidecars.
pub fn slots<'a>(pod: &'a Pod, options: &PatchOptions) -> Vec<Slot<'a>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Slot<'a>> = spec
        .containers
        .iter()
        .enumerate()
        .map(|(index, c)| Slot {
            container: c,
            index,
            init: false,
            current: current_resources(pod, c, false),
        })
        .collect();
    if options.native_sidecars {
        for (index, c) in spec.init_containers.iter().flatten().enumerate() {
            if is_native_sidecar(c) {
                out.push(Slot {
                    container: c,
                    index,
                    init: true,
                    current: current_resources(pod, c, true),
                });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------
// §3.6 proportional limits

/// The limit that keeps `original_limit / original_request` for `recommended_request` (upstream spec §3.6),
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
    let Some(request) = request.filter(|r| !r.units_zero()) else {
        return Ok((Some(recommended.to_quantity()), None));
    };
    if request.millis() == limit.millis() {
        return Ok((Some(recommended.to_quantity()), None));
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
        return Ok((
            Some(capped.to_quantity()),
            Some(format!(
                "{resource}: failed to keep limit to request ratio; capping limit to int64"
            )),
        ));
    }
    Ok((
        Some(Amount::from_amount(resource, scaled, limit.format).to_quantity()),
        None,
    ))
}

/// Proportional limits for cpu and memory (upstream spec §3.6). Returns the limits that got a value and
/// the annotations; an empty map means "no limits" (the caller then drops the annotations).
pub fn proportional_limits(
    current: &CurrentResources,
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

// ---------------------------------------------------------------------------------------------------
// §3.4 Pod LimitRange

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
/// recommendations (upstream spec §3.4). Recommendations are matched to pod containers by name; a
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
        limitrange::bound(item.min.as_ref(), resource),
        || ctx("min"),
    )?;
    let max = amount_of(
        resource,
        limitrange::bound(item.max.as_ref(), resource),
        || ctx("max"),
    )?;
    let default = limitrange::bound(item.default.as_ref(), resource);

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
// §3.5 container LimitRange

/// Clamps `values` (cpu and memory) into the requests allowed by a Container-type LimitRange item for a
/// container whose current resources are `current` (upstream spec §3.5). Returns annotations.
pub fn cap_to_container_limit_range(
    values: &mut ResourceList,
    current: &CurrentResources,
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
                limitrange::bound(item.default.as_ref(), resource),
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
        let min_q = limitrange::bound(item.min.as_ref(), resource);
        let max_q = limitrange::bound(item.max.as_ref(), resource);
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

// ---------------------------------------------------------------------------------------------------
// §3.3 step A: recommendation processing

/// The processed recommendation and the annotations per container name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Processed {
    /// Recommendations for pod containers only, capped.
    pub recommendation: RecommendedPodResources,
    /// Annotations per container name, in the order produced.
    pub annotations: BTreeMap<String, Vec<String>>,
}

/// Processes the VPA's recommendation for `slots` (upstream spec §3.3 step A). `None` when the VPA has no
/// recommendation.
pub fn process_recommendation(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    container_item: Option<&LimitRangeItem>,
    pod_item: Option<&LimitRangeItem>,
) -> Result<Option<Processed>, PodError> {
    let Some(recommendation) = vpa.status.as_ref().and_then(|s| s.recommendation.as_ref()) else {
        return Ok(None);
    };
    let mut recs: Vec<RecommendedContainerResources> = recommendation
        .container_recommendations
        .clone()
        .unwrap_or_default();

    if let Some(pod_item) = pod_item {
        // Containers with requests but no recommendation take part with their requests.
        for slot in slots {
            let has_rec = recs
                .iter()
                .any(|r| r.container_name.as_deref() == Some(slot.name()));
            let requests = slot.current.requests.as_ref().filter(|r| !r.is_empty());
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
    let mut annotations: BTreeMap<String, Vec<String>> = BTreeMap::new();
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
            if requests_only && let Some(limits) = &slot.current.limits {
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

// ---------------------------------------------------------------------------------------------------
// §3.3 step B: requests and limits

/// New requests and limits for one container; `None` maps mean "nothing to set".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerResources {
    /// Requests to set.
    pub requests: ResourceList,
    /// Limits to set.
    pub limits: ResourceList,
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

/// Requests and limits per slot (upstream spec §3.3 step B), from the processed recommendation.
pub fn container_resources(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    processed: Option<&Processed>,
    container_item: Option<&LimitRangeItem>,
    assembly: AssemblyOptions,
    options: &PatchOptions,
) -> Result<Vec<ContainerResources>, PodError> {
    let policy = vpa.spec.resource_policy.as_ref();
    let vpa_off = update_mode(&vpa.spec) == UpdateMode::Off;
    let defaults = container_item.and_then(|i| i.default.as_ref());
    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        let rec = processed.and_then(|p| {
            p.recommendation
                .container_recommendations
                .iter()
                .flatten()
                .find(|r| r.container_name.as_deref() == Some(slot.name()))
        });
        let Some(rec) = rec else {
            out.push(ContainerResources::default());
            continue;
        };
        let mut resources = ContainerResources {
            annotations: processed
                .and_then(|p| p.annotations.get(slot.name()))
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
            let (mut limits, notes) =
                proportional_limits(&slot.current, &resources.requests, defaults)?;
            if !limits.is_empty() {
                if options.honor_max_limit_request_ratio
                    && let Some(item) = container_item
                {
                    resources.annotations.extend(cap_to_max_ratio(
                        &mut limits,
                        &resources.requests,
                        item,
                    )?);
                }
                resources.limits = limits;
                resources.annotations.extend(notes);
            }
        }
        if assembly.add_all {
            for resource in CPU_AND_MEMORY {
                if !resources.requests.contains_key(resource)
                    && let Some(q) = slot.current.request(resource)
                {
                    resources.requests.insert(resource.to_owned(), q.clone());
                }
                if !resources.limits.contains_key(resource)
                    && let Some(q) = slot.current.limit(resource)
                {
                    resources.limits.insert(resource.to_owned(), q.clone());
                }
            }
        }
        resources.requests.remove("");
        resources.limits.remove("");
        out.push(resources);
    }
    Ok(out)
}

/// Tailor improvement: lowers each limit to `request · maxLimitRequestRatio` of the container LimitRange.
fn cap_to_max_ratio(
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

// ---------------------------------------------------------------------------------------------------
// §3.8 start-up boost

fn boost_error(msg: impl Into<String>) -> PodError {
    PodError::Boost(msg.into())
}

/// The boosted CPU request for `base` (upstream spec §3.8).
fn boosted_cpu(
    base: &Amount,
    boost: &GenericStartupBoost,
    max: Option<&Amount>,
) -> Result<Amount, PodError> {
    let boosted = match boost.type_.as_ref() {
        None | Some(StartupBoostType::Factor) => {
            let factor = boost
                .factor
                .ok_or_else(|| boost_error("boost factor is required for type Factor"))?;
            if factor < 1 {
                return Err(boost_error("boost factor must be >= 1"));
            }
            Amount::from_millis(base.millis() * BigInt::from(factor), base.format)
        }
        Some(StartupBoostType::Quantity) => {
            let q = boost
                .quantity
                .as_ref()
                .ok_or_else(|| boost_error("boost quantity is required for type Quantity"))?;
            base.add(&parse(q, || "startupBoost.cpu.quantity".to_owned())?)
        }
        Some(StartupBoostType::Unknown(other)) => {
            return Err(boost_error(format!(
                "unsupported startup boost type: {other}"
            )));
        }
    };
    match max {
        Some(max) if !max.is_zero() && boosted.cmp_value(max) == Ordering::Greater => {
            Ok(max.clone())
        }
        _ => Ok(boosted),
    }
}

/// The boost annotation value: the container's spec cpu/memory requests and limits as JSON.
pub fn boost_annotation_value(resources: Option<&ResourceRequirements>) -> String {
    let pick = |m: Option<&BTreeMap<String, Quantity>>| -> serde_json::Map<String, Value> {
        m.into_iter()
            .flatten()
            .filter(|(k, _)| CPU_AND_MEMORY.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), Value::String(v.0.clone())))
            .collect()
    };
    let requests = pick(resources.and_then(|r| r.requests.as_ref()));
    let limits = pick(resources.and_then(|r| r.limits.as_ref()));
    format!(
        "{{\"requests\":{},\"limits\":{}}}",
        Value::Object(requests),
        Value::Object(limits)
    )
}

// ---------------------------------------------------------------------------------------------------
// §3.7 patches

/// Escapes one JSON-pointer segment (`~` → `~0`, `/` → `~1`).
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// An `add` operation.
pub fn add_op(path: &str, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: jsonptr_buf(path),
        value,
    })
}

fn jsonptr_buf(path: &str) -> json_patch::jsonptr::PointerBuf {
    // Paths built here are always valid pointers; fall back to the root on the impossible error.
    json_patch::jsonptr::PointerBuf::parse(path).unwrap_or_default()
}

/// Path of an annotation.
pub fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", escape(key))
}

/// The resource patches for given per-slot resources (upstream spec §3.7–§3.8): operations in container
/// order and the per-container updates. `resources` is indexed like `slots`.
pub fn resource_patches(
    vpa: &VerticalPodAutoscaler,
    slots: &[Slot<'_>],
    resources: &[ContainerResources],
    options: &PatchOptions,
) -> Result<(Vec<PatchOperation>, Vec<ContainerUpdate>), PodError> {
    let policy = vpa.spec.resource_policy.as_ref();
    let vpa_off = update_mode(&vpa.spec) == UpdateMode::Off;
    let max_boost = parse_opt(options.max_allowed_cpu_boost.as_ref(), || {
        "--max-allowed-cpu-boost".into()
    })?;
    let mut ops = Vec::new();
    let mut updates = Vec::new();
    let empty = ContainerResources::default();
    for (i, slot) in slots.iter().enumerate() {
        let mut res = resources.get(i).cloned().unwrap_or_else(|| empty.clone());
        let container_policy = container_policy(policy, slot.name());
        let mut container_ops = Vec::new();
        if vpa_off {
            // Matched only for its boost: never apply the recommendation.
            res = ContainerResources::default();
        }
        if options.cpu_startup_boost {
            if scaling_mode(container_policy) == ContainerScalingMode::Off {
                continue;
            }
            let boost = container_policy
                .and_then(|p| p.startup_boost.as_ref())
                .or(vpa.spec.startup_boost.as_ref())
                .and_then(|b| b.cpu.as_ref());
            if let Some(boost) = boost {
                let spec_resources = slot.container.resources.as_ref();
                let spec_request = spec_resources
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|m| m.get(CPU));
                let spec_limit = spec_resources
                    .and_then(|r| r.limits.as_ref())
                    .and_then(|m| m.get(CPU));
                let base = match res.requests.get(CPU).or(spec_request) {
                    Some(q) => parse(q, || format!("cpu request of {}", slot.name()))?,
                    None => Amount::zero(),
                };
                let boosted = boosted_cpu(&base, boost, max_boost.as_ref())?;
                let mut request = boosted.to_quantity();
                if controlled_values(container_policy) == ControlledValues::RequestsOnly {
                    if let Some(limit) = spec_limit {
                        let limit = parse(limit, || format!("cpu limit of {}", slot.name()))?;
                        if boosted.cmp_value(&limit) == Ordering::Greater {
                            let lm = limit.millis();
                            request = if lm <= BigInt::from(1) {
                                limit.to_quantity()
                            } else {
                                Amount::from_millis(lm - 1, limit.format).to_quantity()
                            };
                        }
                    }
                } else {
                    let (limit, _) =
                        proportional_limit(CPU, spec_limit, spec_request, Some(&request), None)?;
                    if let Some(limit) = limit {
                        res.limits.insert(CPU.to_owned(), limit);
                    }
                }
                res.requests.insert(CPU.to_owned(), request);
                let key = format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{}", slot.name());
                container_ops.push(add_annotation_op(
                    &key,
                    &boost_annotation_value(spec_resources),
                ));
            }
        }
        let mut items = res.annotations.clone();
        let base = slot.path();
        let spec_resources = slot.container.resources.as_ref();
        let needs_requests = !res.requests.is_empty();
        let needs_limits = !res.limits.is_empty();
        if (needs_requests || needs_limits) && spec_resources.is_none() {
            container_ops.push(add_op(&format!("{base}/resources"), json!({})));
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
                container_ops.push(add_op(&format!("{base}/resources/{field}"), json!({})));
            }
            for (resource, q) in values {
                container_ops.push(resource_value_op(&base, field, resource, q));
                items.push(format!("{resource} {label}"));
            }
        }
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

/// `add /metadata/annotations/<name> "<value>"`.
pub fn add_annotation_op(name: &str, value: &str) -> PatchOperation {
    add_op(&annotation_path(name), Value::String(value.to_owned()))
}

/// `remove /metadata/annotations/<name>`. The webhook never removes annotations: this is the un-boost
/// operation of the updater (upstream-updater §5.3), kept next to the writer it undoes and checked by the
/// same vectors; it moves to the shared crate with the updater.
pub fn remove_annotation_op(name: &str) -> PatchOperation {
    PatchOperation::Remove(json_patch::RemoveOperation {
        path: jsonptr_buf(&annotation_path(name)),
    })
}

/// Parses an observed-containers annotation value (`"a, b"`); every name must be a DNS-1123 label. The
/// reader of [`observed_containers_value`]: the webhook writes, the updater reads (no webhook caller).
pub fn parse_observed_containers(value: &str) -> Result<Vec<String>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(", ")
        .map(|name| {
            if is_dns1123_label(name) {
                Ok(name.to_owned())
            } else {
                Err(format!("container name {name:?} is not a DNS-1123 label"))
            }
        })
        .collect()
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// The resources a start-up boost replaced, from the boost annotation of `container` (`None` when the
/// pod has no such annotation). The reader of [`boost_annotation_value`]: the webhook writes, the updater
/// reads when it un-boosts (no webhook caller).
pub fn parse_boost_annotation(
    annotations: Option<&BTreeMap<String, String>>,
    container: &str,
) -> Result<Option<ResourceRequirements>, String> {
    let key = format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{container}");
    let Some(text) = annotations.and_then(|a| a.get(&key)) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| format!("annotation {key}: {e}"))
}

/// The canonical string form of a quantity (Go's `Quantity.String()`); unparsable text is kept as is.
pub fn canonical(q: &Quantity) -> Quantity {
    Amount::parse(q)
        .map(|a| a.to_quantity())
        .unwrap_or_else(|_| q.clone())
}

/// The text of the updates annotation: `Pod resources updated by <vpa>: container 0: …; container 1: …`.
pub fn updates_annotation_value(vpa_name: &str, updates: &[ContainerUpdate]) -> String {
    let parts: Vec<String> = updates
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

fn resources_for_slots(
    pod: &Pod,
    slots: &[Slot<'_>],
    vpa: &VerticalPodAutoscaler,
    limit_ranges: &[LimitRange],
    options: &PatchOptions,
) -> Result<Vec<ContainerResources>, PodError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let container_item = limitrange::merged_item_with_ratio(
        limitrange::in_namespace(limit_ranges, namespace),
        limitrange::CONTAINER,
        options.honor_max_limit_request_ratio,
    );
    let pod_item = limitrange::merged_item(
        limitrange::in_namespace(limit_ranges, namespace),
        limitrange::POD,
    );
    let processed = process_recommendation(vpa, slots, container_item.as_ref(), pod_item.as_ref())?;
    container_resources(
        vpa,
        slots,
        processed.as_ref(),
        container_item.as_ref(),
        AssemblyOptions::default(),
        options,
    )
}

/// The patch for a pod that `vpa` governs (upstream spec §3.1 steps 6–8): resources of every container,
/// then the updates and observed-containers annotations. A pod already sized by the upstream webhook
/// (annotation `vpaUpdates`) is left alone. LimitRanges of other namespaces are ignored.
pub fn patch_pod(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
    limit_ranges: &[LimitRange],
    options: &PatchOptions,
) -> Result<PodPatch, PodError> {
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_some_and(|a| a.contains_key(UPSTREAM_UPDATES_ANNOTATION)) {
        return Ok(PodPatch {
            skipped: Some(SkipReason::UpstreamManaged),
            ..Default::default()
        });
    }
    let slots = slots(pod, options);
    let resources = resources_for_slots(pod, &slots, vpa, limit_ranges, options)?;
    let (resource_ops, updates) = resource_patches(vpa, &slots, &resources, options)?;
    let mut ops = Vec::new();
    if annotations.is_none() {
        ops.push(add_op("/metadata/annotations", json!({})));
    }
    ops.extend(resource_ops);
    if !updates.is_empty() {
        let name = vpa.metadata.name.as_deref().unwrap_or_default();
        ops.push(add_annotation_op(
            UPDATES_ANNOTATION,
            &updates_annotation_value(name, &updates),
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
    })
}

// ---------------------------------------------------------------------------------------------------
// §3.1 the pod review

/// What happened to a pod review (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Patched from VPA `vpa` (`namespace/name`).
    Patched {
        /// The VPA, as `namespace/name`.
        vpa: String,
    },
    /// No VPA governs the pod (or the chain could not be resolved: `reason`).
    NoMatch {
        /// Why, when matching failed rather than found nothing.
        reason: Option<String>,
    },
    /// The pod already carries upstream's `vpaUpdates` annotation and was left alone.
    SkippedUpstream,
    /// An error left the pod unmodified.
    Error(String),
}

/// Reviews a pod `CREATE` (upstream spec §3.1): finds the VPA in `index` and returns the patch. Never
/// denies; any error admits the pod unmodified.
pub fn review_pod(
    req: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
    index: &crate::index::Index,
    options: &PatchOptions,
) -> (kube::core::admission::AdmissionResponse, PodOutcome) {
    use kube::core::admission::AdmissionResponse;
    let allowed = AdmissionResponse::from(req);
    if req.resource.version != "v1" {
        return (
            allowed,
            PodOutcome::Error("only v1 Pods are supported".into()),
        );
    }
    let decoded = req
        .object
        .as_ref()
        .ok_or_else(|| "request has no object".to_owned())
        .and_then(|o| serde_json::to_value(o).map_err(|e| e.to_string()))
        .and_then(|v| serde_json::from_value::<Pod>(v).map_err(|e| e.to_string()));
    let mut pod = match decoded {
        Ok(pod) => pod,
        Err(e) => {
            return (
                allowed,
                PodOutcome::Error(format!("cannot decode pod: {e}")),
            );
        }
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_else(|| "default".to_owned());
    pod.metadata.namespace = Some(namespace.clone());
    let vpa = match index.matching_vpa(&pod, &namespace) {
        Ok(Some(vpa)) => vpa,
        Ok(None) => return (allowed, PodOutcome::NoMatch { reason: None }),
        Err(e) => {
            return (
                allowed,
                PodOutcome::NoMatch {
                    reason: Some(e.to_string()),
                },
            );
        }
    };
    let limit_ranges = index.limit_ranges(&namespace);
    match patch_pod(&pod, &vpa, &limit_ranges, options) {
        Ok(result) if result.skipped.is_some() => (allowed, PodOutcome::SkippedUpstream),
        Ok(result) => match allowed.clone().with_patch(result.patch) {
            Ok(response) => (
                response,
                PodOutcome::Patched {
                    vpa: format!(
                        "{namespace}/{}",
                        vpa.metadata.name.as_deref().unwrap_or_default()
                    ),
                },
            ),
            Err(e) => (allowed, PodOutcome::Error(e.to_string())),
        },
        Err(e) => (allowed, PodOutcome::Error(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, IndexObjects};
    use kube::core::DynamicObject;
    use kube::core::admission::{AdmissionRequest, AdmissionReview};

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn vpa(v: Value) -> VerticalPodAutoscaler {
        serde_json::from_value(v).unwrap()
    }

    fn web_vpa(policies: Value) -> VerticalPodAutoscaler {
        vpa(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web-vpa", "namespace": "default", "creationTimestamp": "2024-06-01T00:00:00Z"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "resourcePolicy": {"containerPolicies": policies}},
            "status": {"recommendation": {"containerRecommendations": [
                {"containerName": "app", "target": {"cpu": "200m", "memory": "256Mi"}},
                {"containerName": "proxy", "target": {"cpu": "50m", "memory": "64Mi"}}
            ]}}
        }))
    }

    fn web_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "web-abc-", "namespace": "default", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                                     "uid": "1", "controller": true}]},
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "400m"}}}],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
            }
        })
    }

    fn apply(pod_json: &Value, patch: &Patch) -> Value {
        let mut doc = pod_json.clone();
        json_patch::patch(&mut doc, &patch.0).unwrap();
        doc
    }

    #[test]
    fn native_sidecars_only_when_asked() {
        let p = web_pod();
        let v = web_vpa(json!([]));
        let off = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
        let doc = apply(&p, &off.patch);
        assert_eq!(
            doc["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "200m"
        );
        assert_eq!(
            doc["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "800m"
        );
        assert_eq!(
            doc["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
            "10m"
        );
        assert_eq!(
            doc["metadata"]["annotations"][OBSERVED_CONTAINERS_ANNOTATION],
            "app"
        );

        let options = PatchOptions {
            native_sidecars: true,
            ..Default::default()
        };
        let on = patch_pod(&pod(p.clone()), &v, &[], &options).unwrap();
        let doc = apply(&p, &on.patch);
        assert_eq!(
            doc["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
            "50m"
        );
        assert_eq!(
            doc["spec"]["initContainers"][0]["resources"]["requests"]["memory"],
            "64Mi"
        );
        let updates = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(
            updates.contains("init container 0: cpu request, memory request"),
            "{updates}"
        );
    }

    #[test]
    fn max_limit_request_ratio_only_when_asked() {
        let p = web_pod();
        let v = web_vpa(json!([]));
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "lr", "namespace": "default"},
            "spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}
        }))
        .unwrap();
        // The LimitRange has no min/max/default, so upstream ignores it: the 1:4 ratio is kept.
        let plain = patch_pod(
            &pod(p.clone()),
            &v,
            std::slice::from_ref(&lr),
            &PatchOptions::default(),
        )
        .unwrap();
        assert_eq!(
            apply(&p, &plain.patch)["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "800m"
        );
        let options = PatchOptions {
            honor_max_limit_request_ratio: true,
            ..Default::default()
        };
        let capped = patch_pod(&pod(p.clone()), &v, &[lr], &options).unwrap();
        let doc = apply(&p, &capped.patch);
        assert_eq!(
            doc["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "400m"
        );
        let updates = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(
            updates.contains("cpu limit capped to maxLimitRequestRatio"),
            "{updates}"
        );
    }

    #[test]
    fn upstream_managed_pods_are_left_alone() {
        let mut p = web_pod();
        p["metadata"]["annotations"] =
            json!({"vpaUpdates": "Pod resources updated by x: container 0: cpu request"});
        let result =
            patch_pod(&pod(p), &web_vpa(json!([])), &[], &PatchOptions::default()).unwrap();
        assert_eq!(result.skipped, Some(SkipReason::UpstreamManaged));
        assert!(result.patch.0.is_empty());
    }

    fn pod_request(object: Value, version: &str) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": version, "resource": "pods"},
                "name": "", "namespace": "default", "operation": "CREATE", "userInfo": {}, "object": object
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn web_index(vpas: Vec<VerticalPodAutoscaler>) -> Index {
        let rs = serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "default",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "2", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        let deploy = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
        }))
        .unwrap();
        Index::from_objects(IndexObjects {
            vpas,
            deployments: vec![deploy],
            replica_sets: vec![rs],
            ..Default::default()
        })
    }

    #[test]
    fn review_pod_end_to_end() {
        let index = web_index(vec![web_vpa(json!([]))]);
        let p = web_pod();
        let (resp, outcome) = review_pod(
            &pod_request(p.clone(), "v1"),
            &index,
            &PatchOptions::default(),
        );
        assert_eq!(
            outcome,
            PodOutcome::Patched {
                vpa: "default/web-vpa".into()
            }
        );
        assert!(resp.allowed);
        let patch: Patch = serde_json::from_slice(resp.patch.as_deref().unwrap()).unwrap();
        let doc = apply(&p, &patch);
        assert_eq!(
            doc["spec"]["containers"][0]["resources"]["requests"]["memory"],
            "256Mi"
        );
        assert_eq!(
            doc["metadata"]["annotations"][OBSERVED_CONTAINERS_ANNOTATION],
            "app"
        );
    }

    #[test]
    fn review_pod_never_denies() {
        let index = web_index(vec![web_vpa(json!([]))]);
        let (resp, outcome) = review_pod(
            &pod_request(web_pod(), "v2"),
            &index,
            &PatchOptions::default(),
        );
        assert!(resp.allowed && resp.patch.is_none());
        assert!(matches!(outcome, PodOutcome::Error(_)));
        let (resp, outcome) = review_pod(
            &pod_request(json!({"spec": 3}), "v1"),
            &index,
            &PatchOptions::default(),
        );
        assert!(resp.allowed && resp.patch.is_none());
        assert!(matches!(outcome, PodOutcome::Error(_)));
        // A broken recommendation is an error, not a denial.
        let mut bad = web_vpa(json!([]));
        if let Some(r) = bad.status.as_mut().and_then(|s| s.recommendation.as_mut()) {
            r.container_recommendations.as_mut().unwrap()[0]
                .target
                .insert("cpu".into(), Quantity("lots".into()));
        }
        let index = web_index(vec![bad]);
        let (resp, outcome) = review_pod(
            &pod_request(web_pod(), "v1"),
            &index,
            &PatchOptions::default(),
        );
        assert!(resp.allowed && resp.patch.is_none());
        assert!(matches!(outcome, PodOutcome::Error(_)), "{outcome:?}");
        // No VPA: allowed, no annotations.
        let index = web_index(vec![]);
        let (resp, outcome) = review_pod(
            &pod_request(web_pod(), "v1"),
            &index,
            &PatchOptions::default(),
        );
        assert!(resp.allowed && resp.patch.is_none());
        assert_eq!(outcome, PodOutcome::NoMatch { reason: None });
    }
}
