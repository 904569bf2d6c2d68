//! `tailor recommend --prometheus` against real servers started here on free loopback ports: Prometheus (Debian's
//! `prometheus`, history written as TSDB blocks by `promtool tsdb create-blocks-from openmetrics`) and
//! VictoriaMetrics (Debian's `victoria-metrics`, filled through `/api/v1/import`). One synthetic workload is
//! written to both servers and, as a JSON trace, to a file: the recommendations through `--prometheus` must
//! equal those through `--input`.
//!
//! Tolerance: the servers return exactly the trace's points (1-minute samples, `rate` over one step of a
//! counter built from the trace's per-minute cores, gauges at the step times), so the model sees the same
//! samples, only in a different order (per series and window instead of globally by time). Order only changes
//! floating-point summation in the decaying histograms, so every number must be within 0.5% (a histogram
//! bucket is 5% wide; in practice they are equal).
//!
//! The server binaries must be installed (`hack/install-deps.sh` installs them): their absence fails the
//! tests with a message, it never skips them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const STEP: i64 = 60;
/// End of the history (unix seconds, a multiple of the step).
pub(crate) const END: i64 = 1_717_200_000;
const DAYS: i64 = 3;
const NS: &str = "shop";
const RS: &str = "web-5d8f7c9b6d";
pub(crate) const MIB: f64 = 1_048_576.0;

