//! The webhook under attack (docs/decisions/webhook-hardening.md): each attack, sized to run in seconds,
//! against the real server over real TLS, while a second client sends valid pod reviews. Every attack must get
//! a bounded, well-formed answer (or be cut off, for idle connections), and every valid review sent meanwhile
//! must be answered correctly within 50 ms.
//!
//! One test binary with one test, so that the attacks run one after another and alone on the machine: the
//! latency bound is about the server, not about other tests sharing the two cores.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

#[path = "it/server_common.rs"]
mod server_common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{Value, json};
use server_common::*;
use tailor_admission::{
    certs::CertFiles,
    manifests,
    server::{ConnectionLimits, Readiness},
    webhook::Webhook,
};
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::FeatureGates;
use tailor_testkit::fixtures::PodFixture;
use tokio::io::AsyncReadExt;

/// The bound on each valid review's answer while an attack runs.
const VALID_LATENCY: Duration = Duration::from_millis(50);

/// `shop/web` has a normal recommendation; `neg/web` a negative CPU target another writer put there.
const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
status:
  recommendation:
    containerRecommendations:
      - {containerName: app, target: {cpu: 250m, memory: 256Mi}}
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: neg, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
status:
  recommendation:
    containerRecommendations:
      - {containerName: app, target: {cpu: "-1", memory: 256Mi}}
"#;

fn workload(namespace: &str) -> String {
    format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {namespace}, uid: d-{namespace}}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  template: {{metadata: {{labels: {{app: web}}}}, spec: {{containers: [{{name: app, image: nginx}}]}}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-5d9c
  namespace: {namespace}
  uid: rs-{namespace}
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: d-{namespace}, controller: true}}]
spec:
  selector: {{matchLabels: {{app: web}}}}
  template: {{metadata: {{labels: {{app: web}}}}, spec: {{containers: [{{name: app, image: nginx}}]}}}}
"#
    )
}

fn pod(namespace: &str, containers: Value) -> Value {
    PodFixture::generated(namespace, "web-5d9c-")
        .label("app", "web")
        .owner("ReplicaSet", "web-5d9c")
        .owner_uid(&format!("rs-{namespace}"))
        .containers(containers)
        .json()
}

fn app(requests: Value) -> Value {
    json!([{"name": "app", "image": "nginx", "resources": {"requests": requests}}])
}

