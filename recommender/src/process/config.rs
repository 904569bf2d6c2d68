//! Settings of the running recommender (from the command line).

use std::time::Duration;

use tailor_engine::estimate::RecommenderConfig;
use tailor_engine::model::AggregationsConfig;

pub use crate::selection::DEFAULT_RECOMMENDER;

/// Everything the loop needs besides a client and stores.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// `--recommender-name`.
    pub recommender_name: String,
    /// `--recommender-interval`.
    pub interval: Duration,
    /// `--checkpoints-timeout`: deadline of the checkpoint step (and, separately, of checkpoint GC).
    pub checkpoints_timeout: Duration,
    /// `--checkpoints-gc-interval`.
    pub checkpoints_gc_interval: Duration,
    /// `--checkpoints-min-change`: a VPA's checkpoints are rewritten before `checkpoints_max_age` only when
    /// some histogram moved at least this much since the last write (0 = every loop, as upstream).
    pub checkpoints_min_change: f64,
    /// `--checkpoints-max-age`: a VPA's checkpoints are rewritten at least this often, moved or not.
    pub checkpoints_max_age: Duration,
    /// `--update-worker-count`: parallel status and checkpoint writes.
    pub update_worker_count: usize,
    /// `--memory-saver`: only pods matched by some VPA enter the model (Tailor's default: on).
    pub memory_saver: bool,
    /// `--vpa-object-namespace` (empty = all).
    pub vpa_object_namespace: String,
    /// `--ignored-vpa-object-namespaces`.
    pub ignored_namespaces: Vec<String>,
    /// Whether checkpoints are read and written (`--storage` other than `prometheus`).
    pub checkpoints_enabled: bool,
    /// `--restore-open-memory-windows`: continue the memory-peak windows saved with the checkpoints after a
    /// restart (Tailor's default); `false` drops them, as upstream does.
    pub restore_open_windows: bool,
    /// Model parameters.
    pub aggregations: AggregationsConfig,
    /// Estimation parameters.
    pub recommender: RecommenderConfig,
    /// `--profile`: the Tailor profile for VPAs without a `tailor.dev/profile` annotation (None = upstream).
    pub profile: Option<&'static tailor_engine::profile::Profile>,
    /// Lifetime of a `/scale` selector lookup (10 minutes upstream).
    pub scale_cache_ttl: Duration,
    /// Aggregate GC interval (1 hour upstream).
    pub aggregate_gc_interval: Duration,
    /// `--feature-gates=PerVPAConfig=true`: a container policy's `oomBumpUpRatio` and `oomMinBumpUp` bump
    /// its OOMs instead of the flags' (upstream's alpha gate, off by default).
    pub per_vpa_config: bool,
    /// `--pod-level-resources`: pods that declare `spec.resources` also get a pod-level aggregate of their
    /// summed usage, published as the `tailor.dev/pod` row (docs/pod-level-resources.md). Off by default.
    pub pod_level_resources: bool,
    /// `--job-target-memory-percentile`: the memory target percentile of VPAs on a Job or a CronJob, when
    /// higher than theirs (docs/jobs.md). None: upstream's.
    pub job_target_memory_percentile: Option<f64>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            recommender_name: DEFAULT_RECOMMENDER.into(),
            interval: Duration::from_secs(60),
            checkpoints_timeout: Duration::from_secs(60),
            checkpoints_gc_interval: Duration::from_secs(600),
            checkpoints_min_change: 0.05,
            checkpoints_max_age: Duration::from_secs(600),
            update_worker_count: 10,
            memory_saver: true,
            vpa_object_namespace: String::new(),
            ignored_namespaces: Vec::new(),
            checkpoints_enabled: true,
            restore_open_windows: true,
            aggregations: AggregationsConfig::default(),
            recommender: RecommenderConfig::default(),
            profile: None,
            scale_cache_ttl: Duration::from_secs(600),
            aggregate_gc_interval: Duration::from_secs(3600),
            per_vpa_config: false,
            pod_level_resources: false,
            job_target_memory_percentile: None,
        }
    }
}

impl ControllerConfig {
    /// Whether this recommender handles a VPA in `namespace` whose `spec.recommenders` lists `names`.
    /// The default recommender also takes VPAs that list none; any other name only VPAs that list it.
    pub fn owns(&self, namespace: &str, names: &[String]) -> bool {
        crate::selection::is_selected(
            &self.recommender_name,
            names,
            namespace,
            &self.vpa_object_namespace,
            &self.ignored_namespaces,
        )
    }

    /// Whether objects in `namespace` are watched at all.
    pub fn namespace_watched(&self, namespace: &str) -> bool {
        (self.vpa_object_namespace.is_empty() || namespace == self.vpa_object_namespace)
            && !self.ignored_namespaces.iter().any(|n| n == namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_follows_spec_recommenders() {
        let mut c = ControllerConfig::default();
        assert!(c.owns("a", &[]));
        assert!(c.owns("a", &["default".into()]));
        assert!(!c.owns("a", &["other".into()]));
        c.recommender_name = "other".into();
        assert!(!c.owns("a", &[]));
        assert!(c.owns("a", &["x".into(), "other".into()]));
        c.ignored_namespaces = vec!["a".into()];
        assert!(!c.owns("a", &["other".into()]));
        c.ignored_namespaces.clear();
        c.vpa_object_namespace = "b".into();
        assert!(!c.owns("a", &["other".into()]));
        assert!(c.owns("b", &["other".into()]));
    }
}
