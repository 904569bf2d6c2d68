//! Estimators (percentile, margin, confidence, minimum), the per-VPA recommendation, output formatting
//! (rounding) and the post-processors (integer CPU, capping).

use std::collections::BTreeMap;

use tailor_core::policy::{container_policy, needs_recommendation};
use tailor_core::quantity::binary_suffix;
use tailor_core::sizing::POD_ROW;
use tailor_crds::PodResourcePolicy;

use crate::day_plan::{ChangePrice, DayPlan};
use crate::histogram::ZERO_TIME;
use crate::model::AggregateContainerState;
use crate::policy::{self, IntegerBounds, PolicyError, Resources};
use crate::risk_price::{RiskPrice, priced_request};
use crate::stable_memory::{
    MemoryRule, StablePeaks, highest_peak_bytes, memory_rule, steady_peaks_bytes,
};
use crate::units::{
    Resource, ResourceAmount, cpu_amount_from_cores, go_pow, memory_amount_from_bytes, sat_sub,
    scale_resource,
};

/// Annotation prefix/suffix that turn on the integer-CPU post-processor for a container.
pub const INTEGER_CPU_PREFIX: &str = "vpa-post-processor.kubernetes.io/";
/// See [`INTEGER_CPU_PREFIX`].
pub const INTEGER_CPU_SUFFIX: &str = "_integerCPU";

/// Confidence: min(history span / interval, sample count / interval-in-minutes); CPU samples only.
pub fn confidence(agg: &AggregateContainerState, interval: i64) -> f64 {
    confidence_from(
        agg.first_sample_start,
        agg.last_sample_start,
        agg.total_samples_count,
        interval,
    )
}

/// [`confidence`] from raw statistics.
pub fn confidence_from(first: i64, last: i64, count: u64, interval: i64) -> f64 {
    let span = if first == ZERO_TIME || last == ZERO_TIME {
        if first == last {
            0
        } else {
            sat_sub(last as i128, wide_zero(first))
        }
    } else {
        sat_sub(last as i128, first as i128)
    };
    let lifespan = span as f64 / interval as f64;
    let samples = count as f64 / duration_minutes(interval);
    lifespan.min(samples)
}

fn wide_zero(t: i64) -> i128 {
    if t == ZERO_TIME {
        -(crate::units::GO_ZERO_TO_UNIX_SECS as i128) * 1_000_000_000
    } else {
        t as i128
    }
}

/// Go's `Duration.Minutes()`.
pub fn duration_minutes(d: i64) -> f64 {
    const MIN: i64 = 60_000_000_000;
    let m = d / MIN;
    let ns = d % MIN;
    m as f64 + ns as f64 / (60.0 * 1e9)
}

/// An estimator tree for one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Estimator {
    /// A constant amount.
    Const(ResourceAmount),
    /// Percentile of the resource's histogram.
    Percentile(f64),
    /// `b + trunc(b * fraction)`.
    Margin {
        /// Fraction.
        fraction: f64,
        /// Inner estimator.
        base: Box<Estimator>,
    },
    /// `trunc(b * (1 + multiplier/confidence)^exponent)`.
    Confidence {
        /// Multiplier.
        multiplier: f64,
        /// Exponent.
        exponent: f64,
        /// Confidence interval (ns).
        interval: i64,
        /// Inner estimator.
        base: Box<Estimator>,
    },
    /// `max(b, min)`.
    MinResource {
        /// Minimum.
        min: ResourceAmount,
        /// Inner estimator.
        base: Box<Estimator>,
    },
    /// The highest `percentile` of the hourly CPU histograms from the last sample to `ahead` (ns) later;
    /// the all-day percentile when the hours are not covered (see [`hourly_ready`]).
    HourlyPercentile {
        /// Percentile.
        percentile: f64,
        /// How far ahead of the last sample (ns).
        ahead: i64,
    },
    /// `hourly` when the aggregate's hourly histograms are ready for the window, else `otherwise`.
    IfHourly {
        /// How far ahead of the last sample (ns).
        ahead: i64,
        /// Chain used with hourly data.
        hourly: Box<Estimator>,
        /// Chain used without.
        otherwise: Box<Estimator>,
    },
    /// `daily` when the hourly histograms are ready for the window and the container's CPU has a daily
    /// pattern at least as strong as `rule` ([`daily_rule_holds`]), else `otherwise`.
    IfDaily {
        /// The pattern required.
        rule: DailyRule,
        /// How far ahead of the last sample (ns).
        ahead: i64,
        /// Chain used when the day repeats.
        daily: Box<Estimator>,
        /// Chain used otherwise.
        otherwise: Box<Estimator>,
    },
    /// The highest hourly CPU percentile from the last sample to `ahead` later, at the percentile that
    /// spends `share` of the risk `all_day`'s estimate had ([`budget_percentile`]), plus `margin`, and never
    /// more than `all_day` (what is saved is the hours that need less); the all-day estimate when the hours
    /// are not covered.
    HourlyBudget {
        /// Share of the all-day estimate's expected risk the hourly requests may take (0–1).
        share: f64,
        /// Safety margin on the hourly percentile; the result never exceeds the all-day estimate.
        margin: f64,
        /// How far ahead of the last sample (ns).
        ahead: i64,
        /// The all-day estimate whose risk is the budget.
        all_day: Box<Estimator>,
    },
    /// The CPU request that minimises waste + `price` × time above it on the container's own all-day
    /// histogram ([`priced_request`]); `otherwise` for memory or with less than a day of history.
    RiskPriced {
        /// How the price of a minute above the request is set.
        price: RiskPrice,
        /// Upstream's all-day target (the cap, and the estimate without enough history).
        otherwise: Box<Estimator>,
    },
    /// [`Estimator::RiskPriced`] on the hourly CPU histograms from the last sample to `ahead` later (each hour
    /// weighing the same), never above `all_day`; `all_day` when the hours are not covered.
    HourlyPriced {
        /// How the price of a minute above the request is set.
        price: RiskPrice,
        /// How far ahead of the last sample (ns).
        ahead: i64,
        /// The all-day estimate (the cap).
        all_day: Box<Estimator>,
    },
    /// The request the container's day plan ([`crate::day_plan`]) sets for the hour about to be served, never
    /// above `all_day`; `all_day` when the plan has one step or the hours are not all covered.
    HourlyPlan {
        /// How the price of a minute above the request is set.
        price: RiskPrice,
        /// What a request change costs.
        change: ChangePrice,
        /// Factor on the plan's request (1 for the target; below 1 for a lower bound that leaves room for the
        /// plan to drift up a little without a resize).
        factor: f64,
        /// The all-day estimate (the cap).
        all_day: Box<Estimator>,
    },
    /// `planned` when the container's day plan has more than one step (its day pays for the changes that
    /// follow it), else `otherwise`.
    IfPlanned {
        /// How the price of a minute above the request is set.
        price: RiskPrice,
        /// What a request change costs.
        change: ChangePrice,
        /// Chain used when the plan follows the day.
        planned: Box<Estimator>,
        /// Chain used otherwise.
        otherwise: Box<Estimator>,
    },
    /// For memory whose daily peaks hold steady
    /// ([`stable_peak_request`](crate::stable_memory::stable_peak_request)) the highest peak with a small
    /// margin, at most `otherwise`; `otherwise` for CPU, for peaks that spread and with too little history.
    StablePeaks {
        /// When the peaks count as steady and the margin over them.
        rule: StablePeaks,
        /// The highest peak with the margin whatever the spread (the rule's lower bound).
        any_spread: bool,
        /// Upstream's memory target (the cap, and the estimate otherwise).
        otherwise: Box<Estimator>,
    },
    /// The smaller of two estimates.
    Min(Box<Estimator>, Box<Estimator>),
    /// The larger of two estimates.
    Max(Box<Estimator>, Box<Estimator>),
}

