//! The VPA store's bytes per VPA (docs/decisions/recommender-memory.md), counted by a global allocator: its own
//! test binary, so no other test allocates meanwhile. Fails when a change makes the stored VPAs grow past the
//! bound.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::alloc::System;

use cap::Cap;
use kube::runtime::watcher;
use serde_json::json;
use tailor_recommender::views::oom::OomQueue;
use tailor_recommender::views::stores::new_stores;
use tailor_recommender::views::watched_vpa::WatchedVpa;
use tailor_testkit::fixtures::VpaFixture;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Bytes of heap per stored VPA the store may use, for a VPA of one container with a recommendation and
/// three conditions as the recommender writes them: measured 1,648 bytes. The same VPA kept
/// whole (typed status, its recommendation in four maps) takes 3,634 bytes before any store overhead.
const BOUND_BYTES_PER_VPA: usize = 2_048;

/// VPA `i` of namespace `ns` as the watch delivers it, with the status this recommender writes.
fn vpa(ns: &str, i: usize) -> WatchedVpa {
    let rec = |cpu: &str, mem: &str| json!({"cpu": cpu, "memory": mem});
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "lastTransitionTime": "2026-11-01T10:00:00Z"});
    let fixture = VpaFixture::new(ns, &format!("app-{i}"))
        .uid(&format!("uid-{i}"))
        .resource_version(&format!("{}", 100_000_000 + i))
        .generation(1)
        .created("2026-11-01T10:00:00Z")
        .label("team", "payments")
        .managed_fields(json!([{"manager": "kubectl", "operation": "Apply"}]))
        .target("Deployment", &format!("app-{i}"))
        .mode("Off")
        .recommendation_row(json!({"containerName": "app",
            "target": rec("163m", "272629760"), "lowerBound": rec("102m", "262144000"),
            "upperBound": rec("1297m", "1358954496"), "uncappedTarget": rec("163m", "272629760")}))
        .conditions(json!([
            cond("LowConfidence", "True"),
            cond("NoPodsMatched", "False"),
            cond("RecommendationProvided", "True")
        ]))
        .observed_generation(1);
    serde_json::from_value(fixture.json()).unwrap()
}

#[test]
fn vpa_store_bytes_per_vpa_stay_under_the_bound() {
    let n = 5_000;
    let (stores, mut writers) = new_stores(OomQueue::default());
    let before = ALLOC.allocated();
    writers.vpas.apply_watcher_event(&watcher::Event::Init);
    // Each input VPA is decoded and consumed here: what stays allocated is what the store keeps.
    for i in 0..n {
        let v = vpa(&format!("ns-{}", i % 50), i);
        writers
            .vpas
            .apply_watcher_event(&watcher::Event::InitApply(v));
    }
    writers.vpas.apply_watcher_event(&watcher::Event::InitDone);
    let after = ALLOC.allocated();
    assert_eq!(stores.vpas.state().len(), n);
    let per_vpa = after.saturating_sub(before) / n;
    println!("VPA store: {per_vpa} bytes per VPA ({n} VPAs)");
    assert!(
        per_vpa <= BOUND_BYTES_PER_VPA,
        "the VPA store holds {per_vpa} bytes per VPA, above the bound of {BOUND_BYTES_PER_VPA}"
    );
}
