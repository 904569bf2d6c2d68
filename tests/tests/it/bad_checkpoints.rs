//! The real `tailor-recommender` against the stand-in API server holding a checkpoint its schema no longer
//! admits (written before the schema was tightened, docs/decisions/checkpoints.md): only that VPA's history is
//! skipped, named in its status; the other VPA is restored and checkpointing goes on; the logs stay bounded.

use std::time::Duration;

use serde_json::{Value, json};
use tailor_tests::process::{http_get_body, start_recommender};
use tailor_tests::standin::ApiServer;

use crate::binaries::{VPA_API, namespace, vpa, workload};

const WAIT: Duration = Duration::from_secs(20);

/// Checkpoint `{vpa}.app` in `shop` with the CPU bucket weights `weights` (`{"16": -1}` is one the schema refuses).
fn checkpoint(vpa: &str, weights: Value) -> Value {
    json!({
        "apiVersion": VPA_API, "kind": "VerticalPodAutoscalerCheckpoint",
        "metadata": {"name": format!("{vpa}.app"), "namespace": "shop"},
        "spec": {"vpaObjectName": vpa, "containerName": "app"},
        "status": {"version": "v3", "lastUpdateTime": "2026-01-01T00:00:00Z",
            "firstSampleStart": "2025-12-31T00:00:00Z", "lastSampleStart": "2026-01-01T00:00:00Z",
            "totalSamplesCount": 1440,
            "cpuHistogram": {"bucketWeights": weights, "totalWeight": 12.5,
                "referenceTimestamp": "2026-01-01T00:00:00Z"},
            "memoryHistogram": {"bucketWeights": {"40": 10000}, "totalWeight": 3.0,
                "referenceTimestamp": "2026-01-02T00:00:00Z"}}
    })
}

fn condition(server: &ApiServer, name: &str, type_: &str) -> Option<Value> {
    let v = server.get(VPA_API, "VerticalPodAutoscaler", "shop", name)?;
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// A stand-in with VPAs `web` and `api` in `shop` over their Deployments (running pods and their usage), and
/// api's checkpoint one the schema refuses.
pub(crate) async fn web_and_api_with_a_bad_checkpoint() -> ApiServer {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "200Mi")).unwrap();
    server.load_yaml(&workload("api", "250m", "200Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    server.put(vpa("api", "api")).unwrap();
    server.put(checkpoint("api", json!({"16": -1}))).unwrap();
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_checkpoint_costs_only_its_own_vpas_history() {
    let server = web_and_api_with_a_bad_checkpoint().await;
    server.put(checkpoint("web", json!({"60": 10000}))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (rec, metrics) = start_recommender(&server, dir.path(), "recommender", &[]);

    // `api` names the checkpoint it could not restore.
    let skipped = server
        .wait_for(WAIT, |s| condition(s, "api", "CheckpointSkipped"))
        .await
        .unwrap_or_else(|| {
            panic!(
                "no CheckpointSkipped on api:\n{}",
                rec.log_lines().join("\n")
            )
        });
    assert_eq!(skipped["status"], "True");
    let message = skipped["message"].as_str().unwrap();
    assert!(
        message.contains("api.app") && message.contains("-1"),
        "{message}"
    );
    assert!(condition(&server, "web", "CheckpointSkipped").is_none());
    // And a Warning event on `api` says so to whoever watches events.
    let event = server
        .wait_for(WAIT, |s| {
            s.list("events.k8s.io/v1", "Event", Some("shop"))
                .into_iter()
                .find(|e| e["reason"] == "CheckpointSkipped")
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no CheckpointSkipped event:\n{}",
                rec.log_lines().join("\n")
            )
        });
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["regarding"]["name"], "api", "{event}");
    assert_eq!(
        event["regarding"]["kind"], "VerticalPodAutoscaler",
        "{event}"
    );
    assert!(
        event["note"].as_str().unwrap().contains("api.app"),
        "{event}"
    );
    // Checkpointing goes on for both: `web` from its restored history, `api` from scratch.
    let writes = |s: &ApiServer| {
        let mut names: Vec<String> = s
            .requests()
            .iter()
            .filter(|r| r.verb() == "patch" && r.resource() == "verticalpodautoscalercheckpoints")
            .filter_map(|r| r.target.as_ref().and_then(|t| t.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    };
    // `web` is rewritten when its restored checkpoint ages (`--checkpoints-max-age`, 10 minutes after its
    // 2026 write: at once); `api` at once.
    let both = server
        .wait_for(WAIT, |s| {
            let w = writes(s);
            (w.len() == 2).then_some(w)
        })
        .await;
    assert_eq!(
        both,
        Some(vec!["api.app".to_string(), "web.app".to_string()]),
        "{}",
        rec.log_lines().join("\n")
    );
    let text = http_get_body(metrics, "/metrics").await;
    assert!(
        text.contains("tailor_recommender_errors_total{kind=\"checkpoint_invalid\"} 1"),
        "{text}"
    );
    // Bounded logs: one warning naming the object, no line carrying an object or a list.
    let lines = rec.log_lines();
    let warned: Vec<&String> = lines.iter().filter(|l| l.contains("api.app")).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        lines.iter().all(|l| l.len() < 2048),
        "a log line over 2 KiB: {:?}",
        lines.iter().find(|l| l.len() >= 2048)
    );
}
