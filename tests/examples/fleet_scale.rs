//! Fleet onboarding at scale: the real `tailor-recommender` binary, as its own process, against the stand-in
//! API server (in this process) holding a namespace `fleet` labelled `tailor.dev/vpa=Off` with
//! `--deployments` Deployments (default 10,000), and a namespace `shop` with one ordinary workload `web`
//! (two running pods, their PodMetrics) and a hand-written Tailor VPA `web` on it. The usage of `web`'s
//! pods changes every second, so its recommendation moves and its status is rewritten every loop.
//!
//! The recommender runs with `--fleet-enabled --fleet-qps Q --fleet-burst B --fleet-resync-interval 5s
//! --recommender-interval 1s`. Every second, until every fleet VPA is written (or 3 × N / Q + 60 s have
//! passed), the stand-in's recorded requests of that second are read and one CSV row is printed:
//! `second,fleet_vpas,fleet_writes_in_second,web_status_writes_in_second` — fleet VPAs written so far
//! (distinct names applied), the fleet's applies (PATCH of a VPA in `fleet` by the recommender) and the
//! status patches of VPA `web` that arrived in that second.
//!
//! It ends with one line:
//! `fleet_deployments=N fleet_qps=Q fleet_seconds=S fleet_writes_per_second=R rate_ratio=R/Q
//! web_status_writes=W loops_expected=L web_status_write_ratio=W/L max_gap_between_web_writes_s=G`:
//! S is the time from the first fleet write to the last (the onboarding window), R = N / S, W the status
//! writes of `web` in the window, L the whole loop intervals in it, G the longest time without a status
//! write of `web` in it (from the last write before the window, or its start, to the first write after it,
//! or its end). Diagnostics go to stderr: the loops the recommender finished in the run (and the longest),
//! its other writes (statuses of the fleet VPAs, events), re-applies of a VPA already written.
//!
//! Exits non-zero when the stand-in does not hold exactly N fleet VPAs at the end, when any fleet write was
//! answered with an error status (or the recommender's `tailor_fleet_writes_total` counts one that was not
//! `ok`), or when onboarding did not finish in time.
//!
//! Run through `hack/bench-fleet.sh` (release builds of both).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark harness: a panic is its failure report

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tailor_tests::process::{Process, http_get_body, start_recommender};
use tailor_tests::standin::{ApiServer, Recorded};

const VPA_API: &str = "autoscaling.tailor.dev/v1";
/// The kubeconfig user (bearer token) of the recommender: its requests are told apart by it.
const USER: &str = "recommender-fleet-bench";
/// The labelled namespace.
const FLEET_NS: &str = "fleet";
/// The recommendation loop's interval, in seconds.
const LOOP_S: u64 = 1;

struct Args {
    deployments: usize,
    qps: u64,
    burst: u64,
    /// More arguments for the recommender (`--recommender-arg ARG`, repeatable).
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        deployments: 10_000,
        qps: 200,
        burst: 20,
        extra: Vec::new(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: fleet_scale [--deployments N] [--qps Q] [--burst B] [--recommender-arg ARG]...";
    for pair in argv.chunks(2) {
        let raw = pair
            .get(1)
            .unwrap_or_else(|| panic!("{} needs a value ({usage})", pair[0]));
        let value = || -> u64 {
            raw.parse()
                .unwrap_or_else(|_| panic!("{} needs a whole number ({usage})", pair[0]))
        };
        match pair[0].as_str() {
            "--deployments" => a.deployments = value() as usize,
            "--qps" => a.qps = value(),
            "--burst" => a.burst = value(),
            "--recommender-arg" => a.extra.push(raw.clone()),
            other => panic!("unknown argument {other} ({usage})"),
        }
    }
    assert!(
        a.deployments > 0 && a.qps > 0 && a.burst > 0,
        "--deployments, --qps and --burst must be above 0 ({usage})"
    );
    a
}

/// Deployment `i` of the labelled namespace: selector, template labels, one container, a uid.
fn fleet_deployment(i: usize) -> Value {
    let app = format!("app-{i:05}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": FLEET_NS, "uid": format!("dep-{app}"),
                     "labels": {"app": app}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
    })
}

