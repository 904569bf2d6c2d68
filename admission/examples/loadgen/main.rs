//! Load generator for the webhook benchmark (`hack/bench-webhook.sh`).
//!
//! `loadgen setup --dir DIR --vpas N` writes a CA + serving certificate and N Tailor VPAs (each with its
//! Deployment and ReplicaSet, spread over namespaces) for `tailor-admission --vpa-dir`.
//! `loadgen run --addr HOST:PORT --ca DIR/ca.crt …` sends pod-CREATE AdmissionReviews over TLS keep-alive
//! connections, either as fast as possible (`--rate 0`, closed loop) or at a fixed rate (open loop; latency is
//! measured from each request's scheduled start, so a stalled server is not hidden). It checks every answer
//! (HTTP 200, `allowed: true`, a patch) and prints one JSON line of figures.
//! `loadgen soak …` does the same at a fixed rate while every attack of `admission/tests/attacks.rs` runs
//! (`hack/soak-webhook.sh`).
//! `loadgen cold --dir DIR` makes reviews one at a time after other data filled the caches, for counting
//! under callgrind (`hack/bench-review-cachegrind.sh`).
//! `loadgen handshakes --addr HOST:PORT --ca DIR/ca.crt --connections N --concurrency C` opens N fresh TLS
//! connections, at most C at a time, each with a full handshake (no session resumption, as the API server's
//! client) and one review, and counts the ones the server refused (`hack/bench-handshakes.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::{Request, body::Bytes, client::conn::http1};
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::json;

mod fixture;
mod pods;
mod soak;

/// The webhook's allocator (see `tailor-admission`'s binary), so that what `micro` times and `cold` counts
/// is the review as the shipped binary runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use fixture::workload;

use pods::{PodShape, review_body, review_body_of};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write certificates and manifests.
    Setup {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 1000)]
        vpas: usize,
        #[arg(long, default_value_t = 50)]
        namespaces: usize,
    },
    /// In-process cost of one review (decode, match, patch, encode), no TLS or HTTP: one thread.
    Micro {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 20000)]
        iterations: usize,
        #[arg(long, default_value_t = 1000)]
        vpas: usize,
        #[arg(long, default_value_t = 50)]
        namespaces: usize,
        /// The pod the reviews carry.
        #[arg(long, value_enum, default_value_t = PodShape::Small)]
        pod: PodShape,
        /// MiB written between two reviews of the cold step (which runs iterations / 20 reviews), so that each
        /// review starts with the caches holding someone else's data, as a review at a steady rate does.
        #[arg(long, default_value_t = 32)]
        evict_mib: usize,
    },
    /// Reviews made one at a time after other data filled the caches, to be counted under callgrind
    /// (`hack/bench-review-cachegrind.sh`): every workload is reviewed twice first (the patch memo filled),
    /// then `reviews` reviews, each after `evict_mib` MiB written. Only `cold_review` is meant to be counted.
    Cold {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 50)]
        reviews: usize,
        #[arg(long, default_value_t = 1000)]
        vpas: usize,
        #[arg(long, default_value_t = 50)]
        namespaces: usize,
        /// The pod the reviews carry.
        #[arg(long, value_enum, default_value_t = PodShape::Realistic)]
        pod: PodShape,
        #[arg(long, default_value_t = 8)]
        evict_mib: usize,
        /// Without the patch memo: every review sizes its pod.
        #[arg(long)]
        memo_off: bool,
    },
    /// Send reviews and report throughput and latency.
    Run {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        ca: PathBuf,
        /// Keep-alive connections.
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Total requests per second over all connections; 0 = as fast as possible.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Measurement time in seconds (after the warm-up).
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Warm-up time in seconds (not measured).
        #[arg(long, default_value_t = 2)]
        warmup: u64,
        /// Must match `setup`.
        #[arg(long, default_value_t = 1000)]
        vpas: usize,
        #[arg(long, default_value_t = 50)]
        namespaces: usize,
        /// Label of the run in the output.
        #[arg(long, default_value = "")]
        label: String,
        /// The pod the reviews carry.
        #[arg(long, value_enum, default_value_t = PodShape::Small)]
        pod: PodShape,
    },
    /// Valid reviews at a fixed rate while the attacks run; one JSON line of figures.
    Soak(soak::SoakArgs),
    /// Fresh connections: each a full TLS handshake and (unless `--review false`) one pod review, then closed.
    Handshakes {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        ca: PathBuf,
        /// Connections to open in all.
        #[arg(long, default_value_t = 5000)]
        connections: usize,
        /// Connections in progress at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Send one review on each connection (false: close right after the handshake).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        review: bool,
        /// Must match `setup`.
        #[arg(long, default_value_t = 1000)]
        vpas: usize,
        #[arg(long, default_value_t = 50)]
        namespaces: usize,
        /// Label of the run in the output.
        #[arg(long, default_value = "")]
        label: String,
    },
}

