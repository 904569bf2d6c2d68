//! Disruption budgets per controller group: who may be evicted or resized in place this iteration
//! (docs/design/upstream-updater.md §3, §5.3, §5.4, §5.8 `CanUnboost`).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tailor_core::quantity::QuantityError;
use tailor_crds::{UpdateMode, VerticalPodAutoscaler};

use crate::FastMap;
use crate::decisions::calculator::add;
use crate::decisions::config::{FeatureGates, RestrictionConfig};
use crate::decisions::infeasible::InfeasibleAttempts;
use crate::decisions::priority::has_lower_resource;
use crate::decisions::skip::Skip;
use crate::views::pods::{self, CachedPod, Owner, ResizeStatus};

/// `updatePolicy.updateMode` as written: `Recreate` when absent; an explicit empty string stays empty
/// (docs/design/upstream-updater.md §5.3).
pub fn raw_mode(vpa: &VerticalPodAutoscaler) -> UpdateMode {
    vpa.spec
        .update_policy
        .as_ref()
        .and_then(|p| p.update_mode.clone())
        .unwrap_or(UpdateMode::Recreate)
}

/// The direct controller of a pod: the first owner reference with `controller: true`
/// (docs/design/upstream-updater.md §3.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Creator {
    /// The pod's namespace.
    pub namespace: String,
    /// Kind of the controller (empty when the pod has none).
    pub kind: String,
    /// Name of the controller.
    pub name: String,
}

impl Creator {
    /// The creator of `pod`.
    pub fn of(pod: &CachedPod) -> Self {
        let owner = pods::creator(pod);
        Creator {
            namespace: pods::namespace(pod).to_owned(),
            kind: owner.map(|o| o.kind.clone()).unwrap_or_default(),
            name: owner.map(|o| o.name.clone()).unwrap_or_default(),
        }
    }
}

/// How many replicas a controller is configured for (docs/design/upstream-updater.md §3.1 table), answered from
/// the caches.
pub trait ReplicaLookup {
    /// `Ok(n)`: configured replicas; `Err(why)`: the group is dropped. `live` is the number of live pods of
    /// the group (a Job's answer).
    fn configured(&self, creator: &Creator, live: i32) -> Result<i32, String>;
}

/// Upstream's fallback for kinds it does not know: 0 configured replicas (every running pod disruptable).
pub fn unknown_kind_replicas() -> i32 {
    0
}

/// Process-wide fallback timers of pods whose resize is under way (docs/design/upstream-updater.md §5.4):
/// `namespace/name` → when the clock started (and the UID it was started for).
#[derive(Clone, Debug, Default)]
pub struct InPlaceTimers {
    started: HashMap<String, (Timestamp, Option<String>)>,
}

impl InPlaceTimers {
    /// Sets the timer of a pod key (as upstream's map is filled, or by Tailor at the PATCH).
    pub fn set(&mut self, key: &str, at: Timestamp, uid: Option<&str>) {
        self.started
            .insert(key.to_owned(), (at, uid.map(str::to_owned)));
    }

    /// Drops a pod's timer.
    pub fn clear(&mut self, key: &str) {
        self.started.remove(key);
    }

    /// Number of timers held.
    pub fn len(&self) -> usize {
        self.started.len()
    }

    /// Whether no timer is held.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
    }

    /// Keeps only timers of the given pod keys (Tailor, with timers from the PATCH).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.started.retain(|k, _| keep(k));
    }

    fn first_seen(&mut self, pod: &CachedPod, now: Timestamp, by_patch: bool) -> Timestamp {
        let key = pods::pod_key(pod);
        let uid = pod.metadata.uid.as_deref();
        match self.started.get(key) {
            // With Tailor's timers a replaced pod (same name, new UID) starts afresh.
            Some((at, Some(old))) if by_patch && Some(old.as_str()) != uid => {
                let _ = at;
                self.set(key, now, uid);
                now
            }
            Some((at, _)) => *at,
            None => {
                self.set(key, now, uid);
                now
            }
        }
    }
}

/// What `CanInPlaceUpdate` decides (docs/design/upstream-updater.md §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlaceDecision {
    /// Resize now.
    Approved,
    /// Not now; maybe later.
    Deferred,
    /// Evict instead (the resize is stuck or failed).
    Evict,
    /// The resize can never fit (mode `InPlace`).
    Infeasible,
    /// The last attempt was infeasible and the recommendation is not lower (mode `InPlace`).
    InfeasibleCached,
}

