//! Criterion benchmarks on workload W1 (docs/design/bench-workload.md): ingestion through the aggregate path
//! and the full cluster path, and recommendation for every container. Sizes are kept small so a run takes about
//! a minute on a 2-core machine; `examples/w1_figures.rs` produces the large one-shot figures for BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tailor_engine::bench_workload::{self, TICKS_PER_DAY, W1};
use tailor_engine::estimate::{RecommenderConfig, VpaInput, estimate_container, recommend};
use tailor_engine::model::{
    AggregateContainerState, AggregationsConfig, ClusterState, ContainerState,
};
use tailor_engine::units::{cpu_amount_from_cores, memory_amount_from_bytes};

const N: usize = 1000;
const TICKS: usize = TICKS_PER_DAY;

fn fold_aggregates(
    w: &W1,
    n: usize,
    ticks: usize,
) -> Vec<(ContainerState, AggregateContainerState)> {
    let config = AggregationsConfig::default();
    let mut states: Vec<_> = (0..n)
        .map(|_| {
            (
                ContainerState::default(),
                AggregateContainerState::new(&config, 0),
            )
        })
        .collect();
    for k in 0..ticks {
        let (t, d) = (W1::time(k), W1::diurnal(k));
        for (i, (c, a)) in states.iter_mut().enumerate() {
            let _ = c.add_cpu_sample(t, cpu_amount_from_cores(w.cpu(i, k, d)), a);
            let _ = c.add_memory_sample(t, memory_amount_from_bytes(w.mem(i, k)), &config, a);
        }
    }
    states
}

fn cluster(n: usize) -> (ClusterState, Vec<(String, String)>) {
    let names = bench_workload::pod_names(n);
    (
        bench_workload::cluster(&names, AggregationsConfig::default()),
        names,
    )
}

fn ingest(c: &mut Criterion) {
    let w = W1::new();
    let mut g = c.benchmark_group("w1_ingest_1k_containers_1_day");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements((2 * N * TICKS) as u64));
    g.bench_function("aggregate_path", |b| {
        b.iter(|| black_box(fold_aggregates(&w, N, TICKS)))
    });
    g.bench_function("cluster_path", |b| {
        b.iter_batched(
            || cluster(N),
            |(mut cluster, names)| {
                for k in 0..TICKS {
                    w.add_tick(&mut cluster, &names, k);
                }
                cluster
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn recommendations(c: &mut Criterion) {
    let w = W1::new();
    let n = 10_000;
    let states = fold_aggregates(&w, n, 120);
    let rc = RecommenderConfig::default();
    let min = rc.min_resources(1);
    let config = AggregationsConfig::default();
    let empty = BTreeMap::new();
    let mut g = c.benchmark_group("w1_recommend_10k_containers");
    g.sample_size(10).throughput(Throughput::Elements(n as u64));
    g.bench_function("estimate", |b| {
        b.iter(|| {
            for (_, a) in &states {
                black_box(estimate_container(&rc, a, min, (true, true)));
            }
        })
    });
    g.bench_function("update_vpas_equivalent", |b| {
        b.iter(|| {
            for (_, a) in &states {
                let mut fresh = AggregateContainerState::new(&config, 0);
                fresh.merge(a);
                let m = BTreeMap::from([("c".to_string(), fresh)]);
                black_box(
                    recommend(
                        &rc,
                        &m,
                        VpaInput {
                            policy: None,
                            annotations: &empty,
                            explain: false,
                        },
                    )
                    .ok(),
                );
            }
        })
    });
    g.finish();
}

criterion_group!(benches, ingest, recommendations);
criterion_main!(benches);
