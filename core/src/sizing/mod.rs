//! Pod sizing shared by the admission webhook and the updater: a pod, the VPA that governs it and the
//! namespace's LimitRanges in; per-container requests and limits out
//! (docs/design/upstream-admission.md §3.3–§3.6, which the updater's in-place path reuses unchanged:
//! docs/design/upstream-updater.md §5.5 and its appendix A).
//!
//! 1. **Recommendation processing** ([`process_recommendation`]): Pod-type LimitRange sums
//!    (docs/design/upstream-admission.md §3.4), then per container and per field (`target`, `lowerBound`,
//!    `upperBound`) the Container-type LimitRange bounds (docs/design/upstream-admission.md §3.5), the
//!    policy's `minAllowed`/`maxAllowed`, and for `RequestsOnly` the cap at the current limit.
//! 2. **Assembly** ([`container_resources`]): requests from `target`; limits kept in proportion
//!    (docs/design/upstream-admission.md §3.6), or as the VPA's limit policy says ([`LimitPolicy`],
//!    [`policy_limits`], docs/limit-policy.md; Tailor, off unless the VPA is annotated).
//!
//! [`resources_for_slots`] runs both for one pod. Everything here is pure.

use k8s_openapi::api::core::v1::{Container, LimitRange, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::limit_range_merge;
use crate::quantity::{Amount, QuantityError};
use tailor_crds::{RecommendedContainerResources, ResourceList, VerticalPodAutoscaler};

mod annotations;
mod assembly;
mod floor;
mod limit_policy;
mod limit_range_caps;
mod limits;
mod oom_retry;
mod ops;
mod pod_envelope;
mod pod_level;
mod policy_limits;
mod recommendation;

pub use annotations::{
    IN_PLACE_UPDATED_ANNOTATION, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
    UPDATES_ANNOTATION, UPSTREAM_UPDATES_ANNOTATION, boost_annotation_value,
    parse_boost_annotation, parse_observed_containers,
};
pub use assembly::{
    Assembly, AssemblyOptions, ContainerResources, container_resources, container_resources_from,
};
pub use floor::{PodFloor, floor_recommendations};
pub use limit_policy::{
    EntryError, LIMIT_POLICY_ANNOTATION, LimitPolicy, LimitPolicyError, LimitRule,
    MAX_POLICY_BYTES, MAX_POLICY_ENTRIES, MAX_RATIO,
};
pub use limit_range_caps::apply_pod_limit_range;
pub use limits::proportional_limit;
pub use oom_retry::{OomBumpRule, RetryRaise, raise_for_retry};
pub use ops::{add_annotation_op, add_op, escape, remove_annotation_op, remove_op};
pub use pod_envelope::{
    EnvelopeRefused, EnvelopeResource, POD_ROW, envelope_ops, pod_envelope, pod_level_request,
    pod_row,
};
pub use pod_level::{leave_alone, leave_pod_level_alone, pod_level_note, pod_level_resources};
pub use policy_limits::{
    KEPT_IN_PLACE, LimitBounds, LimitContext, PolicyLimits, boosted_limit, policy_limits,
};
pub use recommendation::{Processed, process_recommendation, process_recommendation_floored};

/// Resources that get limits and LimitRange treatment.
pub const CPU: &str = "cpu";
/// Memory, the other resource with limits and LimitRange treatment.
pub const MEMORY: &str = "memory";
/// Both resources sized in proportion.
pub(crate) const CPU_AND_MEMORY: [&str; 2] = [CPU, MEMORY];

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
    /// Tailor (docs/decisions/pod-floor.md): never size a container below its share of this pod minimum
    /// ([`floor_recommendations`]).
    pub floor: Option<PodFloor>,
    /// Tailor (docs/pod-level-resources.md, `--pod-level-resources`): a pod that declares `spec.resources` gets
    /// its envelope from the VPA's [`POD_ROW`] ([`pod_envelope`]) instead of being left alone.
    pub pod_level_resources: bool,
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

/// Parses a quantity, naming where it was read on error.
pub fn parse(q: &Quantity, context: impl FnOnce() -> String) -> Result<Amount, PodError> {
    Amount::parse(q).map_err(|source| PodError::Quantity {
        context: context(),
        source,
    })
}

/// Parses an optional quantity, naming where it was read on error.
pub fn parse_opt(
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
    pub fn get(self, rec: &RecommendedContainerResources) -> Option<&ResourceList> {
        match self {
            Field::Target => Some(&rec.target),
            Field::LowerBound => rec.lower_bound.as_ref(),
            Field::UpperBound => rec.upper_bound.as_ref(),
        }
    }

    pub fn get_mut(self, rec: &mut RecommendedContainerResources) -> Option<&mut ResourceList> {
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

/// A container's current requests and limits, borrowed from the pod; `None` = the map is absent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CurrentResources<'a> {
    /// `resources.requests`.
    pub requests: Option<&'a ResourceList>,
    /// `resources.limits`.
    pub limits: Option<&'a ResourceList>,
}

impl CurrentResources<'_> {
    pub fn request(&self, resource: &str) -> Option<&Quantity> {
        self.requests.and_then(|m| m.get(resource))
    }

    pub fn limit(&self, resource: &str) -> Option<&Quantity> {
        self.limits.and_then(|m| m.get(resource))
    }
}

fn from_requirements(r: Option<&ResourceRequirements>) -> CurrentResources<'_> {
    CurrentResources {
        requests: r.and_then(|r| r.requests.as_ref()),
        limits: r.and_then(|r| r.limits.as_ref()),
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
    pub current: CurrentResources<'a>,
}

impl Slot<'_> {
    pub fn name(&self) -> &str {
        &self.container.name
    }

    pub fn path(&self) -> String {
        let list = if self.init {
            "initContainers"
        } else {
            "containers"
        };
        format!("/spec/{list}/{}", self.index)
    }
}

