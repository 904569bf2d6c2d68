//! The real `tailor-admission` sizing a Job pod's retry after an OOM kill (docs/jobs.md): it lists the Job's
//! failed pods by the Job's uid label, raises the memory of the container that was OOM-killed by the OOM rule,
//! and writes an `OOMRetryBump` Event on the VPA.

use std::time::Duration;

use serde_json::{Value, json};
use tailor_testkit::fixtures::PodFixture;
use tailor_tests::process::{http_get_body, post_review, start_admission, wait_admission_ready};
use tailor_tests::standin::ApiServer;
use tailor_tests::standin::tls::TestCa;

use crate::binaries::{namespace, pod_review as review};

const WAIT: Duration = Duration::from_secs(15);

const JOBS: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop, uid: uid-nightly}
spec:
  schedule: "* * * * *"
  jobTemplate: {spec: {template: {metadata: {labels: {app: nightly}},
    spec: {restartPolicy: Never, containers: [{name: task, image: busybox}]}}}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: nightly-1
  namespace: shop
  uid: uid-nightly-1
  ownerReferences: [{apiVersion: batch/v1, kind: CronJob, name: nightly, uid: uid-nightly, controller: true}]
spec:
  template: {metadata: {labels: {app: nightly}}, spec: {restartPolicy: Never, containers: [{name: task, image: busybox}]}}
"#;

/// A pod of Job `nightly-1`; `phase` and the container's termination reason when it has ended.
fn job_pod(name: &str, memory: &str, ended: Option<&str>) -> Value {
    let memory = json!({"memory": memory});
    let pod = PodFixture::new("shop", name)
        .label("app", "nightly")
        .label("batch.kubernetes.io/controller-uid", "uid-nightly-1")
        .label("batch.kubernetes.io/job-name", "nightly-1")
        .owner("Job", "nightly-1")
        .spec_fields(json!({"restartPolicy": "Never"}))
        .container("task", memory.clone(), memory)
        .image("busybox");
    match ended {
        Some(reason) => pod.phase("Failed").container_status(json!({"name": "task",
            "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": reason}}})),
        None => pod,
    }
    .json()
}

/// The memory request the answer's patch sets on the first container.
fn patched_memory(answer: &Value) -> Option<String> {
    use base64::Engine as _;
    let patch = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .ok()?;
    let ops: Vec<Value> = serde_json::from_slice(&bytes).ok()?;
    (ops.iter())
        .find(|op| op["path"] == "/spec/containers/0/resources/requests/memory")
        .and_then(|op| op["value"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_retry_after_an_oom_kill_gets_more_memory_and_an_event() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(JOBS).unwrap();
    server
        .put(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "nightly", "namespace": "shop", "uid": "uid-vpa"},
            "spec": {"targetRef": {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"},
                     "updatePolicy": {"updateMode": "Recreate"},
                     "resourcePolicy": {"containerPolicies": [
                         {"containerName": "*", "maxAllowed": {"memory": "1Gi"}}]}},
            "status": {"recommendation": {"containerRecommendations": [
                {"containerName": "task", "target": {"cpu": "100m", "memory": "256Mi"}}]}}
        }))
        .unwrap();
    // One attempt OOM-killed at 256Mi, one that failed for another reason at a larger size.
    server
        .put(job_pod("nightly-1-a", "256Mi", Some("OOMKilled")))
        .unwrap();
    server
        .put(job_pod("nightly-1-b", "900Mi", Some("Error")))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(&server, dir.path(), "admission", &cert, &[]).await;
    wait_admission_ready(&adm, &addrs, WAIT).await;

    let mut retry = job_pod("", "256Mi", None);
    retry["metadata"]["generateName"] = json!("nightly-1-");
    let answer = post_review(addrs.webhook, &ca.ca_pem, &review("r-1", &retry)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let memory = patched_memory(&answer);
    assert_eq!(memory.as_deref(), Some("356Mi"), "256Mi + 100Mi: {answer}");
    let event = server
        .wait_for(WAIT, |s| {
            s.list("events.k8s.io/v1", "Event", Some("shop"))
                .into_iter()
                .find(|e| e["reason"] == "OOMRetryBump")
        })
        .await
        .unwrap_or_else(|| panic!("no OOMRetryBump event:\n{}", adm.log_lines().join("\n")));
    assert_eq!(event["regarding"]["name"], "nightly", "{event}");
    assert_eq!(
        event["related"]["name"], "nightly-1-a",
        "the attempt bumped: {event}"
    );
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("nightly-1-* of Job nightly-1") && note.contains("256Mi -> 356Mi"),
        "{event}"
    );
    // One list of the Job's failed pods, by its uid label and phase, one page.
    let lists: Vec<_> = (server.requests().into_iter())
        .filter(|r| r.user == "admission" && r.verb() == "list" && r.resource() == "pods")
        .map(|r| r.query)
        .collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    let q = |k: &str| lists[0].get(k).map(String::as_str);
    assert_eq!(
        (q("labelSelector"), q("fieldSelector"), q("limit")),
        (
            Some("batch.kubernetes.io/controller-uid=uid-nightly-1"),
            Some("status.phase=Failed"),
            Some("100")
        ),
        "{lists:?}"
    );
    let metrics = http_get_body(addrs.ops, "/metrics").await;
    for line in [
        "tailor_admission_oom_retry_bumps_total 1",
        "tailor_admission_job_failed_pod_reads_total{result=\"read\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing:\n{metrics}"
        );
    }
}