/// How strong a daily pattern must be before a profile follows it ([`crate::model::DailyPattern`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DailyRule {
    /// Least lag-24 h autocorrelation of the hourly CPU means.
    pub min_autocorrelation: f64,
    /// Least share of their variance explained by the hour of the day.
    pub min_stability: f64,
    /// Least ratio of the busiest to the quietest hour of the day (hour-of-day means): a daily swing too
    /// small to pay for the resizes that follow it.
    pub min_swing: f64,
    /// Least difference between the busiest and the quietest hour of the day (cores): following the day pays
    /// for its resizes only when it frees enough CPU (0 = no such test).
    pub min_amplitude: f64,
}

/// Lowest and highest percentile [`budget_percentile`] picks.
pub const BUDGET_PERCENTILES: (f64, f64) = (0.8, 0.999);

/// The hourly percentile whose expected risk (the share of samples above the request, averaged over the hours
/// of the day) is `share` × that of a request of `all_day_cores`: `1 − share × risk`, within
/// [`BUDGET_PERCENTILES`].
pub fn budget_percentile(h: &crate::model::HourlyCpu, all_day_cores: f64, share: f64) -> f64 {
    let risk = h.fraction_above(all_day_cores);
    (1.0 - share * risk).clamp(BUDGET_PERCENTILES.0, BUDGET_PERCENTILES.1)
}

/// Whether `agg`'s CPU has a daily pattern at least as strong as `rule` (false without hourly data).
pub fn daily_rule_holds(agg: &AggregateContainerState, rule: &DailyRule) -> bool {
    daily_pattern(agg).is_some_and(|p| {
        p.autocorrelation >= rule.min_autocorrelation
            && p.stability >= rule.min_stability
            && p.swing >= rule.min_swing
            && p.amplitude >= rule.min_amplitude
    })
}

/// The daily pattern of `agg`'s CPU up to its last sample, when it keeps hourly data and has enough of it.
pub fn daily_pattern(agg: &AggregateContainerState) -> Option<crate::model::DailyPattern> {
    agg.hourly
        .as_ref()
        .and_then(|h| h.daily_pattern(agg.last_sample_start))
}

/// Whether `agg` keeps hourly CPU histograms with a day of history and every hour from its last sample to
/// `ahead` later covered.
pub fn hourly_ready(agg: &AggregateContainerState, ahead: i64) -> bool {
    const DAY: i64 = 86_400_000_000_000;
    let Some(h) = &agg.hourly else { return false };
    agg.first_sample_start != ZERO_TIME
        && sat_sub(
            agg.last_sample_start as i128,
            agg.first_sample_start as i128,
        ) >= DAY
        && h.covers(agg.last_sample_start, ahead)
}

