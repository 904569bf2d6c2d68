//! Scale benchmark of one updater iteration (`hack/bench-updater.sh` runs it in release mode): 5,000 VPAs
//! over 50,000 pods of realistic size, the decisions the binary makes (`run_once` over cached objects) with
//! a dry-run actuator, on one thread. Prints decision time per iteration and memory per pod.
//!
//! The caches are the binary's: kube-rs stores of compact pods, VPAs, slim workloads and stripped
//! ReplicaSets, the index over them, and the lists taken from the stores each iteration. Memory is counted
//! by a counting allocator, split into pods, VPAs and workloads + index.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::time::{Duration, Instant};

use cap::Cap;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tailor_core::workload::SlimWorkload;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexStores};
use tailor_kube::rate::RateSettings;
use tailor_kube::reflectors::workload_stores;
use tailor_updater::decisions::config::{FeatureGates, RestrictionConfig};
use tailor_updater::iteration::{IterationConfig, Report, UpdaterState, run_once};
use tailor_updater::preview::plan::DryRun;
use tailor_updater::preview::snapshot::Snapshot;
use tailor_updater::process::metrics::{IterationGauges, Metrics};
use tailor_updater::views::cache_view::{
    CacheView, ReplicaStores, ScaleReplicas, strip_controller,
};
use tailor_updater::views::pods::CachedPod;

/// The binary's allocator (mimalloc), counted.
#[global_allocator]
static ALLOC: Cap<mimalloc::MiMalloc> = Cap::new(mimalloc::MiMalloc, usize::MAX);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const NOW: &str = "2026-01-10T12:00:00Z";

/// A pod as the API server returns it: two containers with env, mounts and probes, status with ids.
fn pod_json(ns: &str, rs: &str, i: usize, outside: bool) -> Value {
    let cpu = if outside { "100m" } else { "250m" };
    let container = |name: &str| {
        json!({
            "name": name, "image": format!("registry.example.com/team/{name}:1.2.3"),
            "command": ["/bin/server", "--config=/etc/app/config.yaml", "--port=8080"],
            "env": (0..10).map(|k| json!({"name": format!("ENV_VAR_{k}"), "value": format!("value-{k}-{i}")})).collect::<Vec<_>>(),
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 5},
            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent",
        })
    };
    let status = |name: &str| {
        json!({"name": name, "ready": true, "restartCount": 0, "image": format!("registry.example.com/team/{name}:1.2.3"),
               "imageID": format!("registry.example.com/team/{name}@sha256:{}", "a".repeat(64)),
               "containerID": format!("containerd://{}", "b".repeat(64)), "started": true,
               "state": {"running": {"startedAt": "2026-01-08T09:00:00Z"}},
               "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{rs}-{i:05}"), "namespace": ns, "uid": format!("{rs}-uid-{i}"),
            "resourceVersion": "123456789", "creationTimestamp": "2026-01-08T09:00:00Z", "generateName": format!("{rs}-"),
            "labels": {"app": rs.trim_end_matches("-rs"), "pod-template-hash": "7d9f8c", "team": "payments", "tier": "backend",
                       "version": "1.2.3", "environment": "production"},
            "annotations": {"tailor.dev/observed-containers": "app, sidecar", "tailor.dev/updates": "Pod resources updated by web: container 0: cpu request, memory request",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("{rs}-uid"), "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
            "nodeName": format!("node-{}", i % 300), "serviceAccountName": "app", "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running", "startTime": "2026-01-08T09:00:00Z", "hostIP": "10.0.0.1", "podIP": "10.1.2.3", "qosClass": "Burstable",
            "conditions": (["Initialized", "Ready", "ContainersReady", "PodScheduled"].iter()
                .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": "2026-01-08T09:00:10Z"})).collect::<Vec<_>>()),
            "containerStatuses": [status("app"), status("sidecar")],
        }
    })
}