fn setup(dir: PathBuf, vpas: usize, namespaces: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("manifests"))?;
    let certs = tailor_admission::certs::generate(&["localhost".into(), "127.0.0.1".into()], 7)?;
    std::fs::write(dir.join("ca.crt"), &certs.ca_cert_pem)?;
    std::fs::write(dir.join("tls.crt"), &certs.cert_pem)?;
    std::fs::write(dir.join("tls.key"), &certs.key_pem)?;
    let out = fixture::manifests(vpas, namespaces);
    std::fs::write(dir.join("manifests/bench.yaml"), out)?;
    println!(
        "wrote {vpas} VPAs in {namespaces} namespaces and certificates to {}",
        dir.display()
    );
    Ok(())
}

async fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// [`connect`], retried for up to a second (a server under a reconnect storm refuses some connections).
async fn reconnect(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let mut last = None;
    for _ in 0..20 {
        match connect(addr, config.clone()).await {
            Ok(sender) => return Ok(sender),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("cannot connect to {addr}")))
}

#[derive(Default)]
struct Stats {
    latencies_us: Vec<u32>,
    /// From the moment the request is handed to the connection (excludes the client timer's lateness).
    service_us: Vec<u32>,
    errors: u64,
    unpatched: u64,
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    bodies: Arc<Vec<Bytes>>,
    offset: usize,
    mut ticks: Option<tokio::sync::mpsc::UnboundedReceiver<Instant>>,
    measure_from: Instant,
    end: Instant,
) -> anyhow::Result<Stats> {
    let mut sender = reconnect(addr, &config).await?;
    let mut stats = Stats::default();
    let mut n = 0usize;
    loop {
        let scheduled = match ticks.as_mut() {
            Some(ticks) => match ticks.recv().await {
                Some(at) => at,
                None => break,
            },
            None => {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                now
            }
        };
        let body = bodies[(offset + n) % bodies.len()].clone();
        n += 1;
        let req = Request::post("/mutate-pods")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body))?;
        let sent = Instant::now();
        let result = async {
            sender.ready().await?;
            let resp = sender.send_request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        }
        .await;
        let done = Instant::now();
        if scheduled < measure_from {
            if result.is_err() {
                sender = reconnect(addr, &config).await?;
            }
            continue;
        }
        match result {
            Ok((status, body)) if status.is_success() => {
                let text = &body[..];
                let allowed = memchr(text, b"\"allowed\":true");
                let patched = memchr(text, b"\"patch\":");
                if !allowed {
                    stats.errors += 1;
                } else if !patched {
                    stats.unpatched += 1;
                }
                stats.latencies_us.push(
                    done.duration_since(scheduled)
                        .as_micros()
                        .min(u32::MAX as u128) as u32,
                );
                stats
                    .service_us
                    .push(done.duration_since(sent).as_micros().min(u32::MAX as u128) as u32);
            }
            Ok(_) => stats.errors += 1,
            Err(_) => {
                stats.errors += 1;
                sender = reconnect(addr, &config).await?;
            }
        }
    }
    Ok(stats)
}

