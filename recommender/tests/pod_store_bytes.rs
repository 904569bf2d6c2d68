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
use tailor_testkit::fixtures::PodFixture;

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
    let fixture = PodFixture::new(ns, &format!("{app}-5d8f7c9b4-{p:05}"))
        .uid(&format!("uid-{rs}-{p}"))
        .resource_version(&format!("{}", 100_000_000 + rs * 10 + p))
        .created("2026-11-01T10:00:00Z")
        .label("app", &app)
        .label("pod-template-hash", "5d8f7c9b4")
        .label("team", "payments")
        .annotation("prometheus.io/scrape", "true")
        .owner("ReplicaSet", &format!("{app}-5d8f7c9b4"))
        .owner_uid("rs")
        .container(
            "app",
            json!({"cpu": "100m", "memory": "128Mi"}),
            json!({"memory": "256Mi"}),
        )
        .image("registry.example.com/app:1")
        .phase("Running")
        .container_status(
            json!({"name": "app", "restartCount": 0, "ready": true, "image": "x",
            "imageID": "y", "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}}),
        );
    serde_json::from_value(fixture.json()).unwrap()
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