pub(crate) fn find_binary(name: &str) -> PathBuf {
    let dirs = std::env::var("PATH").unwrap_or_default();
    for d in dirs
        .split(':')
        .chain(["/usr/bin", "/usr/sbin", "/usr/local/bin"])
    {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{name}` not found on PATH or in /usr/bin: install the Debian packages prometheus and \
         victoria-metrics (hack/install-deps.sh does)"
    );
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free loopback port")
}

pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tailor-prom-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server process, killed (and its data removed) on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Plain HTTP/1.0 request, so no chunked bodies (the fixture's own, independent of the code under test).
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let head_end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(out.len());
    let status = String::from_utf8_lossy(&out[..head_end.min(out.len())])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, out[(head_end + 4).min(out.len())..].to_vec()))
}

pub(crate) fn wait_ready(server: &mut Server, port: u16, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = http(port, "GET", path, b"") {
            return;
        }
        if let Ok(Some(st)) = server.child.try_wait() {
            let log = std::fs::read_to_string(&server.log).unwrap_or_default();
            panic!("server exited ({st}) before it was ready:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "server on port {port} not ready after 60 s:\n{}",
            std::fs::read_to_string(&server.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Deterministic pseudo-random numbers in [0, 1).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(crate) struct Container {
    pod: &'static str,
    name: &'static str,
    /// (unix seconds, cores) at every step from the first; the counter starts one step before.
    cpu: Vec<(i64, f64)>,
    /// (unix seconds, bytes).
    memory: Vec<(i64, f64)>,
    oom_at: Option<i64>,
    request: f64,
}

/// Three workloads in one namespace: Deployment `web` (two pods of one ReplicaSet, containers `app` and
/// `proxy`), StatefulSet `db` (pod `db-0`) and DaemonSet `agent` (one pod); `web`'s first `app` is
/// OOM-killed once.
pub(crate) fn workload() -> Vec<Container> {
    let t0 = END - DAYS * 86_400;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let specs: [(&str, &str, f64, f64); 6] = [
        ("web-5d8f7c9b6d-abcde", "app", 0.40, 300.0),
        ("web-5d8f7c9b6d-abcde", "proxy", 0.05, 60.0),
        ("web-5d8f7c9b6d-fghij", "app", 0.40, 300.0),
        ("web-5d8f7c9b6d-fghij", "proxy", 0.05, 60.0),
        ("db-0", "postgres", 1.20, 2000.0),
        ("agent-x7k2p", "collector", 0.02, 40.0),
    ];
    let oom_at = t0 + 40 * 3600;
    specs
        .iter()
        .enumerate()
        .map(|(i, &(pod, name, cores, mib))| {
            let mut cpu = Vec::new();
            let mut memory = Vec::new();
            let mut t = t0;
            while t <= END {
                let hour = ((t - t0) / 3600) as f64;
                let daily = 1.0 + 0.5 * (hour * std::f64::consts::PI / 12.0).sin();
                // Millicores plus 0.3 so that no value sits on a rounding edge.
                let m = (cores * daily * (0.6 + 0.8 * rng.next()) * 1000.0).floor() + 0.3;
                cpu.push((t, m / 1000.0));
                let bytes = (mib * daily * (0.8 + 0.3 * rng.next()) * MIB).floor();
                memory.push((t, bytes));
                t += STEP;
            }
            Container {
                pod,
                name,
                cpu,
                memory,
                oom_at: (i == 0).then_some(oom_at),
                request: 512.0 * MIB,
            }
        })
        .collect()
}

/// The workload as traces (docs/design/trace-format.md §1), one per workload, as `tailor recommend --input`
/// reads them. The first point of each series is left out: `rate` has no value there.
fn traces(cs: &[Container]) -> Value {
    let mut out = Vec::new();
    for (id, prefix, app) in [
        ("shop/agent", "agent-", "agent"),
        ("shop/db", "db-", "db"),
        ("shop/web", "web-", "web"),
    ] {
        let mut containers = Vec::new();
        let mut pods = Vec::new();
        for c in cs.iter().filter(|c| c.pod.starts_with(prefix)) {
            if !pods.iter().any(|p: &Value| p["name"] == c.pod) {
                pods.push(json!({"name": c.pod, "labels": {"app": app}}));
            }
            let cpu: Vec<Value> = c.cpu[1..].iter().map(|(t, v)| json!([t, v])).collect();
            let mem: Vec<Value> = c.memory[1..].iter().map(|(t, v)| json!([t, v])).collect();
            let ooms: Vec<Value> = c.oom_at.iter().map(|t| json!([t, c.request])).collect();
            containers.push(json!({
                "name": c.name, "pod": c.pod, "memory_request_bytes": c.request,
                "cpu_samples": cpu, "memory_samples": mem, "ooms": ooms,
            }));
        }
        out.push(json!({"id": id, "now": END, "pods": pods, "containers": containers}));
    }
    Value::Array(out)
}

/// One series: labels and (unix seconds, value) points.
pub(crate) type Sample = (Vec<(&'static str, String)>, Vec<(i64, f64)>);

/// Every series the servers hold: cAdvisor and kube-state-metrics.
pub(crate) fn series(cs: &[Container]) -> Vec<(&'static str, Sample)> {
    let mut out = Vec::new();
    let cadvisor = |c: &Container| {
        vec![
            ("job", "kubernetes-cadvisor".to_string()),
            ("namespace", NS.to_string()),
            ("pod", c.pod.to_string()),
            ("container", c.name.to_string()),
            ("image", format!("{}:1", c.name)),
        ]
    };
    let ksm = |pod: &str| {
        vec![
            ("job", "kube-state-metrics".to_string()),
            ("namespace", NS.to_string()),
            ("pod", pod.to_string()),
        ]
    };
    let times: Vec<i64> = cs[0].memory.iter().map(|p| p.0).collect();
    for c in cs {
        // The counter: cumulative core-seconds, starting one step before the first sample.
        let mut total = 1000.0;
        let mut counter = Vec::new();
        for (i, &(t, cores)) in c.cpu.iter().enumerate() {
            if i > 0 {
                total += cores * STEP as f64;
            }
            counter.push((t, total));
        }
        out.push(("container_cpu_usage_seconds_total", (cadvisor(c), counter)));
        out.push((
            "container_memory_working_set_bytes",
            (cadvisor(c), c.memory.clone()),
        ));
        let mut l = ksm(c.pod);
        l.push(("container", c.name.to_string()));
        let restarts: Vec<(i64, f64)> = times
            .iter()
            .map(|&t| {
                (
                    t,
                    if c.oom_at.is_some_and(|o| t >= o) {
                        1.0
                    } else {
                        0.0
                    },
                )
            })
            .collect();
        out.push((
            "kube_pod_container_status_restarts_total",
            (l.clone(), restarts),
        ));
        if let Some(o) = c.oom_at {
            let mut r = l.clone();
            r.push(("reason", "OOMKilled".into()));
            let pts = times
                .iter()
                .filter(|&&t| t >= o)
                .map(|&t| (t, 1.0))
                .collect();
            out.push(("kube_pod_container_status_last_terminated_reason", (r, pts)));
        }
        let mut r = l.clone();
        r.push(("resource", "memory".into()));
        r.push(("unit", "byte".into()));
        let pts = times.iter().map(|&t| (t, c.request)).collect();
        out.push(("kube_pod_container_resource_requests", (r, pts)));
    }
    // Owners, one point per 10 minutes.
    let sparse: Vec<(i64, f64)> = times.iter().step_by(10).map(|&t| (t, 1.0)).collect();
    let mut pods: Vec<&str> = cs.iter().map(|c| c.pod).collect();
    pods.dedup();
    for pod in pods {
        let (kind, name) = if pod.starts_with("web-") {
            ("ReplicaSet", RS)
        } else if pod.starts_with("agent-") {
            ("DaemonSet", "agent")
        } else {
            ("StatefulSet", "db")
        };
        let mut l = ksm(pod);
        l.push(("owner_kind", kind.into()));
        l.push(("owner_name", name.into()));
        l.push(("owner_is_controller", "true".into()));
        out.push(("kube_pod_owner", (l, sparse.clone())));
    }
    let l = vec![
        ("job", "kube-state-metrics".to_string()),
        ("namespace", NS.to_string()),
        ("replicaset", RS.to_string()),
        ("owner_kind", "Deployment".to_string()),
        ("owner_name", "web".to_string()),
    ];
    out.push(("kube_replicaset_owner", (l, sparse)));
    out
}

pub(crate) fn openmetrics(all: &[(&'static str, Sample)]) -> String {
    let mut s = String::new();
    let mut families: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    families.sort();
    families.dedup();
    for fam in families {
        let (base, typ) = match fam.strip_suffix("_total") {
            Some(b) => (b, "counter"),
            None => (fam, "gauge"),
        };
        s.push_str(&format!("# TYPE {base} {typ}\n"));
        for (_, (labels, points)) in all.iter().filter(|(n, _)| *n == fam) {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            for (t, v) in points {
                s.push_str(&format!("{fam}{{{}}} {v} {t}\n", l.join(",")));
            }
        }
    }
    s.push_str("# EOF\n");
    s
}

pub(crate) fn vm_import(all: &[(&'static str, Sample)]) -> String {
    let mut s = String::new();
    for (name, (labels, points)) in all {
        let mut m = serde_json::Map::new();
        m.insert("__name__".into(), json!(name));
        for (k, v) in labels {
            m.insert((*k).into(), json!(v));
        }
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        let ts: Vec<i64> = points.iter().map(|p| p.0 * 1000).collect();
        s.push_str(&json!({"metric": m, "values": values, "timestamps": ts}).to_string());
        s.push('\n');
    }
    s
}

pub(crate) fn start_prometheus(all: &[(&'static str, Sample)]) -> Server {
    let promtool = find_binary("promtool");
    let prometheus = find_binary("prometheus");
    let dir = temp_dir("prometheus");
    let om = dir.join("history.om");
    std::fs::write(&om, openmetrics(all)).unwrap();
    let data = dir.join("data");
    let out = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool tsdb create-blocks-from openmetrics failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
    let port = free_port();
    let log = dir.join("log");
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start prometheus");
    let mut s = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
        dir,
        log,
    };
    wait_ready(&mut s, port, "/-/ready");
    s
}

pub(crate) fn start_victoria_metrics(all: &[(&'static str, Sample)]) -> Server {
    let vm = find_binary("victoria-metrics");
    let dir = temp_dir("vm");
    let port = free_port();
    let log = dir.join("log");
    let child = Command::new(&vm)
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg(format!("-storageDataPath={}", dir.join("data").display()))
        .arg("-retentionPeriod=100y")
        .arg("-search.disableCache")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start victoria-metrics");
    let mut s = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
        dir,
        log,
    };
    wait_ready(&mut s, port, "/health");
    let (st, body) = http(port, "POST", "/api/v1/import", vm_import(all).as_bytes()).unwrap();
    assert!(
        st == 204 || st == 200,
        "import: {st} {}",
        String::from_utf8_lossy(&body)
    );
    let (st, _) = http(port, "GET", "/internal/force_flush", b"").unwrap();
    assert_eq!(st, 200, "force_flush");
    // Imported rows become searchable after a flush; wait until every series is visible.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = "/api/v1/series?match[]=%7B__name__%3D~%22.%2B%22%7D&start=1000000000";
        let n = http(port, "GET", q, b"")
            .ok()
            .and_then(|(_, b)| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["data"].as_array().map(Vec::len))
            .unwrap_or(0);
        if n == all.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "VictoriaMetrics shows {n} of {} series",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    s
}

pub(crate) fn tailor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(args)
        .output()
        .expect("run tailor")
}

pub(crate) fn by_id(v: &Value) -> std::collections::BTreeMap<String, Value> {
    v.as_array()
        .expect("an array of outputs")
        .iter()
        .map(|o| (o["id"].as_str().unwrap().to_string(), o.clone()))
        .collect()
}

pub(crate) fn assert_close(want: &Value, got: &Value, what: &str) {
    let (w, g) = (by_id(want), by_id(got));
    assert_eq!(
        w.keys().collect::<Vec<_>>(),
        g.keys().collect::<Vec<_>>(),
        "{what}: workloads"
    );
    for (id, wo) in &w {
        let go = &g[id];
        let (wr, gr) = (
            wo["recommendations"].as_array().unwrap(),
            go["recommendations"].as_array().unwrap(),
        );
        assert_eq!(wr.len(), gr.len(), "{what} {id}: containers");
        assert!(!wr.is_empty(), "{what} {id}: no recommendation");
        for (a, b) in wr.iter().zip(gr) {
            assert_eq!(a["containerName"], b["containerName"]);
            for bound in ["target", "lowerBound", "upperBound", "uncappedTarget"] {
                for res in ["cpu", "memory"] {
                    let x = a[bound][res].as_f64().unwrap();
                    let y = b[bound][res].as_f64().unwrap();
                    assert!(
                        (x - y).abs() <= 0.005 * x.abs().max(1.0),
                        "{what} {id}/{}: {bound}.{res}: --input {x}, --prometheus {y}",
                        a["containerName"]
                    );
                }
            }
        }
    }
}

pub(crate) fn expected(cs: &[Container]) -> Value {
    let dir = temp_dir("trace");
    let path = dir.join("trace.json");
    std::fs::write(&path, serde_json::to_vec(&traces(cs)).unwrap()).unwrap();
    let out = tailor(&[
        "recommend",
        "--input",
        path.to_str().unwrap(),
        "--output",
        "json",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn from_server(url: &str, extra: &[&str]) -> (Value, String) {
    let end = END.to_string();
    let mut args = vec![
        "recommend",
        "--prometheus",
        url,
        "--history",
        "3d",
        "--end",
        &end,
        "--output",
        "json",
        // Small batches and windows, to exercise the cutting: 4 batches x 4 windows.
        "--prometheus-max-series-per-query",
        "2",
        "--prometheus-max-points-per-query",
        "1200",
    ];
    args.extend_from_slice(extra);
    let out = tailor(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tailor failed: {err}");
    (
        serde_json::from_slice(&out.stdout).expect("JSON output"),
        err,
    )
}

fn check_server(server: &Server, name: &str) {
    let cs = workload();
    let want = expected(&cs);
    let (got, err) = from_server(&server.url, &[]);
    assert_close(&want, &got, name);
    // The OOM reached the model: web's app memory is at least the 1.2 x 512Mi bump.
    let web = &by_id(&got)["shop/web"];
    let app = &web["recommendations"][0];
    assert_eq!(app["containerName"], "app");
    assert!(
        app["target"]["memory"].as_f64().unwrap() >= 1.2 * 512.0 * MIB,
        "{app}"
    );
    // Queries: 1 series + 1 owners + 4 OOM windows + 1 requests + 2 x 2 batches x 4 windows... all counted.
    assert!(err.contains("6 containers in 3 workloads"), "{err}");
    assert!(err.contains("HTTP queries"), "{err}");
    // Namespace filter and selector-free defaults: another namespace has nothing.
    let end = END.to_string();
    let out = tailor(&[
        "recommend",
        "--prometheus",
        &server.url,
        "--history",
        "3d",
        "--end",
        &end,
        "--namespace",
        "nothing-here",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no container series"));
    // Every output format works from a server.
    for fmt in ["table", "yaml", "csv", "vpa"] {
        let out = tailor(&[
            "recommend",
            "--prometheus",
            &server.url,
            "--history",
            "3d",
            "--end",
            &end,
            "--output",
            fmt,
        ]);
        assert!(
            out.status.success(),
            "{fmt}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(s.contains("web") && s.contains("postgres"), "{fmt}: {s}");
        if fmt == "vpa" {
            assert_target_kinds(&s);
        }
    }
}

/// `-o vpa` names each workload's real kind in `targetRef` (kube-state-metrics owners), not `Deployment` for all.
fn assert_target_kinds(yaml: &str) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("VPA manifests");
    let refs: std::collections::BTreeMap<String, (String, String)> = docs
        .iter()
        .map(|d| {
            let r = &d["spec"]["targetRef"];
            (
                r["name"].as_str().unwrap().to_string(),
                (
                    r["kind"].as_str().unwrap().to_string(),
                    r["apiVersion"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    let want = |k: &str| (k.to_string(), "apps/v1".to_string());
    assert_eq!(refs.len(), 3, "{yaml}");
    assert_eq!(refs["web"], want("Deployment"), "{yaml}");
    assert_eq!(refs["db"], want("StatefulSet"), "{yaml}");
    assert_eq!(refs["agent"], want("DaemonSet"), "{yaml}");
}

#[test]
fn prometheus_history_matches_the_trace() {
    let server = start_prometheus(&series(&workload()));
    check_server(&server, "prometheus");
}

#[test]
fn victoria_metrics_history_matches_the_trace() {
    let server = start_victoria_metrics(&series(&workload()));
    check_server(&server, "victoria-metrics");
}