fn memchr(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

#[allow(clippy::too_many_arguments)]
async fn run(
    addr: SocketAddr,
    ca: PathBuf,
    connections: usize,
    rate: u64,
    seconds: u64,
    warmup: u64,
    vpas: usize,
    namespaces: usize,
    label: String,
    pod: PodShape,
) -> anyhow::Result<()> {
    let config = client_config(&ca, b"http/1.1")?;
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..vpas)
            .map(|i| review_body_of(pod, i, namespaces))
            .collect(),
    );
    let body_bytes = bodies.first().map(|b| b.len()).unwrap_or(0);
    let all = load(config, addr, bodies, connections, rate, seconds, warmup).await?;
    let n = all.latencies_us.len();
    let figures = json!({
        "label": label,
        "pod": pod.as_str(),
        "connections": connections,
        "target_rate": rate,
        "seconds": seconds,
        "request_bytes": body_bytes,
        "requests": n,
        "errors": all.errors,
        "unpatched": all.unpatched,
        "reviews_per_second": (n as f64 / seconds as f64).round(),
        "p50_ms": percentile(&all.latencies_us, 50.0),
        "p90_ms": percentile(&all.latencies_us, 90.0),
        "p99_ms": percentile(&all.latencies_us, 99.0),
        "p999_ms": percentile(&all.latencies_us, 99.9),
        "max_ms": all.latencies_us.last().map(|&u| u as f64 / 1000.0).unwrap_or(0.0),
        // Open loop: tokio's 1 ms timer makes sends up to ~1 ms late; these exclude that lateness.
        "service_p50_ms": percentile(&all.service_us, 50.0),
        "service_p99_ms": percentile(&all.service_us, 99.0),
    });
    println!("{figures}");
    Ok(())
}

/// A TLS client configuration trusting the CA in `ca`, offering one ALPN protocol.
fn client_config(ca: &std::path::Path, alpn: &[u8]) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(tailor_admission::certs::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// Open loop: hands each connection its next scheduled send time, round robin, from an OS thread that sleeps
/// with the kernel's high-resolution timer (tokio's timer wheel has 1 ms ticks: pacing with it made every send
/// up to a millisecond late, and that lateness counted as the server's latency). A connection still busy with
/// its previous review finds the tick waiting, so queueing is measured from the scheduled time.
fn pace(
    senders: Vec<tokio::sync::mpsc::UnboundedSender<Instant>>,
    start: Instant,
    every: Duration,
    end: Instant,
) {
    let mut next = start;
    for c in (0..senders.len()).cycle() {
        next += every;
        if next >= end {
            break;
        }
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if senders[c].send(next).is_err() {
            break;
        }
    }
}

/// Valid pod reviews over `connections` keep-alive connections, closed loop (`rate` 0) or open loop; the
/// measured part starts after `warmup` seconds and lasts `seconds`. Latencies come back sorted.
async fn load(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    bodies: Arc<Vec<Bytes>>,
    connections: usize,
    rate: u64,
    seconds: u64,
    warmup: u64,
) -> anyhow::Result<Stats> {
    // Open loop: one send every `every`, spread over the connections in turn.
    let every = (rate > 0).then(|| Duration::from_secs_f64(1.0 / rate as f64));
    let start = Instant::now() + Duration::from_millis(200);
    let measure_from = start + Duration::from_secs(warmup);
    let end = measure_from + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    let mut senders = Vec::new();
    for c in 0..connections {
        let ticks = every.map(|_| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            senders.push(tx);
            rx
        });
        tasks.push(tokio::spawn(worker(
            addr,
            config.clone(),
            bodies.clone(),
            c * 7919,
            ticks,
            measure_from,
            end,
        )));
    }
    if let Some(every) = every {
        std::thread::Builder::new()
            .name("pacer".into())
            .spawn(move || pace(senders, start, every, end))?;
    }
    let mut all = Stats::default();
    for t in tasks {
        let s = t.await??;
        all.latencies_us.extend(s.latencies_us);
        all.service_us.extend(s.service_us);
        all.errors += s.errors;
        all.unpatched += s.unpatched;
    }
    all.latencies_us.sort_unstable();
    all.service_us.sort_unstable();
    Ok(all)
}

/// What became of the connections of `loadgen handshakes`.
#[derive(Default)]
struct Fresh {
    /// Handshake done (and the review answered with a patch, when sent).
    completed: u64,
    /// TCP connected, then closed or reset by the server before the TLS handshake finished: the server's
    /// refusal (`too_fast` or at the connection limit).
    refused: u64,
    /// TCP connect failed (a client-side limit such as ephemeral ports, or the server's backlog).
    connect_errors: u64,
    /// Handshake done, but the review failed or was not a patch.
    review_errors: u64,
}

