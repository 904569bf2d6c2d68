//! `loadgen soak`: valid reviews at a fixed rate while every attack of `admission/tests/attacks.rs` runs
//! against the same server, for a bounded time. Prints one JSON line: the valid reviews' errors and latency,
//! and per attack what was sent and how it was answered. `hack/soak-webhook.sh` adds the server's memory and
//! file descriptors.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full};
use hyper::{Request, body::Bytes};
use serde_json::{Value, json};

use crate::{client_config, connect, load, percentile, review_body};

/// What one attack sent and got back.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    /// HTTP 200 with an AdmissionReview answer for the right uid.
    well_formed: AtomicU64,
    /// HTTP 503 "busy" (large-review slots taken): a fast refusal.
    busy: AtomicU64,
    /// Any other status, a broken connection or an answer that is not a review.
    other: AtomicU64,
    /// Largest answer body.
    max_answer_bytes: AtomicU64,
}

impl Tally {
    fn figures(&self) -> Value {
        json!({
            "sent": self.sent.load(Ordering::Relaxed),
            "well_formed": self.well_formed.load(Ordering::Relaxed),
            "busy_503": self.busy.load(Ordering::Relaxed),
            "other": self.other.load(Ordering::Relaxed),
            "max_answer_bytes": self.max_answer_bytes.load(Ordering::Relaxed),
        })
    }
}

fn review(uid: &str, resource: Value, kind: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": resource["group"], "version": "v1", "kind": kind},
            "resource": resource, "namespace": "ns-0", "operation": "CREATE",
            "userInfo": {"username": "attacker"}, "object": object, "oldObject": null, "dryRun": false
        }
    })
}

fn pod_review(uid: &str, containers: Value) -> Bytes {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "x-", "namespace": "ns-0", "labels": {"app": "w0"}},
        "spec": {"containers": containers}});
    let resource = json!({"group": "", "version": "v1", "resource": "pods"});
    Bytes::from(serde_json::to_vec(&review(uid, resource, "Pod", pod)).unwrap_or_default())
}

fn vpa_review(uid: &str, policies: Value) -> Bytes {
    let vpa = json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "attack", "namespace": "ns-0"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w0"},
            "resourcePolicy": {"containerPolicies": policies}}});
    let resource = json!({"group": "autoscaling.tailor.dev", "version": "v1", "resource": "verticalpodautoscalers"});
    Bytes::from(
        serde_json::to_vec(&review(uid, resource, "VerticalPodAutoscaler", vpa))
            .unwrap_or_default(),
    )
}

/// The attack payloads (built once): name, body, uid, pause between sends.
fn payloads() -> Vec<(&'static str, Bytes, &'static str, Duration)> {
    let long = format!("1.{}", "0".repeat(100_000));
    let quantity_pod = pod_review(
        "quantity-pod",
        json!([{"name": "app", "image": "x", "resources": {"requests": {"cpu": long}}}]),
    );
    let quantity_vpa = vpa_review(
        "quantity-vpa",
        json!([{"containerName": "*", "minAllowed": {"cpu": long}}]),
    );
    let containers: Vec<Value> = (0..53_000)
        .map(|i| json!({"name": format!("container-{i}"), "image": "registry.example/app:1"}))
        .collect();
    let large_pod = pod_review("large-pod", Value::Array(containers));
    let amplified = vpa_review(
        "amplified",
        json!([{"containerName": "*", "controlledResources": vec!["cpu"; 600_000]}]),
    );
    let malformed = pod_review("malformed", json!("x".repeat(4 << 20)));
    vec![
        (
            "quantity_pod",
            quantity_pod,
            "quantity-pod",
            Duration::from_millis(100),
        ),
        (
            "quantity_vpa",
            quantity_vpa,
            "quantity-vpa",
            Duration::from_millis(100),
        ),
        (
            "large_pod",
            large_pod,
            "large-pod",
            Duration::from_millis(200),
        ),
        (
            "amplified_vpa",
            amplified,
            "amplified",
            Duration::from_millis(200),
        ),
        (
            "malformed_field",
            malformed,
            "malformed",
            Duration::from_millis(200),
        ),
    ]
}