impl Estimator {
    /// Evaluates the tree for resource `r`.
    pub fn estimate(&self, r: Resource, agg: &AggregateContainerState) -> ResourceAmount {
        match self {
            Estimator::Const(v) => *v,
            Estimator::Percentile(p) => percentile_amount(r, agg, *p),
            Estimator::Margin { fraction, base } => {
                let b = base.estimate(r, agg);
                b.saturating_add(scale_resource(b, *fraction))
            }
            Estimator::Confidence {
                multiplier,
                exponent,
                interval,
                base,
            } => {
                let b = base.estimate(r, agg);
                let c = confidence(agg, *interval);
                scale_resource(b, go_pow(1.0 + multiplier / c, *exponent))
            }
            Estimator::MinResource { min, base } => base.estimate(r, agg).max(*min),
            Estimator::HourlyPercentile { percentile, ahead } => match (r, &agg.hourly) {
                (Resource::Cpu, Some(h)) if hourly_ready(agg, *ahead) => cpu_amount_from_cores(
                    h.percentile_ahead(*percentile, agg.last_sample_start, *ahead),
                ),
                _ => percentile_amount(r, agg, *percentile),
            },
            Estimator::IfHourly { .. }
            | Estimator::IfDaily { .. }
            | Estimator::IfPlanned { .. } => self.branch(r, agg).estimate(r, agg),
            Estimator::HourlyBudget {
                share,
                margin,
                ahead,
                all_day,
            } => hourly_budget(r, agg, *share, *margin, *ahead, all_day.estimate(r, agg)),
            Estimator::RiskPriced { price, otherwise } => risk_priced(r, agg, price, otherwise),
            Estimator::HourlyPriced {
                price,
                ahead,
                all_day,
            } => hourly_priced(r, agg, price, *ahead, all_day.estimate(r, agg)),
            Estimator::HourlyPlan {
                price,
                change,
                factor,
                all_day,
            } => hourly_plan(r, agg, (price, change), *factor, all_day.estimate(r, agg)),
            Estimator::StablePeaks {
                rule,
                any_spread,
                otherwise,
            } => stable_peaks(r, agg, rule, *any_spread, otherwise),
            Estimator::Min(a, b) => a.estimate(r, agg).min(b.estimate(r, agg)),
            Estimator::Max(a, b) => a.estimate(r, agg).max(b.estimate(r, agg)),
        }
    }
}

/// [`Estimator::HourlyBudget`]: the hourly percentile that spends `share` of `all`'s risk, plus `margin`, at
/// most `all` (`all` unless the hours ahead are covered).
fn hourly_budget(
    r: Resource,
    agg: &AggregateContainerState,
    share: f64,
    margin: f64,
    ahead: i64,
    all: ResourceAmount,
) -> ResourceAmount {
    match (r, &agg.hourly) {
        (Resource::Cpu, Some(h)) if hourly_ready(agg, ahead) => {
            let p = budget_percentile(h, all as f64 / 1000.0, share);
            let hourly = cpu_amount_from_cores(h.percentile_ahead(p, agg.last_sample_start, ahead));
            hourly
                .saturating_add(scale_resource(hourly, margin))
                .min(all)
        }
        _ => all,
    }
}

/// [`Estimator::RiskPriced`]: the priced CPU request, `otherwise` (estimated only then) for memory, before a day
/// of history or without samples.
fn risk_priced(
    r: Resource,
    agg: &AggregateContainerState,
    price: &RiskPrice,
    otherwise: &Estimator,
) -> ResourceAmount {
    let priced = (r == Resource::Cpu && day_of_history(agg))
        .then(|| priced_request(agg.cpu.histogram(), price))
        .flatten();
    priced.map_or_else(|| otherwise.estimate(r, agg), cpu_amount_from_cores)
}

/// [`Estimator::StablePeaks`]: the highest steady memory peak with its margin (the highest peak whatever the
/// spread with `any_spread`), at most `otherwise`'s estimate.
fn stable_peaks(
    r: Resource,
    agg: &AggregateContainerState,
    rule: &StablePeaks,
    any_spread: bool,
    otherwise: &Estimator,
) -> ResourceAmount {
    let upstream = otherwise.estimate(r, agg);
    let peaks = match (r, any_spread) {
        (Resource::Memory, false) => steady_peaks_bytes(agg, rule),
        (Resource::Memory, true) => highest_peak_bytes(agg, rule),
        (Resource::Cpu, _) => None,
    };
    peaks.map_or(upstream, |b| memory_amount_from_bytes(b).min(upstream))
}

/// [`Estimator::HourlyPriced`]: the priced request over the hours ahead, at most `all`.
fn hourly_priced(
    r: Resource,
    agg: &AggregateContainerState,
    price: &RiskPrice,
    ahead: i64,
    all: ResourceAmount,
) -> ResourceAmount {
    match (r, &agg.hourly) {
        (Resource::Cpu, Some(h)) if hourly_ready(agg, ahead) => h
            .priced_ahead(price, agg.last_sample_start, ahead)
            .map_or(all, |c| cpu_amount_from_cores(c).min(all)),
        _ => all,
    }
}

/// How far past the last sample the hour being served lies: the plan's request for an hour is in place from
/// just before that hour starts (a decision made at the turn of the hour, after its last sample of a minute
/// before, serves the hour that begins).
const PLAN_LEAD: i64 = 2 * 60_000_000_000;

/// The day plan of `agg`'s CPU when it has more than one step (for CPU, with a day of history and every hour
/// covered).
fn day_plan(
    r: Resource,
    agg: &AggregateContainerState,
    price: &RiskPrice,
    change: &ChangePrice,
) -> Option<DayPlan> {
    const DAY: i64 = 86_400_000_000_000;
    match (r, &agg.hourly) {
        (Resource::Cpu, Some(h)) if hourly_ready(agg, DAY - 1) => {
            h.plan(price, change).filter(|p| p.steps > 1)
        }
        _ => None,
    }
}

