//! The pod floor's flags (docs/decisions/pod-floor.md), shared by the webhook and the updater so that both write the same
//! least requests: the recommender's flag names and defaults, since the floor is its pod minimums.

use clap::Args;

use tailor_core::sizing::PodFloor;

/// Largest accepted minimum: 1,000 cores, 1 TiB.
const MAX_CPU_MILLICORES: i64 = 1_000_000;
const MAX_MEMORY_MB: i64 = 1024 * 1024;

/// `--pod-recommendation-min-cpu-millicores`, `--pod-recommendation-min-memory-mb`.
#[derive(Args, Debug, Clone, Copy)]
pub struct PodFloorFlags {
    /// Least CPU written into a pod, in millicores, shared equally among its sized containers (the
    /// recommender's minimum; 0: no floor, as upstream).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(i64).range(0..=MAX_CPU_MILLICORES), help_heading = "Pod floor")]
    pub pod_recommendation_min_cpu_millicores: i64,
    /// Least memory written into a pod, in MiB, shared equally among its sized containers (the
    /// recommender's minimum; 0: no floor, as upstream).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(i64).range(0..=MAX_MEMORY_MB), help_heading = "Pod floor")]
    pub pod_recommendation_min_memory_mb: i64,
}

impl PodFloorFlags {
    /// The floor, `None` when both are 0.
    pub fn floor(&self) -> Option<PodFloor> {
        let floor = PodFloor {
            cpu_millis: self.pod_recommendation_min_cpu_millicores,
            memory_bytes: self
                .pod_recommendation_min_memory_mb
                .saturating_mul(1024 * 1024),
        };
        (floor.cpu_millis > 0 || floor.memory_bytes > 0).then_some(floor)
    }
}