fn vpa_json(ns: &str, name: &str, v: usize) -> Value {
    let mode = if v.is_multiple_of(3) {
        "InPlaceOrRecreate"
    } else {
        "Recreate"
    };
    json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns, "uid": format!("vpa-{v}"), "resourceVersion": (1000 + v).to_string(), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "updatePolicy": {"updateMode": mode}},
        "status": {"recommendation": {"containerRecommendations": (["app", "sidecar"].iter().map(|c| json!({
            "containerName": c, "target": {"cpu": "250m", "memory": "256Mi"}, "lowerBound": {"cpu": "200m", "memory": "200Mi"},
            "upperBound": {"cpu": "400m", "memory": "512Mi"}, "uncappedTarget": {"cpu": "250m", "memory": "256Mi"}})).collect::<Vec<_>>())}}
    })
}

fn apply<K>(writer: &mut Writer<K>, object: K)
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Apply(object));
}

/// One timed iteration, as the binary's `Updater::iterate` runs it after the liveness check: VPAs and
/// pods listed from the stores, `run_once`, metrics published. Not inlined, so that callgrind can count it
/// alone (`--toggle-collect=*bench_iteration*`).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn bench_iteration(
    rt: &tokio::runtime::Runtime,
    config: &IterationConfig,
    state: &mut UpdaterState,
    view: &mut CacheView,
    actuator: &mut DryRun,
    list_vpas: &dyn Fn() -> Vec<std::sync::Arc<VerticalPodAutoscaler>>,
    list_pods: &dyn Fn() -> Vec<std::sync::Arc<CachedPod>>,
    metrics: &Metrics,
    now: Timestamp,
) -> Report {
    let mut gauges = IterationGauges::default();
    view.begin_iteration(now);
    let vpas = list_vpas();
    let report = rt.block_on(run_once(
        config,
        state,
        view,
        actuator,
        &vpas,
        list_pods,
        now,
        &mut gauges,
        Some(metrics),
    ));
    metrics.publish(&gauges);
    report
}