/// Sends `body` over one keep-alive connection until `end`, reconnecting when the server closes it.
async fn attack(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    body: Bytes,
    uid: &'static str,
    pause: Duration,
    end: Instant,
    tally: Arc<Tally>,
) {
    let needle = format!("\"uid\":\"{uid}\"");
    let mut sender = None;
    while Instant::now() < end {
        if sender.is_none() {
            sender = connect(addr, config.clone()).await.ok();
        }
        let Some(s) = sender.as_mut() else {
            tokio::time::sleep(pause).await;
            continue;
        };
        let request = Request::post("/")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()));
        let Ok(request) = request else { return };
        tally.sent.fetch_add(1, Ordering::Relaxed);
        let answer = async {
            s.ready().await?;
            let response = s.send_request(request).await?;
            let status = response.status();
            let bytes = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, bytes))
        }
        .await;
        match answer {
            Ok((status, bytes)) => {
                tally
                    .max_answer_bytes
                    .fetch_max(bytes.len() as u64, Ordering::Relaxed);
                let text = String::from_utf8_lossy(&bytes);
                if status.is_success()
                    && text.contains("\"kind\":\"AdmissionReview\"")
                    && text.contains(&needle)
                {
                    tally.well_formed.fetch_add(1, Ordering::Relaxed);
                } else if status == hyper::StatusCode::SERVICE_UNAVAILABLE {
                    tally.busy.fetch_add(1, Ordering::Relaxed);
                } else {
                    tally.other.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                tally.other.fetch_add(1, Ordering::Relaxed);
                sender = None;
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Idle connections the attacker holds: raw TCP that never starts TLS, TLS that never sends HTTP, and HTTP/2
/// after one request. Keeps `per_kind` of each open, reopening what the server closes.
#[derive(Default)]
struct IdleTally {
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    failed_to_open: AtomicU64,
}

async fn hold_idle(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    h2_config: Arc<rustls::ClientConfig>,
    kind: usize,
    backoff: Duration,
    end: Instant,
    tally: Arc<IdleTally>,
) {
    while Instant::now() < end {
        let opened = open_idle(addr, &config, &h2_config, kind).await;
        let Some(closed) = opened else {
            tally.failed_to_open.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff.max(Duration::from_millis(10))).await;
            continue;
        };
        tally.opened.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            _ = closed => { tally.closed_by_server.fetch_add(1, Ordering::Relaxed); }
            _ = tokio::time::sleep_until(end.into()) => return,
        }
        // Reopen after `backoff` (0: at once, a reconnect storm).
        tokio::time::sleep(backoff).await;
    }
}

/// Opens one idle connection of `kind` (0 raw TCP, 1 idle TLS, 2 idle HTTP/2); the future resolves when the
/// server closes it.
async fn open_idle(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    h2_config: &Arc<rustls::ClientConfig>,
    kind: usize,
) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> {
    use tokio::io::AsyncReadExt;
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls_pki_types::ServerName::try_from("localhost").ok()?;
    match kind {
        0 => Some(Box::pin(async move {
            let mut tcp = tcp;
            let mut buf = [0u8; 16];
            while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
        })),
        1 => {
            let mut tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .ok()?;
            Some(Box::pin(async move {
                let mut buf = [0u8; 16];
                while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
            }))
        }
        _ => {
            let tls = tokio_rustls::TlsConnector::from(h2_config.clone())
                .connect(name, tcp)
                .await
                .ok()?;
            let (mut sender, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tls),
            )
            .await
            .ok()?;
            let driver = tokio::spawn(async move {
                let _ = conn.await;
            });
            let request = Request::post("https://localhost/")
                .header("content-type", "application/json")
                .body(Full::new(review_body(0, 50)))
                .ok()?;
            let response = sender.send_request(request).await.ok()?;
            let _ = response.into_body().collect().await;
            Some(Box::pin(async move {
                let _ = driver.await;
                drop(sender);
            }))
        }
    }
}

