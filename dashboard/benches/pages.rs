//! The fleet page at 5,000 VPAs over 50,000 pods (`hack/bench-dashboard.sh` runs it in release mode, on one
//! core): how long one page takes to render — the totals over every workload, the sort, the page of 100 rows —
//! and how large it is; the same for the JSON twin and a workload's page. Prints p50/p99 per page and
//! `fleet_page_p99_ms= fleet_page_bytes= …` last.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::time::Instant;

use tailor_dashboard::model::{
    Condition, Container, Flag, Fleet, Resources, Source, UpdaterAction, Usage, Workload,
};
use tailor_dashboard::money::Prices;
use tailor_dashboard::query::{FleetQuery, PAGE_SIZE};
use tailor_dashboard::summary::Summary;
use tailor_dashboard::{fleet_page, workload_page};
use tailor_engine::histogram::{Histogram, HistogramOptions};

const VPAS: usize = 5_000;
const PODS_PER_VPA: i64 = 10;
const ROUNDS: usize = 200;

/// A usage histogram as the model holds it: 40 buckets around `scale`, what the recommender publishes (the
/// workload page reads its buckets and percentiles when shown).
fn usage(opts: &'static HistogramOptions, scale: f64) -> Usage {
    let mut h = Histogram::new(opts);
    for i in 0..40 {
        h.add_sample(scale * 1.05f64.powi(i), f64::from(i % 7 + 1));
    }
    Usage::of(&h).unwrap()
}

fn container(name: &str, i: usize) -> Container {
    let m = 50 + (i % 400) as i64;
    Container {
        name: name.into(),
        requests: Resources::new(2 * m, (4 * m) << 20),
        limits: Resources::default(),
        target: Resources::new(m, (3 * m) << 20),
        lower_bound: Resources::new(m / 2, (2 * m) << 20),
        upper_bound: Resources::new(4 * m, (8 * m) << 20),
        uncapped_target: Resources::new(m, (3 * m) << 20),
        cpu_usage: Some(usage(HistogramOptions::vpa_cpu(), m as f64 / 4000.0)),
        memory_usage: Some(usage(HistogramOptions::vpa_memory(), (m << 20) as f64)),
    }
}

fn fleet() -> Fleet {
    let workloads = (0..VPAS)
        .map(|i| Workload {
            namespace: format!("team-{:03}", i % 100).into(),
            vpa: format!("service-{i:05}").into(),
            kind: "Deployment".into(),
            name: format!("service-{i:05}").into(),
            mode: "Recreate".into(),
            profile: (i % 3 == 0).then(|| "cautious".into()),
            pods: PODS_PER_VPA,
            ooms_last_day: i64::from(i % 97 == 0),
            containers: vec![container("app", i), container("sidecar", i + 7)].into(),
            conditions: vec![Condition {
                type_: "RecommendationProvided".into(),
                status: "True".into(),
                ..Condition::default()
            }]
            .into(),
            flags: if i % 97 == 0 {
                [Flag::Oom].into()
            } else {
                Default::default()
            },
            instance_family: Some(["m6i", "c7g", "r6i"][i % 3].into()),
            // The updater's last actions: the most a workload keeps.
            updater_actions: (0..tailor_dashboard::MAX_ACTIONS)
                .map(|k| UpdaterAction {
                    time: "2026-11-29T00:00:00Z".into(),
                    type_: "Normal".into(),
                    reason: "InPlaceResizedByVPA".into(),
                    object: format!("Pod/service-{i:05}-7c9f-{k}"),
                    message: "Pod was resized in place by VPA Updater.".into(),
                })
                .collect(),
            ..Workload::default()
        })
        .collect();
    Fleet {
        source: Source {
            producer: "bench".into(),
            generated_at: "2026-11-29T00:00:00Z".into(),
            kubectl_context: None,
        },
        prices: Prices::default()
            .with_families(&["m6i=0.024/0.003", "c7g=0.018/0.0025"])
            .unwrap_or_default(),
        workloads,
    }
}

/// p50 and p99 of `rounds` runs of `f`, in milliseconds, and the size of its last output.
fn measure(rounds: usize, mut f: impl FnMut() -> String) -> (f64, f64, usize) {
    let mut times = Vec::with_capacity(rounds);
    let mut bytes = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let out = f();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        bytes = out.len();
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), bytes)
}

fn main() {
    let f = fleet();
    let sorted = FleetQuery::parse([("sort", "saving"), ("page", "7")]);
    let (p50, p99, bytes) = measure(ROUNDS, || fleet_page(&f, &FleetQuery::default()));
    println!(
        "fleet page (page 1 of {}, by name): p50 {p50:.1} ms, p99 {p99:.1} ms, {bytes} bytes",
        VPAS.div_ceil(PAGE_SIZE)
    );
    let (s50, s99, sbytes) = measure(ROUNDS, || fleet_page(&f, &sorted));
    println!("fleet page (page 8, by saving): p50 {s50:.1} ms, p99 {s99:.1} ms, {sbytes} bytes");
    let (j50, j99, jbytes) = measure(ROUNDS, || {
        let (rows, matched) = FleetQuery::default().select(&f.workloads, &f.prices, PAGE_SIZE);
        let summary = Summary::of(&f.workloads, &f.prices);
        serde_json::to_string(&(summary, matched, rows)).unwrap()
    });
    println!("fleet JSON twin: p50 {j50:.1} ms, p99 {j99:.1} ms, {jbytes} bytes");
    let (w50, w99, wbytes) = measure(ROUNDS, || {
        workload_page(&f, "team-042", "service-04242").unwrap()
    });
    println!("workload page: p50 {w50:.2} ms, p99 {w99:.2} ms, {wbytes} bytes");
    println!(
        "fleet_page_p99_ms={:.1} fleet_page_bytes={} fleet_json_p99_ms={j99:.1} workload_page_p99_ms={w99:.2} vpas={VPAS} pods={}",
        p99.max(s99),
        bytes.max(sbytes),
        VPAS as i64 * PODS_PER_VPA
    );
}
