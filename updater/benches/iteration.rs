//! Scale benchmark of one updater iteration (`hack/bench-updater.sh` runs it in release mode): 5,000 VPAs
//! over 50,000 pods of realistic size, the decisions the binary makes (`run_once` over cached objects) with
//! a dry-run actuator, on one thread. Prints decision time per iteration and memory per pod.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::alloc::System;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cap::Cap;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_crds::VerticalPodAutoscaler;
use tailor_crds::cluster::index::{Index, IndexObjects};
use tailor_updater::cluster::CacheView;
use tailor_updater::config::{FeatureGates, RestrictionConfig};
use tailor_updater::iteration::{IterationConfig, UpdaterState, run_once};
use tailor_updater::metrics::{IterationGauges, Metrics};
use tailor_updater::preview::plan::{DryRun, SnapshotReplicas};
use tailor_updater::preview::snapshot::Snapshot;
use tailor_updater::rate_limit::RateSettings;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

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

fn main() {
    let vpas_n = env("TAILOR_BENCH_VPAS", 5_000);
    let per = env("TAILOR_BENCH_PODS_PER_VPA", 10);
    let iterations = env("TAILOR_BENCH_ITERATIONS", 5);
    let now: Timestamp = NOW.parse().unwrap();

    let sample: Pod = serde_json::from_value(pod_json("ns-0", "d-0-rs", 0, false)).unwrap();
    let before = ALLOC.allocated();
    let full = Arc::new(sample.clone());
    let full_bytes = ALLOC.allocated() - before;
    drop(full);
    // Slim pods, measured over many (slimming frees the full object while it builds the slim one).
    let raw: Vec<Pod> = (0..1000).map(|_| sample.clone()).collect();
    let before = ALLOC.allocated();
    let slimmed: Vec<Arc<Pod>> = raw
        .into_iter()
        .map(|p| Arc::new(tailor_updater::pods::slim(p)))
        .collect();
    let slim_bytes = ALLOC
        .allocated()
        .saturating_sub(before.saturating_sub(1000 * full_bytes))
        / 1000;
    drop(slimmed);

    let base = ALLOC.allocated();
    let mut snapshot = Snapshot::default();
    let mut pods: Vec<Arc<Pod>> = Vec::with_capacity(vpas_n * per);
    for v in 0..vpas_n {
        let ns = format!("ns-{}", v % 200);
        let name = format!("d-{v}");
        let rs = format!("{name}-rs");
        snapshot.deployments.push(
            serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{name}-uid")},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {}}}))
            .unwrap(),
        );
        snapshot.replica_sets.push(serde_json::from_value(json!({
            "metadata": {"name": rs, "namespace": ns, "uid": format!("{rs}-uid"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": format!("{name}-uid"), "controller": true}]},
            "spec": {"replicas": per, "selector": {"matchLabels": {"app": name}}}})).unwrap());
        let mode = if v.is_multiple_of(3) {
            "InPlaceOrRecreate"
        } else {
            "Recreate"
        };
        snapshot.vpas.push(serde_json::from_value(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns, "uid": format!("vpa-{v}"), "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "updatePolicy": {"updateMode": mode}},
            "status": {"recommendation": {"containerRecommendations": (["app", "sidecar"].iter().map(|c| json!({
                "containerName": c, "target": {"cpu": "250m", "memory": "256Mi"}, "lowerBound": {"cpu": "200m", "memory": "200Mi"},
                "upperBound": {"cpu": "400m", "memory": "512Mi"}, "uncappedTarget": {"cpu": "250m", "memory": "256Mi"}})).collect::<Vec<_>>())}}
        })).unwrap());
        for i in 0..per {
            // One pod in five is outside its bounds.
            let p: Pod =
                serde_json::from_value(pod_json(&ns, &rs, i, (v * per + i).is_multiple_of(5)))
                    .unwrap();
            pods.push(Arc::new(tailor_updater::pods::slim(p)));
        }
    }
    let vpas: Vec<Arc<VerticalPodAutoscaler>> =
        snapshot.vpas.iter().cloned().map(Arc::new).collect();
    let mut view = CacheView::new(
        Index::from_objects(IndexObjects {
            vpas: snapshot.vpas.clone(),
            deployments: std::mem::take(&mut snapshot.deployments),
            replica_sets: snapshot.replica_sets.clone(),
            ..Default::default()
        }),
        SnapshotReplicas::of(&snapshot),
        RestrictionConfig {
            timers_from_patch: true,
            ..Default::default()
        },
        FeatureGates::default(),
        now,
    );
    drop(snapshot);
    let cache_bytes = ALLOC.allocated() - base;
    let n_pods = pods.len();

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
    for _ in 0..iterations {
        let mut actuator = DryRun::new(
            &Snapshot::default(),
            RateSettings::from_flags(-1.0, 1),
            Duration::from_secs(60),
        );
        let mut gauges = IterationGauges::default();
        let before = ALLOC.allocated();
        let started = Instant::now();
        view.begin_iteration(now);
        let report = rt.block_on(run_once(
            &config,
            &mut state,
            &view,
            &mut actuator,
            &vpas,
            || pods.clone(),
            now,
            &mut gauges,
            Some(&metrics),
        ));
        metrics.publish(&gauges);
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
    println!(
        "vpas={vpas_n} pods={n_pods} iterations={iterations} evictions_per_iteration={evictions} resizes_per_iteration={resizes}"
    );
    println!("pod_object_bytes full={full_bytes} slim={slim_bytes}");
    println!(
        "cache_bytes_per_pod={} (pods, VPAs, workloads, index) peak_rss_mib={} iteration_heap_delta_mib={}",
        cache_bytes / n_pods.max(1),
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
