//! The real server over real TLS: request rules (content type, size cap, malformed reviews), health,
//! readiness and metrics. The review logic here is a small stand-in; `server_admission.rs` runs the real one.

use std::{sync::Arc, time::Duration};

use crate::server_common::*;
use hyper::StatusCode;
use serde_json::{Value, json};
use tailor_admission::{
    review::{Review, ReviewResult, Reviewed, Reviewer},
    server::Readiness,
};
use tailor_testkit::fixtures::PodFixture;

/// Patches every pod with one annotation; denies every VPA.
struct Stub;

impl Reviewer for Stub {
    fn review_pod(&self, review: &Review<'_>) -> Reviewed {
        let req = &review.request;
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/annotations/stub", "value": "yes"}
        ]))
        .unwrap();
        Reviewed {
            response: req.response().with_patch(patch).unwrap(),
            result: ReviewResult::Patched,
        }
    }
    fn review_vpa(&self, review: &Review<'_>) -> Reviewed {
        let req = &review.request;
        Reviewed {
            response: req.response().deny("stub says no"),
            result: ReviewResult::Denied,
        }
    }
}

fn pod() -> Value {
    PodFixture::new("default", "p")
        .annotations(json!({}))
        .container_resources("c", Value::Null)
        .image("busybox")
        .json()
}

#[tokio::test]
async fn request_rules_health_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let certs = test_certs();
    let readiness = Readiness::new();
    let server = start(
        Arc::new(Stub),
        dir.path(),
        &certs,
        readiness.clone(),
        Duration::from_secs(60),
    )
    .await;

    // Health is always fine; readiness waits for the caches.
    assert_eq!(get_ops(server.ops, "/healthz").await.0, StatusCode::OK);
    assert_eq!(
        get_ops(server.ops, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    readiness.set_synced();
    assert_eq!(get_ops(server.ops, "/readyz").await.0, StatusCode::OK);

    let config = client_config(&certs.ca_cert_pem);
    let mut client = Client::connect(server.webhook, config.clone())
        .await
        .unwrap();

    // A pod review on any path; the patch comes back base64 and applies.
    let review = pod_create_review("uid-1", "default", pod());
    let out = client.review(&review).await;
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(out["response"]["uid"], "uid-1");
    assert_eq!(out["response"]["allowed"], true);
    assert_eq!(out["response"]["patchType"], "JSONPatch");
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(out["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut patched = pod();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["metadata"]["annotations"]["stub"], "yes");

    // Charset parameters are fine, and the same keep-alive connection carries on.
    let (status, body) = client
        .post(
            "/mutate-pods",
            Some("application/json; charset=utf-8"),
            serde_json::to_vec(&review).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));

    // Malformed bodies: a well-formed allowed review, uid kept when readable.
    for (body, uid) in [
        (b"{not json".to_vec(), ""),
        (b"{}".to_vec(), ""),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-9","operation":"CREATE"}}"#.to_vec(), "u-9"),
    ] {
        let (status, body) = client.post("/", Some("application/json"), body).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let out: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(out["response"], json!({"uid": uid, "allowed": true}));
    }

    // Wrong or missing content type.
    for ct in [Some("text/plain"), Some("application/yaml"), None] {
        let (status, _) = client
            .post("/", ct, serde_json::to_vec(&review).unwrap())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
    }

    // Over 5 MiB: 413 with upstream's message, from the declared length, before any of the body is read.
    let answer = declared_too_large(server.webhook, config.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.ends_with("\r\n\r\nrequest payload too large"),
        "{answer}"
    );
    // Exactly 5 MiB is still read (and is malformed here).
    let mut client = Client::connect(server.webhook, config.clone())
        .await
        .unwrap();
    let mut edge = b"{}".to_vec();
    edge.resize(5 * 1024 * 1024, b' ');
    let (status, _) = client
        .post("/", Some("application/json"), edge)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);

    // VPA rejection passes through with allowed: false.
    let vpa = json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "v", "namespace": "default"}, "spec": {}});
    let out = client.review(&vpa_create_review("uid-v", vpa)).await;
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["message"], "stub says no");

    // Metrics count all of it.
    let (status, text) = get_ops(server.ops, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(r#"tailor_admission_reviews_total{resource="pod",result="patched"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tailor_admission_reviews_total{resource="vpa",result="denied"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tailor_admission_reviews_total{resource="other",result="malformed"} 4"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tailor_admission_requests_rejected_total{reason="content_type"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tailor_admission_requests_rejected_total{reason="too_large"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"tailor_admission_review_duration_seconds_count{resource="pod"} 2"#),
        "{text}"
    );

    server.stop().await;
}

