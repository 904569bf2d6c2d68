//! `tailor backtest --frontier`: each strategy's main knob swept over a few settings, every setting
//! backtested on the same history, and cost printed (and plotted) against risk minutes — where a strategy
//! sits on the trade-off, and which settings of one are cheaper at the same risk as another's.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::{
    BLACK, ChartBuilder, Circle, Color, IntoDrawingArea, LineSeries, PathElement, RGBColor,
    SVGBackend, WHITE,
};
use serde_json::json;
use tailor_dashboard::money::Prices;
use tailor_engine::backtest::{self, Score, Strategy, StrategyResult, strategy::MAX_STRATEGIES};
use tailor_engine::estimate::TimeOfDay;
use tailor_engine::profile::Profile;
use tailor_engine::replay::ReplayConfig;

use crate::prices::{prices_json, requested_cost};

/// One setting of one strategy and its score on the whole history.
#[derive(Debug, Clone)]
pub struct FrontierPoint {
    /// The strategy swept.
    pub strategy: &'static str,
    /// The knob's name.
    pub knob: &'static str,
    /// The knob's value.
    pub value: f64,
    /// Whether this is the strategy's own setting.
    pub default: bool,
    /// Totals over every container.
    pub score: Score,
}

/// Settings of the CPU target percentile swept for upstream and the all-day profiles.
const PERCENTILES: [f64; 7] = [0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99];
/// Settings of the hourly percentile swept for profiles that follow the day without a risk budget.
const HOURLY_PERCENTILES: [f64; 5] = [0.8, 0.9, 0.95, 0.98, 0.99];
/// Settings of the risk price (core-minutes of unused request per minute above it) swept for profiles that
/// price CPU risk.
const RISK_PRICES: [f64; 7] = [1.0, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0];
/// Settings of the risk-budget share swept for profiles that have one.
const BUDGET_SHARES: [f64; 6] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0];

/// A leaked profile: the sweep's profiles must live as long as the strategies that point at them (a few
/// dozen, once per run of the binary).
fn leak(p: Profile, name: String) -> &'static Profile {
    let name: &'static str = Box::leak(name.into_boxed_str());
    Box::leak(Box::new(Profile { name, ..p }))
}

/// `upstream`'s flags as a profile, so that its knob can be swept like a profile's.
fn upstream_profile(base: &ReplayConfig) -> Profile {
    let r = &base.recommender;
    Profile {
        name: tailor_engine::profile::UPSTREAM,
        summary: "",
        target_cpu_percentile: r.target_cpu_percentile,
        target_memory_percentile: r.target_memory_percentile,
        safety_margin_fraction: r.safety_margin_fraction,
        pod_min_cpu_millicores: r.pod_min_cpu_millicores,
        pod_min_memory_mb: r.pod_min_memory_mb,
        cpu_time_of_day: None,
        cpu_risk_price: None,
        memory_stable_peaks: None,
    }
}

