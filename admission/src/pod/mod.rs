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

mod assembly;
mod boost;
mod limit_range;
mod limits;
mod patch;
mod recommendation;
mod review;

pub use assembly::*;
pub use boost::*;
pub use limit_range::*;
pub use limits::*;
pub use patch::*;
pub use recommendation::*;
pub use review::*;

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

#[cfg(test)]
mod tests;
