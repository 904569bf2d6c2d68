//! How `auto`'s settings were chosen (QUALITY.md): a grid of its knobs backtested on the suite's **tuning**
//! draws only (`backtest_workloads::TUNING_DRAWS`; the validation draws are never read here), every variant beside
//! `upstream`, printed as cost / risk minutes / OOM-risk samples / churn relative to upstream.
//!
//! `cargo run --release -p tailor-engine --example tune_auto` (the grid: risk price × change price × the day
//! plan's lower and upper margins), or with arguments `price:change-core-hours:lower-margin[:upper-margin[:max-steps]]
//! ...` for those variants only, and `--shapes` for a row per shape.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use tailor_engine::backtest::{self, BacktestConfig, Score, Strategy};
use tailor_engine::backtest_workloads::{SUITE, TUNING_DRAWS};
use tailor_engine::day_plan::ChangePrice;
use tailor_engine::estimate::TimeOfDay;
use tailor_engine::profile::{self, Profile};
use tailor_engine::replay::ReplayConfig;
use tailor_engine::risk_price::RiskPrice;

/// A variant's name, its totals over the tuning draws and (upstream, variant) per draw.
type Row = (String, Score, Vec<(Score, Score)>);

/// `auto` with another risk price, change price, lower and upper margin around the day plan, and most steps a
/// day.
fn variant(auto: &Profile, f: &[f64]) -> Profile {
    let tod = auto.cpu_time_of_day.unwrap();
    let plan = tod.plan.unwrap();
    Profile {
        cpu_risk_price: Some(RiskPrice {
            price: f[0],
            ..auto.cpu_risk_price.unwrap()
        }),
        cpu_time_of_day: Some(TimeOfDay {
            plan: Some(ChangePrice {
                core_hours: f[1],
                max_steps: f.get(4).map_or(plan.max_steps, |&k| k as usize),
            }),
            lower_margin: f[2],
            upper_margin: f.get(3).copied().unwrap_or(tod.upper_margin),
            ..tod
        }),
        ..*auto
    }
}

/// One `price:change-core-hours:lower-margin[:upper-margin[:max-steps]]` argument: three to five finite
/// numbers.
fn grid_point(arg: &str) -> Result<Vec<f64>, String> {
    let f = arg
        .split(':')
        .map(|x| x.parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| format!("{arg:?}: each part must be a finite number"))?;
    if !(3..=5).contains(&f.len()) {
        return Err(format!(
            "{arg:?}: expected price:change-core-hours:lower-margin[:upper-margin[:max-steps]]"
        ));
    }
    if f.get(4)
        .is_some_and(|&k| !(1.0..=24.0).contains(&k) || k.fract() != 0.0)
    {
        return Err(format!(
            "{arg:?}: max-steps must be a whole number from 1 to 24"
        ));
    }
    Ok(f)
}

fn main() {
    let auto = *profile::by_name("auto").unwrap().unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let per_shape = args.iter().any(|a| a == "--shapes");
    let mut variants: Vec<(String, Profile)> = Vec::new();
    for a in args.iter().filter(|a| !a.starts_with("--")) {
        match grid_point(a) {
            Ok(f) => variants.push((a.clone(), variant(&auto, &f))),
            Err(e) => {
                eprintln!("tune_auto: {e}");
                std::process::exit(2);
            }
        }
    }
    if variants.is_empty() {
        for price in [3.25, 3.5, 3.75, 4.0] {
            for change in [0.5, 0.8, 1.2] {
                for lower in [0.0, -0.05, -0.1] {
                    for upper in [0.1, 0.2] {
                        variants.push((
                            format!("price {price} change {change} lower {lower} upper {upper}"),
                            variant(&auto, &[price, change, lower, upper]),
                        ));
                    }
                }
            }
        }
    }
    let leaked: Vec<(String, &'static Profile)> = variants
        .into_iter()
        .map(|(n, p)| (n, &*Box::leak(Box::new(p))))
        .collect();
    let cfg = BacktestConfig::default();
    let mut rows: Vec<Row> = Vec::new();
    let mut upstream = Score::default();
    for chunk in leaked.chunks(15) {
        let mut strategies = vec![Strategy::Upstream];
        strategies.extend(chunk.iter().map(|(_, p)| Strategy::Profile(p)));
        let mut totals = vec![Score::default(); strategies.len()];
        let mut per_draw = vec![vec![Score::default(); strategies.len()]; TUNING_DRAWS.len()];
        for w in SUITE {
            let mut shape = vec![Score::default(); strategies.len()];
            for (k, &d) in TUNING_DRAWS.iter().enumerate() {
                let r = backtest::run(
                    &w.trace_with_draw(d),
                    &ReplayConfig::default(),
                    &strategies,
                    &cfg,
                )
                .unwrap();
                for ((t, r), p) in shape.iter_mut().zip(&r).zip(per_draw[k].iter_mut()) {
                    t.add(&backtest::total(&r.containers));
                    p.add(&backtest::total(&r.containers));
                }
            }
            if per_shape {
                let u = shape[0];
                let cells: Vec<String> = shape
                    .iter()
                    .skip(1)
                    .map(|s| {
                        format!(
                            "{:+6.1} % / {:+6} / {:.2}",
                            100.0 * (s.cost() / u.cost() - 1.0),
                            s.risk_minutes() - u.risk_minutes(),
                            s.changes_per_pod_day()
                        )
                    })
                    .collect();
                println!(
                    "{:<17} {:7.1} {:6} | {}",
                    w.name,
                    u.cost(),
                    u.risk_minutes(),
                    cells.join(" | ")
                );
            }
            for (t, s) in totals.iter_mut().zip(&shape) {
                t.add(s);
            }
        }
        upstream = totals[0];
        for (i, (n, _)) in chunk.iter().enumerate() {
            let draws = per_draw.iter().map(|p| (p[0], p[i + 1])).collect();
            rows.push((n.clone(), totals[i + 1], draws));
        }
    }
    println!(
        "upstream: cost {:.1}, risk {:.0}, oom {}, churn {:.2}",
        upstream.cost(),
        upstream.risk_minutes(),
        upstream.oom_risk_samples,
        upstream.changes_per_pod_day()
    );
    for (n, s, draws) in rows {
        // The worst single tuning draw: a setting that meets the targets only on the sum of three draws is
        // not one to expect on a new draw.
        let worst = |f: &dyn Fn(&Score, &Score) -> f64| {
            draws
                .iter()
                .map(|(u, a)| f(u, a))
                .fold(f64::NEG_INFINITY, f64::max)
        };
        println!(
            "{n:<40} cost {:+6.1} %  risk {:+6.1} %  oom {:>5}  churn {:.2}  | worst draw: cost {:+6.1} %  \
             risk {:+6.1} %  churn {:.2}",
            100.0 * (s.cost() / upstream.cost() - 1.0),
            100.0 * (s.risk_minutes() / upstream.risk_minutes() - 1.0),
            s.oom_risk_samples,
            s.changes_per_pod_day(),
            worst(&|u, a| 100.0 * (a.cost() / u.cost() - 1.0)),
            worst(&|u, a| 100.0 * (a.risk_minutes() / u.risk_minutes() - 1.0)),
            worst(&|_, a| a.changes_per_pod_day()),
        );
    }
}
