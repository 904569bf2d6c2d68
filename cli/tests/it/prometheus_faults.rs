//! Faults of a Prometheus-compatible server, played by a small local HTTP stub: server down, HTTP 500s, a
//! response that stalls mid-stream, a connection cut mid-stream, a malformed response. Each gives a clear
//! error naming the query, keeps the history that already loaded, and never panics; a window that failed
//! half-way and succeeded on retry feeds every point exactly once. The stub lives in
//! `tests/src/prom_stub.rs`, in `tailor-tests`; the controller's bootstrap faults are tested in
//! `recommender/tests/it/history_faults.rs` against the same stub.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::{HistoryConfig, HistorySink, LoadState, discover, load};

use tailor_tests::prom_stub::{END, Reply, healthy, is_history, stub, window_start};

fn tailor(url: &str, extra: &[&str]) -> Output {
    let end = END.to_string();
    let mut args = vec![
        "recommend",
        "--prometheus",
        url,
        "--history",
        "3h",
        "--end",
        &end,
        "--output",
        "json",
        "--prometheus-max-points-per-query",
        "60",
        "--prometheus-retries",
        "1",
        "--prometheus-read-timeout",
        "1s",
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(&args)
        .output()
        .expect("run tailor")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn no_panic(out: &Output) {
    let e = text(&out.stderr);
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn healthy_stub_gives_recommendations() {
    let s = stub(|r, _| Reply::Full(200, healthy(r)));
    let out = tailor(&format!("http://127.0.0.1:{}", s.port), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["id"], "a/w");
    // 0.5 + 0.25 cores, aggregated: the CPU target is between them (plus margin).
    let cpu = v[0]["recommendations"][0]["target"]["cpu"]
        .as_i64()
        .unwrap();
    assert!((250..=700).contains(&cpu), "{v}");
    // 1 series + 1 owners + 1 sample-density probe + 1 OOM probe + 3 windows x 2 queries.
    assert!(
        text(&out.stderr).contains("10 HTTP queries"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn server_down() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = tailor(&format!("http://127.0.0.1:{port}"), &[]);
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains(&format!("127.0.0.1:{port}/api/v1/series")),
        "{e}"
    );
    assert!(e.to_lowercase().contains("connect"), "{e}");
}

#[test]
fn http_500_is_retried_then_reported() {
    let s = stub(|_, _| {
        Reply::Full(
            500,
            r#"{"status":"error","errorType":"internal","error":"boom"}"#.into(),
        )
    });
    let out = tailor(&format!("http://127.0.0.1:{}", s.port), &[]);
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(e.contains("HTTP 500") && e.contains("boom"), "{e}");
    assert!(
        e.contains("container_cpu_usage_seconds_total"),
        "names the query: {e}"
    );
    assert_eq!(
        s.requests.load(Ordering::SeqCst),
        2,
        "one try and one retry"
    );
}

/// Windows after the first stall mid-stream: the first window's history is kept and printed.
#[test]
fn timeout_mid_stream_keeps_partial_history() {
    let split = END - 7200;
    let s = stub(move |r, _| {
        if is_history(r) && window_start(r) > split {
            let full = healthy(r);
            Reply::Stall(full[..full.len() / 2].to_string())
        } else {
            Reply::Full(200, healthy(r))
        }
    });
    let out = tailor(&format!("http://127.0.0.1:{}", s.port), &[]);
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let e = text(&out.stderr);
    assert!(e.contains("timed out after 1s"), "{e}");
    assert!(e.contains("1 of 3 windows loaded"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("partial output");
    let recs = v[0]["recommendations"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{v}");
    assert!(recs[0]["target"]["cpu"].as_i64().unwrap() > 25, "{v}");
}

#[test]
fn malformed_response_names_the_query() {
    let s = stub(|r, _| {
        if is_history(r) {
            Reply::Full(
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"abc"]]}]}}"#.into(),
            )
        } else {
            Reply::Full(200, healthy(r))
        }
    });
    let out = tailor(&format!("http://127.0.0.1:{}", s.port), &[]);
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(e.contains("malformed response"), "{e}");
    assert!(e.contains("invalid sample value \"abc\""), "{e}");
    assert!(e.contains("(query container_"), "{e}");
    // Not JSON at all.
    let s = stub(|r, _| {
        if r.path == "/api/v1/series" {
            Reply::Full(200, "<html>proxy error</html>".into())
        } else {
            Reply::Full(200, healthy(r))
        }
    });
    let out = tailor(&format!("http://127.0.0.1:{}", s.port), &[]);
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("malformed response"),
        "{}",
        text(&out.stderr)
    );
}

#[derive(Default)]
struct Recorder {
    cpu: BTreeMap<(usize, i64), u32>,
    memory: BTreeMap<(usize, i64), u32>,
}

impl HistorySink for Recorder {
    fn cpu(&mut self, c: usize, points: &[(i64, f64)]) {
        for p in points {
            *self.cpu.entry((c, p.0)).or_default() += 1;
        }
    }
    fn memory(&mut self, c: usize, points: &[(i64, f64)], _ooms: &[(i64, Option<f64>)]) {
        for p in points {
            *self.memory.entry((c, p.0)).or_default() += 1;
        }
    }
}

