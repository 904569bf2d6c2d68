//! `tailor-recommender --dry-run` against the stand-in API server: the loop runs on the cluster's objects and
//! prints every write it would make (a status with the recommendation, the Event on a VPA whose checkpoint it
//! could not restore) as a JSON line on stdout, and the API server receives no write at all: no status, no
//! checkpoint, no Event and no leader Lease, although `--leader-elect` is set.

use std::time::{Duration, Instant};

use serde_json::Value;
use tailor_tests::process::{Process, start_recommender};

use crate::bad_checkpoints::web_and_api_with_a_bad_checkpoint;
use crate::binaries::VPA_API;

/// The stdout lines of `p` that are dry-run writes, parsed.
fn printed(p: &Process) -> Vec<Value> {
    (p.stdout_lines().iter())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// Waits until `p` printed a write satisfying `pred`.
async fn wait_printed(p: &Process, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(w) = printed(p).into_iter().find(|w| pred(w)) {
            return w;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} printed within 20 s; stdout:\n{}\nlogs:\n{}",
            p.stdout_lines().join("\n"),
            p.log_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_every_write_and_sends_none() {
    let server = web_and_api_with_a_bad_checkpoint().await;
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--dry-run",
        "--leader-elect",
        "--leader-elect-lease-namespace",
        "tailor",
    ];
    let (rec, _) = start_recommender(&server, dir.path(), "recommender", &flags);

    let status = wait_printed(&rec, "status of web with a recommendation", |w| {
        w["write"] == "status"
            && w["name"] == "web"
            && w.pointer("/patch/status/recommendation/containerRecommendations/0/target/cpu")
                .is_some()
    })
    .await;
    assert_eq!(status["namespace"], "shop", "{status}");
    let event = wait_printed(&rec, "CheckpointSkipped event on api", |w| {
        w["write"] == "event" && w["reason"] == "CheckpointSkipped"
    })
    .await;
    assert_eq!(event["name"], "api", "{event}");
    assert_eq!(event["action"], "Restore", "{event}");
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|n| n.contains("api.app")),
        "{event}"
    );
    // The skipped checkpoint is named in api's printed status as the real run would write it.
    wait_printed(&rec, "status of api naming the skipped checkpoint", |w| {
        w["write"] == "status"
            && w["name"] == "api"
            && (w
                .pointer("/patch/status/conditions")
                .and_then(Value::as_array))
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "CheckpointSkipped"))
    })
    .await;

    // Two more loops (1 s each): still nothing written, and every line on stdout is a write.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes: Vec<String> = (server.requests().iter())
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert!(writes.is_empty(), "a dry run sent writes: {writes:?}");
    assert!(
        server
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "tailor",
                "tailor-recommender"
            )
            .is_none(),
        "a dry run took the leader lease"
    );
    let vpa = server
        .get(VPA_API, "VerticalPodAutoscaler", "shop", "web")
        .expect("web");
    assert!(
        vpa.get("status").is_none_or(Value::is_null),
        "web got a status: {vpa}"
    );
    let kinds = ["status", "checkpoint", "checkpointDeleted", "event"];
    for w in printed(&rec) {
        assert!(kinds.contains(&w["write"].as_str().unwrap_or("")), "{w}");
    }
}
