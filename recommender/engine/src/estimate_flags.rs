//! Upstream's model and estimation flags, shared by `tailor recommend` and the `tailor-recommender` controller.
//!
//! Both front ends `#[command(flatten)]` [`EstimationFlags`], call [`EstimationFlags::validate`] and turn the flags
//! into the engine's configuration with [`EstimationFlags::engine_config`]. Flag names and defaults follow the
//! upstream VPA recommender.

use std::time::Duration;

use crate::estimate::RecommenderConfig;
use crate::model::AggregationsConfig;
use crate::policy::Resources;
use crate::quantity;
use crate::replay::ReplayConfig;

/// A flag value out of its domain; the message names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Model (aggregation, decay, OOM) and estimation (percentiles, margins, bounds, rounding, caps) flags.
///
/// The help texts are `tailor recommend`'s; `tailor-recommender` rewords four of them with `mut_arg`.
#[derive(Debug, Clone, clap::Args)]
pub struct EstimationFlags {
    /// CPU usage percentile that will be used as a base for the CPU target recommendation.
    #[arg(long, default_value_t = 0.9)]
    pub target_cpu_percentile: f64,
    /// CPU usage percentile that will be used for the lower bound on CPU recommendation.
    #[arg(long, default_value_t = 0.5)]
    pub recommendation_lower_bound_cpu_percentile: f64,
    /// CPU usage percentile that will be used for the upper bound on CPU recommendation.
    #[arg(long, default_value_t = 0.95)]
    pub recommendation_upper_bound_cpu_percentile: f64,
    /// Memory usage percentile that will be used as a base for the memory target recommendation.
    #[arg(long, default_value_t = 0.9)]
    pub target_memory_percentile: f64,
    /// Memory usage percentile that will be used for the lower bound on memory recommendation.
    #[arg(long, default_value_t = 0.5)]
    pub recommendation_lower_bound_memory_percentile: f64,
    /// Memory usage percentile that will be used for the upper bound on memory recommendation.
    #[arg(long, default_value_t = 0.95)]
    pub recommendation_upper_bound_memory_percentile: f64,
    /// Fraction of usage added as the safety margin to the recommended request.
    #[arg(long, default_value_t = 0.15)]
    pub recommendation_margin_fraction: f64,
    /// Minimum CPU recommendation for a pod (millicores), split across its containers.
    #[arg(long, default_value_t = 25.0)]
    pub pod_recommendation_min_cpu_millicores: f64,
    /// Minimum memory recommendation for a pod (MiB), split across its containers.
    #[arg(long, default_value_t = 250.0)]
    pub pod_recommendation_min_memory_mb: f64,
    /// Time unit of the confidence for CPU bounds.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub confidence_interval_cpu: Duration,
    /// Time unit of the confidence for memory bounds.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub confidence_interval_memory: Duration,
    /// Round CPU recommendations up to a multiple of this many millicores.
    #[arg(long, default_value_t = 1)]
    pub round_cpu_millicores: i64,
    /// Round memory recommendations up to a multiple of this many bytes.
    #[arg(long, default_value_t = 1)]
    pub round_memory_bytes: i64,
    /// (Deprecated upstream) humanize memory to two decimals of Ki/Mi/Gi/Ti.
    #[arg(long)]
    pub humanize_memory: bool,
    /// Recommend for containers with no usage sample yet (they get the pod minimum), as upstream does.
    /// Off by default: a pod created before the first sample keeps its own requests instead of being sized
    /// to the minimum.
    #[arg(long)]
    pub recommend_without_samples: bool,
    /// Length of one memory peak aggregation window.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub memory_aggregation_interval: Duration,
    /// Number of memory aggregation windows kept (history = interval × count).
    #[arg(long, default_value_t = 8)]
    pub memory_aggregation_interval_count: i64,
    /// Half-life of the memory histogram decay.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub memory_histogram_decay_half_life: Duration,
    /// Half-life of the CPU histogram decay.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub cpu_histogram_decay_half_life: Duration,
    /// Ratio by which memory is bumped up after an OOM.
    #[arg(long, default_value_t = 1.2)]
    pub oom_bump_up_ratio: f64,
    /// Minimum bytes memory is bumped up by after an OOM.
    #[arg(long, default_value_t = 104857600.0)]
    pub oom_min_bump_up_bytes: f64,
    /// Round CPU up to whole cores for containers annotated `vpa-post-processor.kubernetes.io/<name>_integerCPU=true`.
    #[arg(long)]
    pub cpu_integer_post_processor_enabled: bool,
    /// Maximum CPU recommendation per container (quantity, e.g. `4` or `3500m`).
    #[arg(long)]
    pub container_recommendation_max_allowed_cpu: Option<String>,
    /// Maximum memory recommendation per container (quantity, e.g. `8Gi`).
    #[arg(long)]
    pub container_recommendation_max_allowed_memory: Option<String>,
}

