//! Backtest throughput for BENCHMARKS.md: N containers × D days of W1 usage at one-minute resolution,
//! backtested on one thread (hourly decisions, in-place actuation), first with `upstream` alone, then with
//! every strategy. Traces are generated one at a time and only `backtest::run` is timed.
//!
//! `cargo run --release -p tailor-engine --example backtest_figures -- [containers] [days]` (default 1000 14).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::time::{Duration, Instant};

use tailor_engine::backtest::{self, BacktestConfig, Strategy};
use tailor_engine::bench_workload::{T0, TICKS_PER_DAY, W1};
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer};

fn trace(w: &W1, i: usize, ticks: usize) -> Trace {
    let t = |k: usize| (T0 + 60 * k as i64) as f64;
    Trace {
        id: format!("c{i}"),
        containers: vec![TraceContainer {
            name: "app".into(),
            pod: Some(format!("pod-{i}")),
            cpu_samples: (0..ticks)
                .map(|k| [t(k), w.cpu(i, k, W1::diurnal(k))])
                .collect(),
            memory_samples: (0..ticks).map(|k| [t(k), w.mem(i, k)]).collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// On-CPU time of this thread in ns (`/proc/thread-self/schedstat`): other load on the machine does not count;
/// 0 where unavailable.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(1000, |s| s.parse().unwrap());
    let days: usize = args.next().map_or(14, |s| s.parse().unwrap());
    let ticks = days * TICKS_PER_DAY;
    let w = W1::new();
    let base = ReplayConfig::default();
    let cfg = BacktestConfig::default();
    for (label, strategies) in [
        ("upstream", vec![Strategy::Upstream]),
        ("all strategies", Strategy::all()),
    ] {
        let mut spent = Duration::ZERO;
        let mut on_cpu = 0;
        let mut cost = 0.0;
        for i in 0..n {
            let t = trace(&w, i, ticks);
            let started = Instant::now();
            let cpu0 = cpu_ns();
            let r = backtest::run(&t, &base, &strategies, &cfg).unwrap();
            on_cpu += cpu_ns() - cpu0;
            spent += started.elapsed();
            cost += backtest::total(&r[0].containers).cost();
        }
        println!(
            "{n} containers x {days} days x 1-min samples ({} samples), {label} ({} strategies): {:.2} s \
             wall, {:.2} s on-CPU (upstream cost {cost:.1} core-hours)",
            n * ticks * 2,
            strategies.len(),
            spent.as_secs_f64(),
            on_cpu as f64 / 1e9
        );
    }
}