/// The second window's first attempt is cut after its first series: the retry re-sends that series, which
/// must not be fed twice; then a resumed load after a hard failure finishes the rest, again without doubles.
#[test]
fn retried_and_resumed_windows_feed_every_point_once() {
    let split = END - 7200;
    let attempts = Arc::new(AtomicUsize::new(0));
    let fail_hard = Arc::new(AtomicBool::new(false));
    let (a, f) = (attempts.clone(), fail_hard.clone());
    let s = stub(move |r, _| {
        if is_history(r) && window_start(r) > split {
            if f.load(Ordering::SeqCst) {
                return Reply::Full(503, "unavailable".into());
            }
            if window_start(r) < END - 3600 && a.fetch_add(1, Ordering::SeqCst) == 0 {
                let full = healthy(r);
                let cut = full
                    .find(r#"{"metric":{"namespace":"a","pod":"w-1""#)
                    .unwrap();
                return Reply::Cut(full[..cut + 10].to_string());
            }
        }
        Reply::Full(200, healthy(r))
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = PromClient::new(ClientConfig {
        url: format!("http://127.0.0.1:{}", s.port),
        retries: 2,
        backoff: Duration::from_millis(10),
        read_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap();
    let cfg = HistoryConfig {
        max_points_per_series: 60,
        concurrency: 1,
        ..Default::default()
    };
    let plan = rt
        .block_on(discover(
            &client,
            &cfg,
            END * 1000,
            Duration::from_secs(3 * 3600),
        ))
        .unwrap();
    assert_eq!((plan.containers.len(), plan.windows.len()), (2, 3));
    let mut rec = Recorder::default();
    let mut state = LoadState::default();
    // Every window loads; the second only after a retry of its cut memory query.
    let r = rt.block_on(load(
        &client,
        &cfg,
        &plan,
        &mut state,
        &mut rec,
        &mut |_| {},
    ));
    assert!(r.is_ok(), "{r:?}");
    assert!(
        attempts.load(Ordering::SeqCst) >= 2,
        "the cut window was retried: {} requests, {} + {} points",
        attempts.load(Ordering::SeqCst),
        rec.cpu.len(),
        rec.memory.len()
    );
    let points = |m: &BTreeMap<(usize, i64), u32>| m.len();
    assert!(rec.cpu.values().all(|&n| n == 1), "a CPU point fed twice");
    assert!(
        rec.memory.values().all(|&n| n == 1),
        "a memory point fed twice"
    );
    // 180 steps per container; the CPU counter is also read one step before the history, as the base.
    assert_eq!(points(&rec.memory), 2 * 180);
    assert_eq!(points(&rec.cpu), 2 * 180);

    // A hard failure, then a resume: nothing fed twice, nothing lost.
    let mut rec = Recorder::default();
    let mut state = LoadState::default();
    fail_hard.store(true, Ordering::SeqCst);
    let r = rt.block_on(load(
        &client,
        &cfg,
        &plan,
        &mut state,
        &mut rec,
        &mut |_| {},
    ));
    let e = r.unwrap_err().to_string();
    assert!(e.contains("HTTP 503"), "{e}");
    // One chain runs at a time: whichever ran first loaded its windows before the failure (at least the
    // first window, 2 x 60 points); that history is kept, and the load resumes from there.
    assert!(points(&rec.cpu) + points(&rec.memory) >= 2 * 60);
    assert!(state.next_window <= 1);
    fail_hard.store(false, Ordering::SeqCst);
    rt.block_on(load(
        &client,
        &cfg,
        &plan,
        &mut state,
        &mut rec,
        &mut |_| {},
    ))
    .unwrap();
    assert!(state.complete(&plan));
    assert!(rec.cpu.values().all(|&n| n == 1) && rec.memory.values().all(|&n| n == 1));
    assert_eq!((points(&rec.cpu), points(&rec.memory)), (2 * 180, 2 * 180));
}

/// A `CONNECT` proxy on loopback counting its tunnels.
fn connect_proxy() -> (u16, Arc<AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let tunnels = Arc::new(AtomicUsize::new(0));
    let t = tunnels.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(client) = conn else { continue };
            let t = t.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let target = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                assert!(line.starts_with("CONNECT "), "not a CONNECT: {line:?}");
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap() <= 2 {
                        break;
                    }
                }
                let upstream = std::net::TcpStream::connect(&target).unwrap();
                t.fetch_add(1, Ordering::SeqCst);
                let mut c = client;
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .unwrap();
                let (mut c2, mut u2) = (c.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut u2, &mut c2));
                let mut up = upstream;
                let _ = std::io::copy(&mut reader, &mut up);
            });
        }
    });
    (port, tunnels)
}

#[test]
fn proxy_variables_are_honoured() {
    let s = stub(|r, _| Reply::Full(200, healthy(r)));
    let (proxy, tunnels) = connect_proxy();
    let url = format!("http://127.0.0.1:{}", s.port);
    let run = |no_proxy: &str| {
        Command::new(env!("CARGO_BIN_EXE_tailor"))
            .args(["recommend", "--prometheus", &url, "--history", "3h"])
            .args(["--end", &END.to_string(), "-o", "json"])
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("no_proxy")
            .env("HTTP_PROXY", format!("http://127.0.0.1:{proxy}"))
            .env("NO_PROXY", no_proxy)
            .output()
            .unwrap()
    };
    let out = run("");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        tunnels.load(Ordering::SeqCst) >= 1,
        "no query went through the proxy"
    );
    let before = tunnels.load(Ordering::SeqCst);
    let out = run("127.0.0.1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        tunnels.load(Ordering::SeqCst),
        before,
        "NO_PROXY was not honoured"
    );
}