fn patch_of(response: &Value) -> Option<Value> {
    let text = response["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A well-formed answer to `uid`: an AdmissionReview response (checked by the client), with that uid.
fn assert_answer(response: &Value, uid: &str) {
    assert_eq!(response["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(response["kind"], "AdmissionReview");
    assert_eq!(response["response"]["uid"], uid);
}

struct Fixture {
    server: Running,
    config: Arc<rustls::ClientConfig>,
    _dir: tempfile::TempDir,
}

async fn start_fixture(limits: ConnectionLimits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let manifest_dir = dir.path().join("manifests");
    std::fs::create_dir(&manifest_dir).unwrap();
    let text = format!("{MANIFESTS}{}{}", workload("shop"), workload("neg"));
    std::fs::write(manifest_dir.join("all.yaml"), text).unwrap();
    let loaded = manifests::load_dir(&manifest_dir).unwrap();
    let webhook = Webhook::new(
        loaded.objects.into_index(),
        FeatureGates::default(),
        PatchOptions::default(),
    );
    let certs = test_certs();
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::write(&files.cert, &certs.cert_pem).unwrap();
    std::fs::write(&files.key, &certs.key_pem).unwrap();
    let server = start_with_limits(
        Arc::new(webhook),
        files,
        Readiness::ready(),
        Duration::from_secs(60),
        limits,
    )
    .await;
    Fixture {
        server,
        config: client_config(&certs.ca_cert_pem),
        _dir: dir,
    }
}

/// Sends valid pod reviews on one keep-alive connection every 10 ms until `stop`, checking each answer (patched
/// to the recommendation); returns how many were sent and the slowest.
async fn valid_load(
    fixture: &Fixture,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (usize, Duration) {
    let mut client = Client::connect(fixture.server.webhook, fixture.config.clone())
        .await
        .unwrap();
    let review = pod_create_review("valid", "shop", pod("shop", app(json!({"cpu": "100m"}))));
    let (mut sent, mut slowest) = (0, Duration::ZERO);
    while !*stop.borrow() {
        let started = Instant::now();
        let response = client.review(&review).await;
        slowest = slowest.max(started.elapsed());
        sent += 1;
        assert_answer(&response, "valid");
        let patch = patch_of(&response).expect("valid reviews are patched");
        assert!(patch.to_string().contains("\"250m\""), "{patch}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (sent, slowest)
}

/// Runs `attack` while valid reviews flow; checks that the valid ones stayed under [`VALID_LATENCY`].
async fn under_attack<F, T>(fixture: &Fixture, name: &str, attack: F) -> T
where
    F: std::future::Future<Output = T>,
{
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let valid = valid_load(fixture, stop_rx);
    let attack = async {
        // Let the valid client connect first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let out = attack.await;
        let _ = stop_tx.send(true);
        out
    };
    let ((sent, slowest), out) = tokio::join!(valid, attack);
    assert!(sent > 0, "{name}: no valid review was sent");
    assert!(
        slowest <= VALID_LATENCY,
        "{name}: a valid review took {slowest:?} (of {sent})"
    );
    eprintln!("{name}: {sent} valid reviews meanwhile, slowest {slowest:?}");
    out
}

/// A quantity whose old normalisation was quadratic: `1.` and `n` zeros.
fn long_quantity(n: usize) -> String {
    format!("1.{}", "0".repeat(n))
}

async fn attack_quantities(fixture: &Fixture) {
    under_attack(fixture, "long quantities", async {
        let mut client = Client::connect(fixture.server.webhook, fixture.config.clone())
            .await
            .unwrap();
        let q = long_quantity(100_000);
        for i in 0..4 {
            let uid = format!("q-pod-{i}");
            let started = Instant::now();
            let review =
                pod_create_review(&uid, "shop", pod("shop", app(json!({"cpu": q.clone()}))));
            let response = client.review(&review).await;
            assert_answer(&response, &uid);
            assert_eq!(response["response"]["allowed"], true);
            assert!(started.elapsed() < Duration::from_secs(1));
        }
        let vpa = json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "q", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "resourcePolicy": {"containerPolicies": [{"containerName": "*", "minAllowed": {"cpu": q}}]}}
        });
        let response = client.review(&vpa_create_review("q-vpa", vpa)).await;
        assert_answer(&response, "q-vpa");
        assert_eq!(response["response"]["allowed"], false);
        let body = response.to_string();
        assert!(body.len() < 4096, "answer of {} bytes", body.len());
    })
    .await;
}

async fn attack_large_pods(fixture: &Fixture) {
    // ~3 MB: 53,000 containers. Four at once, on four connections.
    let containers: Vec<Value> = (0..53_000)
        .map(|i| json!({"name": format!("container-{i}"), "image": "registry.example/app:1"}))
        .collect();
    let review = pod_create_review("big", "shop", pod("shop", Value::Array(containers)));
    let body = hyper::body::Bytes::from(serde_json::to_vec(&review).unwrap());
    assert!(body.len() > 2_500_000, "{}", body.len());
    under_attack(fixture, "large pods", async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (addr, config, body) =
                    (fixture.server.webhook, fixture.config.clone(), body.clone());
                tokio::spawn(async move {
                    let mut client = Client::connect(addr, config).await.unwrap();
                    client.post("/", Some("application/json"), body).await
                })
            })
            .collect();
        let mut answered = 0;
        for task in tasks {
            let Ok((status, answer)) = task.await.unwrap() else {
                // Over the large-body byte budget the server answers 503 and closes the connection
                // without reading the body: a client still sending sees the connection close.
                continue;
            };
            if status == hyper::StatusCode::SERVICE_UNAVAILABLE {
                // Every large-review slot stayed busy: a fast refusal, not a queue.
                continue;
            }
            answered += 1;
            assert_eq!(status, hyper::StatusCode::OK);
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            assert_answer(&answer, "big");
            assert_eq!(answer["response"]["allowed"], true);
            assert!(
                answer["response"].get("patch").is_none(),
                "oversized pods are not sized"
            );
        }
        assert!(answered >= 1, "no large pod was reviewed at all");
    })
    .await;
}

async fn attack_amplified_answer(fixture: &Fixture) {
    // Payloads are built before the valid load starts: the test's own JSON work must not stall the runtime
    // the server shares.
    let resources = vec!["cpu"; 600_000];
    let vpa = json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "amp", "namespace": "shop"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "resourcePolicy": {"containerPolicies": [{"containerName": "*", "controlledResources": resources}]}}
    });
    let amplified = serde_json::to_vec(&vpa_create_review("amp", vpa)).unwrap();
    under_attack(fixture, "controlledResources amplification", async {
        let mut client = Client::connect(fixture.server.webhook, fixture.config.clone())
            .await
            .unwrap();
        let (status, body) = client
            .post("/", Some("application/json"), amplified)
            .await
            .unwrap();
        assert_eq!(status, hyper::StatusCode::OK);
        assert!(body.len() < 4096, "answer of {} bytes", body.len());
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_answer(&answer, "amp");
        assert_eq!(answer["response"]["allowed"], false);
        let causes = answer["response"]["status"]["details"]["causes"]
            .as_array()
            .unwrap();
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0]["reason"], "FieldValueTooMany");

        // Many distinct errors: at most 20 causes, the rest counted in the message.
        let policies: Vec<Value> = (0..400)
            .map(|i| json!({"containerName": format!("c{i}"), "mode": "Sometimes"}))
            .collect();
        let vpa = json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "many", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "resourcePolicy": {"containerPolicies": policies}}
        });
        let answer = client.review(&vpa_create_review("many", vpa)).await;
        assert_answer(&answer, "many");
        let status = &answer["response"]["status"];
        assert_eq!(status["details"]["causes"].as_array().unwrap().len(), 20);
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("and 380 more errors")
        );
    })
    .await;
}

