//! The estimation settings: upstream's percentiles, margins and minimums, and a profile's rules.

use super::{DailyRule, Estimator};

use crate::day_plan::ChangePrice;
use crate::policy::Resources;
use crate::risk_price::RiskPrice;
use crate::stable_memory::StablePeaks;
use crate::units::{Resource, cpu_amount_from_cores, memory_amount_from_bytes, scale_resource};

/// Recommender flags that shape estimation and output.
#[derive(Debug, Clone, PartialEq)]
pub struct RecommenderConfig {
    /// `--target-cpu-percentile`.
    pub target_cpu_percentile: f64,
    /// `--recommendation-lower-bound-cpu-percentile`.
    pub lower_bound_cpu_percentile: f64,
    /// `--recommendation-upper-bound-cpu-percentile`.
    pub upper_bound_cpu_percentile: f64,
    /// `--target-memory-percentile`.
    pub target_memory_percentile: f64,
    /// `--recommendation-lower-bound-memory-percentile`.
    pub lower_bound_memory_percentile: f64,
    /// `--recommendation-upper-bound-memory-percentile`.
    pub upper_bound_memory_percentile: f64,
    /// `--recommendation-margin-fraction`.
    pub safety_margin_fraction: f64,
    /// `--pod-recommendation-min-cpu-millicores`.
    pub pod_min_cpu_millicores: f64,
    /// `--pod-recommendation-min-memory-mb` (MiB).
    pub pod_min_memory_mb: f64,
    /// `--confidence-interval-cpu` (ns).
    pub confidence_interval_cpu: i64,
    /// `--confidence-interval-memory` (ns).
    pub confidence_interval_memory: i64,
    /// `--round-cpu-millicores`.
    pub round_cpu_millicores: i64,
    /// `--round-memory-bytes`.
    pub round_memory_bytes: i64,
    /// `--humanize-memory` (deprecated).
    pub humanize_memory: bool,
    /// `--cpu-integer-post-processor-enabled`.
    pub cpu_integer_post_processor_enabled: bool,
    /// `--container-recommendation-max-allowed-cpu` / `-memory`.
    pub global_max_allowed: Resources,
    /// CPU from the hourly histograms (a profile's setting; `None` = upstream's all-day estimate).
    pub cpu_time_of_day: Option<TimeOfDay>,
    /// The all-day CPU target priced against its risk (a profile's setting; `None` = upstream's percentile).
    pub cpu_risk_price: Option<RiskPrice>,
    /// Memory at a small margin over steady daily peaks (a profile's setting; `None` = upstream's).
    pub memory_stable_peaks: Option<StablePeaks>,
    /// Recommend for containers with no usage sample yet, as upstream does: they get the pod minimum
    /// (`--recommend-without-samples`). Off in the daemon and the CLI, so that a pod created before the first
    /// sample is never sized to the minimum; the library's default keeps upstream's rule for the conformance
    /// harnesses (DEVIATIONS.md, "Containers without samples").
    pub recommend_without_samples: bool,
}

/// How a profile that follows the daily curve sets CPU: the target is the highest hourly `percentile` (with
/// its own margin) over the hours a recommendation must cover; the bounds sit around it so that the updater
/// resizes in place when the request falls below `lower_margin` or above `upper_margin` of the target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeOfDay {
    /// Percentile of each hour's histogram.
    pub percentile: f64,
    /// Safety margin of the hourly CPU estimate (replaces `--recommendation-margin-fraction` for CPU, which
    /// keeps applying to memory).
    pub margin: f64,
    /// How far ahead of the last sample the target covers (ns).
    pub ahead: i64,
    /// How far ahead the lower bound covers (ns, ≤ `ahead`): a request set to the target lasts until the
    /// hours within this window need more than it.
    pub lower_ahead: i64,
    /// Lower bound = the `lower_ahead` estimate × (1 + `lower_margin`) (≤ 0; as upstream's margin step, a
    /// negative margin adds nothing there); with a risk price, at most the target (a priced target weighs the
    /// hours of its window together and can fall below the next hour's). With a day plan ([`Self::plan`]) the
    /// lower bound is the target × (1 + `lower_margin`): −0.1 lets the plan drift up by the updater's 10 %
    /// without a resize.
    pub lower_margin: f64,
    /// Upper bound = target × (1 + `upper_margin`) (≥ 0).
    pub upper_margin: f64,
    /// Follow the day only for containers whose CPU has a daily pattern this strong; the all-day estimate
    /// for the others (`None`: wherever the hourly histograms cover the window).
    pub only_if: Option<DailyRule>,
    /// Instead of `percentile`, the hourly percentile that spends this share of the risk upstream's all-day
    /// target had on the same history ([`Estimator::HourlyBudget`]).
    pub risk_budget: Option<f64>,
    /// With a risk price: follow the day by the container's day plan ([`crate::day_plan`]), a few steps a day
    /// each priced over its hours, where the steps pay for their changes at this price; instead of the
    /// priced request over `ahead` (the bounds keep their margins around the plan's request).
    pub plan: Option<ChangePrice>,
}

