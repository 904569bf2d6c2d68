//! The compact pod as the sizing code shared with the webhook (`tailor_core::sizing`) reads it: one
//! [`Slot`] per container of `spec.containers`, with its current requests and limits (the status's when
//! reported, else the spec's, as [`tailor_core::sizing::current_resources`] picks them).

use k8s_openapi::api::core::v1::Container;
use tailor_core::sizing::{CurrentResources, Slot};

use crate::views::pods::{self, CachedPod};

/// The containers the slots of `pod` refer to: only their names are read.
pub fn containers(pod: &CachedPod) -> Vec<Container> {
    pods::containers(pod)
        .iter()
        .map(|c| Container {
            name: c.name.to_string(),
            ..Container::default()
        })
        .collect()
}

/// The slots of `pod` over `containers` (from [`containers`]), in the order of `spec.containers`.
pub fn slots<'a>(pod: &'a CachedPod, containers: &'a [Container]) -> Vec<Slot<'a>> {
    containers
        .iter()
        .zip(pods::containers(pod))
        .enumerate()
        .map(|(index, (container, info))| Slot {
            container,
            index,
            init: false,
            current: CurrentResources {
                requests: info.requests.as_ref().map(|a| a.list()),
                limits: info.limits.as_ref().map(|a| a.list()),
            },
        })
        .collect()
}