impl InPlaceDecision {
    /// Upstream's name (`InPlaceApproved`, …).
    pub fn name(self) -> &'static str {
        match self {
            InPlaceDecision::Approved => "InPlaceApproved",
            InPlaceDecision::Deferred => "InPlaceDeferred",
            InPlaceDecision::Evict => "InPlaceEvict",
            InPlaceDecision::Infeasible => "InPlaceInfeasible",
            InPlaceDecision::InfeasibleCached => "InPlaceInfeasibleCached",
        }
    }
}

/// Why an eviction or resize was refused outright.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestrictionError {
    /// The pod's group was dropped (below `minReplicas`, or its controller is unknown).
    #[error("pod not suitable for {action} {pod}: not in replicated pods map")]
    NotInGroup {
        /// `eviction` or `in-place update`.
        action: &'static str,
        /// `namespace/name` (or name).
        pod: String,
    },
    /// The group's budget is used up.
    #[error("cannot evict pod {0}: eviction budget exceeded")]
    BudgetExceeded(String),
}

#[derive(Clone, Debug, Default)]
struct Group {
    configured: i32,
    tolerance: i32,
    running: i32,
    evicted: i32,
    in_place_started: i32,
    below_min_replicas: bool,
}

impl Group {
    fn disruptable(&self) -> bool {
        let should_be_alive = self.configured - self.tolerance;
        let actually_alive = self.running - (self.evicted + self.in_place_started);
        actually_alive > should_be_alive
            || (self.configured == self.running
                && self.tolerance == 0
                && self.evicted == 0
                && self.in_place_started == 0)
    }
}

/// The budgets of one VPA's pods for one iteration, shared by evictions and in-place resizes.
#[derive(Debug)]
pub struct Restriction {
    groups: Vec<Group>,
    pod_group: FastMap<Arc<str>, usize>,
    config: RestrictionConfig,
    gates: FeatureGates,
}

impl Restriction {
    /// Builds the groups of `vpa`'s live pods (docs/design/upstream-updater.md §3.1).
    pub fn new(
        vpa: &VerticalPodAutoscaler,
        vpa_pods: &[Arc<CachedPod>],
        replicas: &dyn ReplicaLookup,
        config: &RestrictionConfig,
        gates: FeatureGates,
    ) -> Self {
        let effective = tailor_core::policy::update_mode(&vpa.spec);
        let required = vpa
            .spec
            .update_policy
            .as_ref()
            .and_then(|p| p.min_replicas)
            .unwrap_or(config.min_replicas);
        let skip_replica_check = matches!(
            effective,
            UpdateMode::InPlaceOrRecreate | UpdateMode::InPlace
        ) && config.in_place_skip_disruption_budget;
        // Grouped by (namespace, kind, name) of the creator, in order of first appearance.
        let mut index: FastMap<(&str, &str, &str), usize> = FastMap::default();
        let mut by_creator: Vec<Vec<&Arc<CachedPod>>> = Vec::new();
        // The previous pod's creator (interned: pods of one controller share it) and group, so that a
        // run of pods of one creator is grouped without hashing its key for every pod.
        let mut last: Option<(&Arc<Owner>, &str, usize)> = None;
        for pod in vpa_pods {
            let owner = pods::creator(pod);
            let namespace = pods::namespace(pod);
            let same = match (last, owner) {
                (Some((prev, prev_ns, i)), Some(o))
                    if Arc::ptr_eq(prev, o) && prev_ns == namespace =>
                {
                    Some(i)
                }
                _ => None,
            };
            let i = match same {
                Some(i) => i,
                None => {
                    let key = (
                        namespace,
                        owner.map(|o| o.kind.as_str()).unwrap_or_default(),
                        owner.map(|o| o.name.as_str()).unwrap_or_default(),
                    );
                    *index.entry(key).or_insert_with(|| {
                        // The first group is usually the only one: room for all the pods.
                        let room = if by_creator.is_empty() {
                            vpa_pods.len()
                        } else {
                            0
                        };
                        by_creator.push(Vec::with_capacity(room));
                        by_creator.len() - 1
                    })
                }
            };
            last = owner.map(|o| (o, namespace, i));
            by_creator[i].push(pod);
        }
        let mut groups = Vec::new();
        let mut pod_group = FastMap::with_capacity_and_hasher(vpa_pods.len(), Default::default());
        for members in by_creator {
            let Some(first) = members.first() else {
                continue;
            };
            let creator = Creator::of(first);
            let actual = i32::try_from(members.len()).unwrap_or(i32::MAX);
            let mut below_min_replicas = false;
            if actual < required {
                let boosted = members.iter().any(|p| pods::has_boost_annotation(p));
                if !boosted && !skip_replica_check {
                    continue;
                }
                below_min_replicas = skip_replica_check;
            }
            let Ok(configured) = replicas.configured(&creator, actual) else {
                continue;
            };
            let mut tolerance = (f64::from(configured) * config.eviction_tolerance).trunc() as i32;
            if creator.kind == "DaemonSet" && config.daemonset_max_unavailable > 0 {
                tolerance = tolerance.min(config.daemonset_max_unavailable);
            }
            // Pods that do not count as running: pending ones (upstream), and with `count_readiness`
            // running ones whose Ready condition is False (a replica down already).
            let down = members
                .iter()
                .filter(|p| pods::is_pending(p) || (config.count_readiness && pods::is_unready(p)))
                .count();
            let pending = i32::try_from(down).unwrap_or(0);
            for pod in &members {
                pod_group.insert(pods::shared_key(pod), groups.len());
            }
            groups.push(Group {
                configured,
                tolerance,
                running: actual - pending,
                below_min_replicas,
                ..Default::default()
            });
        }
        Restriction {
            groups,
            pod_group,
            config: config.clone(),
            gates,
        }
    }