/// A chain that estimates nothing (0): what [`Estimator::branch`] answers for a step that is not a branch.
static NO_BRANCH: Estimator = Estimator::Const(0);

impl Estimator {
    /// The chain an `If…` step takes for `r` on `agg`: its first chain when its condition holds, else the
    /// other ([`NO_BRANCH`] for any other step).
    fn branch(&self, r: Resource, agg: &AggregateContainerState) -> &Estimator {
        let cpu = r == Resource::Cpu;
        let (holds, yes, no) = match self {
            Estimator::IfHourly {
                ahead,
                hourly,
                otherwise,
            } => (cpu && hourly_ready(agg, *ahead), hourly, otherwise),
            Estimator::IfDaily {
                rule,
                ahead,
                daily,
                otherwise,
            } => (
                cpu && hourly_ready(agg, *ahead) && daily_rule_holds(agg, rule),
                daily,
                otherwise,
            ),
            Estimator::IfPlanned {
                price,
                change,
                planned,
                otherwise,
            } => (
                day_plan(r, agg, price, change).is_some(),
                planned,
                otherwise,
            ),
            _ => return &NO_BRANCH,
        };
        if holds { yes } else { no }
    }
}

/// [`Estimator::HourlyPlan`]: the plan's request for the hour being served, at most `all`, times `factor`;
/// `all` without a plan of more than one step.
fn hourly_plan(
    r: Resource,
    agg: &AggregateContainerState,
    (price, change): (&RiskPrice, &ChangePrice),
    factor: f64,
    all: ResourceAmount,
) -> ResourceAmount {
    day_plan(r, agg, price, change).map_or(all, |p| {
        scale_resource(
            cpu_amount_from_cores(plan_request(&p, agg)).min(all),
            factor,
        )
    })
}

/// The plan's request (cores) for the hour being served after `agg`'s last sample.
fn plan_request(plan: &DayPlan, agg: &AggregateContainerState) -> f64 {
    let hour =
        crate::model::time_of_day::hour_of_day(agg.last_sample_start.saturating_add(PLAN_LEAD));
    plan.requests.get(hour).copied().unwrap_or(0.0)
}

/// Whether `agg` has at least a day between its first and last CPU sample.
pub fn day_of_history(agg: &AggregateContainerState) -> bool {
    const DAY: i64 = 86_400_000_000_000;
    agg.first_sample_start != ZERO_TIME
        && sat_sub(
            agg.last_sample_start as i128,
            agg.first_sample_start as i128,
        ) >= DAY
}

/// Percentile of the CPU (→ millicores) or memory (→ bytes) histogram.
pub fn percentile_amount(r: Resource, agg: &AggregateContainerState, p: f64) -> ResourceAmount {
    match r {
        Resource::Cpu => cpu_amount_from_cores(agg.cpu.percentile(p)),
        Resource::Memory => memory_amount_from_bytes(agg.memory.percentile(p)),
    }
}

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
    fn percentile(&self, b: Bound, r: Resource) -> f64 {
        match (b, r) {
            (Bound::Target, Resource::Cpu) => self.target_cpu_percentile,
            (Bound::Lower, Resource::Cpu) => self.lower_bound_cpu_percentile,
            (Bound::Upper, Resource::Cpu) => self.upper_bound_cpu_percentile,
            (Bound::Target, Resource::Memory) => self.target_memory_percentile,
            (Bound::Lower, Resource::Memory) => self.lower_bound_memory_percentile,
            (Bound::Upper, Resource::Memory) => self.upper_bound_memory_percentile,
        }
    }

    fn interval(&self, r: Resource) -> i64 {
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
    fn all_day_estimator(&self, b: Bound, r: Resource) -> Estimator {
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

/// The raw (pre-format) estimate of one container: which resources are controlled and the three bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEstimate {
    /// Target.
    pub target: Resources,
    /// Lower bound.
    pub lower_bound: Resources,
    /// Upper bound.
    pub upper_bound: Resources,
}

/// Estimator chains for the three bounds, each per resource (`[cpu, memory]`).
#[derive(Debug, Clone, PartialEq)]
pub struct BoundChains {
    /// Target chains.
    pub target: [Estimator; 2],
    /// Lower-bound chains.
    pub lower_bound: [Estimator; 2],
    /// Upper-bound chains.
    pub upper_bound: [Estimator; 2],
}

impl RecommenderConfig {
    /// The configured chains (percentile → margin → confidence multiplier).
    pub fn chains(&self) -> BoundChains {
        let per = |b| {
            [
                self.estimator(b, Resource::Cpu),
                self.estimator(b, Resource::Memory),
            ]
        };
        BoundChains {
            target: per(Bound::Target),
            lower_bound: per(Bound::Lower),
            upper_bound: per(Bound::Upper),
        }
    }
}

/// [`RecommenderConfig::chains`], built once per thread for the configuration last asked for: building the
/// chains (boxed estimator trees) cost more than evaluating them for a one-container VPA.
fn chains_of(config: &RecommenderConfig) -> std::rc::Rc<BoundChains> {
    type Cached = Option<(RecommenderConfig, std::rc::Rc<BoundChains>)>;
    thread_local! {
        static LAST: std::cell::RefCell<Cached> = const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((c, chains)) if c == config => chains.clone(),
            _ => {
                let chains = std::rc::Rc::new(config.chains());
                *last = Some((config.clone(), chains.clone()));
                chains
            }
        }
    })
}