async fn fresh_connection(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    body: Option<Bytes>,
    fresh: &mut Fresh,
) {
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        fresh.connect_errors += 1;
        return;
    };
    let _ = tcp.set_nodelay(true);
    let Ok(name) = ServerName::try_from("localhost") else {
        fresh.connect_errors += 1;
        return;
    };
    let Ok(tls) = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
    else {
        fresh.refused += 1;
        return;
    };
    let Some(body) = body else {
        fresh.completed += 1;
        return;
    };
    let answered = async {
        let (mut sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
        let conn = tokio::spawn(conn);
        let req = Request::post("/mutate-pods")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        drop(sender);
        let _ = conn.await;
        anyhow::Ok(status.is_success() && memchr(&body, b"\"patch\":"))
    }
    .await;
    match answered {
        Ok(true) => fresh.completed += 1,
        _ => fresh.review_errors += 1,
    }
}

/// `loadgen handshakes`: `connections` fresh connections, `concurrency` at a time.
#[allow(clippy::too_many_arguments)]
async fn handshakes(
    addr: SocketAddr,
    ca: PathBuf,
    connections: usize,
    concurrency: usize,
    review: bool,
    vpas: usize,
    namespaces: usize,
    label: String,
) -> anyhow::Result<()> {
    let mut config = (*client_config(&ca, b"http/1.1")?).clone();
    // The API server's client (Go, no session cache) makes a full handshake on every new connection.
    config.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(config);
    let bodies: Arc<Vec<Bytes>> = Arc::new((0..vpas).map(|i| review_body(i, namespaces)).collect());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (config, bodies, next) = (config.clone(), bodies.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut fresh = Fresh::default();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= connections {
                    return fresh;
                }
                let body = review.then(|| bodies[i % bodies.len()].clone());
                fresh_connection(addr, &config, body, &mut fresh).await;
            }
        }));
    }
    let mut all = Fresh::default();
    for t in tasks {
        let f = t.await?;
        all.completed += f.completed;
        all.refused += f.refused;
        all.connect_errors += f.connect_errors;
        all.review_errors += f.review_errors;
    }
    let seconds = started.elapsed().as_secs_f64();
    let figures = json!({
        "label": label,
        "connections": connections,
        "concurrency": concurrency,
        "review": review,
        "completed": all.completed,
        "refused": all.refused,
        "connect_errors": all.connect_errors,
        "review_errors": all.review_errors,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "connections_per_second": (connections as f64 / seconds).round(),
    });
    println!("{figures}");
    Ok(())
}

