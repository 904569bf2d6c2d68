//! One-shot W1 figures for BENCHMARKS.md: ingestion throughput (aggregate and cluster paths), heap per
//! container (counting global allocator) and time to recommend for every container.
//!
//! `cargo run --release -p tailor-engine --example w1_figures -- [containers] [days] [--hourly] [--profile=NAME]`
//! (default 10000 7; `--hourly` keeps the hourly CPU histograms and recommends with the `diurnal` profile, or with
//! `NAME`'s: `--hourly --profile=auto` times `auto`'s day plans).
//!
//! Every phase is timed by this thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`, nanosecond resolution), so other
//! load on the machine does not count. Besides the human-readable lines it prints `key=value` lines, the same keys
//! as upstream's harness `hack/go/vpa-bench` (which runs the same phases on upstream's model), and checksums of the
//! recommendations that must equal that harness's: `hack/bench-vs-upstream.sh` runs the two side by side.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::alloc::System;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use cap::Cap;
use tailor_engine::bench_workload::{self, TICKS_PER_DAY, W1};
use tailor_engine::estimate::{
    ContainerRecommendation, RecommenderConfig, VpaInput, estimate_container, recommend,
};
use tailor_engine::model::{AggregateContainerState, AggregationsConfig, ContainerState};
use tailor_engine::units::{cpu_amount_from_cores, memory_amount_from_bytes};

/// Counts live heap bytes (the `cap` allocator wraps the system one), for heap per container.
#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// On-CPU time of this thread in ns (`CLOCK_THREAD_CPUTIME_ID`), so other load on the machine does not count.
fn cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// FNV-1a 64 over one text line per container recommendation; `hack/go/vpa-bench` computes the same.
struct Checksum(u64);

