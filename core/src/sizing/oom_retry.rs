//! Memory for the retry of an OOM-killed Job pod (docs/jobs.md). A Job replaces a failed pod with a new one;
//! when the failed one was OOM-killed, the new one is admitted with more memory than the VPA's target: the
//! OOM-killed attempt's memory request bumped by the recommender's own OOM rule (`max(request × ratio,
//! request + minimum)`). Each attempt was itself bumped, so the memory grows per retry; `maxAllowed` still
//! caps it, as it caps every recommendation.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_crds::vpa::ContainerResourcePolicy;
use tailor_crds::{RecommendedContainerResources, RecommendedPodResources, VerticalPodAutoscaler};

use super::MEMORY;
use crate::policy::{container_policy, controlled_resources, scaling_mode};
use crate::quantity::{self, Amount, Format};
use tailor_crds::ContainerScalingMode;

/// The OOM bump: the recommender's `--oom-bump-up-ratio` and `--oom-min-bump-up-bytes`, which a container
/// policy's `oomBumpUpRatio` and `oomMinBumpUp` override under the `PerVPAConfig` feature gate (as in the
/// recommender).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OomBumpRule {
    /// Multiplier of the OOM-killed memory (at least 1).
    pub ratio: f64,
    /// Smallest increase, in bytes (at least 0).
    pub min_bytes: f64,
    /// Feature gate `PerVPAConfig`: a container policy's own values win.
    pub per_vpa_config: bool,
}

impl Default for OomBumpRule {
    /// Upstream's defaults: 1.2 and 100 MiB.
    fn default() -> Self {
        Self {
            ratio: 1.2,
            min_bytes: 104_857_600.0,
            per_vpa_config: false,
        }
    }
}

impl OomBumpRule {
    /// This rule with the container policy's overrides under `PerVPAConfig` (values out of range are ignored,
    /// as the recommender ignores them).
    pub fn for_policy(self, policy: Option<&ContainerResourcePolicy>) -> Self {
        if !self.per_vpa_config {
            return self;
        }
        let value = |q: Option<&Quantity>| {
            q.and_then(|q| quantity::milli_value(q).ok())
                .map(|milli| milli as f64 / 1000.0)
        };
        Self {
            ratio: value(policy.and_then(|p| p.oom_bump_up_ratio.as_ref()))
                .filter(|r| r.is_finite() && *r >= 1.0)
                .unwrap_or(self.ratio),
            min_bytes: value(policy.and_then(|p| p.oom_min_bump_up.as_ref()))
                .filter(|b| b.is_finite() && *b >= 0.0)
                .unwrap_or(self.min_bytes),
            per_vpa_config: true,
        }
    }

    /// The memory after an OOM kill at `bytes`: `max(bytes × ratio, bytes + min_bytes)`, rounded up to a
    /// whole byte and saturating.
    pub fn bumped(&self, bytes: i64) -> i64 {
        let b = bytes.max(0) as f64;
        let raised = (b * self.ratio).max(b + self.min_bytes).ceil();
        if raised >= i64::MAX as f64 {
            i64::MAX
        } else {
            raised as i64
        }
    }
}

/// One container's raise, for the Event that reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryRaise {
    /// Container name.
    pub container: String,
    /// The memory request of the OOM-killed attempt, in bytes.
    pub killed_at: i64,
    /// The memory target before the raise (bytes; `None` when the VPA had none for the container).
    pub target: Option<i64>,
    /// The raised target, in bytes (before `maxAllowed` and LimitRanges, which the patch then applies).
    pub raised: i64,
    /// The container policy's `maxAllowed` memory, in bytes, when it has one.
    pub max_allowed: Option<i64>,
}

impl RetryRaise {
    /// The memory the pod gets, as far as `maxAllowed` goes.
    pub fn capped(&self) -> i64 {
        self.max_allowed.map_or(self.raised, |m| self.raised.min(m))
    }
}

/// Raises `vpa`'s memory targets for a Job pod's retry: for each `(container, bytes)` the OOM-killed attempt
/// requested, the target becomes at least the bumped `bytes`. Containers the VPA does not size (mode `Off`,
/// memory not controlled) are left out. Returns the raises made; the VPA's recommendation is changed in place
/// (a copy the caller owns), so the pod patch then applies `maxAllowed`, LimitRanges and the limit rule.
pub fn raise_for_retry(
    vpa: &mut VerticalPodAutoscaler,
    killed: &[(String, i64)],
    rule: OomBumpRule,
) -> Vec<RetryRaise> {
    let mut raises = Vec::new();
    for (container, bytes) in killed {
        let policy = container_policy(vpa.spec.resource_policy.as_ref(), container);
        if scaling_mode(policy) == ContainerScalingMode::Off
            || !controlled_resources(policy).iter().any(|r| r == MEMORY)
        {
            continue;
        }
        let raised = rule.for_policy(policy).bumped(*bytes);
        let max_allowed = (policy.and_then(|p| p.max_allowed.as_ref()))
            .and_then(|m| m.get(MEMORY))
            .and_then(|q| quantity::value(q).ok());
        let row = recommendation_row(vpa, container);
        let target = row.target.get(MEMORY).and_then(|q| quantity::value(q).ok());
        if target.is_some_and(|t| t >= raised) {
            continue;
        }
        let amount = Amount::from_units(raised.into(), Format::BinarySi);
        row.target.insert(MEMORY.to_owned(), amount.to_quantity());
        raises.push(RetryRaise {
            container: container.clone(),
            killed_at: *bytes,
            target,
            raised,
            max_allowed,
        });
    }
    raises
}

