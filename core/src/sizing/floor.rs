//! A floor under what Tailor writes into pods (docs/decisions/pod-floor.md): a recommendation of memory `"1"` gave a
//! patch with a 1-byte request and a 2-byte limit, which kills the container at once. With a floor, each
//! container's recommendation is raised to its share of a pod minimum before the usual capping (the policy's
//! `maxAllowed`, LimitRanges) applies, so neither the webhook nor the updater writes less unless a cap says
//! so, and the updater's priorities see the same floored range (a pod at the floor is in range, not evicted
//! again). Off in [`PatchOptions::default`] (upstream has none); the binaries switch it on by flag.

use super::{CPU_AND_MEMORY, MEMORY, PodError, parse};
use crate::quantity;
use crate::quantity::Amount;
use std::collections::BTreeMap;
use tailor_crds::RecommendedContainerResources;

/// The least resources of a pod, shared out equally among its sized containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodFloor {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
}

impl PodFloor {
    /// The recommender's pod minimums (upstream's `--pod-recommendation-min-cpu-millicores=25`,
    /// `--pod-recommendation-min-memory-mb=250`): no recommendation it writes is below them.
    pub const RECOMMENDER_MINIMUMS: PodFloor = PodFloor {
        cpu_millis: 25,
        memory_bytes: 250 * 1024 * 1024,
    };

    /// Each of `containers` containers' share of `resource` (rounded up), if `resource` has a floor.
    pub fn share(&self, resource: &str, containers: usize) -> Option<i128> {
        let total = match resource {
            "cpu" => self.cpu_millis,
            "memory" => self.memory_bytes,
            _ => return None,
        };
        let n = i128::try_from(containers.max(1)).ok()?;
        let total = i128::from(total);
        (total > 0).then(|| (total + n - 1) / n)
    }
}

/// Raises the target, lower bound, upper bound and uncapped target of each recommendation in `recs` to its
/// container's share of `floor` (among `containers`). Runs on the recommendation before any capping, as the
/// recommender's own minimums do, so that the policy's `maxAllowed`, `RequestsOnly` and the LimitRanges
/// still cap it (the API server would refuse a pod above a LimitRange `max`). Returns, per container, the
/// resources it raised (for the updates annotation).
pub fn floor_recommendations(
    recs: &mut [RecommendedContainerResources],
    floor: &PodFloor,
    containers: usize,
) -> Result<BTreeMap<String, Vec<String>>, PodError> {
    let mut raised_notes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rec in recs.iter_mut() {
        let name = rec.container_name.clone().unwrap_or_default();
        for resource in CPU_AND_MEMORY {
            let Some(share) = floor.share(resource, containers) else {
                continue;
            };
            let mut raised = false;
            for list in [
                Some(&mut rec.target),
                rec.lower_bound.as_mut(),
                rec.upper_bound.as_mut(),
                rec.uncapped_target.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                let Some(q) = list.get(resource) else {
                    continue;
                };
                let current = parse(q, || format!("recommendation[{name}][{resource}]"))?;
                if current.amount_i128(resource).is_some_and(|c| c < share) {
                    let format = if resource == MEMORY {
                        quantity::Format::BinarySi
                    } else {
                        current.format
                    };
                    list.insert(
                        resource.to_owned(),
                        Amount::from_amount_i128(resource, share, format).to_quantity(),
                    );
                    raised = true;
                }
            }
            if raised {
                raised_notes
                    .entry(name.clone())
                    .or_default()
                    .push(format!("{resource} raised to the pod floor"));
            }
        }
    }
    Ok(raised_notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::*;
    use k8s_openapi::api::core::v1::LimitRangeItem;
    use serde_json::json;
    use tailor_testkit::fixtures::{PodFixture, VpaFixture};

    fn vpa(policy: serde_json::Value, memory: &str) -> VerticalPodAutoscaler {
        VpaFixture::new("ns", "v")
            .target("Deployment", "d")
            .resource_policy(policy)
            .recommendation_row(json!({"containerName": "app", "target": {"cpu": "2m", "memory": memory},
                "lowerBound": {"cpu": "1m", "memory": memory}, "upperBound": {"cpu": "1", "memory": "1Gi"}}))
            .recommendation("side", "2m", memory)
            .build()
    }

    fn pod(limits: serde_json::Value) -> Pod {
        PodFixture::new("ns", "p")
            .container("app", json!({"cpu": "10m", "memory": "100Mi"}), limits)
            .container_resources("side", json!(null))
            .build()
    }

    fn processed(
        vpa: &VerticalPodAutoscaler,
        pod: &Pod,
        container_item: Option<&LimitRangeItem>,
    ) -> Processed {
        let slots = slots(pod, &PatchOptions::default());
        process_recommendation_floored(
            vpa,
            &slots,
            container_item,
            None,
            Some(&PodFloor::RECOMMENDER_MINIMUMS),
        )
        .expect("processed")
        .expect("some")
    }

    fn app(p: &Processed) -> &RecommendedContainerResources {
        &p.recommendation
            .container_recommendations
            .as_ref()
            .expect("list")[0]
    }

    #[test]
    fn an_absurd_target_is_raised_to_the_containers_share_of_the_pod_minimum() {
        let p = processed(
            &vpa(serde_json::json!({}), "1"),
            &pod(serde_json::json!({})),
            None,
        );
        let rec = app(&p);
        // Two containers: 25m / 2 rounded up, 250Mi / 2.
        assert_eq!(rec.target["cpu"].0, "13m");
        assert_eq!(rec.target["memory"].0, "125Mi");
        assert_eq!(
            rec.lower_bound.as_ref().expect("lower")["memory"].0,
            "125Mi"
        );
        // Values above the floor stay.
        assert_eq!(rec.upper_bound.as_ref().expect("upper")["memory"].0, "1Gi");
        assert_eq!(
            p.annotations["app"],
            [
                "cpu raised to the pod floor",
                "memory raised to the pod floor"
            ]
        );
        // Without a floor: upstream's processing.
        let bare = pod(serde_json::json!({}));
        let slots = slots(&bare, &PatchOptions::default());
        let plain = process_recommendation(&vpa(serde_json::json!({}), "1"), &slots, None, None)
            .expect("processed")
            .expect("some");
        assert_eq!(app(&plain).target["memory"].0, "1");
    }

    #[test]
    fn the_policy_max_allowed_still_caps_the_floor() {
        let policy = serde_json::json!({"containerPolicies": [
            {"containerName": "app", "maxAllowed": {"memory": "64Mi"}}]});
        let p = processed(&vpa(policy, "1"), &pod(serde_json::json!({})), None);
        assert_eq!(app(&p).target["memory"].0, "64Mi");
    }

    #[test]
    fn a_limit_range_max_still_caps_the_floor_and_its_proportional_limit() {
        // Container max 100Mi with a limit twice the request: the floored 125Mi request is capped to 50Mi,
        // as upstream caps any recommendation whose proportional limit would exceed the max.
        let item: LimitRangeItem = serde_json::from_value(
            serde_json::json!({"type": "Container", "max": {"memory": "100Mi"}}),
        )
        .expect("item");
        let p = processed(
            &vpa(serde_json::json!({}), "1"),
            &pod(serde_json::json!({"memory": "200Mi"})),
            Some(&item),
        );
        assert_eq!(app(&p).target["memory"].0, "50Mi");
    }
}
