//! A floor under what Tailor writes into pods (issue 30 item 7): a recommendation of memory `"1"` gave a
//! patch with a 1-byte request and a 2-byte limit, which kills the container at once. With a floor, no
//! container's target, lower bound or upper bound is below its share of a pod minimum, so neither the
//! webhook nor the updater writes less, and the updater's priorities see the same floored range (a pod at
//! the floor is in range, not evicted again). Off in [`PatchOptions::default`] (upstream has none); the
//! binaries switch it on by flag.

use super::*;

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

/// The LimitRange maxima a floor never goes above: the namespace's merged Container and Pod items.
#[derive(Clone, Copy, Debug, Default)]
pub struct FloorLimits<'a> {
    /// The Container item (`max` per container).
    pub container_item: Option<&'a LimitRangeItem>,
    /// The Pod item (`max` for the pod, shared out like the floor).
    pub pod_item: Option<&'a LimitRangeItem>,
}

/// The smallest of the `max` values `resource` has in `limits` and the policy's `max_allowed` (the pod's
/// shared out among `containers`), if any.
fn ceiling(
    resource: &str,
    max_allowed: Option<&ResourceList>,
    limits: &FloorLimits<'_>,
    containers: usize,
) -> Result<Option<i128>, PodError> {
    let amount = |q: Option<&Quantity>, what: &str| -> Result<Option<i128>, PodError> {
        match q {
            Some(q) => Ok(parse(q, || format!("{what}[{resource}]"))?.amount_i128(resource)),
            None => Ok(None),
        }
    };
    let n = i128::try_from(containers.max(1)).unwrap_or(1);
    let candidates = [
        amount(max_allowed.and_then(|m| m.get(resource)), "maxAllowed")?,
        amount(
            limits
                .container_item
                .and_then(|i| i.max.as_ref())
                .and_then(|m| m.get(resource)),
            "LimitRange Container max",
        )?,
        amount(
            limits
                .pod_item
                .and_then(|i| i.max.as_ref())
                .and_then(|m| m.get(resource)),
            "LimitRange Pod max",
        )?
        .map(|max| max / n),
    ];
    Ok(candidates.into_iter().flatten().min())
}

/// Raises the target, lower bound, upper bound and uncapped target of every recommendation in `processed`
/// to its container's share of `floor` (among `containers`), but never above the container policy's
/// `maxAllowed` nor a LimitRange `max` of `limits` (the API server would refuse the pod); each raised
/// container and resource gets a note in `processed.annotations` (the updates annotation).
pub fn apply_floor(
    vpa: &VerticalPodAutoscaler,
    processed: &mut Processed,
    floor: &PodFloor,
    containers: usize,
    limits: &FloorLimits<'_>,
) -> Result<(), PodError> {
    let policy = vpa.spec.resource_policy.as_ref();
    for rec in processed
        .recommendation
        .container_recommendations
        .iter_mut()
        .flatten()
    {
        let name = rec.container_name.clone().unwrap_or_default();
        let max_allowed = container_policy(policy, &name).and_then(|p| p.max_allowed.as_ref());
        for resource in CPU_AND_MEMORY {
            let Some(mut share) = floor.share(resource, containers) else {
                continue;
            };
            if let Some(max) = ceiling(resource, max_allowed, limits, containers)? {
                share = share.min(max);
            }
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
                    let format = if resource == "memory" {
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
                processed
                    .annotations
                    .entry(name.clone())
                    .or_default()
                    .push(format!("{resource} raised to the pod floor"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vpa(policy: serde_json::Value) -> VerticalPodAutoscaler {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                     "resourcePolicy": policy}
        }))
        .expect("vpa")
    }

    fn processed(memory: &str) -> Processed {
        Processed {
            recommendation: serde_json::from_value(
                serde_json::json!({"containerRecommendations": [
                {"containerName": "app", "target": {"cpu": "2m", "memory": memory},
                 "lowerBound": {"cpu": "1m", "memory": memory},
                 "upperBound": {"cpu": "1", "memory": "1Gi"}}]}),
            )
            .expect("recommendation"),
            annotations: BTreeMap::new(),
        }
    }

    fn first(p: &Processed) -> &RecommendedContainerResources {
        &p.recommendation
            .container_recommendations
            .as_ref()
            .expect("list")[0]
    }

    #[test]
    fn an_absurd_target_is_raised_to_the_containers_share_of_the_pod_minimum() {
        let mut p = processed("1");
        apply_floor(
            &vpa(serde_json::json!({})),
            &mut p,
            &PodFloor::RECOMMENDER_MINIMUMS,
            2,
            &FloorLimits::default(),
        )
        .expect("floor");
        let rec = first(&p);
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
    }

    #[test]
    fn the_floor_never_exceeds_the_policy_max_allowed() {
        let mut p = processed("1");
        let policy = serde_json::json!({"containerPolicies": [
            {"containerName": "app", "maxAllowed": {"memory": "64Mi"}}]});
        let limits = FloorLimits::default();
        apply_floor(
            &vpa(policy),
            &mut p,
            &PodFloor::RECOMMENDER_MINIMUMS,
            1,
            &limits,
        )
        .expect("floor");
        assert_eq!(first(&p).target["memory"].0, "64Mi");
    }

    #[test]
    fn the_floor_never_exceeds_a_limit_range_max() {
        // A LimitRange that caps memory at 200Mi per container, 300Mi per pod: the pod would be refused
        // above them.
        let item = |max: &str| -> LimitRangeItem {
            serde_json::from_value(serde_json::json!({"type": "Container", "max": {"memory": max}}))
                .expect("item")
        };
        let (container, pod) = (item("200Mi"), item("300Mi"));
        let mut p = processed("1");
        let limits = FloorLimits {
            container_item: Some(&container),
            pod_item: None,
        };
        apply_floor(
            &vpa(serde_json::json!({})),
            &mut p,
            &PodFloor::RECOMMENDER_MINIMUMS,
            1,
            &limits,
        )
        .expect("floor");
        assert_eq!(first(&p).target["memory"].0, "200Mi");
        let mut p = processed("1");
        let limits = FloorLimits {
            container_item: None,
            pod_item: Some(&pod),
        };
        apply_floor(
            &vpa(serde_json::json!({})),
            &mut p,
            &PodFloor::RECOMMENDER_MINIMUMS,
            2,
            &limits,
        )
        .expect("floor");
        // Two containers: 125Mi each is under 150Mi (300Mi / 2).
        assert_eq!(first(&p).target["memory"].0, "125Mi");
    }
}