/// The VPA's recommendation row for `container`, added (empty) when it has none.
fn recommendation_row<'a>(
    vpa: &'a mut VerticalPodAutoscaler,
    container: &str,
) -> &'a mut RecommendedContainerResources {
    let status = vpa.status.get_or_insert_with(Default::default);
    let rec = status
        .recommendation
        .get_or_insert_with(RecommendedPodResources::default);
    let rows = rec.container_recommendations.get_or_insert_with(Vec::new);
    let at = match (rows.iter()).position(|r| r.container_name.as_deref() == Some(container)) {
        Some(at) => at,
        None => {
            rows.push(RecommendedContainerResources {
                container_name: Some(container.to_owned()),
                ..Default::default()
            });
            rows.len() - 1
        }
    };
    &mut rows[at]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tailor_testkit::fixtures::VpaFixture;

    const MI: i64 = 1 << 20;

    fn vpa(policy: serde_json::Value, target: Option<&str>) -> VerticalPodAutoscaler {
        let v = VpaFixture::new("ns", "v")
            .target("CronJob", "c")
            .container_policy(policy);
        match target {
            Some(t) => v.recommendation("job", "100m", t),
            None => v,
        }
        .build()
    }

    fn memory_target(v: &VerticalPodAutoscaler) -> Option<i64> {
        let rows = v.status.as_ref()?.recommendation.as_ref()?;
        let row = rows.container_recommendations.as_ref()?.first()?;
        quantity::value(row.target.get(MEMORY)?).ok()
    }

    #[test]
    fn the_bump_is_upstreams_oom_rule() {
        let rule = OomBumpRule::default();
        assert_eq!(rule.bumped(256 * MI), 356 * MI, "small: + 100 MiB");
        assert_eq!(rule.bumped(1000 * MI), 1200 * MI, "large: × 1.2");
        assert_eq!(rule.bumped(i64::MAX), i64::MAX, "saturates");
        assert_eq!(
            rule.bumped(-5),
            100 * MI,
            "a negative request counts as none"
        );
    }

    #[test]
    fn each_retry_grows_from_the_last_attempt_until_max_allowed() {
        let mut v = vpa(
            json!({"containerName": "*", "maxAllowed": {"memory": "600Mi"}}),
            Some("256Mi"),
        );
        let mut at = 256 * MI;
        let mut seen = Vec::new();
        for _ in 0..5 {
            let raises = raise_for_retry(&mut v, &[("job".into(), at)], OomBumpRule::default());
            let r = &raises[0];
            assert!(r.raised > at, "{r:?}");
            seen.push(r.capped());
            at = r.capped();
        }
        assert_eq!(seen, [356 * MI, 456 * MI, 556 * MI, 600 * MI, 600 * MI]);
        assert_eq!(
            memory_target(&v),
            Some(720 * MI),
            "the patch caps it at maxAllowed"
        );
    }

    #[test]
    fn a_policy_overrides_the_rule_under_its_gate_and_a_higher_target_stays() {
        let policy = json!({"containerName": "job", "oomBumpUpRatio": "2", "oomMinBumpUp": "0"});
        let mut v = vpa(policy.clone(), None);
        let raises = raise_for_retry(&mut v, &[("job".into(), 300 * MI)], OomBumpRule::default());
        assert_eq!(
            raises[0].raised,
            400 * MI,
            "without PerVPAConfig the flags' rule"
        );
        let gated = OomBumpRule {
            per_vpa_config: true,
            ..OomBumpRule::default()
        };
        let mut v = vpa(policy.clone(), None);
        let raises = raise_for_retry(&mut v, &[("job".into(), 300 * MI)], gated);
        assert_eq!(raises[0].raised, 600 * MI);
        assert_eq!(
            raises[0].target, None,
            "no recommendation yet: a row is added"
        );
        assert_eq!(memory_target(&v), Some(600 * MI));
        let mut v = vpa(policy, Some("1Gi"));
        assert!(
            raise_for_retry(&mut v, &[("job".into(), 300 * MI)], OomBumpRule::default()).is_empty()
        );
        assert_eq!(memory_target(&v), Some(1024 * MI));
    }

    #[test]
    fn containers_the_vpa_does_not_size_are_left_alone() {
        for policy in [
            json!({"containerName": "job", "mode": "Off"}),
            json!({"containerName": "job", "controlledResources": ["cpu"]}),
        ] {
            let mut v = vpa(policy, Some("64Mi"));
            assert!(
                raise_for_retry(&mut v, &[("job".into(), 64 * MI)], OomBumpRule::default())
                    .is_empty()
            );
            assert_eq!(memory_target(&v), Some(64 * MI));
        }
    }
}