async fn attack_malformed_field(fixture: &Fixture) {
    // A 4 MB string where a pod's containers must be a list: decoding fails, the pod is admitted.
    let mut review = pod_create_review("bad", "shop", pod("shop", json!([])));
    review["request"]["object"]["spec"]["containers"] = json!("x".repeat(4 << 20));
    let malformed = serde_json::to_vec(&review).unwrap();
    under_attack(fixture, "malformed 4 MB field", async {
        let mut client = Client::connect(fixture.server.webhook, fixture.config.clone())
            .await
            .unwrap();
        let (status, body) = client
            .post("/", Some("application/json"), malformed)
            .await
            .unwrap();
        assert_eq!(status, hyper::StatusCode::OK);
        assert!(body.len() < 1024, "answer of {} bytes", body.len());
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_answer(&answer, "bad");
        assert_eq!(answer["response"]["allowed"], true);
    })
    .await;
}

async fn negative_targets_are_never_patched(fixture: &Fixture) {
    let mut client = Client::connect(fixture.server.webhook, fixture.config.clone())
        .await
        .unwrap();
    let review = pod_create_review("neg", "neg", pod("neg", app(json!({"cpu": "100m"}))));
    let answer = client.review(&review).await;
    assert_answer(&answer, "neg");
    assert_eq!(answer["response"]["allowed"], true);
    let patch = patch_of(&answer).map(|p| p.to_string()).unwrap_or_default();
    assert!(!patch.contains("\"-1\""), "{patch}");
    // Memory still follows its (positive) recommendation.
    assert!(patch.contains("256Mi"), "{patch}");
}