/// Evaluates the chains for one container, raises every value to the per-container minimum and keeps only the
/// controlled resources (`(cpu, memory)`).
pub fn estimate_with(
    chains: &BoundChains,
    agg: &AggregateContainerState,
    min: Resources,
    controlled: (bool, bool),
) -> RawEstimate {
    let mut out = RawEstimate {
        target: Resources::default(),
        lower_bound: Resources::default(),
        upper_bound: Resources::default(),
    };
    for (i, r, on) in [
        (0, Resource::Cpu, controlled.0),
        (1, Resource::Memory, controlled.1),
    ] {
        if !on {
            continue;
        }
        let m = min.get(r).unwrap_or(0);
        *out.target.get_mut(r) = Some(chains.target[i].estimate(r, agg).max(m));
        *out.lower_bound.get_mut(r) = Some(chains.lower_bound[i].estimate(r, agg).max(m));
        *out.upper_bound.get_mut(r) = Some(chains.upper_bound[i].estimate(r, agg).max(m));
    }
    out
}

/// Estimates one container with the configured chains.
pub fn estimate_container(
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
    min: Resources,
    controlled: (bool, bool),
) -> RawEstimate {
    estimate_with(&config.chains(), agg, min, controlled)
}

/// Formats raw estimates into the list the status carries: sorted by name, rounded (and humanised), with
/// `uncappedTarget` a copy of the target.
pub fn map_to_list(
    estimates: &BTreeMap<String, RawEstimate>,
    config: &RecommenderConfig,
) -> Vec<ContainerRecommendation> {
    estimates
        .iter()
        .map(|(name, raw)| {
            let target = format_resources(raw.target, config);
            ContainerRecommendation {
                container_name: name.clone(),
                target,
                lower_bound: format_resources(raw.lower_bound, config),
                upper_bound: format_resources(raw.upper_bound, config),
                uncapped_target: target,
            }
        })
        .collect()
}

/// `ceil(value / scale) * scale` in float64; a scale ≤ 0 returns the value and an error message.
pub fn round_up_to_scale(
    value: ResourceAmount,
    scale: i64,
) -> (ResourceAmount, Option<&'static str>) {
    if scale <= 0 {
        return (value, Some("scale must be greater than zero"));
    }
    if value == 0 {
        return (0, None);
    }
    let v = (value as f64 / scale as f64).ceil() * scale as f64;
    // A plain float → int64 conversion (no 1e14 clamp): an upper bound of 1e14 rounds above it, as upstream.
    (v as i64, None)
}

/// `%.2f` in the largest binary unit not above the value (`Ki`…`Ti`... up to `Ei`); values under 1024 stay integers.
pub fn humanize_memory(bytes: f64) -> String {
    let mut power = 0;
    let mut div = 1.0;
    while binary_suffix(power + 1).is_some() && bytes >= div * 1024.0 {
        div *= 1024.0;
        power += 1;
    }
    match binary_suffix(power) {
        Some(unit) => format!("{:.2}{unit}", bytes / div),
        None => format!("{}", bytes as i64),
    }
}

/// The memory quantity the formatter emits: rounded up to `--round-memory-bytes`, then humanised if asked
/// (which may hold fractional bytes, e.g. `800.61Mi`).
pub fn memory_quantity(bytes: ResourceAmount, config: &RecommenderConfig) -> String {
    let mut m = bytes;
    if config.round_memory_bytes != 1 && m != 0 {
        m = round_up_to_scale(m, config.round_memory_bytes).0;
    }
    if config.humanize_memory && m != 0 {
        humanize_memory(m as f64)
    } else {
        m.to_string()
    }
}

/// Applies rounding (and humanisation) to one resource list, as the output formatter does.
pub fn format_resources(res: Resources, config: &RecommenderConfig) -> Resources {
    let mut out = res;
    if let Some(c) = out.cpu
        && config.round_cpu_millicores != 1
        && c != 0
    {
        out.cpu = Some(round_up_to_scale(c, config.round_cpu_millicores).0);
    }
    if let Some(m) = out.memory {
        out.memory = Some(if config.humanize_memory {
            // Quantity.Value() of a humanised amount rounds fractional bytes up.
            crate::quantity::memory_bytes(&memory_quantity(m, config)).unwrap_or(m)
        } else if config.round_memory_bytes != 1 && m != 0 {
            // What memory_quantity prints and Quantity.Value() reads back, without the text.
            round_up_to_scale(m, config.round_memory_bytes).0
        } else {
            m
        });
    }
    out
}

/// Name of the container an integer-CPU annotation key refers to, or "" if the key does not have the form.
pub fn extract_container_name(key: &str, prefix: &str, suffix: &str) -> String {
    if key.len() >= prefix.len() + suffix.len() && key.starts_with(prefix) && key.ends_with(suffix)
    {
        key[prefix.len()..key.len() - suffix.len()].to_string()
    } else {
        String::new()
    }
}

/// Rounds CPU up to whole cores.
pub fn integer_cpu(res: &mut Resources) {
    if let Some(c) = res.cpu {
        let cores = (c as f64 / 1000.0).ceil();
        res.cpu = Some(crate::units::resource_amount_from_float(cores * 1000.0));
    }
}

