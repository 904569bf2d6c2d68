//! `tailor recommend --snapshot` and `tailor-recommender` on the same objects (docs/decisions/cluster-fit.md):
//! a Deployment whose pods use more CPU than the one node they may run on has. The real recommender runs
//! against the stand-in holding the objects and their PodMetrics; `tailor recommend` reads the same objects
//! from a snapshot file and the same usage from a trace. Both must cap the target to the node, and print the
//! same target and the same `CappedToNodeSize` condition: the offline answer is the daemon's.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_tests::process::{binary, start_recommender};
use tailor_tests::standin::ApiServer;

use crate::binaries::{VPA_API, namespace, vpa, workload};

const WAIT: Duration = Duration::from_secs(20);

/// The pods' usage (each of the two): three cores, 2 GiB.
const CPU_CORES: f64 = 3.0;
const MEMORY_BYTES: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// The one node: 1 core and 8 GiB allocatable, so the CPU target (3 cores and the margin) is capped to it
/// and the memory target is not.
const NODE: &str = r#"
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels: {kubernetes.io/hostname: node-1}
status:
  allocatable: {cpu: "1", memory: 8Gi, pods: "110"}
"#;

/// The snapshot both read: the namespace, the node, the Deployment with its ReplicaSet, pods and PodMetrics,
/// and the VPA.
fn snapshot() -> String {
    let vpa = serde_json::to_string(&vpa("web", "web")).expect("JSON");
    format!(
        "{}{NODE}{}\n---\n{vpa}\n",
        namespace(),
        workload("web", "3000m", "2Gi")
    )
}

/// The usage of the two pods as a trace of VPA `shop/web`: one sample each, at the PodMetrics' time.
fn trace() -> Value {
    let at = 1_767_225_600.0; // 2026-01-01T00:00:00Z, the PodMetrics' timestamp.
    let containers: Vec<Value> = (0..2)
        .map(|i| {
            json!({"name": "app", "pod": format!("web-7c9f-{i}"), "cpu_request_cores": 0.1,
                   "memory_request_bytes": 134217728.0,
                   "cpu_samples": [[at, CPU_CORES]], "memory_samples": [[at, MEMORY_BYTES]]})
        })
        .collect();
    json!({"id": "shop/web", "now": at,
           "pods": [{"name": "web-7c9f-0", "labels": {"app": "web"}}, {"name": "web-7c9f-1", "labels": {"app": "web"}}],
           "containers": containers})
}

fn millicores(q: &str) -> i64 {
    tailor_core::quantity::amount("cpu", &Quantity(q.to_owned())).expect("a CPU quantity")
}

fn bytes(q: &str) -> i64 {
    tailor_core::quantity::amount("memory", &Quantity(q.to_owned())).expect("a memory quantity")
}

/// The recommender's capped status of `shop/web`: (CPU millicores, memory bytes, the condition).
async fn daemon_answer(server: &ApiServer, dir: &std::path::Path) -> (i64, i64, Value) {
    let (rec, _) = start_recommender(server, dir, "recommender", &[]);
    let found = server
        .wait_for(WAIT, |s| {
            let v = s.get(VPA_API, "VerticalPodAutoscaler", "shop", "web")?;
            let status = v.get("status")?;
            let capped = (status["conditions"].as_array()?.iter())
                .find(|c| c["type"] == "CappedToNodeSize")?
                .clone();
            let target = &status["recommendation"]["containerRecommendations"][0]["target"];
            Some((
                millicores(target["cpu"].as_str()?),
                bytes(target["memory"].as_str()?),
                capped,
            ))
        })
        .await;
    found.unwrap_or_else(|| {
        panic!(
            "the recommender capped no target within {WAIT:?}; logs:\n{}",
            rec.log_lines().join("\n")
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommend_with_a_snapshot_prints_the_node_capped_target_the_recommender_writes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = ApiServer::start().await.expect("the stand-in");
    server.load_yaml(&snapshot()).expect("the snapshot loads");
    let (cpu, memory, condition) = daemon_answer(&server, dir.path()).await;
    assert!(cpu <= 1000, "the daemon caps CPU to the node: {cpu}m");
    assert_eq!(condition["status"], "True", "{condition}");
    assert_eq!(condition["reason"], "LargestNode", "{condition}");

    let snapshot_file = dir.path().join("snapshot.yaml");
    std::fs::write(&snapshot_file, snapshot()).expect("write the snapshot");
    let trace_file = dir.path().join("trace.json");
    std::fs::write(&trace_file, trace().to_string()).expect("write the trace");
    let out = Command::new(binary("tailor"))
        .args(["recommend", "-o", "json", "--input"])
        .arg(&trace_file)
        .arg("--snapshot")
        .arg(&snapshot_file)
        .output()
        .expect("tailor runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tailor recommend failed: {stderr}");
    assert!(stderr.is_empty(), "no warning expected: {stderr}");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let target = &printed["recommendations"][0]["target"];
    assert_eq!(
        (target["cpu"].as_i64(), target["memory"].as_i64()),
        (Some(cpu), Some(memory)),
        "tailor recommend --snapshot: {printed}"
    );
    let uncapped = printed["recommendations"][0]["uncappedTarget"]["cpu"].as_i64();
    assert!(
        uncapped.is_some_and(|u| u > cpu),
        "the uncapped target stays above the node: {printed}"
    );
    let offline = &printed["conditions"][0];
    for field in ["type", "status", "reason", "message"] {
        assert_eq!(offline[field], condition[field], "{field}: {printed}");
    }

    // Without the snapshot, the same trace is not capped: the cap came from the node.
    let out = Command::new(binary("tailor"))
        .args(["recommend", "-o", "json", "--input"])
        .arg(&trace_file)
        .output()
        .expect("tailor runs");
    let plain: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(
        plain["recommendations"][0]["target"]["cpu"].as_i64(),
        uncapped
    );
    assert!(plain.get("conditions").is_none(), "{plain}");
}