impl Default for RecommenderConfig {
    fn default() -> Self {
        const DAY: i64 = 86_400_000_000_000;
        RecommenderConfig {
            target_cpu_percentile: 0.9,
            lower_bound_cpu_percentile: 0.5,
            upper_bound_cpu_percentile: 0.95,
            target_memory_percentile: 0.9,
            lower_bound_memory_percentile: 0.5,
            upper_bound_memory_percentile: 0.95,
            safety_margin_fraction: 0.15,
            pod_min_cpu_millicores: 25.0,
            pod_min_memory_mb: 250.0,
            confidence_interval_cpu: DAY,
            confidence_interval_memory: DAY,
            round_cpu_millicores: 1,
            round_memory_bytes: 1,
            humanize_memory: false,
            cpu_integer_post_processor_enabled: false,
            global_max_allowed: Resources::default(),
            cpu_time_of_day: None,
            cpu_risk_price: None,
            memory_stable_peaks: None,
            recommend_without_samples: true,
        }
    }
}

/// Which of the three bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Target.
    Target,
    /// Lower bound.
    Lower,
    /// Upper bound.
    Upper,
}

impl RecommenderConfig {
    pub(super) fn percentile(&self, b: Bound, r: Resource) -> f64 {
        match (b, r) {
            (Bound::Target, Resource::Cpu) => self.target_cpu_percentile,
            (Bound::Lower, Resource::Cpu) => self.lower_bound_cpu_percentile,
            (Bound::Upper, Resource::Cpu) => self.upper_bound_cpu_percentile,
            (Bound::Target, Resource::Memory) => self.target_memory_percentile,
            (Bound::Lower, Resource::Memory) => self.lower_bound_memory_percentile,
            (Bound::Upper, Resource::Memory) => self.upper_bound_memory_percentile,
        }
    }

    pub(super) fn interval(&self, r: Resource) -> i64 {
        match r {
            Resource::Cpu => self.confidence_interval_cpu,
            Resource::Memory => self.confidence_interval_memory,
        }
    }

    /// The estimator chain of one bound and resource, without the minimum.
    pub fn estimator(&self, b: Bound, r: Resource) -> Estimator {
        let all_day = self.all_day_estimator(b, r);
        let Some(tod) = self.cpu_time_of_day.filter(|_| r == Resource::Cpu) else {
            return all_day;
        };
        let planned = match (self.cpu_risk_price, tod.plan) {
            (Some(price), Some(change)) => Some((price, change)),
            _ => None,
        };
        let (target, lower) = match planned {
            Some(p) => (
                self.plan_estimator(p, 1.0),
                self.plan_estimator(p, 1.0 + tod.lower_margin.min(0.0)),
            ),
            None => (
                self.window_estimator(&tod, tod.ahead),
                Estimator::Margin {
                    fraction: tod.lower_margin,
                    base: Box::new(self.window_estimator(&tod, tod.lower_ahead.min(tod.ahead))),
                },
            ),
        };
        let hourly = match b {
            Bound::Target => target,
            // A priced target weighs the hours of its window together, so on a ramp down (or after a quiet
            // weekend) it can fall below the next hour's own: a lower bound above the target made the updater
            // resize every hour to a target still below it, and once 1.6 × the target fell under the
            // lower bound, resize down. The lower bound is at most the target, as upstream's always is.
            Bound::Lower if self.cpu_risk_price.is_some() => {
                Estimator::Min(Box::new(lower), Box::new(target))
            }
            Bound::Lower => lower,
            Bound::Upper => Estimator::Margin {
                fraction: tod.upper_margin,
                base: Box::new(target),
            },
        };
        let hourly = match planned {
            Some((price, change)) => Estimator::IfPlanned {
                price,
                change,
                planned: Box::new(hourly),
                otherwise: Box::new(all_day.clone()),
            },
            None => hourly,
        };
        match tod.only_if {
            Some(rule) => Estimator::IfDaily {
                rule,
                ahead: tod.ahead,
                daily: Box::new(hourly),
                otherwise: Box::new(all_day),
            },
            None => Estimator::IfHourly {
                ahead: tod.ahead,
                hourly: Box::new(hourly),
                otherwise: Box::new(all_day),
            },
        }
    }

