//! Faults of a Prometheus-compatible server, played by a small local HTTP stub: server down, HTTP 500s, a
//! response that stalls mid-stream, a connection cut mid-stream, a malformed response. Each gives a clear
//! error naming the query, keeps the history that already loaded, and never panics; a window that failed
//! half-way and succeeded on retry feeds every point exactly once.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::{HistoryConfig, HistorySink, LoadState, discover, load};

/// End of the history (unix seconds).
const END: i64 = 1_717_200_000;

/// A parsed request: path and form parameters (query string and body).
struct Req {
    path: String,
    params: BTreeMap<String, String>,
}

impl Req {
    fn get(&self, k: &str) -> &str {
        self.params.get(k).map_or("", String::as_str)
    }
    fn num(&self, k: &str) -> i64 {
        self.get(k).parse::<f64>().unwrap_or(0.0) as i64
    }
}

enum Reply {
    /// Status and full body.
    Full(u16, String),
    /// Sends this much of a 200 response, then nothing until the client gives up.
    Stall(String),
    /// Sends this much of a 200 response, then closes the connection.
    Cut(String),
}

type Handler = dyn Fn(&Req, usize) -> Reply + Send + Sync;

/// The stub server; stops on drop.
struct Stub {
    port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(h, 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_form(s: &str, into: &mut BTreeMap<String, String>) {
    for pair in s.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        into.insert(decode(k), decode(v));
    }
}

fn serve(mut s: TcpStream, handler: &Handler, n: usize, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    }
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut params = BTreeMap::new();
    parse_form(query, &mut params);
    parse_form(
        &String::from_utf8_lossy(&buf[head_end..(head_end + len).min(buf.len())]),
        &mut params,
    );
    let req = Req {
        path: path.to_string(),
        params,
    };
    match handler(&req, n) {
        Reply::Full(status, body) => {
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Reply::Stall(prefix) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{prefix}",
                prefix.len() + 1_000_000
            );
            let _ = s.flush();
            for _ in 0..300 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Reply::Cut(prefix) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{prefix}",
                prefix.len() + 1_000_000
            );
        }
    }
}

fn stub(handler: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> Stub {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let handler: Arc<Handler> = Arc::new(handler);
    let (st, rq) = (stop.clone(), requests.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            if st.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            let n = rq.fetch_add(1, Ordering::SeqCst);
            let (h, st) = (handler.clone(), st.clone());
            std::thread::spawn(move || serve(conn, &*h, n, &st));
        }
    });
    Stub {
        port,
        stop,
        requests,
    }
}

const PODS: [&str; 2] = ["w-0", "w-1"];