    fn group(&self, pod: &CachedPod) -> Option<&Group> {
        self.groups.get(*self.pod_group.get(pods::pod_key(pod))?)
    }

    fn group_mut(&mut self, pod: &CachedPod) -> Option<&mut Group> {
        let i = *self.pod_group.get(pods::pod_key(pod))?;
        self.groups.get_mut(i)
    }

    /// Whether the pod's group kept it (it can be disrupted at all).
    pub fn contains(&self, pod: &CachedPod) -> bool {
        self.group(pod).is_some()
    }

    /// `CanEvict` (docs/design/upstream-updater.md §3.3), with the reason when refused.
    pub fn can_evict(
        &self,
        pod: &CachedPod,
        timers: &mut InPlaceTimers,
        now: Timestamp,
    ) -> Result<(), Skip> {
        let Some(group) = self.group(pod) else {
            return Err(Skip::BelowMinReplicas);
        };
        if !self.config.evict_job_pods && pods::creator(pod).is_some_and(|o| o.kind == "Job") {
            return Err(Skip::JobPod);
        }
        if pods::is_pending(pod) {
            return Ok(());
        }
        if group.below_min_replicas {
            return Err(Skip::BelowMinReplicas);
        }
        // A pod that is down already (not Ready) costs no availability, as a pending one.
        if self.down_already(pod) {
            return Ok(());
        }
        if pods::is_in_place_updating(pod) {
            return if self.can_evict_in_placing_pod(pod, timers, now) {
                Ok(())
            } else {
                Err(Skip::ResizeInProgress)
            };
        }
        if group.disruptable() {
            Ok(())
        } else {
            Err(Skip::ToleranceExhausted)
        }
    }

    /// Checks an eviction before the API call (docs/design/upstream-updater.md §3.4).
    pub fn check_evict(
        &self,
        pod: &CachedPod,
        timers: &mut InPlaceTimers,
        now: Timestamp,
    ) -> Result<(), RestrictionError> {
        if !self.contains(pod) {
            return Err(RestrictionError::NotInGroup {
                action: "eviction",
                pod: pods::pod_key(pod).to_owned(),
            });
        }
        self.can_evict(pod, timers, now)
            .map_err(|_| RestrictionError::BudgetExceeded(pods::pod_key(pod).to_owned()))
    }

    /// Whether `count_readiness` counts `pod` as down already (Running, `Ready` condition `False`).
    fn down_already(&self, pod: &CachedPod) -> bool {
        self.config.count_readiness && pods::is_unready(pod)
    }

    /// Counts a successful eviction against the group (pending pods, and with `count_readiness` unready
    /// ones, cost nothing).
    pub fn evicted(&mut self, pod: &CachedPod) {
        let pending = pods::is_pending(pod) || self.down_already(pod);
        if let Some(group) = self.group_mut(pod)
            && !pending
        {
            group.evicted += 1;
        }
    }

