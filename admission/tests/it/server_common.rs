//! Shared fixture of the server integration tests: rcgen certificates, the real server on a loopback port,
//! and a real HTTPS client (hyper over rustls, trusting only the test CA).
#![allow(dead_code)]

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, client::conn::http1};
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tailor_admission::{
    certs::{self, CertFiles, GeneratedCerts, MinTlsVersion, Reloader},
    metrics::Metrics,
    review::Reviewer,
    server::{AppState, ConnectionLimits, LargeReviews, Readiness, Server, ShutdownTiming},
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// CA + leaf for `localhost` and 127.0.0.1.
pub fn test_certs() -> GeneratedCerts {
    certs::generate(&["localhost".to_owned(), "127.0.0.1".to_owned()], 2).unwrap()
}

/// A running server and what the tests need to talk to it.
pub struct Running {
    pub webhook: SocketAddr,
    pub ops: SocketAddr,
    pub readiness: Readiness,
    pub metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Shuts the server down gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .unwrap()
                .unwrap();
        }
    }
}

/// Writes `certs` as `tls.crt`/`tls.key` into `dir` and starts the server on loopback ports. `poll` is the
/// reloader's fallback polling period (the directory watch is always on).
pub async fn start(
    reviewer: Arc<dyn Reviewer>,
    dir: &Path,
    certs: &GeneratedCerts,
    readiness: Readiness,
    poll: Duration,
) -> Running {
    let files = CertFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    if !files.cert.exists() {
        std::fs::write(&files.cert, &certs.cert_pem).unwrap();
        std::fs::write(&files.key, &certs.key_pem).unwrap();
    }
    start_with_files(reviewer, files, readiness, poll).await
}

/// Starts the server serving `files` (which must exist).
pub async fn start_with_files(
    reviewer: Arc<dyn Reviewer>,
    files: CertFiles,
    readiness: Readiness,
    poll: Duration,
) -> Running {
    start_with_limits(
        reviewer,
        files,
        readiness,
        poll,
        ConnectionLimits::default(),
    )
    .await
}

/// Starts the server serving `files` (which must exist) with these connection limits.
pub async fn start_with_limits(
    reviewer: Arc<dyn Reviewer>,
    files: CertFiles,
    readiness: Readiness,
    poll: Duration,
    connections: ConnectionLimits,
) -> Running {
    let metrics = Arc::new(Metrics::new());
    let (resolver, reloader) = Reloader::load(files, Some(metrics.clone())).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (watch_tx, watch_rx) = tokio::sync::oneshot::channel::<()>();
    reloader
        .spawn(poll, async move {
            let _ = watch_rx.await;
        })
        .unwrap();
    let tls = Arc::new(certs::server_config(resolver, MinTlsVersion::Tls12).unwrap());
    let state = Arc::new(AppState {
        reviewer,
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        body_timeout: Duration::from_secs(10),
        large_reviews: LargeReviews::default(),
        connections,
    });
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some("127.0.0.1:0".parse().unwrap()),
        tls,
        state,
        ShutdownTiming {
            delay: Duration::ZERO,
            drain: Duration::from_secs(5),
        },
    )
    .await
    .unwrap();
    let webhook = server.webhook_addr().unwrap();
    let ops = server.ops_addr().unwrap();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        let _ = watch_tx.send(());
    });
    Running {
        webhook,
        ops,
        readiness,
        metrics,
        stop: Some(stop_tx),
        task: Some(task),
    }
}

/// An HTTPS/1.1 keep-alive connection to the webhook.
pub struct Client {
    sender: http1::SendRequest<Full<Bytes>>,
    /// Headers of the last response.
    pub last_headers: hyper::HeaderMap,
    /// The end-entity certificate the server presented.
    pub peer_cert: CertificateDer<'static>,
}

/// A TLS client configuration trusting only `ca_pem`.
pub fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(certs::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

impl Client {
    /// Connects (TLS handshake for `localhost`) and starts an HTTP/1.1 connection.
    pub async fn connect(
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> Result<Client, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let tls = TlsConnector::from(config)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .map_err(|e| e.to_string())?;
        let peer_cert = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .ok_or("no peer certificate")?;
        let (sender, conn) = http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Client {
            sender,
            last_headers: Default::default(),
            peer_cert,
        })
    }

    /// POSTs `body` and returns status and body.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let mut req = Request::post(path).header("host", "localhost");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req
            .body(Full::new(body.into()))
            .map_err(|e| e.to_string())?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        self.last_headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }

    /// POSTs an AdmissionReview (JSON) and returns the decoded response review.
    pub async fn review(&mut self, review: &serde_json::Value) -> serde_json::Value {
        let (status, body) = self
            .post(
                "/",
                Some("application/json"),
                serde_json::to_vec(review).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// GETs a path on the plain-HTTP operations listener.
pub async fn get_ops(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The AdmissionReview the API server sends for a pod CREATE.
pub fn pod_create_review(uid: &str, namespace: &str, pod: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "5b4c5a4e-3d0d-4a4e-9a0a-8a4f3a1b2c3d",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
            },
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// The AdmissionReview the API server sends for a Tailor VPA CREATE.
pub fn vpa_create_review(uid: &str, vpa: serde_json::Value) -> serde_json::Value {
    let namespace = vpa["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    serde_json::json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "resource": {"group": "autoscaling.tailor.dev", "version": "v1", "resource": "verticalpodautoscalers"},
            "requestKind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "requestResource": {"group": "autoscaling.tailor.dev", "version": "v1", "resource": "verticalpodautoscalers"},
            "name": vpa["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": vpa,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-client-side-apply"}
        }
    })
}
