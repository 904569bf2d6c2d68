//! How `auto`'s settings were chosen (QUALITY.md): a grid of its knobs backtested on the suite's **tuning**
//! draws only (`backtest_workloads::TUNING_DRAWS`; the validation draws are never read here), every variant beside
//! `upstream` in one replay, printed as cost / risk minutes / OOM-risk samples / churn relative to upstream.
//!
//! `cargo run --release -p tailor-engine --example tune_auto`

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use tailor_engine::backtest::{self, BacktestConfig, Score, Strategy};
use tailor_engine::backtest_workloads::{SUITE, TUNING_DRAWS};
use tailor_engine::estimate::{DailyRule, TimeOfDay};
use tailor_engine::profile::{self, Profile};
use tailor_engine::replay::ReplayConfig;

const HOUR: i64 = 3_600_000_000_000;

fn main() {
    let auto = *profile::by_name("auto").unwrap().unwrap();
    let tod = auto.cpu_time_of_day.unwrap();
    let rule = tod.only_if.unwrap();
    let mut variants: Vec<(String, Profile)> = Vec::new();
    for ahead in [6, 8, 10] {
        for upper in [0.6, 1.0, 1.5] {
            for swing in [2.0, 2.5, 3.0] {
                let t = TimeOfDay {
                    ahead: ahead * HOUR,
                    upper_margin: upper,
                    only_if: Some(DailyRule {
                        min_swing: swing,
                        ..rule
                    }),
                    ..tod
                };
                variants.push((
                    format!("ahead {ahead}h upper {upper} swing {swing}"),
                    Profile {
                        cpu_time_of_day: Some(t),
                        ..auto
                    },
                ));
            }
        }
    }
    for share in [0.25, 1.0, 2.0] {
        variants.push((
            format!("share {share}"),
            Profile {
                cpu_time_of_day: Some(TimeOfDay {
                    risk_budget: Some(share),
                    ..tod
                }),
                ..auto
            },
        ));
    }
    let leaked: Vec<(String, &'static Profile)> = variants
        .into_iter()
        .map(|(n, p)| (n, &*Box::leak(Box::new(p))))
        .collect();
    let cfg = BacktestConfig::default();
    let mut rows: Vec<(String, Score)> = Vec::new();
    let mut upstream = Score::default();
    for chunk in leaked.chunks(15) {
        let mut strategies = vec![Strategy::Upstream];
        strategies.extend(chunk.iter().map(|(_, p)| Strategy::Profile(p)));
        let mut totals = vec![Score::default(); strategies.len()];
        for w in SUITE {
            for &d in &TUNING_DRAWS {
                let r = backtest::run(
                    &w.trace_with_draw(d),
                    &ReplayConfig::default(),
                    &strategies,
                    &cfg,
                )
                .unwrap();
                for (t, r) in totals.iter_mut().zip(&r) {
                    t.add(&backtest::total(&r.containers));
                }
            }
        }
        upstream = totals[0];
        rows.extend(
            chunk
                .iter()
                .map(|(n, _)| n.clone())
                .zip(totals.into_iter().skip(1)),
        );
    }
    println!(
        "upstream: cost {:.1}, risk {:.0}, oom {}, churn {:.2}",
        upstream.cost(),
        upstream.risk_minutes(),
        upstream.oom_risk_samples,
        upstream.changes_per_pod_day()
    );
    for (n, s) in rows {
        println!(
            "{n:<34} cost {:+6.1} %  risk {:+6.1} %  oom {:>5}  churn {:.2}",
            100.0 * (s.cost() / upstream.cost() - 1.0),
            100.0 * (s.risk_minutes() / upstream.risk_minutes() - 1.0),
            s.oom_risk_samples,
            s.changes_per_pod_day()
        );
    }
}