fn micro(
    dir: PathBuf,
    iterations: usize,
    vpas: usize,
    namespaces: usize,
    pod: PodShape,
    evict_mib: usize,
) -> anyhow::Result<()> {
    use tailor_admission::{manifests, review, webhook::Webhook};
    let webhook = |memo_bytes: usize| -> anyhow::Result<Webhook> {
        let loaded = manifests::load_dir(&dir.join("manifests"))?;
        Ok(Webhook::new(
            loaded.objects.into_index(),
            Default::default(),
            Default::default(),
        )
        .with_patch_memo_bytes(memo_bytes))
    };
    // The default patch memo (every review after the first per workload is a hit), and none.
    let webhooks = [
        (
            "",
            webhook(tailor_admission::flags::DEFAULT_PATCH_MEMO_BYTES)?,
        ),
        (", memo off", webhook(0)?),
    ];
    let bodies: Vec<Bytes> = (0..vpas)
        .map(|i| review_body_of(pod, i, namespaces))
        .collect();
    println!(
        "{}",
        json!({"pod": pod.as_str(), "request_bytes": bodies.first().map(|b| b.len())})
    );
    let time = |what: &str, f: &dyn Fn(&[u8])| {
        for b in bodies.iter().take(1000) {
            f(b);
        }
        let t = Instant::now();
        for i in 0..iterations {
            f(&bodies[i % bodies.len()]);
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iterations as f64;
        println!(
            "{}",
            json!({"step": what, "us_per_review": (us * 100.0).round() / 100.0})
        );
    };
    time("decode (derived AdmissionReview<DynamicObject>)", &|b| {
        let _ = serde_json::from_slice::<
            kube::core::admission::AdmissionReview<kube::core::DynamicObject>,
        >(b);
    });
    time("decode (review::decode)", &|b| {
        let _ = review::decode(b);
    });
    for (memo, webhook) in &webhooks {
        time(&format!("handle (decode + review + encode){memo}"), &|b| {
            let h = review::handle(b, webhook);
            assert_eq!(h.result, review::ReviewResult::Patched);
        });
    }
    // Cold: each review after the caches were filled with other data (only the review is timed).
    let mut evict = vec![0u8; evict_mib << 20];
    let cold = (iterations / 20).max(100);
    for (memo, webhook) in &webhooks {
        let mut total = Duration::ZERO;
        for i in 0..cold {
            for (j, line) in evict.chunks_mut(64).enumerate() {
                line[0] = line[0].wrapping_add(j as u8);
            }
            std::hint::black_box(&evict);
            let t = Instant::now();
            let h = review::handle(&bodies[i % bodies.len()], webhook);
            total += t.elapsed();
            assert_eq!(h.result, review::ReviewResult::Patched);
        }
        let us = total.as_secs_f64() * 1e6 / cold as f64;
        println!(
            "{}",
            json!({"step": format!("handle, cold ({evict_mib} MiB written before each){memo}"), "reviews": cold,
                "us_per_review": (us * 100.0).round() / 100.0})
        );
    }
    Ok(())
}

/// `loadgen cold`: see [`Cmd::Cold`].
fn cold(
    dir: PathBuf,
    reviews: usize,
    vpas: usize,
    namespaces: usize,
    pod: PodShape,
    evict_mib: usize,
    memo_off: bool,
) -> anyhow::Result<()> {
    use tailor_admission::{manifests, review, webhook::Webhook};
    let loaded = manifests::load_dir(&dir.join("manifests"))?;
    let memo = if memo_off {
        0
    } else {
        tailor_admission::flags::DEFAULT_PATCH_MEMO_BYTES
    };
    let webhook = Webhook::new(
        loaded.objects.into_index(),
        Default::default(),
        Default::default(),
    )
    .with_patch_memo_bytes(memo);
    let bodies: Vec<Bytes> = (0..vpas)
        .map(|i| review_body_of(pod, i, namespaces))
        .collect();
    for _ in 0..2 {
        for body in &bodies {
            std::hint::black_box(review::handle(body, &webhook));
        }
    }
    let mut evict = vec![0u8; evict_mib << 20];
    for i in 0..reviews {
        for (j, line) in evict.chunks_mut(64).enumerate() {
            line[0] = line[0].wrapping_add(j as u8);
        }
        std::hint::black_box(&evict);
        // A stride through the workloads: no two reviews in a row are of neighbouring ones.
        cold_review(&bodies[(i * 7) % bodies.len()], &webhook);
    }
    Ok(())
}

/// One review of `loadgen cold`, kept out of line so that callgrind can count it alone.
#[inline(never)]
fn cold_review(body: &[u8], webhook: &tailor_admission::webhook::Webhook) {
    let handled = tailor_admission::review::handle(body, webhook);
    assert_eq!(
        handled.result,
        tailor_admission::review::ReviewResult::Patched
    );
    std::hint::black_box(handled);
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let threads: usize = std::env::var("LOADGEN_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    match cli.cmd {
        Cmd::Soak(args) => runtime()?.block_on(soak::soak(args)),
        Cmd::Handshakes {
            addr,
            ca,
            connections,
            concurrency,
            review,
            vpas,
            namespaces,
            label,
        } => runtime()?.block_on(handshakes(
            addr,
            ca,
            connections,
            concurrency,
            review,
            vpas,
            namespaces,
            label,
        )),
        Cmd::Setup {
            dir,
            vpas,
            namespaces,
        } => setup(dir, vpas, namespaces),
        Cmd::Cold {
            dir,
            reviews,
            vpas,
            namespaces,
            pod,
            evict_mib,
            memo_off,
        } => cold(dir, reviews, vpas, namespaces, pod, evict_mib, memo_off),
        Cmd::Micro {
            dir,
            iterations,
            vpas,
            namespaces,
            pod,
            evict_mib,
        } => micro(dir, iterations, vpas, namespaces, pod, evict_mib),
        Cmd::Run {
            addr,
            ca,
            connections,
            rate,
            seconds,
            warmup,
            vpas,
            namespaces,
            label,
            pod,
        } => runtime()?.block_on(run(
            addr,
            ca,
            connections,
            rate,
            seconds,
            warmup,
            vpas,
            namespaces,
            label,
            pod,
        )),
    }
}
