//! The floor under `cpu_us_per_review` (`hack/bench-webhook.sh --floor`): a server that does everything
//! `tailor-admission` does for a review except the review itself — the same rustls configuration
//! (`certs::server_config`, ring, TLS 1.3), hyper's HTTP/1.1 keep-alive connection, the whole body read —
//! and answers every request with one fixed AdmissionReview response carrying a patch. Its on-CPU time per
//! request at a steady rate is what the machine's kernel (loopback TCP, wake-ups), TLS and HTTP cost without
//! any decoding, matching or patching; `tailor-admission`'s figure minus this one is the review's own cost.
//!
//! `--allow` answers what the API server needs and nothing more (the request's uid, `allowed: true`, no
//! patch): the cheapest webhook an API server can call, the floor of `hack/bench-pod-creation.sh`.
//!
//! `floor --cert tls.crt --key tls.key --port P [--bind IP] [--threads N] [--review-dir DIR | --allow]`: N = 0 serves on a
//! multi-threaded runtime (the webhook's default), N ≥ 1 on a single-threaded runtime per connection thread
//! (`--connection-threads N`). With `--review-dir` each request is reviewed (`review::handle` over the VPAs in
//! DIR) and answered with the webhook's answer: the floor plus the review, without the webhook's router, request
//! limits, metrics or logging — what the server around the review costs is the webhook's figure minus this one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is a failure report

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Bytes, service::service_fn};
use hyper_util::rt::TokioIo;
use tailor_admission::certs::{self, CertResolver, MinTlsVersion};
use tailor_admission::{manifests, review, webhook::Webhook};
use tokio_rustls::TlsAcceptor;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    cert: PathBuf,
    #[arg(long)]
    key: PathBuf,
    #[arg(long)]
    port: u16,
    /// Connection threads with a single-threaded runtime each; 0 = one multi-threaded runtime.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Answer with the webhook's review (`review::handle`) over the VPAs of these manifests instead of the fixed
    /// answer: the review on this bare server, without the webhook's router, limits and metrics.
    #[arg(long)]
    review_dir: Option<PathBuf>,
    /// Answer `allowed: true` with the request's uid and no patch (what an API server checks).
    #[arg(long, conflicts_with = "review_dir")]
    allow: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
}

/// `--allow`.
static ALLOW: OnceLock<()> = OnceLock::new();

/// The request's uid: the first `"uid":"…"` of the review, which the API server writes before the object
/// (at most 64 bytes of `[0-9A-Za-z-]`; empty otherwise).
fn request_uid(body: &[u8]) -> &[u8] {
    const KEY: &[u8] = b"\"uid\":\"";
    let Some(at) = body.windows(KEY.len()).position(|w| w == KEY) else {
        return b"";
    };
    let rest = &body[at + KEY.len()..];
    let end = rest.iter().take(64).position(|&b| b == b'"').unwrap_or(0);
    let uid = &rest[..end];
    if uid.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') {
        uid
    } else {
        b""
    }
}

/// The `--allow` answer for a review.
fn allowed(body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":""#,
    );
    out.extend_from_slice(request_uid(body));
    out.extend_from_slice(br#"","allowed":true}}"#);
    Bytes::from(out)
}

/// The reviewer of `--review-dir`.
static WEBHOOK: OnceLock<Webhook> = OnceLock::new();

/// A patched pod-CREATE answer of the size the webhook sends for the benchmark's pods.
const ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true,"patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL21ldGFkYXRhL2Fubm90YXRpb25zL3ZwYVVwZGF0ZXMiLCJ2YWx1ZSI6IlBvZCByZXNvdXJjZXMgdXBkYXRlZCBieSBiZW5jaDogY29udGFpbmVyIDA6IGNwdSByZXF1ZXN0LCBtZW1vcnkgcmVxdWVzdDsgY29udGFpbmVyIDE6IGNwdSByZXF1ZXN0LCBtZW1vcnkgcmVxdWVzdCJ9LHsib3AiOiJyZXBsYWNlIiwicGF0aCI6Ii9zcGVjL2NvbnRhaW5lcnMvMC9yZXNvdXJjZXMvcmVxdWVzdHMvY3B1IiwidmFsdWUiOiIyNTBtIn0seyJvcCI6InJlcGxhY2UiLCJwYXRoIjoiL3NwZWMvY29udGFpbmVycy8wL3Jlc291cmNlcy9yZXF1ZXN0cy9tZW1vcnkiLCJ2YWx1ZSI6IjI2MjE0NGsifSx7Im9wIjoicmVwbGFjZSIsInBhdGgiOiIvc3BlYy9jb250YWluZXJzLzEvcmVzb3VyY2VzL3JlcXVlc3RzL2NwdSIsInZhbHVlIjoiMTAwbSJ9LHsib3AiOiJyZXBsYWNlIiwicGF0aCI6Ii9zcGVjL2NvbnRhaW5lcnMvMS9yZXNvdXJjZXMvcmVxdWVzdHMvbWVtb3J5IiwidmFsdWUiOiIxMzEwNzJrIn1d","patchType":"JSONPatch"}}"#;

async fn answer(
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    // Read the whole review as the webhook does, then drop it.
    let body = req.into_body().collect().await?.to_bytes();
    std::hint::black_box(&body);
    let out = match WEBHOOK.get() {
        Some(webhook) => Bytes::from(review::handle(&body, webhook).body),
        None if ALLOW.get().is_some() => allowed(&body),
        None => Bytes::from_static(ANSWER.as_bytes()),
    };
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(out))
        .expect("static response"))
}

async fn serve(stream: tokio::net::TcpStream, acceptor: TlsAcceptor) {
    let _ = stream.set_nodelay(true);
    let Ok(tls) = acceptor.accept(stream).await else {
        return;
    };
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tls), service_fn(answer))
        .await;
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.review_dir {
        let loaded = manifests::load_dir(dir)?;
        let webhook = Webhook::new(
            loaded.objects.into_index(),
            Default::default(),
            Default::default(),
        );
        let _ = WEBHOOK.set(webhook);
    }
    if args.allow {
        let _ = ALLOW.set(());
    }
    let key = certs::certified_key_from_pem(
        &std::fs::read(&args.cert)?,
        &std::fs::read(&args.key)?,
        "serving",
    )?;
    let config = certs::server_config(CertResolver::new(key), MinTlsVersion::Tls12)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind((args.bind, args.port))?;
    listener.set_nonblocking(true)?;
    if args.threads == 0 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            loop {
                let (stream, _) = listener.accept().await?;
                tokio::spawn(serve(stream, acceptor.clone()));
            }
        });
    }
    // One single-threaded runtime per thread, each accepting on a clone of the listener.
    let threads: Vec<_> = (0..args.threads)
        .map(|_| {
            let listener = listener.try_clone().expect("clone listener");
            let acceptor = acceptor.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                    while let Ok((stream, _)) = listener.accept().await {
                        tokio::spawn(serve(stream, acceptor.clone()));
                    }
                });
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}