/// The settings swept for `s`: (knob, value, is-default, strategy to run).
fn sweep(s: Strategy, base: &ReplayConfig) -> Vec<(&'static str, f64, bool, Strategy)> {
    let (p, own) = match s {
        Strategy::KrrSimple => return vec![("cpu percentile", 0.95, true, s)],
        Strategy::Upstream => (upstream_profile(base), None),
        Strategy::Profile(p) => (*p, Some(p)),
    };
    let name = s.name();
    let point = |knob: &'static str, v: f64, default: bool, q: Profile| {
        let strategy = match (default, own, s) {
            (true, Some(p), _) => Strategy::Profile(p),
            (true, None, Strategy::Upstream) => Strategy::Upstream,
            _ => Strategy::Profile(leak(q, format!("{name}@{v}"))),
        };
        (knob, v, default, strategy)
    };
    type Set = Box<dyn Fn(f64) -> Profile>;
    let (knob, own, values, set): (&'static str, f64, &[f64], Set) =
        match (p.cpu_risk_price, p.cpu_time_of_day) {
            (Some(price), _) => (
                "risk price (core-min per min)",
                price.price,
                &RISK_PRICES,
                Box::new(move |v| Profile {
                    cpu_risk_price: Some(tailor_engine::risk_price::RiskPrice {
                        price: v,
                        ..price
                    }),
                    ..p
                }),
            ),
            (None, Some(tod)) if tod.risk_budget.is_some() => (
                "risk budget share",
                tod.risk_budget.unwrap_or(0.0),
                &BUDGET_SHARES,
                Box::new(move |v| Profile {
                    cpu_time_of_day: Some(TimeOfDay {
                        risk_budget: Some(v),
                        ..tod
                    }),
                    ..p
                }),
            ),
            (None, Some(tod)) => (
                "hourly cpu percentile",
                tod.percentile,
                &HOURLY_PERCENTILES,
                Box::new(move |v| Profile {
                    cpu_time_of_day: Some(TimeOfDay {
                        percentile: v,
                        ..tod
                    }),
                    ..p
                }),
            ),
            (None, None) => (
                "cpu percentile",
                p.target_cpu_percentile,
                &PERCENTILES,
                Box::new(move |v| Profile {
                    target_cpu_percentile: v,
                    ..p
                }),
            ),
        };
    let mut values = values.to_vec();
    values.push(own);
    values.sort_by(f64::total_cmp);
    values.dedup();
    values
        .into_iter()
        .map(|v| point(knob, v, v == own, set(v)))
        .collect()
}

/// Backtests every setting of every strategy's knob with `run_some` (which runs some strategies on the whole
/// history; at most [`MAX_STRATEGIES`] at a time, so that they share one model), `config` being upstream's flags.
pub fn run(
    config: &ReplayConfig,
    strategies: &[Strategy],
    run_some: impl Fn(&[Strategy]) -> anyhow::Result<Vec<StrategyResult>>,
) -> anyhow::Result<Vec<FrontierPoint>> {
    let settings: Vec<(&'static str, &'static str, f64, bool, Strategy)> = strategies
        .iter()
        .flat_map(|s| {
            sweep(*s, config)
                .into_iter()
                .map(move |(k, v, d, x)| (s.name(), k, v, d, x))
        })
        .collect();
    let mut out = Vec::with_capacity(settings.len());
    for chunk in settings.chunks(MAX_STRATEGIES) {
        let run: Vec<Strategy> = chunk.iter().map(|x| x.4).collect();
        let results = run_some(&run)?;
        for (x, r) in chunk.iter().zip(results) {
            out.push(FrontierPoint {
                strategy: x.0,
                knob: x.1,
                value: x.2,
                default: x.3,
                score: backtest::total(&r.containers),
            });
        }
    }
    Ok(out)
}

