//! Container-policy lookup and the per-container settings derived from it.

use tailor_crds::vpa::{
    ContainerResourcePolicy, ContainerScalingMode, ControlledValues, PodResourcePolicy, UpdateMode,
    VerticalPodAutoscalerSpec,
};

/// The container name that makes a policy the default for every container without its own entry.
pub const DEFAULT_CONTAINER: &str = "*";

/// Resources recommended when a policy does not say otherwise.
pub const DEFAULT_CONTROLLED_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The policy for `container`: the entry with that exact name wherever it stands in the list, else the
/// last `*` entry, else none.
pub fn container_policy<'a>(
    policy: Option<&'a PodResourcePolicy>,
    container: &str,
) -> Option<&'a ContainerResourcePolicy> {
    let policies = policy?.container_policies.as_deref()?;
    let mut default = None;
    for p in policies {
        match p.container_name.as_deref() {
            Some(name) if name == container => return Some(p),
            Some(DEFAULT_CONTAINER) => default = Some(p),
            _ => {}
        }
    }
    default
}

/// The scaling mode of a container policy: `Auto` unless the policy says `Off`.
pub fn scaling_mode(policy: Option<&ContainerResourcePolicy>) -> ContainerScalingMode {
    match policy.and_then(|p| p.mode.as_ref()) {
        Some(ContainerScalingMode::Off) => ContainerScalingMode::Off,
        _ => ContainerScalingMode::Auto,
    }
}

/// Whether the recommender produces a recommendation for the container (its mode is not `Off`).
pub fn needs_recommendation(policy: Option<&ContainerResourcePolicy>) -> bool {
    scaling_mode(policy) != ContainerScalingMode::Off
}

/// The controlled values of a container policy: `RequestsAndLimits` unless it says `RequestsOnly`.
pub fn controlled_values(policy: Option<&ContainerResourcePolicy>) -> ControlledValues {
    match policy.and_then(|p| p.controlled_values.as_ref()) {
        Some(ControlledValues::RequestsOnly) => ControlledValues::RequestsOnly,
        _ => ControlledValues::RequestsAndLimits,
    }
}

/// The resources a container policy asks recommendations for: its list when present (even empty),
/// otherwise cpu and memory.
pub fn controlled_resources(policy: Option<&ContainerResourcePolicy>) -> Vec<String> {
    match policy.and_then(|p| p.controlled_resources.as_ref()) {
        Some(list) => list.clone(),
        None => DEFAULT_CONTROLLED_RESOURCES
            .iter()
            .map(|r| r.to_string())
            .collect(),
    }
}

/// The memory aggregation interval for a container: the policy's value when per-VPA configuration is
/// enabled and the policy sets one, otherwise `default_seconds`.
pub fn memory_aggregation_interval_seconds(
    policy: Option<&ContainerResourcePolicy>,
    per_vpa_config: bool,
    default_seconds: i64,
) -> i64 {
    match policy.and_then(|p| p.memory_aggregation_interval_seconds) {
        Some(v) if per_vpa_config => i64::from(v),
        _ => default_seconds,
    }
}

/// The number of memory aggregation intervals for a container, like
/// [`memory_aggregation_interval_seconds`].
pub fn memory_aggregation_interval_count(
    policy: Option<&ContainerResourcePolicy>,
    per_vpa_config: bool,
    default_count: i64,
) -> i64 {
    match policy.and_then(|p| p.memory_aggregation_interval_count) {
        Some(v) if per_vpa_config => v,
        _ => default_count,
    }
}

/// The effective update mode of a VPA: `Recreate` when unset (upstream's code default).
pub fn update_mode(spec: &VerticalPodAutoscalerSpec) -> UpdateMode {
    spec.update_policy
        .as_ref()
        .and_then(|p| p.update_mode.clone())
        .unwrap_or(UpdateMode::Recreate)
}

/// Whether the VPA configures a CPU start-up boost, at pod level or for any container.
pub fn has_startup_boost(spec: &VerticalPodAutoscalerSpec) -> bool {
    let pod_level = spec.startup_boost.as_ref().is_some_and(|b| b.cpu.is_some());
    let container_level = spec
        .resource_policy
        .as_ref()
        .and_then(|p| p.container_policies.as_ref())
        .is_some_and(|list| list.iter().any(|p| p.startup_boost.is_some()));
    pod_level || container_level
}