/// Current resources of a container (docs/design/upstream-admission.md §3.3):
/// `status.containerStatuses[name].resources` when
/// present, otherwise the spec.
pub fn current_resources<'a>(
    pod: &'a Pod,
    container: &'a Container,
    init: bool,
) -> CurrentResources<'a> {
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
pub(crate) fn is_native_sidecar(container: &Container) -> bool {
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

/// Per-slot requests and limits for `pod` from `vpa` and the LimitRanges of the pod's namespace (LimitRanges
/// of other namespaces are ignored): [`process_recommendation`], then [`container_resources`]. The webhook
/// patches these at creation. `quota_limits`: the resources whose `limits.*` a ResourceQuota charging the pod
/// tracks ([`crate::quota::limits_tracked`]), where the limit policy's `unset` keeps the limit.
pub fn resources_for_slots(
    pod: &Pod,
    slots: &[Slot<'_>],
    vpa: &VerticalPodAutoscaler,
    limit_ranges: &[LimitRange],
    quota_limits: &[&'static str],
    options: &PatchOptions,
) -> Result<Vec<ContainerResources>, PodError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let container_item = limit_range_merge::merged_item_with_ratio(
        limit_range_merge::in_namespace(limit_ranges, namespace),
        limit_range_merge::CONTAINER,
        options.honor_max_limit_request_ratio,
    );
    let pod_item = limit_range_merge::merged_item(
        limit_range_merge::in_namespace(limit_ranges, namespace),
        limit_range_merge::POD,
    );
    let processed = process_recommendation_floored(
        vpa,
        slots,
        container_item.as_ref(),
        pod_item.as_ref(),
        options.floor.as_ref(),
    )?;
    let from = Assembly {
        recommendation: processed.as_ref().map(|p| &p.recommendation),
        annotations: processed.as_ref().map(|p| &p.annotations),
        container_item: container_item.as_ref(),
        assembly: AssemblyOptions::default(),
        limits: LimitContext {
            limit_ranges,
            namespace,
            quota_limits,
            in_place: false,
        },
    };
    container_resources_from(vpa, slots, &from, options)
}
