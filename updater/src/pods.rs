//! What the updater reads off a pod: phase, current resources, observed containers, resize conditions,
//! resize policies and start-up boost annotations (upstream-updater §2.1, §2.2, §3.2, §5.3, §5.7, §5.8).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use tailor_crds::VerticalPodAutoscaler;
use tailor_crds::policy::container_policy;
use tailor_crds::sizing::{
    CurrentResources, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
    current_resources, parse_observed_containers,
};

/// Pod condition the kubelet sets while a resize waits (`Deferred` or `Infeasible`).
pub const RESIZE_PENDING: &str = "PodResizePending";
/// Pod condition the kubelet sets while a resize is being actuated.
pub const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// `namespace/name`, the key upstream uses for pods in its maps.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod's name (empty when absent).
pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// The pod's UID (empty when absent).
pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// Whether the pod's phase is `Pending` (scheduled, not yet running; an absent phase counts as running).
pub fn is_pending(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The pod's `status.startTime`.
pub fn start_time(pod: &Pod) -> Option<Timestamp> {
    pod.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

/// The containers of `spec.containers`.
pub fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
}

/// Current requests and limits of a container: the status's when reported, else the spec's (§2.1).
pub fn current(pod: &Pod, container: &Container) -> CurrentResources {
    current_resources(pod, container, false)
}

/// Current requests of a container without copying them: the status's resources when the status reports
/// them (§2.1), else the spec's.
pub fn current_requests<'a>(
    pod: &'a Pod,
    container: &'a Container,
) -> Option<&'a tailor_crds::ResourceList> {
    let from_status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find(|s| s.name == container.name)
        .and_then(|s| s.resources.as_ref());
    match from_status {
        Some(r) => r.requests.as_ref(),
        None => container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()),
    }
}

/// The containers the webhook observed, from the observed-containers annotation; `None` (all observed)
/// when the annotation is absent or any name in it is invalid (§2.2).
pub fn observed_containers(pod: &Pod) -> Option<Vec<String>> {
    let value = pod
        .metadata
        .annotations
        .as_ref()?
        .get(OBSERVED_CONTAINERS_ANNOTATION)?;
    parse_observed_containers(value).ok()
}

/// Whether `container` counts for priorities and quick OOMs under `observed` (§2.2).
pub fn is_observed(observed: Option<&[String]>, container: &str) -> bool {
    observed.is_none_or(|list| list.iter().any(|c| c == container))
}

fn resize_conditions(pod: &Pod) -> impl Iterator<Item = &k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == RESIZE_PENDING || c.type_ == RESIZE_IN_PROGRESS)
}

/// Whether a resize is under way: the first resize condition's status is `True` (§3.2).
pub fn is_in_place_updating(pod: &Pod) -> bool {
    resize_conditions(pod)
        .next()
        .is_some_and(|c| c.status == "True")
}

/// Where a pod's resize stands (§5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeStatus {
    /// No resize under way.
    None,
    /// The kubelet defers it (does not fit now).
    Deferred,
    /// It can never fit this node.
    Infeasible,
    /// Being actuated.
    InProgress,
    /// Actuation failed.
    Error,
    /// Any other state.
    Unknown,
}

impl ResizeStatus {
    /// Upstream's name (`ResizeNone`, `ResizeDeferred`, …).
    pub fn name(self) -> &'static str {
        match self {
            ResizeStatus::None => "ResizeNone",
            ResizeStatus::Deferred => "ResizeDeferred",
            ResizeStatus::Infeasible => "ResizeInfeasible",
            ResizeStatus::InProgress => "ResizeInProgress",
            ResizeStatus::Error => "ResizeError",
            ResizeStatus::Unknown => "ResizeUnknown",
        }
    }
}

fn condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    resize_conditions(pod).find(|c| c.type_ == type_)
}

/// The resize status of a pod (§5.7): `PodResizePending` wins over `PodResizeInProgress`.
pub fn resize_status(pod: &Pod) -> ResizeStatus {
    if !is_in_place_updating(pod) {
        return ResizeStatus::None;
    }
    if let Some(c) = condition(pod, RESIZE_PENDING) {
        return match c.reason.as_deref() {
            Some("Deferred") => ResizeStatus::Deferred,
            Some("Infeasible") => ResizeStatus::Infeasible,
            _ => ResizeStatus::Unknown,
        };
    }
    if let Some(c) = condition(pod, RESIZE_IN_PROGRESS) {
        let reason = c.reason.as_deref().unwrap_or_default();
        let message = c.message.as_deref().unwrap_or_default();
        return match (reason, message) {
            ("", "") => ResizeStatus::InProgress,
            ("Error", _) => ResizeStatus::Error,
            _ => ResizeStatus::Unknown,
        };
    }
    ResizeStatus::Unknown
}

