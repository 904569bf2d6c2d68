//! A stub Prometheus HTTP API for integration tests, shared by the test binaries of `tailor-cli` and
//! `tailor-recommender` (a dev-dependency of both): a plain thread-per-connection server whose replies a
//! handler decides, including faults (HTTP errors, a stream that stalls or is cut mid-way), and a healthy
//! answer for two containers.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test support: a panic is a failure report

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// End of the history (unix seconds).
pub const END: i64 = 1_717_200_000;

/// A parsed request: path and form parameters (query string and body).
pub struct Req {
    /// Path without the query string.
    pub path: String,
    /// Query-string and form parameters.
    pub params: BTreeMap<String, String>,
}

impl Req {
    /// A parameter, empty when absent.
    pub fn get(&self, k: &str) -> &str {
        self.params.get(k).map_or("", String::as_str)
    }
    /// A numeric parameter (0 when absent).
    pub fn num(&self, k: &str) -> i64 {
        self.get(k).parse::<f64>().unwrap_or(0.0) as i64
    }
}

pub enum Reply {
    /// Status and full body.
    Full(u16, String),
    /// Sends this much of a 200 response, then nothing until the client gives up.
    Stall(String),
    /// Sends this much of a 200 response, then closes the connection.
    Cut(String),
}

pub type Handler = dyn Fn(&Req, usize) -> Reply + Send + Sync;

/// The stub server; stops on drop.
pub struct Stub {
    /// Loopback port.
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Connections accepted.
    pub requests: Arc<AtomicUsize>,
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

/// Starts a stub answering every request with `handler(request, connection number)`.
pub fn stub(handler: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> Stub {
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

/// The pods of the healthy server (namespace `a`, container `c`).
pub const PODS: [&str; 2] = ["w-0", "w-1"];

/// The labels of a pod's container series.
pub fn labels(pod: &str) -> String {
    format!(r#"{{"namespace":"a","pod":"{pod}","container":"c"}}"#)
}

/// A healthy server holding two containers: CPU counter growing at 0.5 and 0.25 cores, memory 100 MiB.
pub fn healthy(req: &Req) -> String {
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
        "/api/v1/query" if raw_span(req).is_some() => ok(format!(
            r#"{{"resultType":"matrix","result":[{}]}}"#,
            PODS.iter()
                .enumerate()
                .map(|(i, p)| series(req, p, i))
                .collect::<Vec<_>>()
                .join(",")
        )),
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

/// The span (seconds) of a raw-sample query `metric{…}[<n>ms]`, if the request is one.
pub fn raw_span(req: &Req) -> Option<i64> {
    let q = req.get("query");
    let inner = q.strip_suffix("ms]")?;
    let n = &inner[inner.rfind('[')? + 1..];
    n.parse::<i64>().ok().map(|ms| ms / 1000)
}

/// The (start, end, step) in seconds a request covers: a range query's, or a raw-sample query's span
/// ending at its time with one sample a minute.
pub fn span(req: &Req) -> (i64, i64, i64) {
    match raw_span(req) {
        Some(d) => {
            let end = req.num("time");
            let start = end - d;
            // Samples on the minute grid in [start, end].
            (start + (60 - start.rem_euclid(60)) % 60, end, 60)
        }
        None => (req.num("start"), req.num("end"), req.num("step").max(1)),
    }
}

/// Whether the request reads history: a range query or a raw-sample query.
pub fn is_history(req: &Req) -> bool {
    req.path == "/api/v1/query_range" || (req.path == "/api/v1/query" && raw_span(req).is_some())
}

/// The first time (seconds) a history request covers that the previous window did not: a range query's
/// start, or just after a raw-sample query's left end.
pub fn window_start(req: &Req) -> i64 {
    match raw_span(req) {
        Some(d) => req.num("time") - d + 1,
        None => req.num("start"),
    }
}

/// One matrix series of `pod` (the `i`-th) for a range or raw-sample query.
pub fn series(req: &Req, pod: &str, i: usize) -> String {
    let (start, end, step) = span(req);
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