/// Applies the integer-CPU post-processor for containers annotated `…/<name>_integerCPU: "true"`.
pub fn apply_integer_cpu(
    recs: &mut [ContainerRecommendation],
    annotations: &BTreeMap<String, String>,
) {
    for (k, v) in annotations {
        if v != "true" {
            continue;
        }
        let name = extract_container_name(k, INTEGER_CPU_PREFIX, INTEGER_CPU_SUFFIX);
        if name.is_empty() {
            continue;
        }
        for r in recs.iter_mut().filter(|r| r.container_name == name) {
            integer_cpu(&mut r.target);
            integer_cpu(&mut r.lower_bound);
            integer_cpu(&mut r.upper_bound);
            integer_cpu(&mut r.uncapped_target);
        }
    }
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

/// Per-container details of how a recommendation came about (`--explain`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ContainerExplain {
    /// Container name.
    pub container: String,
    /// CPU samples behind the aggregate.
    pub cpu_samples: u64,
    /// First and last CPU sample (ns), if any.
    pub history_span_ns: i64,
    /// Confidence for CPU and memory intervals.
    pub confidence_cpu: f64,
    /// See `confidence_cpu`.
    pub confidence_memory: f64,
    /// Per-container minimum applied.
    pub minimum: Resources,
    /// CPU came from the hourly histograms (a time-of-day profile with enough history); the steps'
    /// percentile amounts are then the all-day ones and `estimate` the hourly result. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cpu_by_hour: bool,
    /// Which rule set CPU, for profiles that decide per container (`auto`); omitted for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_rule: Option<CpuRule>,
    /// Which rule set memory, for profiles with a steady-peaks memory rule (`auto`); omitted for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_rule: Option<MemoryRule>,
    /// Caps hit: `bound resource cap value`.
    pub caps: Vec<String>,
    /// Per resource and bound: percentile, bucket index, bucket end, base after margin, multiplier, raw value.
    pub steps: Vec<ExplainStep>,
}

/// One bound of one resource.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExplainStep {
    /// `cpu` or `memory`.
    pub resource: &'static str,
    /// `target`, `lowerBound`, `upperBound`.
    pub bound: &'static str,
    /// Percentile asked for.
    pub percentile: f64,
    /// Bucket index the percentile landed in (None = empty histogram).
    pub bucket: Option<usize>,
    /// Percentile value as an amount.
    pub percentile_amount: ResourceAmount,
    /// Amount after the margin.
    pub with_margin: ResourceAmount,
    /// Confidence multiplier applied (1 for the target).
    pub multiplier: f64,
    /// Estimate before the minimum.
    pub estimate: ResourceAmount,
    /// Whether the per-container minimum raised it.
    pub minimum_applied: bool,
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

/// The rule a per-container profile (one with [`TimeOfDay::only_if`]) applied to a container's CPU, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuRule {
    /// `daily` (CPU follows the hour of the day), `priced` (the all-day request priced against its risk,
    /// [`RiskPrice`]) or `upstream` (upstream's all-day estimate).
    pub rule: &'static str,
    /// Why, in one sentence.
    pub reason: String,
    /// Lag-24 h autocorrelation of the hourly CPU means, when there were enough of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autocorrelation: Option<f64>,
    /// Share of their variance the hour of the day explains, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stability: Option<f64>,
    /// The hourly percentile the risk budget chose (daily rule with a budget only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hourly_percentile: Option<f64>,
    /// The all-day request priced against its risk (cores), with a price and a day of history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priced_cores: Option<f64>,
    /// The day plan's request for each hour of the day (UTC, cores, before the all-day cap), when the daily
    /// rule follows the day by a plan of more than one step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_cores_by_hour: Option<Vec<f64>>,
}

/// Share of `h`'s weight in buckets that start at or above `cores`: how often usage was above a request of
/// `cores` (within a bucket).
fn share_above(h: &crate::histogram::Histogram, cores: f64) -> f64 {
    let total = h.total_weight();
    if total <= 0.0 {
        return 0.0;
    }
    let opts = h.options();
    // + 0.0: an empty f64 sum is −0.0, printed "-0.0 %".
    h.buckets()
        .filter(|&(b, _)| opts.bucket_start(b) >= cores)
        .map(|(_, w)| w)
        .sum::<f64>()
        / total
        + 0.0
}

