//! `spec.updatePolicy.evictionRequirements`: which scaling directions may disrupt a pod
//! (docs/design/upstream-updater.md §4). Applied after prioritisation on the eviction and the in-place path alike.

use std::sync::Arc;

use tailor_core::quantity::{self, QuantityError};
use tailor_crds::{
    EvictionChangeRequirement, EvictionRequirement, RecommendedPodResources, VerticalPodAutoscaler,
};

use crate::FastMap;
use crate::decisions::priority::container_recommendation;
use crate::views::pods::{self, CachedPod};

/// Requirements per pod (`namespace/name`), rebuilt every iteration.
#[derive(Clone, Debug, Default)]
pub struct EvictionAdmission {
    requirements: FastMap<Arc<str>, Arc<[EvictionRequirement]>>,
}

impl EvictionAdmission {
    /// Rebuilds the map from the VPA → pods assignment of this iteration. Pods of VPAs without
    /// `updatePolicy` are not entered (they are always admitted).
    pub fn loop_init<'a>(
        &mut self,
        assignment: impl IntoIterator<Item = (&'a VerticalPodAutoscaler, &'a [Arc<CachedPod>])>,
    ) {
        self.requirements.clear();
        for (vpa, vpa_pods) in assignment {
            let Some(policy) = vpa.spec.update_policy.as_ref() else {
                continue;
            };
            let reqs: Arc<[EvictionRequirement]> = policy
                .eviction_requirements
                .clone()
                .unwrap_or_default()
                .into();
            for pod in vpa_pods {
                self.requirements
                    .insert(pods::shared_key(pod), Arc::clone(&reqs));
            }
        }
    }

    /// Forgets every pod (no VPA this iteration).
    pub fn clean_up(&mut self) {
        self.requirements.clear();
    }

    /// The requirements recorded for a pod (`None` = not in the map).
    pub fn requirements(&self, pod: &CachedPod) -> Option<&[EvictionRequirement]> {
        self.requirements.get(pods::pod_key(pod)).map(|r| &r[..])
    }

    /// Whether `pod` may be updated towards `rec` (docs/design/upstream-updater.md §4).
    pub fn admit(
        &self,
        pod: &CachedPod,
        rec: Option<&RecommendedPodResources>,
    ) -> Result<bool, QuantityError> {
        admit(pod, self.requirements(pod), rec)
    }
}

/// The admission rule for one pod with its requirements (`None` = pod not in the map → admitted).
pub fn admit(
    pod: &CachedPod,
    requirements: Option<&[EvictionRequirement]>,
    rec: Option<&RecommendedPodResources>,
) -> Result<bool, QuantityError> {
    let Some(requirements) = requirements else {
        return Ok(true);
    };
    for container in pods::containers(pod) {
        let Some(crec) = container_recommendation(rec, &container.name) else {
            continue;
        };
        let Some(requests) = container.requests.as_deref() else {
            return Ok(true);
        };
        if !requests.contains("cpu") || !requests.contains("memory") {
            return Ok(true);
        }
        let mut satisfied = true;
        for requirement in requirements {
            let mut any = false;
            for resource in &requirement.resources {
                let target = crec
                    .target
                    .get(resource)
                    .map(quantity::milli_value)
                    .transpose()?
                    .unwrap_or(0);
                let request = requests
                    .get(resource)
                    .map(|(q, _)| quantity::milli_value(q))
                    .transpose()?
                    .unwrap_or(0);
                let holds = match requirement.change_requirement {
                    EvictionChangeRequirement::TargetHigherThanRequests => target > request,
                    EvictionChangeRequirement::TargetLowerThanRequests => target < request,
                    _ => false,
                };
                if holds {
                    any = true;
                    break;
                }
            }
            if !any {
                satisfied = false;
                break;
            }
        }
        if satisfied {
            return Ok(true);
        }
    }
    Ok(false)
}
