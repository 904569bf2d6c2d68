//! The per-VPA recommendation ([`recommend`]): the estimators of each bound (`estimators.rs`) under the
//! settings (`config.rs`), formatted for the status (`format.rs`), with what `--explain` says (`explain.rs`).

mod config;
mod estimators;
mod explain;
mod format;

pub use config::{Bound, RecommenderConfig, TimeOfDay};
pub use estimators::{
    BUDGET_PERCENTILES, BoundChains, DailyRule, Estimator, RawEstimate, budget_percentile,
    confidence, confidence_from, daily_pattern, daily_rule_holds, day_of_history, duration_minutes,
    estimate_container, estimate_with, hourly_ready, percentile_amount,
};
pub use explain::{ContainerExplain, CpuRule, ExplainStep, cpu_rule, explain_container};
pub use format::{
    INTEGER_CPU_PREFIX, INTEGER_CPU_SUFFIX, apply_integer_cpu, extract_container_name,
    format_resources, humanize_memory, integer_cpu, map_to_list, memory_quantity,
    round_up_to_scale,
};

use estimators::chains_of;
use std::collections::BTreeMap;

use tailor_core::policy::{container_policy, needs_recommendation};
use tailor_core::sizing::POD_ROW;
use tailor_crds::PodResourcePolicy;

use crate::model::AggregateContainerState;
use crate::policy::{self, IntegerBounds, PolicyError, Resources};

/// A container's recommendation (integer millicores / bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecommendation {
    /// Container name.
    pub container_name: String,
    /// Target.
    pub target: Resources,
    /// Lower bound.
    pub lower_bound: Resources,
    /// Upper bound.
    pub upper_bound: Resources,
    /// Target before capping.
    pub uncapped_target: Resources,
}

/// Input of one per-VPA recommendation pass.
#[derive(Debug, Clone, Copy)]
pub struct VpaInput<'a> {
    /// `spec.resourcePolicy`.
    pub policy: Option<&'a PodResourcePolicy>,
    /// `metadata.annotations`.
    pub annotations: &'a BTreeMap<String, String>,
    /// Also fill [`PodRecommendation::explain`] (`--explain`, replay); the recommender's loop does not, which
    /// spares it a second pass over every estimator chain and the caps' messages.
    pub explain: bool,
}

/// Result of a VPA recommendation pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodRecommendation {
    /// Sorted by container name.
    pub containers: Vec<ContainerRecommendation>,
    /// Explanations in the same order (empty unless [`VpaInput::explain`]).
    pub explain: Vec<ContainerExplain>,
}

/// Whether an aggregate holds any usage: a CPU sample, or memory (a peak or an OOM).
pub fn has_usage(agg: &AggregateContainerState) -> bool {
    !agg.is_empty() || !agg.memory.is_empty()
}