fn labels(pod: &str) -> String {
    format!(r#"{{"namespace":"a","pod":"{pod}","container":"c"}}"#)
}

/// A healthy server holding two containers: CPU counter growing at 0.5 and 0.25 cores, memory 100 MiB.
fn healthy(req: &Req) -> String {
    let ok = |data: String| format!(r#"{{"status":"success","data":{data}}}"#);
    match req.path.as_str() {
        "/api/v1/series" => {
            if req.get("match[]").contains("container_") {
                let l: Vec<String> = PODS.iter().map(|p| labels(p)).collect();
                ok(format!("[{}]", l.join(",")))
            } else {
                ok("[]".into())
            }
        }
        "/api/v1/query" => ok(r#"{"resultType":"vector","result":[]}"#.into()),
        "/api/v1/query_range" => ok(format!(
            r#"{{"resultType":"matrix","result":[{}]}}"#,
            PODS.iter()
                .enumerate()
                .map(|(i, p)| series(req, p, i))
                .collect::<Vec<_>>()
                .join(",")
        )),
        _ => ok("null".into()),
    }
}

fn series(req: &Req, pod: &str, i: usize) -> String {
    let (start, end, step) = (req.num("start"), req.num("end"), req.num("step").max(1));
    let cpu = req.get("query").contains("cpu");
    let mut pts = Vec::new();
    let mut t = start;
    while t <= end {
        let v = if cpu {
            (t - 1_700_000_000) as f64 * 0.5 / (i + 1) as f64
        } else {
            104_857_600.0
        };
        pts.push(format!("[{t},\"{v}\"]"));
        t += step;
    }
    format!(
        r#"{{"metric":{},"values":[{}]}}"#,
        labels(pod),
        pts.join(",")
    )
}

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
    // 1 series + 1 owners + 1 OOM probe + 3 windows x 2 queries.
    assert!(
        text(&out.stderr).contains("9 HTTP queries"),
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
        if r.path == "/api/v1/query_range" && r.num("start") > split {
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
        if r.path == "/api/v1/query_range" {
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
    assert!(
        e.contains("(query max by (namespace, pod, container)"),
        "{e}"
    );
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
        if r.path == "/api/v1/query_range" && r.num("start") > split {
            if f.load(Ordering::SeqCst) {
                return Reply::Full(503, "unavailable".into());
            }
            if r.num("start") < END - 3600 && a.fetch_add(1, Ordering::SeqCst) == 0 {
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

/// The controller's history bootstrap: while the server fails the VPA shows `FetchingHistory` with the
/// reason; a load that fails half-way resumes (after `retry_after`) from where it stopped; the finished
/// aggregates hold every CPU sample exactly once, and the condition is removed.
#[test]
fn controller_bootstrap_retries_resumes_and_counts_once() {
    use tailor_engine::model::AggregationsConfig;
    use tailor_recommender::history::{HistoryBootstrap, HistoryOptions, history_end, merge_into};
    use tailor_recommender::status_writer::{Findings, plan_status};
    use tailor_recommender::time::to_time_secs;

    let split = END - 7200;
    let down = Arc::new(AtomicBool::new(true));
    let cpu_fails = Arc::new(AtomicUsize::new(0));
    let (d, cf) = (down.clone(), cpu_fails.clone());
    let s = stub(move |r, _| {
        if d.load(Ordering::SeqCst) {
            return Reply::Full(503, "starting".into());
        }
        // The third CPU window fails twice (one try + one retry): the load stops and later resumes.
        if r.path == "/api/v1/query_range"
            && r.get("query").contains("cpu")
            && r.num("start") > split
            && cf.fetch_add(1, Ordering::SeqCst) < 2
        {
            return Reply::Full(503, "busy".into());
        }
        Reply::Full(200, healthy(r))
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = PromClient::new(ClientConfig {
        url: format!("http://127.0.0.1:{}", s.port),
        retries: 1,
        backoff: Duration::from_millis(10),
        read_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap();
    let opts = HistoryOptions {
        client,
        query: HistoryConfig {
            max_points_per_series: 60,
            ..Default::default()
        },
        length: Duration::from_secs(3 * 3600),
        retry_after: Duration::from_millis(200),
    };
    let key = ("a".to_string(), "vpa".to_string());
    let t = to_time_secs(END).unwrap();
    rt.block_on(async {
        let mut h = HistoryBootstrap::new(opts, AggregationsConfig::default());
        h.start(key.clone(), "Deployment", "w", END * 1000);
        assert!(h.started(&key));
        // Server down: the task keeps retrying and says so.
        let mut msg = String::new();
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            msg = h.fetching(&key).unwrap_or_default();
            if msg.contains("Retrying") {
                break;
            }
        }
        assert!(msg.contains("Retrying") && msg.contains("503"), "{msg}");
        let status = plan_status(
            None,
            &Findings {
                fetching_history: Some(msg),
                ..Default::default()
            },
            &t,
        );
        let c = status.conditions.clone().unwrap();
        assert!(
            c.iter()
                .any(|c| c.type_ == "FetchingHistory" && c.status == "True")
        );
        down.store(false, Ordering::SeqCst);
        let mut done = Vec::new();
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            done = h.poll().await;
            if !done.is_empty() {
                break;
            }
        }
        assert_eq!(done.len(), 1, "the history task finished");
        assert!(h.fetching(&key).is_none());
        assert!(
            cpu_fails.load(Ordering::SeqCst) >= 3,
            "the load failed and resumed"
        );
        let (k, aggs) = done.pop().unwrap();
        assert_eq!(k, key);
        let agg = &aggs["c"];
        // Two pods x 180 steps, each CPU sample once across the failure and the resume.
        assert_eq!(agg.total_samples_count, 360);
        // Merging into restored state adds to it; history ends before the restored state begins.
        let mut initial = BTreeMap::new();
        merge_into(&mut initial, aggs.clone());
        merge_into(&mut initial, aggs);
        assert_eq!(initial["c"].total_samples_count, 720);
        let first_ms = initial["c"].first_sample_start / 1_000_000;
        assert_eq!(history_end(&initial, END * 1000), first_ms - 1);
        // Done: the condition is removed.
        let status = plan_status(Some(&status), &Findings::default(), &t);
        assert!(
            !status
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "FetchingHistory")
        );
    });
}