/// What `loadgen soak` sends.
#[derive(clap::Args)]
pub struct SoakArgs {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long)]
    ca: PathBuf,
    #[arg(long, default_value_t = 180)]
    seconds: u64,
    /// Valid reviews per second.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Keep-alive connections for the valid reviews.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Idle connections held of each kind (raw TCP, idle TLS, idle HTTP/2).
    #[arg(long = "idle", default_value_t = 1000)]
    idle_per_kind: usize,
    /// Milliseconds an idle-connection holder waits before reopening what the server closed (0: a storm).
    #[arg(long, default_value_t = 1000)]
    idle_backoff_ms: u64,
    /// Send the payload attacks (long quantities, large pods, amplification, malformed field).
    #[arg(long = "payloads", default_value_t = true, action = clap::ArgAction::Set)]
    payload_attacks: bool,
    /// Scheduling niceness of the attacker's thread (0-19). In a cluster the attackers' own CPU (encrypting
    /// megabytes, thousands of handshakes) is spent on other machines; 19 keeps it from taking the webhook's
    /// cores on a shared benchmark machine, 0 shares them equally.
    #[arg(long, default_value_t = 19, value_parser = clap::value_parser!(i32).range(0..=19))]
    attacker_nice: i32,
    #[arg(long, default_value_t = 1000)]
    vpas: usize,
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
}

/// Lowers the calling thread's scheduling priority (on Linux niceness is per thread).
fn renice_this_thread(nice: i32) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
        eprintln!("loadgen: could not set the attacker's niceness to {nice}: {e}");
    }
}

/// Runs the soak and prints its figures.
pub async fn soak(args: SoakArgs) -> anyhow::Result<()> {
    let SoakArgs {
        addr,
        ca,
        seconds,
        rate,
        connections,
        idle_per_kind,
        idle_backoff_ms,
        payload_attacks,
        attacker_nice,
        vpas,
        namespaces,
    } = args;
    let idle_backoff = Duration::from_millis(idle_backoff_ms);
    let config = client_config(&ca, b"http/1.1")?;
    let h2_config = client_config(&ca, b"h2")?;
    // The valid client connects first (as the API server's connections are long-lived), then the attacks
    // start, within the valid load's warm-up, and end with it.
    let bodies = Arc::new(
        (0..vpas)
            .map(|i| review_body(i, namespaces))
            .collect::<Vec<_>>(),
    );
    let valid = tokio::spawn(load(
        config.clone(),
        addr,
        bodies,
        connections,
        rate,
        seconds,
        2,
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let end = Instant::now() + Duration::from_secs(seconds + 1);
    // A runtime of its own: the attacker's work (encrypting megabytes) never delays the valid client's sends.
    let attacker = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("attacker")
        .on_thread_start(move || renice_this_thread(attacker_nice))
        .enable_all()
        .build()?;
    let mut attacks = Vec::new();
    let mut tallies = Vec::new();
    let payloads = if payload_attacks {
        payloads()
    } else {
        Vec::new()
    };
    for (name, body, uid, pause) in payloads {
        let tally = Arc::new(Tally::default());
        tallies.push((name, tally.clone()));
        attacks.push(attacker.spawn(attack(addr, config.clone(), body, uid, pause, end, tally)));
    }
    let idle = Arc::new(IdleTally::default());
    for i in 0..idle_per_kind * 3 {
        attacks.push(attacker.spawn(hold_idle(
            addr,
            config.clone(),
            h2_config.clone(),
            i % 3,
            idle_backoff,
            end,
            idle.clone(),
        )));
        if i % 64 == 63 {
            // Open them in waves, not all in the same millisecond.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let valid = valid.await;
    for a in attacks {
        let _ = a.await;
    }
    attacker.shutdown_background();
    let valid = valid??;
    let mut attack_figures = serde_json::Map::new();
    for (name, tally) in tallies {
        attack_figures.insert(name.to_owned(), tally.figures());
    }
    let n = valid.latencies_us.len();
    println!(
        "{}",
        json!({
            "seconds": seconds,
            "attacker_nice": attacker_nice,
            "valid": {
                "rate": rate,
                "answered": n,
                "errors": valid.errors,
                "unpatched": valid.unpatched,
                "p50_ms": percentile(&valid.latencies_us, 50.0),
                "p99_ms": percentile(&valid.latencies_us, 99.0),
                "max_ms": valid.latencies_us.last().map(|&u| u as f64 / 1000.0).unwrap_or(0.0),
                "service_p99_ms": percentile(&valid.service_us, 99.0),
            },
            "attacks": attack_figures,
            "idle_connections": {
                "held_per_kind": idle_per_kind,
                "reopen_backoff_ms": idle_backoff_ms,
                "opened": idle.opened.load(Ordering::Relaxed),
                "closed_by_server": idle.closed_by_server.load(Ordering::Relaxed),
                "failed_to_open": idle.failed_to_open.load(Ordering::Relaxed),
            },
        })
    );
    Ok(())
}
