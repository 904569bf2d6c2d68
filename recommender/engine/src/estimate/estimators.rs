//! The estimators upstream chains for each bound (percentile, margin, confidence, minimum) and Tailor's
//! per-container rules beside them (daily budgets, risk-priced requests, day plans, stable memory peaks),
//! and their evaluation for one container.

use super::{Bound, RecommenderConfig};

use crate::day_plan::{ChangePrice, DayPlan};
use crate::histogram::ZERO_TIME;
use crate::model::AggregateContainerState;
use crate::policy::Resources;
use crate::risk_price::{RiskPrice, priced_request};
use crate::stable_memory::{StablePeaks, highest_peak_bytes, steady_peaks_bytes};
use crate::units::{
    Resource, ResourceAmount, cpu_amount_from_cores, go_pow, memory_amount_from_bytes, sat_sub,
    scale_resource,
};

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
pub(super) fn chains_of(config: &RecommenderConfig) -> std::rc::Rc<BoundChains> {
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
