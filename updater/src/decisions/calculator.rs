//! The priority calculator: which pods of one VPA to update, in which order
//! (docs/design/upstream-updater.md §2.4–§2.6).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tailor_core::policy::{container_policy, scaling_mode};
use tailor_core::quantity::QuantityError;
use tailor_crds::{
    ContainerScalingMode, RecommendedPodResources, UpdateMode, VerticalPodAutoscaler,
};

use crate::decisions::config::{FeatureGates, PriorityConfig};
use crate::decisions::eviction_admission::EvictionAdmission;
use crate::decisions::infeasible::InfeasibleAttempts;
use crate::decisions::priority::{PodPriority, has_lower_resource};
use crate::decisions::skip::Skip;
use crate::views::pods::{self, CachedPod};

/// A pod the calculator accepted, with what it was accepted for.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The pod.
    pub pod: Arc<CachedPod>,
    /// Its priority.
    pub priority: PodPriority,
    /// The processed recommendation it would be updated to.
    pub recommendation: Option<Arc<RecommendedPodResources>>,
}

/// Collects candidate pods of one VPA and orders them.
#[derive(Debug)]
pub struct PriorityCalculator<'a> {
    vpa: &'a VerticalPodAutoscaler,
    config: &'a PriorityConfig,
    gates: FeatureGates,
    accepted: Vec<Candidate>,
}

impl<'a> PriorityCalculator<'a> {
    /// A calculator for `vpa`'s pods.
    pub fn new(
        vpa: &'a VerticalPodAutoscaler,
        config: &'a PriorityConfig,
        gates: FeatureGates,
    ) -> Self {
        Self {
            vpa,
            config,
            gates,
            accepted: Vec::new(),
        }
    }

    /// Offers a pod with its processed recommendation and priority (docs/design/upstream-updater.md §2.5).
    /// `Ok(None)` when accepted, otherwise why it was rejected.
    pub fn add_pod(
        &mut self,
        pod: Arc<CachedPod>,
        recommendation: Option<Arc<RecommendedPodResources>>,
        priority: PodPriority,
        infeasible: &InfeasibleAttempts,
        now: Timestamp,
    ) -> Result<Option<Skip>, QuantityError> {
        let mode = self
            .vpa
            .spec
            .update_policy
            .as_ref()
            .and_then(|p| p.update_mode.as_ref());
        if mode == Some(&UpdateMode::InPlace)
            && let Some(last) = infeasible.get(pods::uid(&pod))
            && !has_lower_resource(Some(last), recommendation.as_deref())?
        {
            return Ok(Some(Skip::InfeasibleCached));
        }
        let quick_oom = self.quick_oom(&pod, now);
        if !priority.outside_recommended_range && !quick_oom {
            let Some(start) = pods::start_time(&pod) else {
                return Ok(Some(Skip::NotStarted));
            };
            if now < add(start, self.config.pod_lifetime_update_threshold) {
                return Ok(Some(Skip::TooYoung));
            }
            if priority.resource_diff < self.config.min_change_priority {
                return Ok(Some(Skip::WithinRange));
            }
        }
        if quick_oom && priority.resource_diff == 0.0 {
            return Ok(Some(Skip::NoChange));
        }
        self.accepted.push(Candidate {
            pod,
            priority,
            recommendation,
        });
        Ok(None)
    }

    /// Whether a container of the pod was OOM-killed after running less than the threshold
    /// (docs/design/upstream-updater.md §2.4). With [`PriorityConfig::quick_oom_max_age`], a kill older than
    /// that no longer counts (Tailor option).
    fn quick_oom(&self, pod: &CachedPod, now: Timestamp) -> bool {
        let threshold = match self
            .vpa
            .spec
            .update_policy
            .as_ref()
            .and_then(|p| p.evict_after_oom_seconds)
        {
            Some(seconds) if self.gates.per_vpa_config => {
                Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
            }
            _ => self.config.evict_after_oom_threshold,
        };
        let observed = pods::observed_containers(pod);
        let policy = self.vpa.spec.resource_policy.as_ref();
        pods::oom_kills(pod).iter().any(|kill| {
            if !pods::is_observed(observed, &kill.container)
                || scaling_mode(container_policy(policy, &kill.container))
                    == ContainerScalingMode::Off
            {
                return false;
            }
            if let Some(max_age) = self.config.quick_oom_max_age
                && now > add(kill.finished, max_age)
            {
                return false;
            }
            kill.finished < add(kill.started, threshold)
        })
    }

    /// The accepted pods, highest priority first (stable among equals), that `admission` admits; the
    /// rejected ones are returned separately.
    pub fn sorted(
        mut self,
        admission: &EvictionAdmission,
    ) -> Result<(Vec<Candidate>, Vec<Arc<CachedPod>>), QuantityError> {
        self.accepted
            .sort_by(|a, b| a.priority.cmp_desc(&b.priority));
        let mut out = Vec::with_capacity(self.accepted.len());
        let mut refused = Vec::new();
        for c in self.accepted {
            if admission.admit(&c.pod, c.recommendation.as_deref())? {
                out.push(c);
            } else {
                refused.push(c.pod);
            }
        }
        Ok((out, refused))
    }
}

/// `t + d`, saturating at the end of time.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    k8s_openapi::jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}