/// The PodMetrics of pod `i` of `web` in round `round`: a usage that differs every round (50m..450m CPU,
/// 64..320 MiB), so the recommendation keeps moving.
fn pod_metrics(i: usize, round: u64) -> Value {
    let step = round as usize * 7 + i * 3;
    let cpu = 50 + (step * 53) % 400;
    let mem_mib = 64 + (step * 29) % 256;
    json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
        "metadata": {"name": format!("web-7c9f-{i}"), "namespace": "shop"},
        "timestamp": "2026-01-01T00:00:00Z", "window": "30s",
        "containers": [{"name": "app", "usage": {"cpu": format!("{cpu}m"),
                                                 "memory": format!("{mem_mib}Mi")}}]
    })
}

/// Loads both namespaces; returns how long the fleet's Deployments took.
fn load(server: &ApiServer, n: usize) -> Duration {
    server
        .put(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": FLEET_NS, "labels": {"tailor.dev/vpa": "Off"}}}))
        .expect("namespace fleet");
    let started = Instant::now();
    for i in 0..n {
        server.put(fleet_deployment(i)).expect("deployment");
    }
    let took = started.elapsed();
    server
        .load_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n")
        .expect("namespace shop");
    server
        .load_yaml(&tailor_tests::small_workload::deployment_with_pods("web"))
        .expect("workload web");
    for i in 0..2 {
        server.put(pod_metrics(i, 0)).expect("pod metrics");
    }
    server
        .put(
            json!({"apiVersion": VPA_API, "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "updatePolicy": {"updateMode": "Off"}}}),
        )
        .expect("vpa web");
    took
}

fn target_is(r: &Recorded, resource: &str, sub: Option<&str>, namespace: &str) -> bool {
    r.target.as_ref().is_some_and(|t| {
        t.resource == resource
            && t.subresource.as_deref() == sub
            && t.namespace.as_deref() == Some(namespace)
    })
}

fn name_of(r: &Recorded) -> &str {
    r.target
        .as_ref()
        .and_then(|t| t.name.as_deref())
        .unwrap_or_default()
}

/// A fleet write: the recommender patching (applying) or deleting a VPA of the labelled namespace.
fn is_fleet_write(r: &Recorded) -> bool {
    r.user == USER
        && (r.method == "PATCH" || r.method == "DELETE")
        && target_is(r, "verticalpodautoscalers", None, FLEET_NS)
}

/// A status patch of VPA `web`.
fn is_web_status(r: &Recorded) -> bool {
    r.user == USER
        && r.method == "PATCH"
        && target_is(r, "verticalpodautoscalers", Some("status"), "shop")
        && name_of(r) == "web"
}

/// A fleet write answered with an error (0: still in flight when read, its answer unknown).
fn failed(r: &Recorded) -> bool {
    r.status >= 400
}

/// What the run saw, request by request.
#[derive(Default)]
struct Seen {
    /// Arrival of each fleet apply.
    fleet_at: Vec<Instant>,
    /// Distinct fleet VPAs applied (answered with success, or still in flight when read).
    written: HashSet<String>,
    /// Applies of a VPA already applied.
    reapplies: usize,
    /// Fleet deletes (none expected).
    deletes: usize,
    /// Fleet writes answered with an error: (status, path).
    errors: Vec<(u16, String)>,
    /// Fleet writes still in flight when read (answer unknown).
    in_flight: usize,
    /// Arrival of each status patch of `web`.
    web_at: Vec<Instant>,
    /// Status patches of other VPAs (the fleet's), and event writes, by the recommender.
    other_status: usize,
    events: usize,
}

impl Seen {
    /// Takes one batch; returns (fleet writes, web status writes) in it.
    fn take(&mut self, batch: &[Recorded]) -> (usize, usize) {
        let (mut fleet, mut web) = (0, 0);
        for r in batch {
            if is_fleet_write(r) {
                fleet += 1;
                if r.method == "DELETE" {
                    self.deletes += 1;
                } else {
                    self.fleet_at.push(r.at);
                    if failed(r) {
                        self.errors.push((r.status, r.path.clone()));
                    } else if !self.written.insert(name_of(r).to_owned()) {
                        self.reapplies += 1;
                    }
                }
                if r.status == 0 {
                    self.in_flight += 1;
                }
            } else if is_web_status(r) {
                web += 1;
                self.web_at.push(r.at);
            } else if r.user == USER && r.method == "PATCH" && r.resource().ends_with("/status") {
                self.other_status += 1;
            } else if r.user == USER && r.method == "POST" && r.resource() == "events" {
                self.events += 1;
            }
        }
        (fleet, web)
    }
}

/// The longest time without a status write of `web` in `[start, end]`: from the last write before the
/// window (or its start) through the writes in it to the first write after it (or its end).
fn max_gap(web_at: &[Instant], start: Instant, end: Instant) -> Duration {
    let before = web_at.iter().rev().find(|t| **t < start).copied();
    let after = web_at.iter().find(|t| **t > end).copied();
    let mut points = vec![before.unwrap_or(start)];
    points.extend(web_at.iter().filter(|t| **t >= start && **t <= end));
    points.push(after.unwrap_or(end));
    points
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

/// `(action, result, count)` of every `tailor_fleet_writes_total` series the recommender serves.
fn fleet_write_counts(metrics: &str) -> Vec<(String, String, f64)> {
    let label = |labels: &str, key: &str| -> String {
        labels
            .split(',')
            .find_map(|kv| kv.trim().strip_prefix(&format!("{key}=\"")))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_default()
            .to_owned()
    };
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("tailor_fleet_writes_total{"))
        .filter_map(|l| {
            let (labels, value) = l.split_once("} ")?;
            Some((
                label(labels, "action"),
                label(labels, "result"),
                value.trim().parse().ok()?,
            ))
        })
        .collect()
}

fn message(l: &Value) -> Option<&str> {
    l.get("message")
        .or_else(|| l.pointer("/fields/message"))
        .and_then(Value::as_str)
}

fn field(l: &Value, k: &str) -> f64 {
    l.pointer(&format!("/fields/{k}"))
        .or_else(|| l.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// Prints one CSV row per second until `n` fleet VPAs are written or `timeout` has passed since the start;
/// returns what was seen and whether it timed out. Exits if the recommender does.
async fn follow(
    server: &ApiServer,
    rec: &mut Process,
    n: usize,
    timeout: Duration,
) -> (Seen, bool) {
    let started = Instant::now();
    println!("second,fleet_vpas,fleet_writes_in_second,web_status_writes_in_second");
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut second = 0u64;
    while seen.written.len() < n {
        tick.tick().await;
        second += 1;
        let (fleet, web) = seen.take(&server.take_requests());
        println!("{second},{},{fleet},{web}", seen.written.len());
        if rec.exited() {
            eprintln!("the recommender exited:\n{}", rec.log_lines().join("\n"));
            std::process::exit(1);
        }
        if started.elapsed() > timeout {
            eprintln!(
                "timed out after {} s with {} of {n} fleet VPAs written",
                timeout.as_secs(),
                seen.written.len()
            );
            return (seen, true);
        }
    }
    (seen, false)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let n = a.deployments;
    let server = Arc::new(ApiServer::start().await.expect("stand-in"));
    let took = load(&server, n);
    eprintln!(
        "stand-in: {n} Deployments in namespace {FLEET_NS} loaded in {:.2} s ({:.0} µs each); shop/web with 2 pods",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / n as f64
    );

    // New usage for web's pods every second.
    let usage = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut round = 0u64;
            loop {
                tick.tick().await;
                round += 1;
                for i in 0..2 {
                    server.put(pod_metrics(i, round)).expect("pod metrics");
                }
            }
        })
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let flags: Vec<String> = [
        "--fleet-enabled".to_owned(),
        "--fleet-qps".to_owned(),
        a.qps.to_string(),
        "--fleet-burst".to_owned(),
        a.burst.to_string(),
        "--fleet-resync-interval".to_owned(),
        "5s".to_owned(),
    ]
    .into_iter()
    .chain(a.extra.iter().cloned())
    .collect();
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    // start_recommender adds `--recommender-interval 1s` (LOOP_S) and JSON logs.
    let (mut rec, ops) = start_recommender(&server, dir.path(), USER, &flag_refs);
    let started = Instant::now();
    eprintln!("recommender pid {}, flags {}", rec.pid(), flags.join(" "));

    let timeout = Duration::from_secs(3 * n as u64 / a.qps + 60);
    let (mut seen, timed_out) = follow(&server, &mut rec, n, timeout).await;
    // The web writes just after the window (for the gap), and any late fleet write.
    tokio::time::sleep(Duration::from_secs(3 * LOOP_S)).await;
    seen.take(&server.take_requests());
    let run_s = started.elapsed().as_secs_f64();
    usage.abort();

    let first = seen.fleet_at.iter().min().copied().unwrap_or(started);
    let last = seen.fleet_at.iter().max().copied().unwrap_or(first);
    let window = last.saturating_duration_since(first);
    let s = window.as_secs_f64();
    let r = if s > 0.0 { n as f64 / s } else { f64::NAN };
    let w = (seen.web_at.iter())
        .filter(|t| **t >= first && **t <= last)
        .count();
    let loops_expected = window.as_secs() / LOOP_S;
    let gap = max_gap(&seen.web_at, first, last);

    // What the recommender says about its loops in the window and its fleet writes.
    let logs = rec.json_logs();
    let loops: Vec<f64> = (logs.iter())
        .filter(|l| message(l) == Some("loop finished"))
        .map(|l| field(l, "total_s"))
        .collect();
    let passes = (logs.iter())
        .filter(|l| message(l) == Some("fleet pass"))
        .count();
    let warnings: Vec<String> = (logs.iter())
        .filter(|l| l.get("level").and_then(Value::as_str) == Some("WARN"))
        .map(|l| l.to_string())
        .collect();
    let counts = fleet_write_counts(&http_get_body(ops, "/metrics").await);
    rec.terminate(Duration::from_secs(30)).await;

    let fleet_vpas = server
        .list(VPA_API, "VerticalPodAutoscaler", Some(FLEET_NS))
        .into_iter()
        .filter(|v| v["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tailor")
        .count();
    eprintln!(
        "run {run_s:.1} s; recommender: {} loops finished (longest {:.2} s), {passes} fleet pass lines, \
         {} status writes of other VPAs, {} event writes, {} fleet re-applies, {} fleet deletes, \
         {} fleet writes in flight when read, {} warnings; tailor_fleet_writes_total {:?}",
        loops.len(),
        loops.iter().copied().fold(0.0, f64::max),
        seen.other_status,
        seen.events,
        seen.reapplies,
        seen.deletes,
        seen.in_flight,
        warnings.len(),
        counts
    );
    for l in warnings.iter().take(10) {
        eprintln!("  {l}");
    }
    println!(
        "fleet_deployments={n} fleet_qps={} fleet_seconds={s:.1} fleet_writes_per_second={r:.1} \
         rate_ratio={:.3} web_status_writes={w} loops_expected={loops_expected} \
         web_status_write_ratio={:.3} max_gap_between_web_writes_s={:.2}",
        a.qps,
        r / a.qps as f64,
        w as f64 / loops_expected.max(1) as f64,
        gap.as_secs_f64()
    );

    let mut ok = true;
    if fleet_vpas != n {
        eprintln!("FAIL: {fleet_vpas} fleet VPAs in the stand-in, not {n}");
        ok = false;
    }
    if !seen.errors.is_empty() {
        eprintln!(
            "FAIL: {} fleet writes answered with an error, first: {:?}",
            seen.errors.len(),
            seen.errors.first()
        );
        ok = false;
    }
    let not_ok: Vec<_> = counts.iter().filter(|c| c.1 != "ok" && c.2 > 0.0).collect();
    if !not_ok.is_empty() {
        eprintln!("FAIL: the recommender counts fleet writes that failed: {not_ok:?}");
        ok = false;
    }
    if timed_out {
        ok = false;
    }
    if !ok {
        std::process::exit(1);
    }
}
