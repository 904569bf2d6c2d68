//! Disruption budgets that count the right thing (docs/decisions/disruption-budgets.md), through
//! `tailor plan`'s path (the binary's iteration over a snapshot): readiness counts, DaemonSets lose at most
//! `--daemonset-max-unavailable` pods at once, Jobs' pods are not evicted with `--evict-job-pods=false`;
//! with the options at upstream's values, upstream's numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tailor_kube::rate::RateSettings;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};
use tailor_updater::decisions::config::RestrictionConfig;
use tailor_updater::iteration::IterationConfig;
use tailor_updater::preview::plan::{Plan, PlanSettings, plan};
use tailor_updater::preview::snapshot::Snapshot;

const NOW: &str = "2026-01-10T12:00:00Z";

/// A running pod of `owner` (kind, name) with requests below the VPA's range; `ready` sets its Ready
/// condition.
fn pod(name: &str, app: &str, (kind, owner): (&str, &str), ready: bool) -> String {
    PodFixture::new("shop", name)
        .uid(&format!("uid-{name}"))
        .label("app", app)
        .owner(kind, owner)
        .container(
            "app",
            json!({"cpu": "100m", "memory": "300Mi"}),
            Value::Null,
        )
        .image("app")
        .running_on("node-1", "2026-01-01T00:00:00Z")
        .condition("Ready", if ready { "True" } else { "False" })
        .manifest()
}

fn vpa(kind: &str, name: &str) -> String {
    VpaFixture::new("shop", name)
        .created("2026-01-01T00:00:00Z")
        .target(kind, name)
        .mode("Recreate")
        .recommendation_bounds(
            "app",
            ("400m", "400Mi"),
            ("500m", "512Mi"),
            ("600m", "600Mi"),
        )
        .manifest()
}

/// A StatefulSet `db` of 3 (db-1 running but not Ready), a DaemonSet `agent` on 10 nodes, a Job `batch`
/// of 4 pods; a Recreate VPA over each.
fn snapshot() -> Snapshot {
    let mut text = String::from(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop, uid: uid-db}
spec: {replicas: 3, selector: {matchLabels: {app: db}}, serviceName: db, template: {}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop, uid: uid-agent}
spec: {selector: {matchLabels: {app: agent}}, template: {}}
status: {numberReady: 10, currentNumberScheduled: 10, desiredNumberScheduled: 10, numberMisscheduled: 0}
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: shop, uid: uid-batch}
spec: {parallelism: 4, selector: {matchLabels: {app: batch}}, template: {}}
"#,
    );
    for i in 0..3 {
        text.push_str(&pod(
            &format!("db-{i}"),
            "db",
            ("StatefulSet", "db"),
            i != 1,
        ));
    }
    for i in 0..10 {
        text.push_str(&pod(
            &format!("agent-{i}"),
            "agent",
            ("DaemonSet", "agent"),
            true,
        ));
    }
    for i in 0..4 {
        text.push_str(&pod(&format!("batch-{i}"), "batch", ("Job", "batch"), true));
    }
    for (kind, name) in [
        ("StatefulSet", "db"),
        ("DaemonSet", "agent"),
        ("Job", "batch"),
    ] {
        text.push_str(&vpa(kind, name));
    }
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

async fn run(restriction: RestrictionConfig) -> Plan {
    let settings = PlanSettings {
        iteration: IterationConfig::default(),
        restriction,
        rate: RateSettings::from_flags(-1.0, 1),
        interval: Duration::from_secs(60),
        status_lease: None,
        now: NOW.parse().unwrap(),
        floor: None,
        resize_rules: Default::default(),
    };
    plan(&snapshot(), &settings).await
}

/// VPA name → (evicted pods, skip reasons).
fn outcome(plan: &Plan) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut out: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for p in &plan.pods {
        let entry = out.entry(p.vpa.clone()).or_default();
        match p.action {
            "evict" => entry.0.push(p.pod.clone()),
            _ => entry.1.push(p.reason.clone().unwrap_or_default()),
        }
    }
    out
}

fn safer() -> RestrictionConfig {
    RestrictionConfig {
        count_readiness: true,
        daemonset_max_unavailable: 1,
        evict_job_pods: false,
        ..RestrictionConfig::default()
    }
}

#[tokio::test]
async fn readiness_counts_daemon_sets_lose_one_pod_and_job_pods_stay() {
    let out = outcome(&run(safer()).await);
    // db-1 is down already: evicting it costs nothing; the two Ready pods must both stay (3 − 1 tolerance).
    let (evicted, skipped) = &out["shop/db"];
    assert_eq!(evicted, &["db-1"], "{out:?}");
    assert!(
        skipped.iter().all(|r| r == "tolerance exhausted"),
        "{skipped:?}"
    );
    // One node agent at a time.
    assert_eq!(out["shop/agent"].0.len(), 1, "{out:?}");
    // Job pods: left alone, with the reason.
    let (evicted, skipped) = &out["shop/batch"];
    assert!(evicted.is_empty(), "{out:?}");
    assert_eq!(skipped.len(), 4);
    assert!(
        skipped.iter().all(|r| r.contains("backoffLimit")),
        "{skipped:?}"
    );
}

#[tokio::test]
async fn upstreams_counts_with_the_options_at_upstreams_values() {
    let out = outcome(&run(RestrictionConfig::default()).await);
    // Upstream counts db-1 as alive: one more pod goes, possibly a Ready one (two down together).
    assert_eq!(out["shop/db"].0.len(), 1, "{out:?}");
    // Half of the node agents at once.
    assert_eq!(out["shop/agent"].0.len(), 5, "{out:?}");
    // Job pods are evicted (configured = live pods, tolerance 2).
    assert_eq!(out["shop/batch"].0.len(), 2, "{out:?}");
}