    /// The hourly CPU estimate over the hours from the last sample to `ahead` later: priced with a risk price,
    /// at the risk budget's percentile with one, else `tod`'s percentile and margin.
    fn window_estimator(&self, tod: &TimeOfDay, ahead: i64) -> Estimator {
        match (self.cpu_risk_price, tod.risk_budget) {
            (Some(price), _) => Estimator::HourlyPriced {
                price,
                ahead,
                all_day: Box::new(self.all_day_estimator(Bound::Target, Resource::Cpu)),
            },
            (None, Some(share)) => Estimator::HourlyBudget {
                share,
                margin: tod.margin,
                ahead,
                all_day: Box::new(self.all_day_estimator(Bound::Target, Resource::Cpu)),
            },
            (None, None) => Estimator::Margin {
                fraction: tod.margin,
                base: Box::new(Estimator::HourlyPercentile {
                    percentile: tod.percentile,
                    ahead,
                }),
            },
        }
    }

    /// The day plan's CPU request times `factor`, capped at the all-day priced target.
    fn plan_estimator(&self, (price, change): (RiskPrice, ChangePrice), factor: f64) -> Estimator {
        Estimator::HourlyPlan {
            price,
            change,
            factor,
            all_day: Box::new(self.all_day_estimator(Bound::Target, Resource::Cpu)),
        }
    }

    /// The all-day chain: upstream's, or for CPU with [`RecommenderConfig::cpu_risk_price`] the priced target
    /// (the bounds widened to hold it).
    pub(super) fn all_day_estimator(&self, b: Bound, r: Resource) -> Estimator {
        let upstream = self.upstream_estimator(b, r);
        if let Some(rule) = self.memory_stable_peaks.filter(|_| r == Resource::Memory) {
            return self.stable_memory_estimator(b, rule, upstream);
        }
        let Some(price) = self.cpu_risk_price.filter(|_| r == Resource::Cpu) else {
            return upstream;
        };
        let priced = Estimator::RiskPriced {
            price,
            otherwise: Box::new(self.upstream_estimator(Bound::Target, r)),
        };
        match b {
            Bound::Target => priced,
            Bound::Lower => Estimator::Min(Box::new(upstream), Box::new(priced)),
            Bound::Upper => match price.upper_margin {
                Some(fraction) => Estimator::Margin {
                    fraction,
                    base: Box::new(priced),
                },
                None => Estimator::Max(Box::new(upstream), Box::new(priced)),
            },
        }
    }

    /// The memory chain of [`RecommenderConfig::memory_stable_peaks`]: the steady-peak target; the lower bound
    /// at most the highest peak with the margin whatever the spread (a request that holds every peak seen is
    /// not raised again when a peak one bucket off makes the peaks unsteady); the upper bound upstream's.
    fn stable_memory_estimator(
        &self,
        b: Bound,
        rule: StablePeaks,
        upstream: Estimator,
    ) -> Estimator {
        let peaks = |any_spread| Estimator::StablePeaks {
            rule,
            any_spread,
            otherwise: Box::new(self.upstream_estimator(Bound::Target, Resource::Memory)),
        };
        match b {
            Bound::Target => peaks(false),
            Bound::Lower => Estimator::Min(Box::new(upstream), Box::new(peaks(true))),
            Bound::Upper => upstream,
        }
    }

    /// Upstream's chain: percentile → margin → confidence multiplier (bounds only).
    pub fn upstream_estimator(&self, b: Bound, r: Resource) -> Estimator {
        let e = Estimator::Margin {
            fraction: self.safety_margin_fraction,
            base: Box::new(Estimator::Percentile(self.percentile(b, r))),
        };
        match b {
            Bound::Target => e,
            Bound::Lower => Estimator::Confidence {
                multiplier: 0.001,
                exponent: -2.0,
                interval: self.interval(r),
                base: Box::new(e),
            },
            Bound::Upper => Estimator::Confidence {
                multiplier: 1.0,
                exponent: 1.0,
                interval: self.interval(r),
                base: Box::new(e),
            },
        }
    }

    /// Per-container minimum when the pod minimum is split over `n` containers.
    pub fn min_resources(&self, n: usize) -> Resources {
        let fraction = 1.0 / n.max(1) as f64;
        Resources {
            cpu: Some(scale_resource(
                cpu_amount_from_cores(self.pod_min_cpu_millicores * 0.001),
                fraction,
            )),
            memory: Some(scale_resource(
                memory_amount_from_bytes(self.pod_min_memory_mb * 1024.0 * 1024.0),
                fraction,
            )),
        }
    }
}
