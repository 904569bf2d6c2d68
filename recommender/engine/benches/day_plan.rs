//! Criterion benchmark of `auto`'s day plan (`day_plan::plan`): the 24 hourly CPU histograms of the suite's
//! `web-diurnal` (draw 1, nine days at one minute) cut into a day and a night request. BENCHMARKS.md has the
//! figure; the recommender computes one plan per daily aggregate and hour of data.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tailor_engine::backtest_workloads::SUITE;
use tailor_engine::day_plan::{self, ChangePrice, HOURS};
use tailor_engine::histogram::{Histogram, HistogramOptions};
use tailor_engine::risk_price::RiskPrice;

fn hourly_histograms() -> Vec<Histogram> {
    let trace = SUITE
        .iter()
        .find(|w| w.name == "web-diurnal")
        .unwrap()
        .trace_with_draw(1);
    let mut hours: Vec<Histogram> = (0..HOURS)
        .map(|_| Histogram::new(HistogramOptions::vpa_cpu()))
        .collect();
    for s in &trace.containers[0].cpu_samples {
        let hour = (s[0].rem_euclid(86_400.0) / 3_600.0) as usize;
        hours[hour.min(HOURS - 1)].add_sample(s[1], 1.0);
    }
    hours
}

fn plan(c: &mut Criterion) {
    let hours = hourly_histograms();
    let refs: Vec<&Histogram> = hours.iter().collect();
    let price = RiskPrice {
        price: 3.75,
        upper_margin: Some(0.1),
    };
    let two = ChangePrice {
        core_hours: 0.8,
        max_steps: 2,
    };
    let four = ChangePrice {
        core_hours: 0.8,
        max_steps: 4,
    };
    assert_eq!(day_plan::plan(&refs, &price, &two).unwrap().steps, 2);
    c.bench_function("day_plan/two_steps", |b| {
        b.iter(|| day_plan::plan(black_box(&refs), &price, &two))
    });
    c.bench_function("day_plan/up_to_four_steps", |b| {
        b.iter(|| day_plan::plan(black_box(&refs), &price, &four))
    });
}

criterion_group!(benches, plan);
criterion_main!(benches);
