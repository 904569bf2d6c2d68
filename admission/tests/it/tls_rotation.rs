//! Certificate rotation the way Kubernetes updates a Secret volume: the files are symlinks through `..data`,
//! which is swapped atomically to a new timestamped directory. Requests keep flowing during the swap (over a
//! long-lived keep-alive connection and over fresh connections); none may fail, and the new certificate must be
//! served afterwards. The fallback poll is set to an hour, so only the directory watch can notice the swap.
//!
//! The server runs with the default connection limits, and new connections are paced at half the default
//! handshake rate per loop: the load stays inside the server's documented limits on any machine, so a lost
//! request means the rotation lost it. Should the server still refuse a connection before its handshake, the
//! failure says so (from its `connections_closed` metric) instead of counting it as a rotation failure.

use std::{
    os::unix::fs::symlink,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::server_common::*;
use rustls_pki_types::{CertificateDer, pem::PemObject};
use serde_json::json;
use tailor_admission::{
    certs::{CertFiles, GeneratedCerts},
    review::{Review, Reviewed, Reviewer},
    server::{ConnectionLimits, Readiness},
};

struct AllowAll;
impl Reviewer for AllowAll {
    fn review_pod(&self, review: &Review<'_>) -> Reviewed {
        let req = &review.request;
        Reviewed::allowed(req)
    }
    fn review_vpa(&self, review: &Review<'_>) -> Reviewed {
        let req = &review.request;
        Reviewed {
            response: req.response(),
            result: tailor_admission::review::ReviewResult::Allowed,
        }
    }
}

/// Writes `certs` into a new timestamped directory and points `..data` at it (atomically, via rename).
fn publish(dir: &Path, stamp: &str, certs: &GeneratedCerts) {
    let data = dir.join(stamp);
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("tls.crt"), &certs.cert_pem).unwrap();
    std::fs::write(data.join("tls.key"), &certs.key_pem).unwrap();
    std::fs::write(data.join("ca.crt"), &certs.ca_cert_pem).unwrap();
    let tmp = dir.join("..data_tmp");
    symlink(stamp, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

/// `tailor_admission_connections_closed_total{reason}` from the ops endpoint's text (0 when absent).
fn closed(metrics: &str, reason: &str) -> u64 {
    let series = format!("tailor_admission_connections_closed_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn leaf(certs: &GeneratedCerts) -> CertificateDer<'static> {
    CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_symlink_swap_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let old = test_certs();
    publish(dir.path(), "..2026_11_21_06_00_00.000000001", &old);
    for name in ["tls.crt", "tls.key", "ca.crt"] {
        symlink(format!("..data/{name}"), dir.path().join(name)).unwrap();
    }
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    // The documented defaults; each loop below opens its connections one at a time, at most at half the
    // sustained handshake rate, so both together stay within it without touching the burst: whatever the
    // machine's speed, the server has no reason to refuse one.
    let limits = ConnectionLimits::default();
    let fresh_every = Duration::from_secs(2) / limits.handshakes_per_second;
    let server = start_with_limits(
        Arc::new(AllowAll),
        files,
        Readiness::ready(),
        Duration::from_secs(3600),
        limits,
    )
    .await;

    // The new certificate comes from a different CA; the client trusts both during the rotation.
    let new = test_certs();
    let both = client_config(&format!("{}{}", old.ca_cert_pem, new.ca_cert_pem));
    let addr = server.webhook;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let connects = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let review = pod_create_review(
        "uid-r",
        "default",
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }),
    );
    let body = serde_json::to_vec(&review).unwrap();

    // Loop 1: one long-lived keep-alive connection. Loop 2: a new connection (handshake) per request.
    let mut tasks = Vec::new();
    for fresh in [false, true] {
        let (stop, ok, connects, failures, both, body) = (
            stop.clone(),
            ok.clone(),
            connects.clone(),
            failures.clone(),
            both.clone(),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut client = None;
            // Every new connection waits for its tick; after a stall, no catching up in a burst.
            let mut pace = tokio::time::interval(fresh_every);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                if fresh || client.is_none() {
                    pace.tick().await;
                    connects.fetch_add(1, Ordering::Relaxed);
                    match Client::connect(addr, both.clone()).await {
                        Ok(c) => client = Some(c),
                        Err(e) => {
                            failures.lock().unwrap().push(format!("connect: {e}"));
                            continue;
                        }
                    }
                }
                let Some(c) = client.as_mut() else { continue };
                match c.post("/", Some("application/json"), body.clone()).await {
                    Ok((status, _)) if status.is_success() => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((status, _)) => failures.lock().unwrap().push(format!("status {status}")),
                    Err(e) => failures.lock().unwrap().push(format!("request: {e}")),
                }
            }
        }));
    }

    // Let traffic flow, then rotate.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = ok.load(Ordering::Relaxed);
    assert!(before > 0, "no request succeeded before the rotation");
    let old_dir = dir.path().join("..2026_11_21_06_00_00.000000001");
    publish(dir.path(), "..2026_11_21_07_00_00.000000002", &new);
    std::fs::remove_dir_all(&old_dir).unwrap();

    // The new certificate is served within a bounded time (directory watch, no polling).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut served_new = false;
    while Instant::now() < deadline {
        // A fresh client configuration: a shared one would resume the TLS session and see no new certificate.
        let fresh = client_config(&format!("{}{}", old.ca_cert_pem, new.ca_cert_pem));
        let c = match Client::connect(addr, fresh).await {
            Ok(c) => c,
            Err(e) => {
                failures
                    .lock()
                    .unwrap()
                    .push(format!("connect (probe): {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if c.peer_cert == leaf(&new) {
            served_new = true;
            break;
        }
        assert_eq!(c.peer_cert, leaf(&old));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, m) = get_ops(server.ops, "/metrics").await;
    assert!(
        served_new,
        "the new certificate was not served within 10 s: {}",
        m.lines()
            .filter(|l| l.contains("reload"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Traffic continued after the swap, and a client trusting only the new CA now connects.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let total = ok.load(Ordering::Relaxed);
    assert!(total > before, "no request succeeded after the rotation");
    let failures = failures.lock().unwrap().clone();
    let (_, m) = get_ops(server.ops, "/metrics").await;
    let (too_fast, full, handshake) = (
        closed(&m, "too_fast"),
        closed(&m, "refused"),
        closed(&m, "handshake"),
    );
    // Refusals by the connection limits are the test's load, not the rotation: told apart first.
    assert!(
        too_fast + full == 0,
        "the server refused {too_fast} connections before the handshake for the handshake rate (too_fast) \
         and {full} at the connection limit: the test's load exceeded the limits ({} new connections in \
         {:.2} s, paced at one per {fresh_every:?}; limits {limits:?}), which says nothing about the rotation; \
         {} requests failed, e.g. {:?}",
        connects.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        failures.len(),
        failures.first()
    );
    assert!(
        failures.is_empty(),
        "the rotation lost {} of {} requests ({} when connecting, {} after the handshake; the server counted \
         {handshake} failed handshakes and refused none), e.g. {:?}",
        failures.len(),
        failures.len() + total,
        failures.iter().filter(|f| f.starts_with("connect")).count(),
        failures
            .iter()
            .filter(|f| !f.starts_with("connect"))
            .count(),
        failures.first()
    );
    let only_new = Client::connect(addr, client_config(&new.ca_cert_pem))
        .await
        .unwrap();
    assert_eq!(only_new.peer_cert, leaf(&new));
    assert!(
        Client::connect(addr, client_config(&old.ca_cert_pem))
            .await
            .is_err()
    );

    let (_, metrics) = get_ops(server.ops, "/metrics").await;
    assert!(
        metrics.contains(r#"tailor_admission_certificate_reloads_total{result="success"} 1"#),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_bad_update_keeps_the_old_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let old = test_certs();
    publish(dir.path(), "..a", &old);
    for name in ["tls.crt", "tls.key"] {
        symlink(format!("..data/{name}"), dir.path().join(name)).unwrap();
    }
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    let server = start_with_files(
        Arc::new(AllowAll),
        files,
        Readiness::ready(),
        Duration::from_secs(3600),
    )
    .await;
    // A new certificate with somebody else's key.
    let mut broken = test_certs();
    broken.key_pem = test_certs().key_pem;
    publish(dir.path(), "..b", &broken);
    let config = client_config(&format!("{}{}", old.ca_cert_pem, broken.ca_cert_pem));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = get_ops(server.ops, "/metrics").await;
        if metrics.contains(r#"tailor_admission_certificate_reloads_total{result="error"}"#) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failed reload was not attempted: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut c = Client::connect(server.webhook, config).await.unwrap();
    assert_eq!(c.peer_cert, leaf(&old));
    let (status, _) = c.post("/", Some("application/json"), "{}").await.unwrap();
    assert!(status.is_success());
    server.stop().await;
}
