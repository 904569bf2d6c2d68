//! The `tailor-admission` binary itself, in standalone mode: flags, readiness, a patched pod over TLS, and a
//! graceful exit on SIGTERM (not ready during the shutdown delay, then exit 0).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::server_common::*;
use hyper::StatusCode;
use serde_json::{Value, json};

const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: shop}
spec:
  targetRef: {apiVersion: apps/v1, kind: StatefulSet, name: db}
status:
  recommendation:
    containerRecommendations:
      - {containerName: db, target: {cpu: 500m, memory: 1Gi}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  selector: {matchLabels: {app: db}}
  serviceName: db
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
"#;

#[tokio::test]
async fn standalone_binary_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let certs = test_certs();
    std::fs::write(dir.path().join("tls.crt"), &certs.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &certs.key_pem).unwrap();
    std::fs::create_dir(dir.path().join("vpas")).unwrap();
    std::fs::write(dir.path().join("vpas/db.yaml"), MANIFESTS).unwrap();

    /// Kills the server if the test fails before it exits (its stderr pipe would keep the harness waiting).
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Command::new(env!("CARGO_BIN_EXE_tailor-admission"))
        .args([
            "--bind-address",
            "127.0.0.1",
            "--port",
            "0",
            "--address",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-private-key")
        .arg(dir.path().join("tls.key"))
        .arg("--vpa-dir")
        .arg(dir.path().join("vpas"))
        .args([
            "--reload-cert",
            "--min-tls-version",
            "tls1_3",
            "--webhook-timeout-seconds=5",
            "--tls-ciphers=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ])
        .args(["--shutdown-delay-seconds", "1", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);

    // The "serving" log line names the bound addresses.
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let serving = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("no 'serving' log line");
        if line["message"] == "serving" {
            break line;
        }
    };
    let webhook: std::net::SocketAddr = serving["webhook"].as_str().unwrap().parse().unwrap();
    let ops: std::net::SocketAddr = serving["metrics"].as_str().unwrap().parse().unwrap();

    assert_eq!(get_ops(ops, "/readyz").await.0, StatusCode::OK);
    let mut client = Client::connect(webhook, client_config(&certs.ca_cert_pem))
        .await
        .unwrap();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "labels": {"app": "db"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s", "controller": true}]},
        "spec": {"containers": [{"name": "db", "image": "postgres"}]}
    });
    let out = client
        .review(&pod_create_review("b-1", "shop", pod.clone()))
        .await;
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(out["response"]["patch"].as_str().unwrap())
        .unwrap();
    let mut patched = pod.clone();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1Gi"}})
    );
    // The next pod of the StatefulSet has the same sizing inputs: the same patch, from the patch memo.
    let mut next = pod.clone();
    next["metadata"]["name"] = json!("db-1");
    let again = client
        .review(&pod_create_review("b-1b", "shop", next.clone()))
        .await;
    assert_eq!(again["response"]["patch"], out["response"]["patch"]);
    let memo_hits = || async {
        let (_, metrics) = get_ops(ops, "/metrics").await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("tailor_admission_patch_memo_hits_total "))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .expect("patch memo metrics on /metrics")
    };
    assert_eq!(memo_hits().await, 1);
    let pod = next;

    // Standalone mode re-reads the directory: a VPA added now governs the next pod.
    let agent_manifests = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: agent, namespace: shop}
spec:
  targetRef: {apiVersion: apps/v1, kind: DaemonSet, name: agent}
status:
  recommendation:
    containerRecommendations:
      - {containerName: agent, target: {cpu: 50m, memory: 64Mi}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: fluent-bit}]}
"#;
    std::fs::write(dir.path().join("vpas/agent.yaml.tmp"), agent_manifests).unwrap();
    std::fs::rename(
        dir.path().join("vpas/agent.yaml.tmp"),
        dir.path().join("vpas/agent.yaml"),
    )
    .unwrap();
    let agent = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-x", "namespace": "shop", "labels": {"app": "agent"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d", "controller": true}]},
        "spec": {"containers": [{"name": "agent", "image": "fluent-bit"}]}
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = client
            .review(&pod_create_review("b-2", "shop", agent.clone()))
            .await;
        if out["response"]["patch"].is_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the added manifest was not picked up: {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The reload made new VPA objects: the StatefulSet's next pod is sized again, to the same patch.
    let after_reload = client
        .review(&pod_create_review("b-3", "shop", pod.clone()))
        .await;
    assert_eq!(after_reload["response"]["patch"], out["response"]["patch"]);
    assert_eq!(memo_hits().await, 1);

    // SIGTERM: not ready during the delay, then a clean exit.
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_millis(800);
    let mut saw_not_ready = false;
    while Instant::now() < deadline && !saw_not_ready {
        saw_not_ready = get_ops(ops, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_not_ready, "/readyz stayed ready after SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit within 15 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
}