/// Which CPU rule `tod` (with a [`TimeOfDay::only_if`] rule) applies to `agg`, and why.
pub fn cpu_rule(
    tod: &TimeOfDay,
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
) -> CpuRule {
    let pattern = daily_pattern(agg);
    let hist = agg.cpu.histogram();
    let priced = config
        .cpu_risk_price
        .filter(|_| day_of_history(agg))
        .and_then(|p| priced_request(hist, &p).map(|r| (p, r)));
    let mut out = CpuRule {
        rule: if priced.is_some() {
            "priced"
        } else {
            "upstream"
        },
        reason: String::new(),
        autocorrelation: pattern.map(|p| p.autocorrelation),
        stability: pattern.map(|p| p.stability),
        hourly_percentile: None,
        priced_cores: priced.map(|p| p.1),
        plan_cores_by_hour: None,
    };
    let all_day = all_day_reason(config, agg, priced);
    let Some(rule) = tod.only_if else {
        out.reason = format!("no per-container rule: {all_day}");
        return out;
    };
    out.reason = match (pattern, hourly_ready(agg, tod.ahead)) {
        (_, false) | (None, _) if priced.is_none() && config.cpu_risk_price.is_some() => {
            all_day.clone()
        }
        (_, false) | (None, _) => format!("less than two days of complete hours: {all_day}"),
        (Some(p), true) if p.autocorrelation < rule.min_autocorrelation => format!(
            "no repeating daily pattern (24 h autocorrelation {:.2} < {:.2}): {all_day}",
            p.autocorrelation, rule.min_autocorrelation
        ),
        (Some(p), true) if p.stability < rule.min_stability => format!(
            "the hour of the day explains too little (stability {:.2} < {:.2}): {all_day}",
            p.stability, rule.min_stability
        ),
        (Some(p), true) if p.swing < rule.min_swing => format!(
            "daily swing too small to pay for resizes (busiest/quietest hour {:.2} < {:.2}): {all_day}",
            p.swing, rule.min_swing
        ),
        (Some(p), true) if p.amplitude < rule.min_amplitude => format!(
            "daily swing too small to pay for resizes (busiest − quietest hour {:.3} < {:.3} cores): \
             {all_day}",
            p.amplitude, rule.min_amplitude
        ),
        (Some(p), true) => daily_reason(tod, config, agg, p, priced, &mut out),
    };
    out
}

/// [`cpu_rule`]'s reason where the daily pattern holds (sets the rule to `daily` in `out` where CPU follows
/// the day: without a day plan in the profile, or with a plan of more than one step).
fn daily_reason(
    tod: &TimeOfDay,
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
    p: crate::model::DailyPattern,
    priced: Option<(RiskPrice, f64)>,
    out: &mut CpuRule,
) -> String {
    let all_day = all_day_reason(config, agg, priced);
    let pattern = format!(
        "daily pattern (24 h autocorrelation {:.2}, stability {:.2}, swing {:.1}x",
        p.autocorrelation, p.stability, p.swing
    );
    match plan_of(tod, config, agg) {
        Some(Err(None)) => format!(
            "{pattern}), but not every hour of the day has samples yet for a day plan: {all_day}"
        ),
        Some(Err(Some(saving))) => format!(
            "{pattern}), but a day and a night request would save {saving:.3} core-hours a day of unused CPU \
             and priced risk, not more than their two resizes a day cost (2 × {} core-hours): {all_day}",
            change_price(tod)
        ),
        plan => {
            out.rule = "daily";
            let how = match plan {
                Some(Ok(plan)) => {
                    let cap = priced.map_or(f64::INFINITY, |p| p.1);
                    out.plan_cores_by_hour = Some(plan.requests.to_vec());
                    plan_how(&plan, cap)
                }
                _ => daily_how(tod, config, agg, priced, out),
            };
            format!(
                "{pattern}, {:.3} cores): CPU follows the hour of the day, {how}",
                p.amplitude
            )
        }
    }
}

/// The change price of `tod`'s plan (core-hours), 0 without one.
fn change_price(tod: &TimeOfDay) -> f64 {
    tod.plan.map_or(0.0, |c| c.core_hours)
}

/// `tod`'s day plan for `agg` when the profile follows the day by one (a risk price and a change price set):
/// `Ok` with more than one step; `Err(Some(saving))` when no plan of steps pays for its changes (`saving`: what
/// the best two-step day would save before its changes, core-hours a day); `Err(None)` before every hour of the
/// day has samples; `None` for a profile without a plan.
fn plan_of(
    tod: &TimeOfDay,
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
) -> Option<Result<DayPlan, Option<f64>>> {
    const DAY: i64 = 86_400_000_000_000;
    let (price, change) = (config.cpu_risk_price?, tod.plan?);
    let Some(h) = agg.hourly.as_ref().filter(|_| hourly_ready(agg, DAY - 1)) else {
        return Some(Err(None));
    };
    let Some(plan) = h.plan(&price, &change) else {
        return Some(Err(None));
    };
    if plan.steps > 1 {
        return Some(Ok(plan));
    }
    // What two steps would have saved without their price.
    let free = ChangePrice {
        core_hours: 0.0,
        max_steps: 2,
    };
    let saving = h
        .plan_fresh(&price, &free)
        .map_or(0.0, |p| (p.flat_cost - p.cost).max(0.0));
    Some(Err(Some(saving)))
}

/// The plan's steps in words, for [`cpu_rule`]'s reason: each step's hours and request, the all-day cap.
fn plan_how(plan: &DayPlan, cap: f64) -> String {
    let mut steps = Vec::new();
    let r = &plan.requests;
    // Steps start where the request differs from the hour before (the day wraps).
    let starts: Vec<usize> = (0..r.len())
        .filter(|&h| r[h] != r[(h + r.len() - 1) % r.len()])
        .collect();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts[(i + 1) % starts.len()];
        let cores = r[start].min(cap);
        steps.push(format!("{cores:.3} cores {start:02}:00–{end:02}:00 UTC"));
    }
    format!(
        "a plan of {} steps a day, each the request that minimises unused CPU + priced minutes above it over \
         its hours, at most the all-day one: {} (saves {:.3} core-hours a day of unused CPU and priced risk \
         after its resizes)",
        plan.steps,
        steps.join(", "),
        plan.flat_cost - plan.cost
    )
}

