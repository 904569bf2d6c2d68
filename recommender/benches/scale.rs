//! In-process scale benchmark (`cargo bench -p tailor-recommender --bench scale`): 5,000 VPAs and
//! 50,000 pods in stores fed directly, with the stand-in API server (`tailor_tests::standin`) answering
//! metrics, status patches and checkpoint writes in the same process. Prints loop time, writes per loop,
//! RSS and live heap (counting allocator); both include the stand-in's objects (the VPAs and the
//! checkpoints written), while its request record and change log are dropped after every loop. The product's own figures come from `hack/bench-recommender.sh`, which runs the release
//! binary as its own process against the stand-in API server (docs/decisions/recommender-memory.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::alloc::System;
use std::time::Instant;

#[path = "../tests/it/harness.rs"]
mod harness;

use cap::Cap;
use harness::*;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tailor_core::workload::SlimWorkload;
use tailor_recommender::process::config::ControllerConfig;

/// Counts live heap bytes (the `cap` allocator wraps the system one), to tell retained memory from
/// allocator slack in RSS.
#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

fn live_mib() -> usize {
    ALLOC.allocated() / (1 << 20)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn metrics(vpas: usize, per: usize, namespaces: usize, secs: i64, round: i64) -> Value {
    let mut items = Vec::with_capacity(vpas * per);
    for v in 0..vpas {
        let ns = format!("ns-{}", v % namespaces);
        for p in 0..per {
            let cpu = 50 + ((v * 7 + p * 13) as i64 + round * 11) % 400;
            let mem = (100 + ((v * 3 + p * 5) as i64 + round * 7) % 300) * 1024 * 1024;
            items.push(json!({
                "metadata": {"name": format!("d{v}-{p}"), "namespace": ns},
                "timestamp": rfc3339(secs), "window": "30s",
                "containers": [{"name": "app", "usage": {"cpu": format!("{cpu}m"), "memory": mem.to_string()}}],
            }));
        }
    }
    json!({"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetricsList", "metadata": {}, "items": items})
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(five_thousand_vpas_fifty_thousand_pods());
}

async fn five_thousand_vpas_fifty_thousand_pods() {
    let vpas = env("TAILOR_BENCH_VPAS", 5000);
    let per = env("TAILOR_BENCH_PODS_PER_VPA", 10);
    let namespaces = env("TAILOR_BENCH_NAMESPACES", 50);
    let loops = env("TAILOR_BENCH_LOOPS", 4) as i64;
    let rss_start = rss_kib("VmRSS:");
    let cfg = ControllerConfig {
        checkpoints_timeout: std::time::Duration::from_secs(600),
        ..ControllerConfig::default()
    };
    let mut h = Harness::new(cfg).await;
    let t = Instant::now();
    for v in 0..vpas {
        let ns = format!("ns-{}", v % namespaces);
        let name = format!("d{v}");
        let sel = [("app", name.as_str())];
        h.writers
            .workloads
            .deployments
            .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
                &ns, &name, &sel,
            ))));
        h.apply_vpa(&vpa(&ns, &name, "Deployment", &name));
        for p in 0..per {
            let mut pd = pod(
                &ns,
                &format!("{name}-{p}"),
                &[("app", name.as_str()), ("pod-template-hash", "abc")],
                &["app"],
            );
            pd.metadata.resource_version = Some("1".into());
            h.writers.pods.handle(watcher::Event::Apply(pd));
        }
    }
    println!(
        "stores fed: {vpas} VPAs, {} pods in {:.2}s",
        vpas * per,
        t.elapsed().as_secs_f64()
    );
    let rss_stores = rss_kib("VmRSS:");
    println!("live heap after feeding the stores: {} MiB", live_mib());
    // TAILOR_BENCH_DASHBOARD=1: the dashboard on, its fleet page rendered once a second meanwhile.
    let dashboard = (env("TAILOR_BENCH_DASHBOARD", 0) == 1).then(|| {
        let state = std::sync::Arc::new(tailor_recommender::dashboard::DashboardState::new(
            tailor_dashboard::money::Prices::default(),
            None,
        ));
        h.rec.set_dashboard(Some(state.clone()));
        let poller = state.clone();
        std::thread::spawn(move || {
            loop {
                if let Some(p) = poller.fleet() {
                    let page = tailor_dashboard::fleet_page_with(
                        &p.fleet,
                        &p.summary,
                        &Default::default(),
                    );
                    std::hint::black_box(page);
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        });
        state
    });
    println!(
        "loop,seconds,dashboard_seconds,status_writes,checkpoint_writes,samples,pods,vpas,rss_mib,live_heap_mib"
    );
    for i in 0..loops {
        h.api
            .push_metrics(Ok(metrics(vpas, per, namespaces, i * 60, i)));
        let t = Instant::now();
        let report = h.rec.run_once(harness::t(i * 60)).await;
        let secs = t.elapsed().as_secs_f64();
        let reqs = h.api.take();
        h.api.compact();
        h.reflect_status_patches(&reqs);
        println!(
            "{},{secs:.3},{:.3},{},{},{},{},{},{},{}",
            i + 1,
            report.phases.dashboard_seconds,
            report.status_writes,
            report.checkpoints_written,
            report.samples_accepted,
            report.pods,
            report.vpas,
            rss_kib("VmRSS:") / 1024,
            live_mib()
        );
        assert_eq!(report.vpas, vpas);
        assert_eq!(report.pods, vpas * per);
        assert_eq!(report.status_errors, 0);
    }
    if let Some(d) = &dashboard {
        // What the published fleet holds: workloads, histogram buckets, actions, its JSON twin's size.
        if let Some(p) = d.fleet() {
            let f = &p.fleet;
            let containers = f.workloads.iter().flat_map(|w| w.containers.iter());
            let buckets: usize = containers
                .flat_map(|c| [&c.cpu_usage, &c.memory_usage])
                .flatten()
                .map(|u| u.distribution().buckets.len())
                .sum();
            let json = serde_json::to_vec(f).map_or(0, |j| j.len());
            println!(
                "dashboard: {} workloads, {buckets} histogram buckets, JSON {} KiB",
                f.workloads.len(),
                json / 1024
            );
        }
        // The published fleet's own memory: the live heap with it, then without it.
        let with = ALLOC.allocated();
        d.stand_by();
        let without = ALLOC.allocated();
        println!(
            "dashboard: published fleet {} KiB of {} KiB live heap ({:.1} %)",
            with.saturating_sub(without) / 1024,
            without / 1024,
            100.0 * with.saturating_sub(without) as f64 / without.max(1) as f64
        );
    }
    println!(
        "rss: start {} MiB, after stores {} MiB, end {} MiB, peak {} MiB; model aggregates {}, histogram heap {} KiB",
        rss_start / 1024,
        rss_stores / 1024,
        rss_kib("VmRSS:") / 1024,
        rss_kib("VmHWM:") / 1024,
        h.rec.model().aggregate_count(),
        h.rec.model().histogram_heap_bytes() / 1024
    );
}