/// The `PodResizePending` condition's reason, if that condition exists (its status is not checked).
pub fn pending_reason(pod: &Pod) -> Option<&str> {
    condition(pod, RESIZE_PENDING).map(|c| c.reason.as_deref().unwrap_or_default())
}

/// The `PodResizeInProgress` condition's reason and message, if that condition exists.
pub fn in_progress_state(pod: &Pod) -> Option<(&str, &str)> {
    condition(pod, RESIZE_IN_PROGRESS).map(|c| {
        (
            c.reason.as_deref().unwrap_or_default(),
            c.message.as_deref().unwrap_or_default(),
        )
    })
}

/// Whether resizing the pod restarts no container: no container in `spec.containers` has a
/// `RestartContainer` resize policy (§5.3 step 7).
pub fn is_non_disruptive(pod: &Pod) -> bool {
    !containers(pod).iter().any(|c| {
        c.resize_policy
            .iter()
            .flatten()
            .any(|p| p.restart_policy == "RestartContainer")
    })
}

/// The boost annotations of a pod (key → value).
pub fn boost_annotations(pod: &Pod) -> impl Iterator<Item = (&String, &String)> {
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(STARTUP_BOOST_ANNOTATION_PREFIX))
}

/// Whether the pod carries any start-up boost annotation (a boost is, or was, in progress).
pub fn has_boost_annotation(pod: &Pod) -> bool {
    boost_annotations(pod).next().is_some()
}

/// The annotation key of `container`'s boost.
pub fn boost_key(container: &str) -> String {
    format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{container}")
}

/// The boost annotation keys whose boost has run its course at `now` (§5.8): none unless the pod is
/// `Ready`; a key expires when its duration is 0 or more than that many seconds have passed since the pod
/// became ready. The duration is the VPA's `startupBoost.cpu.durationSeconds`, overridden by the
/// container policy's when that one sets it.
pub fn expired_boost_keys(pod: &Pod, vpa: &VerticalPodAutoscaler, now: Timestamp) -> Vec<String> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "True");
    let Some(ready) = ready else {
        return Vec::new();
    };
    let ready_time = ready
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(go_zero_time);
    let pod_level = vpa
        .spec
        .startup_boost
        .as_ref()
        .and_then(|b| b.cpu.as_ref())
        .and_then(|c| c.duration_seconds)
        .unwrap_or(0);
    let policy = vpa.spec.resource_policy.as_ref();
    let mut out = Vec::new();
    for (key, _) in boost_annotations(pod) {
        let container = &key[STARTUP_BOOST_ANNOTATION_PREFIX.len()..];
        let seconds = container_policy(policy, container)
            .and_then(|p| p.startup_boost.as_ref())
            .and_then(|b| b.cpu.as_ref())
            .and_then(|c| c.duration_seconds)
            .unwrap_or(pod_level);
        let elapsed = now.as_second().saturating_sub(ready_time.as_second());
        let elapsed_longer = elapsed > i64::from(seconds)
            || (elapsed == i64::from(seconds)
                && now.subsec_nanosecond() > ready_time.subsec_nanosecond());
        if seconds == 0 || elapsed_longer {
            out.push(key.clone());
        }
    }
    out
}

/// Go's zero time, `0001-01-01T00:00:00Z`: what an absent timestamp reads as upstream.
pub fn go_zero_time() -> Timestamp {
    Timestamp::new(-62_135_596_800, 0).unwrap_or(Timestamp::MIN)
}

/// Labels of the pod (empty map when absent).
pub fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// The pod reduced to what the updater reads (names, labels, owners, Tailor's annotations, container
/// resources and resize policies, phase, start time, conditions, container statuses' resources and last
/// termination): what the pod cache keeps.
pub fn slim(pod: Pod) -> Pod {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let m = pod.metadata;
    let annotations = m.annotations.map(|a| {
        a.into_iter()
            .filter(|(k, _)| {
                k.starts_with(STARTUP_BOOST_ANNOTATION_PREFIX)
                    || k == OBSERVED_CONTAINERS_ANNOTATION
            })
            .collect::<BTreeMap<_, _>>()
    });
    let metadata = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        annotations: annotations.filter(|a| !a.is_empty()),
        owner_references: m.owner_references,
        deletion_timestamp: m.deletion_timestamp,
        creation_timestamp: m.creation_timestamp,
        ..ObjectMeta::default()
    };
    let spec = pod.spec.map(|s| PodSpec {
        containers: s
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                resources: c.resources,
                resize_policy: c.resize_policy,
                ..Container::default()
            })
            .collect(),
        node_name: s.node_name,
        ..PodSpec::default()
    });
    let status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        start_time: s.start_time,
        conditions: s.conditions.map(|list| {
            list.into_iter()
                .map(|mut c| {
                    c.message = c.message.map(|m| m.chars().take(256).collect());
                    c
                })
                .collect()
        }),
        container_statuses: s.container_statuses.map(|list| {
            list.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    resources: c.resources,
                    last_state: c.last_state,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec,
        status,
    }
}