/// What a container's all-day CPU estimate is, for [`cpu_rule`]'s reason: the priced request (with the share of
/// time usage was above it and above upstream's target) or upstream's estimate.
fn all_day_reason(
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
    priced: Option<(RiskPrice, f64)>,
) -> String {
    let hist = agg.cpu.histogram();
    let upstream = config
        .upstream_estimator(Bound::Target, Resource::Cpu)
        .estimate(Resource::Cpu, agg) as f64
        / 1000.0;
    match priced {
        Some((p, r)) => format!(
            "the all-day request priced on its own history: {r:.3} cores minimises unused CPU + {} \
             core-minutes per minute above it (usage above it {:.1} % of the time; upstream's target {upstream:.3} \
             cores, above it {:.1} %)",
            p.price,
            100.0 * share_above(hist, r),
            100.0 * share_above(hist, upstream)
        ),
        None if config.cpu_risk_price.is_some() => {
            "less than a day of history: upstream's all-day estimate".into()
        }
        None => "upstream's all-day estimate".into(),
    }
}

/// How the daily rule sets a container's CPU, for [`cpu_rule`]'s reason (records the budget's hourly
/// percentile in `out`).
fn daily_how(
    tod: &TimeOfDay,
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
    priced: Option<(RiskPrice, f64)>,
    out: &mut CpuRule,
) -> String {
    let hours = tod.ahead / 3_600_000_000_000;
    match (priced, tod.risk_budget, &agg.hourly) {
        (Some((price, r)), _, _) => format!(
            "the request that minimises unused CPU + {} core-minutes per minute above it on the \
             hours of the next {hours} h, at most the all-day one ({r:.3} cores)",
            price.price
        ),
        (None, Some(share), Some(h)) => {
            let all = config
                .all_day_estimator(Bound::Target, Resource::Cpu)
                .estimate(Resource::Cpu, agg);
            let q = budget_percentile(h, all as f64 / 1000.0, share);
            out.hourly_percentile = Some(q);
            format!(
                "p{:.1} of each hour (risk budget: {:.0} % of upstream's) + {:.0} % over the next \
                 {hours} h, at most upstream's all-day target",
                100.0 * q,
                100.0 * share,
                100.0 * tod.margin
            )
        }
        _ => format!(
            "p{:.0} of each hour + {:.0} % over the next {hours} h, at most upstream's all-day target",
            100.0 * tod.percentile,
            100.0 * tod.margin
        ),
    }
}

/// The memory rule a profile with [`RecommenderConfig::memory_stable_peaks`] applies to `agg` (`None` without).
fn explain_memory_rule(
    config: &RecommenderConfig,
    agg: &AggregateContainerState,
) -> Option<MemoryRule> {
    let rule = config.memory_stable_peaks?;
    let upstream = config
        .upstream_estimator(Bound::Target, Resource::Memory)
        .estimate(Resource::Memory, agg);
    Some(memory_rule(&rule, agg, upstream as f64))
}

/// Recomputes the chain step by step for `--explain`.
pub fn explain_container(
    config: &RecommenderConfig,
    name: &str,
    agg: &AggregateContainerState,
    min: Resources,
    controlled: (bool, bool),
) -> ContainerExplain {
    let span = if agg.first_sample_start == ZERO_TIME {
        0
    } else {
        agg.last_sample_start - agg.first_sample_start
    };
    let mut ex = ContainerExplain {
        container: name.to_string(),
        cpu_samples: agg.total_samples_count,
        history_span_ns: span,
        confidence_cpu: confidence(agg, config.confidence_interval_cpu),
        confidence_memory: confidence(agg, config.confidence_interval_memory),
        minimum: min,
        cpu_by_hour: config.cpu_time_of_day.is_some_and(|t| {
            controlled.0
                && hourly_ready(agg, t.ahead)
                && t.only_if.is_none_or(|rule| daily_rule_holds(agg, &rule))
                && plan_of(&t, config, agg).is_none_or(|p| p.is_ok())
        }),
        cpu_rule: config
            .cpu_time_of_day
            .filter(|t| controlled.0 && t.only_if.is_some())
            .map(|t| cpu_rule(&t, config, agg)),
        memory_rule: explain_memory_rule(config, agg).filter(|_| controlled.1),
        ..Default::default()
    };
    for (r, on) in [
        (Resource::Cpu, controlled.0),
        (Resource::Memory, controlled.1),
    ] {
        if !on {
            continue;
        }
        for (b, bname) in [
            (Bound::Target, "target"),
            (Bound::Lower, "lowerBound"),
            (Bound::Upper, "upperBound"),
        ] {
            let p = config.percentile(b, r);
            let h = match r {
                Resource::Cpu => agg.cpu.histogram(),
                Resource::Memory => agg.memory.histogram(),
            };
            let pa = percentile_amount(r, agg, p);
            let wm = pa.saturating_add(scale_resource(pa, config.safety_margin_fraction));
            let c = confidence(agg, config.interval(r));
            let multiplier = match b {
                Bound::Target => 1.0,
                Bound::Lower => go_pow(1.0 + 0.001 / c, -2.0),
                Bound::Upper => go_pow(1.0 + 1.0 / c, 1.0),
            };
            let est = config.estimator(b, r).estimate(r, agg);
            let m = min.get(r).unwrap_or(0);
            ex.steps.push(ExplainStep {
                resource: r.name(),
                bound: bname,
                percentile: p,
                bucket: h.percentile_bucket(p),
                percentile_amount: pa,
                with_margin: wm,
                multiplier,
                estimate: est,
                minimum_applied: est < m,
            });
        }
    }
    ex
}

#[cfg(test)]
mod tests {
    use super::*;

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