/// Opens `n` TCP connections that never start TLS and `n` TLS connections that, in turn, never send a byte of
/// HTTP, send a request head that never ends, or send one request, read its answer and send nothing more.
async fn idle_connections(fixture: &Fixture, n: usize) -> Vec<Box<dyn IdleConn>> {
    use tokio::io::AsyncWriteExt;
    let mut out: Vec<Box<dyn IdleConn>> = Vec::new();
    for i in 0..n {
        out.push(Box::new(
            tokio::net::TcpStream::connect(fixture.server.webhook)
                .await
                .unwrap(),
        ));
        let tcp = tokio::net::TcpStream::connect(fixture.server.webhook)
            .await
            .unwrap();
        let tls = tokio_rustls::TlsConnector::from(fixture.config.clone())
            .connect(
                rustls_pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await;
        // At the limit the server may already have shed the connection during the handshake.
        let Ok(mut tls) = tls else { continue };
        match i % 3 {
            1 => {
                let _ = tls
                    .write_all(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-")
                    .await;
            }
            2 => {
                // A GET is answered at once (405) and the connection kept alive; `closed` reads the answer
                // out before it looks for the close.
                let _ = tls
                    .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await;
            }
            _ => {}
        }
        out.push(Box::new(tls));
    }
    out
}

/// Opens `n` HTTP/2 connections, sends one valid review on each, then leaves them idle (the client keeps
/// answering the server's pings). Returns each connection's driver task, which ends when the server closes.
async fn idle_http2_connections(fixture: &Fixture, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut config = (*fixture.config).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let config = Arc::new(config);
    let mut drivers = Vec::new();
    for i in 0..n {
        let tcp = tokio::net::TcpStream::connect(fixture.server.webhook)
            .await
            .unwrap();
        let tls = tokio_rustls::TlsConnector::from(config.clone())
            .connect(
                rustls_pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        drivers.push(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let uid = format!("h2-{i}");
        let review = pod_create_review(&uid, "shop", pod("shop", app(json!({"cpu": "100m"}))));
        let request = hyper::Request::post("https://localhost/")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(hyper::body::Bytes::from(
                serde_json::to_vec(&review).unwrap(),
            )))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), hyper::StatusCode::OK);
        assert_eq!(response.version(), hyper::Version::HTTP_2);
    }
    drivers
}

/// A connection the attacker holds open; `closed` tells whether the server has closed it.
trait IdleConn: Send {
    fn closed(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>>;
}

impl<S: tokio::io::AsyncRead + Unpin + Send> IdleConn for S {
    fn closed(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let mut buf = [0u8; 512];
            loop {
                match tokio::time::timeout(Duration::from_millis(10), self.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return true,
                    // What the server sent before closing (an answer to an earlier request).
                    Ok(Ok(_)) => {}
                    Err(_) => return false,
                }
            }
        })
    }
}

async fn attack_idle_connections() {
    let limits = ConnectionLimits {
        max_connections: 64,
        idle_timeout: Duration::from_millis(400),
        handshake_timeout: Duration::from_millis(400),
        // The storm guard has its own unit test; here every connection must reach the limit logic.
        handshakes_per_second: 100_000,
        handshake_burst: 100_000,
        ..ConnectionLimits::default()
    };
    let fixture = start_fixture(limits).await;
    let mut idle = under_attack(&fixture, "idle connections", async {
        // Four times the limit: the oldest idle ones are shed, new clients still get in.
        idle_connections(&fixture, 128).await
    })
    .await;
    assert!(idle.len() >= 128, "raw TCP connections always connect");
    let h2 = idle_http2_connections(&fixture, 8).await;
    // Past the idle timeout every one of them has been closed by the server.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut open = 0;
    for conn in &mut idle {
        if !conn.closed().await {
            open += 1;
        }
    }
    assert_eq!(open, 0, "{open} idle connections still open");
    // HTTP/2 connections that answer the server's pings but send no request are idle too.
    for conn in h2 {
        assert!(
            conn.is_finished(),
            "an idle HTTP/2 connection is still open"
        );
    }
    let metrics = fixture.server.metrics.encode();
    for reason in ["shed", "idle"] {
        assert!(
            metrics.contains(&format!(
                "tailor_admission_connections_closed_total{{reason=\"{reason}\"}}"
            )),
            "no connection closed as {reason}:\n{metrics}"
        );
    }
    // And the probes answered throughout on their own runtime.
    let (status, _) = get_ops(fixture.server.ops, "/healthz").await;
    assert_eq!(status, hyper::StatusCode::OK);
    fixture.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_gets_a_bounded_answer_and_valid_reviews_stay_fast() {
    let fixture = start_fixture(ConnectionLimits::default()).await;
    negative_targets_are_never_patched(&fixture).await;
    attack_quantities(&fixture).await;
    attack_amplified_answer(&fixture).await;
    attack_malformed_field(&fixture).await;
    attack_large_pods(&fixture).await;
    let (status, _) = get_ops(fixture.server.ops, "/healthz").await;
    assert_eq!(status, hyper::StatusCode::OK);
    fixture.server.stop().await;
    attack_idle_connections().await;
}