#[tokio::test]
async fn http2_via_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let certs = test_certs();
    let server = start(
        Arc::new(Stub),
        dir.path(),
        &certs,
        Readiness::ready(),
        Duration::from_secs(60),
    )
    .await;
    let mut config = (*client_config(&certs.ca_cert_pem)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.webhook)
        .await
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls_pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let body = serde_json::to_vec(&pod_create_review("uid-h2", "default", pod())).unwrap();
    let req = hyper::Request::post("https://localhost/")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    use http_body_util::BodyExt as _;
    let out: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(out["response"]["uid"], "uid-h2");
    server.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_reports_not_ready_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let certs = test_certs();
    let server = start(
        Arc::new(Stub),
        dir.path(),
        &certs,
        Readiness::ready(),
        Duration::from_secs(60),
    )
    .await;
    let addr = server.webhook;
    let readiness = server.readiness.clone();
    // Once stopping, kept-alive connections are told to close so the client moves to another replica.
    let mut client = Client::connect(addr, client_config(&certs.ca_cert_pem))
        .await
        .unwrap();
    client
        .post("/", Some("application/json"), "{}")
        .await
        .unwrap();
    assert!(client.last_headers.get("connection").is_none());
    readiness.set_stopping();
    client
        .post("/", Some("application/json"), "{}")
        .await
        .unwrap();
    assert_eq!(
        client
            .last_headers
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close"),
        "{:?}",
        client.last_headers
    );
    server.stop().await;
    assert!(!readiness.is_ready());
    let config = client_config(&certs.ca_cert_pem);
    assert!(
        Client::connect(addr, config).await.is_err(),
        "listener closed after shutdown"
    );
}

/// Sends the head of a request declaring a body of 5 MiB + 1 byte, and none of the body, on a fresh connection;
/// returns the server's answer as text. (Sending the body too races the server's answer: it answers from the
/// head and closes the connection, which a client still writing sees as a reset; a client on the same thread as
/// the server used to finish writing first.)
async fn declared_too_large(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        5 * 1024 * 1024 + 1
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while !answer.ends_with(b"request payload too large") {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// `--connection-threads 2`: connections served on two single-threaded runtimes of their own answer reviews
/// as the default runtime does, on several keep-alive connections at once.
#[tokio::test]
async fn connection_threads_serve_reviews() {
    let dir = tempfile::tempdir().unwrap();
    let certs = test_certs();
    let files = tailor_admission::certs::CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::write(&files.cert, &certs.cert_pem).unwrap();
    std::fs::write(&files.key, &certs.key_pem).unwrap();
    let readiness = Readiness::new();
    readiness.set_synced();
    let server = start_with_limits(
        Arc::new(Stub),
        files,
        readiness,
        Duration::from_secs(60),
        tailor_admission::server::ConnectionLimits {
            threads: 2,
            ..Default::default()
        },
    )
    .await;
    let config = client_config(&certs.ca_cert_pem);
    for c in 0..4 {
        let mut client = Client::connect(server.webhook, config.clone())
            .await
            .unwrap();
        for i in 0..3 {
            let uid = format!("uid-{c}-{i}");
            let out = client
                .review(&pod_create_review(&uid, "default", pod()))
                .await;
            assert_eq!(out["response"]["uid"], uid.as_str());
            assert_eq!(out["response"]["patchType"], "JSONPatch", "{out}");
        }
    }
}