    /// Checks an in-place update before the PATCH (docs/design/upstream-updater.md §5.5): only group
    /// membership; the budget is not re-checked.
    pub fn check_in_place(&self, pod: &CachedPod) -> Result<(), RestrictionError> {
        if self.contains(pod) {
            Ok(())
        } else {
            Err(RestrictionError::NotInGroup {
                action: "in-place update",
                pod: pods::name(pod).to_owned(),
            })
        }
    }

    /// Counts a started in-place update against the group; with Tailor's timers, starts the pod's
    /// fallback timer.
    pub fn in_place_started(
        &mut self,
        pod: &CachedPod,
        timers: &mut InPlaceTimers,
        now: Timestamp,
    ) {
        if let Some(group) = self.group_mut(pod) {
            group.in_place_started += 1;
        }
        if self.config.timers_from_patch {
            timers.set(pods::pod_key(pod), now, pod.metadata.uid.as_deref());
        }
    }

    /// `CanInPlaceUpdate` (docs/design/upstream-updater.md §5.3).
    pub fn can_in_place_update(
        &self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        infeasible: &InfeasibleAttempts,
        timers: &mut InPlaceTimers,
        now: Timestamp,
    ) -> Result<InPlaceDecision, QuantityError> {
        let in_place = raw_mode(vpa) == UpdateMode::InPlace;
        if in_place && !self.gates.in_place {
            return Ok(InPlaceDecision::Deferred);
        }
        let Some(group) = self.group(pod) else {
            return Ok(InPlaceDecision::Deferred);
        };
        if pods::is_pending(pod) {
            return Ok(InPlaceDecision::Deferred);
        }
        let raw = vpa.status.as_ref().and_then(|s| s.recommendation.as_ref());
        if raw.is_none() {
            return Ok(InPlaceDecision::Deferred);
        }
        if in_place
            && let Some(last) = infeasible.get(pods::uid(pod))
            && !has_lower_resource(Some(last), raw)?
        {
            return Ok(InPlaceDecision::InfeasibleCached);
        }
        let status = pods::resize_status(pod);
        if status != ResizeStatus::None {
            return Ok(if in_place {
                if status == ResizeStatus::Infeasible {
                    InPlaceDecision::Infeasible
                } else {
                    InPlaceDecision::Deferred
                }
            } else if self.can_evict_in_placing_pod(pod, timers, now) {
                InPlaceDecision::Evict
            } else {
                InPlaceDecision::Deferred
            });
        }
        if self.config.timers_from_patch {
            timers.clear(pods::pod_key(pod));
        }
        if self.config.in_place_skip_disruption_budget && pods::is_non_disruptive(pod) {
            return Ok(InPlaceDecision::Approved);
        }
        Ok(if group.disruptable() {
            InPlaceDecision::Approved
        } else {
            InPlaceDecision::Deferred
        })
    }

    /// `CanEvictInPlacingPod` (docs/design/upstream-updater.md §5.4): a resize stuck past its timeout, failed
    /// or infeasible may fall back to eviction when the budget allows.
    pub fn can_evict_in_placing_pod(
        &self,
        pod: &CachedPod,
        timers: &mut InPlaceTimers,
        now: Timestamp,
    ) -> bool {
        if !pods::is_in_place_updating(pod) {
            return false;
        }
        let last = timers.first_seen(pod, now, self.config.timers_from_patch);
        if !self.group(pod).is_some_and(Group::disruptable) {
            return false;
        }
        if let Some(reason) = pods::pending_reason(pod) {
            return match reason {
                "Deferred" => now > add(last, self.config.deferred_timeout),
                _ => true,
            };
        }
        if let Some((reason, message)) = pods::in_progress_state(pod) {
            return match (reason, message) {
                ("", false) => now > add(last, self.config.in_progress_timeout),
                _ => true,
            };
        }
        false
    }

    /// `CanUnboost` (docs/design/upstream-updater.md §5.8).
    pub fn can_unboost(
        &self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> bool {
        self.gates.cpu_startup_boost
            && !pods::is_pending(pod)
            && !pods::expired_boost_keys(pod, vpa, now).is_empty()
            && self
                .group(pod)
                .is_some_and(|g| !pods::is_in_place_updating(pod) && g.disruptable())
    }
}