/// Computes a VPA's recommendation from its per-container-name aggregates: drops `Off` containers (and,
/// unless [`RecommenderConfig::recommend_without_samples`], containers with no usage yet), splits the pod
/// minimum, estimates, filters controlled resources, formats (rounding), then runs the integer-CPU and
/// capping post-processors.
pub fn recommend(
    config: &RecommenderConfig,
    aggregates: &BTreeMap<String, AggregateContainerState>,
    vpa: VpaInput<'_>,
) -> Result<PodRecommendation, PolicyError> {
    let cpolicy = |name: &str| container_policy(vpa.policy, name);
    let active: Vec<(&String, &AggregateContainerState)> = aggregates
        .iter()
        .filter(|(n, _)| needs_recommendation(cpolicy(n)))
        .filter(|(_, a)| config.recommend_without_samples || has_usage(a))
        .collect();
    let mut out = PodRecommendation::default();
    if active.is_empty() {
        return Ok(out);
    }
    // The pod-level row (docs/pod-level-resources.md) is not a container: the pod minimum is shared by the
    // containers as without it, and the row, the pod's whole, gets all of it.
    let containers = active.iter().filter(|(n, _)| n.as_str() != POD_ROW).count();
    let container_min = config.min_resources(containers);
    let chains = chains_of(config);
    let mut raw = BTreeMap::new();
    for (name, agg) in &active {
        let min = if name.as_str() == POD_ROW {
            config.min_resources(1)
        } else {
            container_min
        };
        let controlled = policy::controlled(cpolicy(name));
        raw.insert(
            (*name).clone(),
            estimate_with(&chains, agg, min, controlled),
        );
        if vpa.explain {
            out.explain
                .push(explain_container(config, name, agg, min, controlled));
        }
    }
    out.containers = map_to_list(&raw, config);
    if config.cpu_integer_post_processor_enabled {
        apply_integer_cpu(&mut out.containers, vpa.annotations);
    }
    let global_max = config.global_max_allowed.to_resource_list();
    for (i, rec) in out.containers.iter_mut().enumerate() {
        let bounds = IntegerBounds::compile(cpolicy(&rec.container_name), &global_max)?;
        let (mut t, mut l, mut u) = (rec.target, rec.lower_bound, rec.upper_bound);
        let hits = bounds.apply([
            ("target", &mut t),
            ("lowerBound", &mut l),
            ("upperBound", &mut u),
        ]);
        rec.target = t;
        rec.lower_bound = l;
        rec.upper_bound = u;
        let Some(ex) = out.explain.get_mut(i) else {
            continue;
        };
        ex.caps = hits
            .hits
            .iter()
            .map(|(f, r, c, v)| {
                let unit = if r.name() == "cpu" { "m" } else { " bytes" };
                format!("{f} {} capped to {c} {v}{unit}", r.name())
            })
            .collect();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::risk_price::{RiskPrice, priced_request};

    #[test]
    fn humanize() {
        assert_eq!(humanize_memory(1050000.0), "1.00Mi");
        assert_eq!(humanize_memory(1537.0), "1.50Ki");
        assert_eq!(humanize_memory(100.0), "100");
    }

    /// Priced against its risk, a request covers every sample where the peaks cost little to hold (usage
    /// spread evenly below them) and leaves rare, large peaks uncovered.
    #[test]
    fn the_priced_request_covers_cheap_peaks_and_leaves_costly_ones() {
        use crate::histogram::{Histogram, HistogramOptions};
        let price = RiskPrice {
            price: 3.25,
            upper_margin: None,
        };
        let mut even = Histogram::new(HistogramOptions::vpa_cpu());
        for i in 0..=400 {
            even.add_sample(1.0 + 0.001 * f64::from(i), 1.0);
        }
        let r = priced_request(&even, &price).unwrap();
        assert!((1.4..=1.5).contains(&r), "{r}");
        let mut bursts = Histogram::new(HistogramOptions::vpa_cpu());
        for i in 0..1000 {
            bursts.add_sample(if i % 10 == 0 { 20.0 } else { 2.0 }, 1.0);
        }
        let r = priced_request(&bursts, &price).unwrap();
        assert!((2.0..=2.2).contains(&r), "{r}");
        // A small container with the same shape: holding its bursts is cheap, so it does.
        let mut small = Histogram::new(HistogramOptions::vpa_cpu());
        for i in 0..1000 {
            small.add_sample(if i % 10 == 0 { 0.2 } else { 0.02 }, 1.0);
        }
        let r = priced_request(&small, &price).unwrap();
        assert!(r >= 0.2, "{r}");
        assert_eq!(
            priced_request(&Histogram::new(HistogramOptions::vpa_cpu()), &price),
            None
        );
    }

    /// A container with no usage yet gets no recommendation (upstream's rule, behind
    /// `recommend_without_samples`, gives it the pod minimum), and the pod minimum is split over the
    /// containers that have usage.
    #[test]
    fn containers_without_usage_get_no_recommendation_unless_asked() {
        use crate::model::AggregationsConfig;
        let agg_config = AggregationsConfig::default();
        let mut used = AggregateContainerState::new(&agg_config, 0);
        used.add_cpu_cores(0.001, 1.0, 1_000_000_000);
        let idle = AggregateContainerState::new(&agg_config, 0);
        let aggregates: BTreeMap<String, AggregateContainerState> =
            [("app".to_string(), used), ("sidecar".to_string(), idle)].into();
        let annotations = BTreeMap::new();
        let input = VpaInput {
            policy: None,
            annotations: &annotations,
            explain: false,
        };
        let tailor = RecommenderConfig {
            recommend_without_samples: false,
            ..RecommenderConfig::default()
        };
        let r = recommend(&tailor, &aggregates, input).unwrap();
        let names: Vec<&str> = r
            .containers
            .iter()
            .map(|c| c.container_name.as_str())
            .collect();
        assert_eq!(names, ["app"]);
        // The whole pod minimum goes to the one container with usage.
        assert_eq!(r.containers[0].target.cpu, Some(25));
        let upstream = recommend(&RecommenderConfig::default(), &aggregates, input).unwrap();
        let names: Vec<&str> = upstream
            .containers
            .iter()
            .map(|c| c.container_name.as_str())
            .collect();
        assert_eq!(names, ["app", "sidecar"]);
        assert_eq!(upstream.containers[1].target.cpu, Some(12));
        // Nothing at all with usage: nothing to publish.
        let only_idle: BTreeMap<String, AggregateContainerState> = [(
            "sidecar".to_string(),
            AggregateContainerState::new(&agg_config, 0),
        )]
        .into();
        assert!(
            recommend(&tailor, &only_idle, input)
                .unwrap()
                .containers
                .is_empty()
        );
    }

    #[test]
    fn minimum_split() {
        let c = RecommenderConfig::default();
        assert_eq!(
            c.min_resources(2),
            Resources {
                cpu: Some(12),
                memory: Some(131072000)
            }
        );
    }
}