/// The frontier as a table (or Markdown), cost relative to upstream's own setting when it is there, and
/// last what the requests cost in money at `prices`.
pub fn write_table(
    w: &mut impl std::io::Write,
    points: &[FrontierPoint],
    markdown: bool,
    prices: &Prices,
) -> std::io::Result<()> {
    let reference = points
        .iter()
        .find(|p| p.default && p.strategy == tailor_engine::profile::UPSTREAM)
        .map(|p| p.score.cost());
    let vs = |c: f64| match reference {
        Some(r) if r > 0.0 => format!("{:+.1} %", 100.0 * (c / r - 1.0)),
        _ => "-".into(),
    };
    let currency = &prices.currency;
    let money = format!("REQ-{currency}");
    if markdown {
        writeln!(
            w,
            "| strategy | knob | value | cost (core-h) | vs upstream | risk min (CPU + memory) | OOM-risk samples | changes/pod-day | requested ({currency}) |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|")?;
    } else {
        writeln!(
            w,
            "{:<12} {:<22} {:>7} {:>10} {:>9} {:>10} {:>6} {:>7} {money:>12}",
            "STRATEGY", "KNOB", "VALUE", "COST", "VS-UP", "RISK-MIN", "OOM", "CHURN"
        )?;
    }
    for p in points {
        let value = format!("{}{}", p.value, if p.default { "*" } else { "" });
        let s = &p.score;
        let requested = requested_cost(s, prices);
        if markdown {
            writeln!(
                w,
                "| {} | {} | {value} | {:.1} | {} | {:.0} | {} | {:.2} | {requested:.2} |",
                p.strategy,
                p.knob,
                s.cost(),
                vs(s.cost()),
                s.risk_minutes(),
                s.oom_risk_samples,
                s.changes_per_pod_day()
            )?;
        } else {
            writeln!(
                w,
                "{:<12} {:<22} {value:>7} {:>10.1} {:>9} {:>10.0} {:>6} {:>7.2} {requested:>12.2}",
                p.strategy,
                p.knob,
                s.cost(),
                vs(s.cost()),
                s.risk_minutes(),
                s.oom_risk_samples,
                s.changes_per_pod_day()
            )?;
        }
    }
    if !markdown {
        writeln!(
            w,
            "\nCOST = CPU waste + memory waste/9 (core-hours); RISK-MIN = minutes above the CPU or memory request; \
             OOM = memory samples above the limit; CHURN = request changes per pod-day; {money} = requested \
             core-hours × {} + requested GiB-hours × {} ({currency} per vCPU-hour and per GiB-hour); * = the \
             strategy's own setting",
            prices.vcpu_hour, prices.gib_hour
        )?;
    }
    Ok(())
}

/// The frontier as JSON: `{"prices", "points": [{"strategy", "knob", "value", "default", "cost_core_hours",
/// ..., "requested_cost"}]}`.
pub fn to_json(points: &[FrontierPoint], prices: &Prices) -> serde_json::Value {
    let points: Vec<_> = points
        .iter()
        .map(|p| {
            json!({
                "strategy": p.strategy,
                "knob": p.knob,
                "value": p.value,
                "default": p.default,
                "cost_core_hours": p.score.cost(),
                "risk_minutes": p.score.risk_minutes(),
                "cpu_risk_minutes": p.score.cpu_risk_minutes,
                "memory_risk_minutes": p.score.memory_risk_minutes,
                "oom_risk_samples": p.score.oom_risk_samples,
                "changes_per_pod_day": p.score.changes_per_pod_day(),
                "cpu_request_core_hours": p.score.cpu_request_core_hours,
                "memory_request_gib_hours": p.score.memory_request_gib_hours,
                "requested_cost": requested_cost(&p.score, prices),
            })
        })
        .collect();
    json!({ "prices": prices_json(prices), "points": points })
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes `dir/frontier.svg`: cost (y) against risk minutes (x), one line per strategy through its
/// settings, its own setting drawn larger.
pub fn plot(dir: &Path, points: &[FrontierPoint]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("frontier.svg");
    draw(&file, points).with_context(|| format!("plotting {}", file.display()))
}

fn draw(file: &Path, points: &[FrontierPoint]) -> anyhow::Result<()> {
    let root = SVGBackend::new(file, (1000, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let x_max = points
        .iter()
        .map(|p| p.score.risk_minutes())
        .fold(1.0, f64::max)
        * 1.05;
    let y_max = points.iter().map(|p| p.score.cost()).fold(1.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tailor backtest --frontier: cost against risk",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("risk minutes (CPU + memory usage above the request)")
        .y_desc("cost (core-hours of waste; GiB-hour = 1/9)")
        .draw()?;
    let mut names: Vec<&str> = Vec::new();
    for p in points {
        if !names.contains(&p.strategy) {
            names.push(p.strategy);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut own: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.strategy == *name)
            .map(|p| (p.score.risk_minutes(), p.score.cost()))
            .collect();
        own.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(own.clone(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            own.iter()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )?;
        chart.draw_series(
            points
                .iter()
                .filter(|p| p.strategy == *name && p.default)
                .map(|p| {
                    Circle::new(
                        (p.score.risk_minutes(), p.score.cost()),
                        7,
                        color.stroke_width(2),
                    )
                }),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
