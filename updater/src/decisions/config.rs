//! Settings of the updater's decisions (docs/design/upstream-updater.md §6), independent of how they are read.

use std::time::Duration;

/// Alpha features upstream puts behind `--feature-gates`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `CPUStartupBoost`: take back start-up boosts once they expire.
    pub cpu_startup_boost: bool,
    /// `InPlace`: honour `updateMode: InPlace`.
    pub in_place: bool,
    /// `PerVPAConfig`: honour `updatePolicy.evictAfterOOMSeconds`.
    pub per_vpa_config: bool,
    /// Not one of upstream's gates: Tailor's `--pod-level-resources` (docs/pod-level-resources.md), a pod
    /// whose pod-level requests stray from its VPA's `tailor.dev/pod` envelope is a candidate for eviction.
    pub pod_level_resources: bool,
}

impl FeatureGates {
    /// Parses `Name=bool,…` (`AllAlpha`/`AllBeta` switch every alpha gate). Unknown names are refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut gates = FeatureGates::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("feature gate {item:?}: expected Name=true|false"))?;
            let on: bool = value
                .trim()
                .parse()
                .map_err(|_| format!("feature gate {name}: {value:?} is not true or false"))?;
            match name.trim() {
                "CPUStartupBoost" => gates.cpu_startup_boost = on,
                "InPlace" => gates.in_place = on,
                "PerVPAConfig" => gates.per_vpa_config = on,
                "AllAlpha" => {
                    gates.cpu_startup_boost = on;
                    gates.in_place = on;
                    gates.per_vpa_config = on;
                }
                "AllBeta" => {}
                other => return Err(format!("unknown feature gate {other:?}")),
            }
        }
        Ok(gates)
    }
}

/// Thresholds of the priority calculator (docs/design/upstream-updater.md §2).
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityConfig {
    /// `--pod-update-threshold`: least relative change worth an update of a pod within its bounds.
    pub min_change_priority: f64,
    /// `--in-recommendation-bounds-eviction-lifetime-threshold`: pods within bounds younger than this are
    /// left alone.
    pub pod_lifetime_update_threshold: Duration,
    /// `--evict-after-oom-threshold`: an OOM kill after running less than this makes a pod eligible.
    pub evict_after_oom_threshold: Duration,
    /// Tailor option (`--quick-oom-max-age`): an OOM kill older than this no longer makes a pod eligible
    /// (upstream: never expires, docs/design/upstream-updater.md §8 item 10). `None` = upstream.
    pub quick_oom_max_age: Option<Duration>,
}

impl Default for PriorityConfig {
    fn default() -> Self {
        Self {
            min_change_priority: 0.1,
            pod_lifetime_update_threshold: Duration::from_secs(12 * 3600),
            evict_after_oom_threshold: Duration::from_secs(600),
            quick_oom_max_age: None,
        }
    }
}

/// A kubelet-deferred resize waits this long before the pod is evicted instead (`InPlaceOrRecreate`): upstream's
/// `DeferredResizeUpdateTimeout`, the default of `--in-place-deferred-timeout`.
pub const DEFERRED_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// A resize in progress waits this long before the pod is evicted instead (`InPlaceOrRecreate`): upstream's
/// `InProgressResizeUpdateTimeout`, the default of `--in-place-in-progress-timeout`.
pub const IN_PROGRESS_TIMEOUT: Duration = Duration::from_secs(3600);

/// Disruption budget settings (docs/design/upstream-updater.md §3.1, §5.9).
#[derive(Clone, Debug, PartialEq)]
pub struct RestrictionConfig {
    /// `--min-replicas`: least live pods per controller before any disruption (per VPA:
    /// `updatePolicy.minReplicas`).
    pub min_replicas: i32,
    /// `--eviction-tolerance`: fraction of the configured replicas that may be down at once.
    pub eviction_tolerance: f64,
    /// `--in-place-skip-disruption-budget`: in-place modes resize non-disruptive pods without consulting
    /// the budget.
    pub in_place_skip_disruption_budget: bool,
    /// Tailor option (`--in-place-timers=patch`): fallback timers start at the resize PATCH and are cleared
    /// when the resize ends or the pod is replaced (upstream: first seen, never cleared;
    /// docs/design/upstream-updater.md §8 item 2).
    pub timers_from_patch: bool,
    /// Tailor option (`--count-readiness`, docs/decisions/disruption-budgets.md): a pod whose `Ready` condition
    /// is `False` does not count as running, so a workload with a replica down is not disrupted further
    /// (upstream counts the phase only). Pods without a `Ready` condition count as upstream's.
    pub count_readiness: bool,
    /// Tailor option (`--daemonset-max-unavailable`, docs/decisions/disruption-budgets.md): most pods of one
    /// DaemonSet disrupted at once (the DaemonSet rolling update's default is 1); 0 = upstream's tolerance
    /// (half of a node agent's pods).
    pub daemonset_max_unavailable: i32,
    /// `--evict-job-pods` (docs/decisions/disruption-budgets.md): evict pods of Jobs (upstream). Off, they are
    /// left alone: an evicted Job pod counts against the Job's `backoffLimit`.
    pub evict_job_pods: bool,
    /// `--in-place-deferred-timeout`: how long a resize the kubelet deferred waits before the pod may be
    /// evicted instead (`InPlaceOrRecreate`; upstream's constant, 5 minutes).
    pub deferred_timeout: Duration,
    /// `--in-place-in-progress-timeout`: how long a resize in progress waits before the pod may be evicted
    /// instead (`InPlaceOrRecreate`; upstream's constant, 1 hour).
    pub in_progress_timeout: Duration,
}

impl Default for RestrictionConfig {
    fn default() -> Self {
        Self {
            min_replicas: 2,
            eviction_tolerance: 0.5,
            in_place_skip_disruption_budget: false,
            timers_from_patch: false,
            count_readiness: false,
            daemonset_max_unavailable: 0,
            evict_job_pods: true,
            deferred_timeout: DEFERRED_TIMEOUT,
            in_progress_timeout: IN_PROGRESS_TIMEOUT,
        }
    }
}