fn main() {
    let vpas_n = env("TAILOR_BENCH_VPAS", 5_000);
    let per = env("TAILOR_BENCH_PODS_PER_VPA", 10);
    let iterations = env("TAILOR_BENCH_ITERATIONS", 5);
    let now: Timestamp = NOW.parse().unwrap();

    let sample: Pod = serde_json::from_value(pod_json("ns-0", "d-0-rs", 0, false)).unwrap();
    let before = ALLOC.allocated();
    let full = std::sync::Arc::new(sample.clone());
    let full_bytes = ALLOC.allocated() - before;
    drop(full);
    // Compact pods, measured over 1,000 pods of 100 ReplicaSets (what pods of one controller share is
    // counted once per controller, as in the cache).
    let raw: Vec<Pod> = (0..1000)
        .map(|k| {
            serde_json::from_value(pod_json("ns-x", &format!("x-{}-rs", k / 10), k % 10, false))
                .unwrap()
        })
        .collect();
    let before = ALLOC.allocated();
    let compacted: Vec<std::sync::Arc<CachedPod>> = raw
        .iter()
        .map(|p| std::sync::Arc::new(CachedPod::new(p)))
        .collect();
    let compact_bytes = (ALLOC.allocated() - before) / 1000;
    drop(compacted);
    drop(raw);

    // The binary's caches: one kube-rs store per kind, the index over them.
    let mut vpa_writer: Writer<VerticalPodAutoscaler> = Writer::default();
    let mut pod_writer: Writer<CachedPod> = Writer::default();
    let mut rs_writer: Writer<ReplicaSet> = Writer::default();
    let vpa_store = vpa_writer.as_reader();
    let pod_store = pod_writer.as_reader();
    let (workloads, mut workload_writers) = workload_stores();

    let base = ALLOC.allocated();
    for v in 0..vpas_n {
        let (ns, name) = (format!("ns-{}", v % 200), format!("d-{v}"));
        apply(
            &mut vpa_writer,
            serde_json::from_value(vpa_json(&ns, &name, v)).unwrap(),
        );
    }
    let vpa_bytes = ALLOC.allocated() - base;

    let base = ALLOC.allocated();
    for v in 0..vpas_n {
        let (ns, name) = (format!("ns-{}", v % 200), format!("d-{v}"));
        let rs = format!("{name}-rs");
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{name}-uid")},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {}}}))
        .unwrap();
        let replica_set: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": rs, "namespace": ns, "uid": format!("{rs}-uid"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": format!("{name}-uid"), "controller": true}]},
            "spec": {"replicas": per, "selector": {"matchLabels": {"app": name}}}}))
        .unwrap();
        let deployments = &mut workload_writers.deployments;
        deployments.apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment)));
        let replica_sets = &mut workload_writers.replica_sets;
        replica_sets.apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&replica_set)));
        apply(&mut rs_writer, strip_controller(replica_set));
    }
    let replicas = ReplicaStores {
        replica_sets: rs_writer.as_reader(),
        stateful_sets: Writer::default().as_reader(),
        replication_controllers: Writer::default().as_reader(),
        daemon_sets: Writer::default().as_reader(),
        scaled: ScaleReplicas::default(),
    };
    let mut view = CacheView::new(
        Index::from_stores(IndexStores {
            vpas: std::sync::Arc::new(vpa_store.clone()),
            workloads,
            limit_ranges: Writer::default().as_reader(),
        }),
        replicas,
        RestrictionConfig {
            timers_from_patch: true,
            ..Default::default()
        },
        FeatureGates::default(),
        now,
    );
    let workload_bytes = ALLOC.allocated() - base;

    let base = ALLOC.allocated();
    for v in 0..vpas_n {
        let ns = format!("ns-{}", v % 200);
        let rs = format!("d-{v}-rs");
        for i in 0..per {
            // One pod in five is outside its bounds.
            let p: Pod =
                serde_json::from_value(pod_json(&ns, &rs, i, (v * per + i).is_multiple_of(5)))
                    .unwrap();
            apply(&mut pod_writer, CachedPod::from(p));
        }
    }
    let pod_bytes = ALLOC.allocated() - base;
    let n_pods = vpas_n * per;

    let config = IterationConfig {
        fair_order: true,
        in_place_honours_deferrals: true,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let metrics = Metrics::new();
    let mut state = UpdaterState::default();
    let mut times = Vec::new();
    let mut peak_iteration_bytes = 0usize;
    let mut evictions = 0;
    let mut resizes = 0;
    let list_vpas = || vpa_store.state();
    let list_pods = || pod_store.state();
    for _ in 0..iterations {
        let mut actuator = DryRun::new(
            &Snapshot::default(),
            RateSettings::from_flags(-1.0, 1),
            Duration::from_secs(60),
        );
        let before = ALLOC.allocated();
        let started = Instant::now();
        let report = bench_iteration(
            &rt,
            &config,
            &mut state,
            &mut view,
            &mut actuator,
            &list_vpas,
            &list_pods,
            &metrics,
            now,
        );
        times.push(started.elapsed());
        peak_iteration_bytes = peak_iteration_bytes.max(ALLOC.allocated().saturating_sub(before));
        evictions = report.evictions;
        resizes = report.resizes;
        drop(report);
    }
    times.sort();
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<usize>().ok())
        })
        .unwrap_or(0);
    let per_pod = |bytes: usize| bytes / n_pods.max(1);
    println!(
        "vpas={vpas_n} pods={n_pods} iterations={iterations} evictions_per_iteration={evictions} resizes_per_iteration={resizes}"
    );
    println!(
        "pod_object_bytes full={full_bytes} compact={compact_bytes} (size_of CachedPod={})",
        std::mem::size_of::<CachedPod>()
    );
    println!(
        "cache_bytes_per_pod={} pods={} vpas={} workloads_and_index={} peak_rss_mib={} iteration_heap_delta_mib={}",
        per_pod(pod_bytes + vpa_bytes + workload_bytes),
        per_pod(pod_bytes),
        per_pod(vpa_bytes),
        per_pod(workload_bytes),
        rss_kib / 1024,
        peak_iteration_bytes >> 20
    );
    println!(
        "iteration_ms min={:.1} median={:.1} max={:.1}",
        times[0].as_secs_f64() * 1e3,
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
