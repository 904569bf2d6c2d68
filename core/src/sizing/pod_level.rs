//! Pods with pod-level resources (`spec.resources`, beta since Kubernetes 1.34): the API server requires
//! the containers' requests to fit within the pod's, so raising a container above that budget gets the pod
//! rejected after mutation (its ReplicaSet then cannot create pods) and an in-place resize refused. Tailor
//! leaves a resource the pod budgets at pod level alone in every container, and says so.

use k8s_openapi::api::core::v1::Pod;

use super::{CPU, ContainerResources, MEMORY};

/// The resources (`cpu`, `memory`) that `pod` sets requests or limits for at pod level.
pub fn pod_level_resources(pod: &Pod) -> Vec<&'static str> {
    let Some(resources) = pod.spec.as_ref().and_then(|s| s.resources.as_ref()) else {
        return Vec::new();
    };
    [CPU, MEMORY]
        .into_iter()
        .filter(|r| {
            [&resources.requests, &resources.limits]
                .into_iter()
                .flatten()
                .any(|m| m.contains_key(*r))
        })
        .collect()
}

/// The note in the updates annotation for `resource` left alone.
pub fn pod_level_note(resource: &str) -> String {
    format!("{resource} left alone: the pod sets pod-level resources")
}

/// Takes the resources `pod` budgets at pod level out of every container's requests and limits (and their
/// notes). Returns
/// the resources some container would have changed.
pub fn leave_pod_level_alone(pod: &Pod, resources: &mut [ContainerResources]) -> Vec<&'static str> {
    leave_alone(&pod_level_resources(pod), resources)
}

/// [`leave_pod_level_alone`] for the resources a pod budgets at pod level (from [`pod_level_resources`]).
pub fn leave_alone(
    pod_level: &[&'static str],
    resources: &mut [ContainerResources],
) -> Vec<&'static str> {
    let mut left = Vec::new();
    for &resource in pod_level {
        let mut taken = false;
        for container in resources.iter_mut() {
            taken |= container.requests.remove(resource).is_some();
            taken |= container.limits.remove(resource).is_some();
            let removed = container.removed_limits.len();
            container.removed_limits.retain(|r| *r != resource);
            taken |= container.removed_limits.len() != removed;
            // Capping and limit notes about it no longer describe anything written.
            container
                .annotations
                .retain(|note| !note.starts_with(resource));
        }
        if taken {
            left.push(resource);
        }
    }
    left
}
