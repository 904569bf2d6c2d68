//! `--explain`: per container and resource, which rule set each number and from what.

use super::{
    Bound, RecommenderConfig, TimeOfDay, budget_percentile, confidence, daily_pattern,
    daily_rule_holds, day_of_history, hourly_ready, percentile_amount,
};

use crate::day_plan::{ChangePrice, DayPlan};
use crate::histogram::ZERO_TIME;
use crate::model::AggregateContainerState;
use crate::policy::Resources;
use crate::risk_price::{RiskPrice, priced_request};
use crate::stable_memory::{MemoryRule, memory_rule};
use crate::units::{Resource, ResourceAmount, go_pow, scale_resource};

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
