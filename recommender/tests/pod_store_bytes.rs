//! The pod store's bytes per pod (docs/decisions/recommender-memory.md), counted by a global allocator: its own
//! test binary, so no other test allocates meanwhile. Fails when a change makes the stored pods grow past the
//! bound.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::alloc::System;

use cap::Cap;
use kube::runtime::watcher;
use serde_json::json;
use tailor_recommender::views::oom::OomQueue;
use tailor_recommender::views::slim::WatchedPod;
use tailor_recommender::views::stores::new_stores;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Bytes of heap per stored pod the store may use: measured 417 bytes (16 of them the start of a terminated
/// container's run, for the run peaks of docs/decisions/job-runs.md) with one container, three labels
/// shared by the ten pods of each ReplicaSet and a 9-digit resourceVersion (before, a reflector
/// store of slim pods took about 2.2 KiB).
const BOUND_BYTES_PER_POD: usize = 512;

/// A running pod of ReplicaSet `rs` as the watch delivers it (the slim type drops the rest on decoding).
fn pod(ns: &str, rs: usize, p: usize) -> WatchedPod {
    let app = format!("app-{rs}");
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-5d8f7c9b4-{p:05}"), "namespace": ns, "uid": format!("uid-{rs}-{p}"),
            "resourceVersion": format!("{}", 100_000_000 + rs * 10 + p),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b4", "team": "payments"},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-5d8f7c9b4"),
                                 "uid": "rs", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 0, "ready": true,
            "image": "x", "imageID": "y", "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}}]}
    }))
    .unwrap()
}

#[test]
fn pod_store_bytes_per_pod_stay_under_the_bound() {
    let (replicasets, per) = (2_000, 10);
    let (stores, mut writers) = new_stores(OomQueue::default());
    let before = ALLOC.allocated();
    writers.pods.handle(watcher::Event::Init);
    // Each input pod is built and consumed here: what stays allocated is what the store keeps.
    for rs in 0..replicasets {
        for p in 0..per {
            let pod = pod(&format!("ns-{}", rs % 50), rs, p);
            writers.pods.handle(watcher::Event::InitApply(pod));
        }
    }
    writers.pods.handle(watcher::Event::InitDone);
    let after = ALLOC.allocated();
    let n = replicasets * per;
    assert_eq!(stores.pods.len(), n);
    let per_pod = after.saturating_sub(before) / n;
    println!(
        "pod store: {per_pod} bytes per pod ({n} pods, {} interned strings, {} label sets)",
        stores.pods.interned().0,
        stores.pods.interned().1
    );
    assert!(
        per_pod <= BOUND_BYTES_PER_POD,
        "the pod store holds {per_pod} bytes per pod, above the bound of {BOUND_BYTES_PER_POD}"
    );
}