impl Checksum {
    fn new() -> Self {
        Checksum(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, index: usize, r: &ContainerRecommendation) {
        let v = |x: Option<i64>| x.unwrap_or(-1);
        let line = format!(
            "{index} {} {} {} {} {} {} {}\n",
            r.container_name,
            v(r.target.cpu),
            v(r.target.memory),
            v(r.lower_bound.cpu),
            v(r.lower_bound.memory),
            v(r.upper_bound.cpu),
            v(r.upper_bound.memory)
        );
        for b in line.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn live() -> isize {
    isize::try_from(ALLOC.allocated()).unwrap_or(isize::MAX)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(10_000);
    let days = args.get(1).copied().unwrap_or(7);
    let ticks = days * TICKS_PER_DAY;
    let samples = (2 * n * ticks) as f64;
    let w = W1::new();
    let hourly = std::env::args().any(|a| a == "--hourly");
    let profile_name = std::env::args()
        .find_map(|a| a.strip_prefix("--profile=").map(str::to_string))
        .unwrap_or_else(|| "diurnal".into());
    let config = AggregationsConfig {
        cpu_time_of_day: hourly,
        ..AggregationsConfig::default()
    };
    println!(
        "W1: {n} containers x {days} days ({:.1} M samples){}",
        samples / 1e6,
        if hourly {
            format!(", hourly CPU histograms, {profile_name}")
        } else {
            String::new()
        }
    );

    // --- aggregate path: ContainerState + its own aggregate --------------------------------------------------
    let base = live();
    let mut states: Vec<(ContainerState, AggregateContainerState)> = (0..n)
        .map(|_| {
            (
                ContainerState::default(),
                AggregateContainerState::new(&config, 0),
            )
        })
        .collect();
    let start = Instant::now();
    let cpu0 = cpu_ns();
    for k in 0..ticks {
        let t = W1::time(k);
        let d = W1::diurnal(k);
        for (i, (c, a)) in states.iter_mut().enumerate() {
            let _ = c.add_cpu_sample(t, cpu_amount_from_cores(w.cpu(i, k, d)), a);
            let _ = c.add_memory_sample(t, memory_amount_from_bytes(w.mem(i, k)), &config, a);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = (cpu_ns() - cpu0) as f64 / 1e9;
    let heap = live() - base;
    println!(
        "aggregate path: {secs:.2} s wall, {cpu:.2} s on-CPU, {:.2} M samples/s (on-CPU), {:.1} ns/sample; heap {:.1} B/container (struct {} B + buckets)",
        samples / cpu.max(1e-9) / 1e6,
        cpu * 1e9 / samples,
        heap as f64 / n as f64,
        std::mem::size_of::<(ContainerState, AggregateContainerState)>()
    );
    println!("aggregate_cpu_s={cpu}");
    println!("aggregate_msamples_per_s={}", samples / cpu.max(1e-9) / 1e6);
    println!("aggregate_heap_b_per_container={}", heap as f64 / n as f64);

    // --- recommendations for every aggregate -----------------------------------------------------------------
    let rc = match hourly {
        true => tailor_engine::profile::by_name(&profile_name)
            .unwrap()
            .unwrap()
            .apply(&RecommenderConfig::default()),
        false => RecommenderConfig::default(),
    };
    let min = rc.min_resources(1);
    let cpu0 = cpu_ns();
    for (_, a) in &states {
        black_box(estimate_container(&rc, a, min, (true, true)));
    }
    let est = (cpu_ns() - cpu0) as f64 / 1e9;
    let empty = BTreeMap::new();
    let mut recs = Vec::with_capacity(n);
    let cpu0 = cpu_ns();
    for (_, a) in &states {
        let mut fresh = AggregateContainerState::new(&config, 0);
        fresh.merge(a);
        let m = BTreeMap::from([("c".to_string(), fresh)]);
        recs.push(
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
    let upd = (cpu_ns() - cpu0) as f64 / 1e9;
    let mut sum = Checksum::new();
    for (i, r) in recs.iter().enumerate() {
        for c in r.iter().flat_map(|r| &r.containers) {
            sum.add(i, c);
        }
    }
    drop(recs);
    println!(
        "recommend {n} (on-CPU): estimate {:.1} ms ({:.2} us/container); UpdateVPAs-equivalent {:.1} ms ({:.2} us/container)",
        est * 1e3,
        est * 1e6 / n as f64,
        upd * 1e3,
        upd * 1e6 / n as f64
    );
    println!("estimate_us_per_container={}", est * 1e6 / n as f64);
    println!("updatevpas_us_per_container={}", upd * 1e6 / n as f64);
    println!("checksum_updatevpas={:016x}", sum.0);
    drop(states);

    // --- cluster path by names: every sample looked up by namespace, pod and container name -----------------
    let names = bench_workload::pod_names(n);
    let mut cluster = bench_workload::cluster(&names, config);
    let cpu0 = cpu_ns();
    for k in 0..ticks {
        w.add_tick(&mut cluster, &names, k);
    }
    let cpu = (cpu_ns() - cpu0) as f64 / 1e9;
    println!(
        "cluster path by names: {cpu:.2} s on-CPU, {:.2} M samples/s (on-CPU), {:.1} ns/sample",
        samples / cpu.max(1e-9) / 1e6,
        cpu * 1e9 / samples
    );
    println!(
        "cluster_by_names_msamples_per_s={}",
        samples / cpu.max(1e-9) / 1e6
    );
    drop(cluster);

    // --- cluster path: pod map -> container -> aggregate, one VPA per namespace, each container resolved once -
    let base = live();
    let mut cluster = bench_workload::cluster(&names, config);
    let refs = bench_workload::container_refs(&cluster, &names);
    let start = Instant::now();
    let cpu0 = cpu_ns();
    for k in 0..ticks {
        w.add_tick_by_ref(&mut cluster, &refs, k);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = (cpu_ns() - cpu0) as f64 / 1e9;
    let heap = live() - base;
    println!(
        "cluster path: {secs:.2} s wall, {cpu:.2} s on-CPU, {:.2} M samples/s (on-CPU), {:.1} ns/sample; heap {:.1} B/container (pods, labels, maps, aggregates)",
        samples / cpu.max(1e-9) / 1e6,
        cpu * 1e9 / samples,
        heap as f64 / n as f64
    );
    println!("cluster_cpu_s={cpu}");
    println!("cluster_msamples_per_s={}", samples / cpu.max(1e-9) / 1e6);
    println!("cluster_heap_b_per_container={}", heap as f64 / n as f64);
    let mut recs = Vec::with_capacity(cluster.vpas().len());
    let cpu0 = cpu_ns();
    for v in 0..cluster.vpas().len() {
        let aggs = cluster.aggregate_state_by_container_name(v);
        let vpa = &cluster.vpas()[v];
        recs.push(
            recommend(
                &rc,
                &aggs,
                VpaInput {
                    policy: vpa.policy.as_ref(),
                    annotations: &vpa.annotations,
                    explain: false,
                },
            )
            .ok(),
        );
    }
    let all = (cpu_ns() - cpu0) as f64 / 1e9;
    let mut sum = Checksum::new();
    let mut count = 0;
    for (j, r) in recs.iter().enumerate() {
        for c in r.iter().flat_map(|r| &r.containers) {
            sum.add(j, c);
            count += 1;
        }
    }
    println!(
        "cluster recommend pass, on-CPU ({} VPAs, {count} container names): {:.1} ms ({:.2} us/container)",
        cluster.vpas().len(),
        all * 1e3,
        all * 1e6 / n as f64
    );
    println!(
        "cluster_recommend_us_per_container={}",
        all * 1e6 / n as f64
    );
    println!("checksum_cluster={:016x}", sum.0);
}