impl EstimationFlags {
    /// Checks that every window, half-life and count is greater than zero, every percentile in (0, 1] and
    /// every margin, minimum and bump finite and not negative; the error names the first offending flag.
    pub fn validate(&self) -> Result<(), FlagError> {
        for (name, d) in [
            ("--confidence-interval-cpu", self.confidence_interval_cpu),
            (
                "--confidence-interval-memory",
                self.confidence_interval_memory,
            ),
            (
                "--memory-aggregation-interval",
                self.memory_aggregation_interval,
            ),
            (
                "--memory-histogram-decay-half-life",
                self.memory_histogram_decay_half_life,
            ),
            (
                "--cpu-histogram-decay-half-life",
                self.cpu_histogram_decay_half_life,
            ),
        ] {
            if d.is_zero() {
                return Err(FlagError(format!("{name} must be greater than zero")));
            }
        }
        for (name, p) in [
            ("--target-cpu-percentile", self.target_cpu_percentile),
            (
                "--recommendation-lower-bound-cpu-percentile",
                self.recommendation_lower_bound_cpu_percentile,
            ),
            (
                "--recommendation-upper-bound-cpu-percentile",
                self.recommendation_upper_bound_cpu_percentile,
            ),
            ("--target-memory-percentile", self.target_memory_percentile),
            (
                "--recommendation-lower-bound-memory-percentile",
                self.recommendation_lower_bound_memory_percentile,
            ),
            (
                "--recommendation-upper-bound-memory-percentile",
                self.recommendation_upper_bound_memory_percentile,
            ),
        ] {
            // Written so that NaN fails too.
            if !(p > 0.0 && p <= 1.0) {
                return Err(FlagError(format!(
                    "{name} must be in (0, 1] (a fraction: 0.9 is the 90th percentile), got {p}"
                )));
            }
        }
        for (name, v) in [
            (
                "--recommendation-margin-fraction",
                self.recommendation_margin_fraction,
            ),
            (
                "--pod-recommendation-min-cpu-millicores",
                self.pod_recommendation_min_cpu_millicores,
            ),
            (
                "--pod-recommendation-min-memory-mb",
                self.pod_recommendation_min_memory_mb,
            ),
            ("--oom-bump-up-ratio", self.oom_bump_up_ratio),
            ("--oom-min-bump-up-bytes", self.oom_min_bump_up_bytes),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(FlagError(format!(
                    "{name} must be a finite number >= 0, got {v}"
                )));
            }
        }
        if self.memory_aggregation_interval_count <= 0 {
            return Err(FlagError(
                "--memory-aggregation-interval-count must be greater than zero".into(),
            ));
        }
        Ok(())
    }

    /// The model and estimation configuration these flags describe (call [`Self::validate`] first).
    /// `legacy_oom_staleness` is `tailor recommend`'s hidden `--legacy-oom-staleness`; the controller passes
    /// `false`. Fails only on an invalid `--container-recommendation-max-allowed-*` quantity.
    pub fn engine_config(&self, legacy_oom_staleness: bool) -> Result<ReplayConfig, FlagError> {
        let max_cpu = self
            .container_recommendation_max_allowed_cpu
            .as_deref()
            .map(quantity::cpu_millis)
            .transpose()
            .map_err(|e| FlagError(format!("--container-recommendation-max-allowed-cpu: {e}")))?;
        let max_mem = self
            .container_recommendation_max_allowed_memory
            .as_deref()
            .map(quantity::memory_bytes)
            .transpose()
            .map_err(|e| {
                FlagError(format!(
                    "--container-recommendation-max-allowed-memory: {e}"
                ))
            })?;
        Ok(ReplayConfig {
            aggregations: AggregationsConfig {
                memory_aggregation_interval: nanos(self.memory_aggregation_interval),
                memory_aggregation_interval_count: self.memory_aggregation_interval_count,
                memory_histogram_decay_half_life: nanos(self.memory_histogram_decay_half_life),
                cpu_histogram_decay_half_life: nanos(self.cpu_histogram_decay_half_life),
                oom_bump_up_ratio: self.oom_bump_up_ratio,
                oom_min_bump_up_bytes: self.oom_min_bump_up_bytes,
                legacy_oom_staleness,
                cpu_time_of_day: false,
            },
            recommender: RecommenderConfig {
                target_cpu_percentile: self.target_cpu_percentile,
                lower_bound_cpu_percentile: self.recommendation_lower_bound_cpu_percentile,
                upper_bound_cpu_percentile: self.recommendation_upper_bound_cpu_percentile,
                target_memory_percentile: self.target_memory_percentile,
                lower_bound_memory_percentile: self.recommendation_lower_bound_memory_percentile,
                upper_bound_memory_percentile: self.recommendation_upper_bound_memory_percentile,
                safety_margin_fraction: self.recommendation_margin_fraction,
                pod_min_cpu_millicores: self.pod_recommendation_min_cpu_millicores,
                pod_min_memory_mb: self.pod_recommendation_min_memory_mb,
                confidence_interval_cpu: nanos(self.confidence_interval_cpu),
                confidence_interval_memory: nanos(self.confidence_interval_memory),
                round_cpu_millicores: self.round_cpu_millicores,
                round_memory_bytes: self.round_memory_bytes,
                humanize_memory: self.humanize_memory,
                cpu_integer_post_processor_enabled: self.cpu_integer_post_processor_enabled,
                global_max_allowed: Resources {
                    cpu: max_cpu,
                    memory: max_mem,
                },
                cpu_time_of_day: None,
                cpu_risk_price: None,
                memory_stable_peaks: None,
                recommend_without_samples: self.recommend_without_samples,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: EstimationFlags,
    }

    fn flags(args: &[&str]) -> EstimationFlags {
        Cli::parse_from(std::iter::once("t").chain(args.iter().copied())).flags
    }

    #[test]
    fn defaults_follow_upstream() {
        let f = flags(&[]);
        assert_eq!(f.validate(), Ok(()));
        let c = f.engine_config(false).unwrap();
        assert_eq!(c.recommender.target_cpu_percentile, 0.9);
        assert_eq!(c.recommender.confidence_interval_cpu, 86_400_000_000_000);
        assert_eq!(c.aggregations.memory_aggregation_interval_count, 8);
        assert_eq!(c.recommender.global_max_allowed, Resources::default());
        assert!(!c.aggregations.legacy_oom_staleness);
        assert!(
            f.engine_config(true)
                .unwrap()
                .aggregations
                .legacy_oom_staleness
        );
    }

    #[test]
    fn rejects_impossible_percentiles_and_margins() {
        assert!(flags(&[]).validate().is_ok());
        assert!(flags(&["--target-cpu-percentile", "1"]).validate().is_ok());
        for p in ["2", "NaN", "-5", "0"] {
            let flag = format!("--target-cpu-percentile={p}");
            let e = flags(&[&flag]).validate().unwrap_err();
            assert!(
                e.0.starts_with("--target-cpu-percentile must be in (0, 1]"),
                "{e}"
            );
        }
        let e = flags(&["--recommendation-margin-fraction=-1"])
            .validate()
            .unwrap_err();
        assert!(e.0.contains("--recommendation-margin-fraction must be a finite number >= 0"));
        assert!(
            flags(&["--recommendation-margin-fraction", "inf"])
                .validate()
                .is_err()
        );
        assert!(
            flags(&["--recommendation-margin-fraction", "0"])
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn rejects_zero_windows_and_bad_caps() {
        assert_eq!(
            flags(&["--cpu-histogram-decay-half-life", "0s"]).validate(),
            Err(FlagError(
                "--cpu-histogram-decay-half-life must be greater than zero".into()
            ))
        );
        assert!(
            flags(&["--memory-aggregation-interval-count", "0"])
                .validate()
                .is_err()
        );
        let f = flags(&[
            "--container-recommendation-max-allowed-cpu",
            "3500m",
            "--container-recommendation-max-allowed-memory",
            "1Gi",
        ]);
        let max = f
            .engine_config(false)
            .unwrap()
            .recommender
            .global_max_allowed;
        assert_eq!((max.cpu, max.memory), (Some(3500), Some(1 << 30)));
        let err = flags(&["--container-recommendation-max-allowed-memory", "lots"])
            .engine_config(false)
            .unwrap_err();
        assert!(
            err.0
                .starts_with("--container-recommendation-max-allowed-memory: ")
        );
    }
}
