//! Recommender at scale (docs/decisions/recommender-memory.md): the real `tailor-recommender` binary, as its
//! own process, against the stand-in API server (in this process) holding `--vpas` Deployments with a VPA each,
//! `--pods-per-vpa` running pods per Deployment (of realistic size: env, probes, mounts, owner references,
//! managed fields, container statuses) and their PodMetrics, whose usage changes before every loop.
//!
//! Per loop it reads the recommender's own phase timings and resident memory from its `loop finished` log
//! line (list/decode of PodMetrics, ingest, recommend, status writes, checkpoint writes), the process's CPU
//! time from `/proc/<pid>/stat` and its peak RSS from `/proc/<pid>/status` (sampled every 10 ms between
//! loops). Writes a CSV (`--csv`, default `target/bench-recommender/<label>-<pods>.csv`) and ends with one
//! line `peak_rss_bytes_per_pod=N loop_seconds_per_50k_pods=M`, both of the recommender process alone:
//! N is its peak RSS (`VmHWM`) over the whole run divided by the pods; M is the mean CPU time of the
//! recommender process per loop (loops after the first, which creates every checkpoint and status once),
//! scaled to 50,000 pods. The API server's work is in this process and not counted.
//!
//! `--history-days D` (default 7) also stores one checkpoint per VPA holding D days of that usage, as a
//! cluster whose VPAs are older than their histograms' half-life has them when the recommender restarts:
//! the loops then show the steady state (statuses rewritten as their bounds move, checkpoints only when
//! their histograms moved or aged). `--history-days 0` shows every VPA in its first minutes instead, when
//! nearly every checkpoint moves in every loop.
//!
//! With `--recommender-arg --dashboard-address=127.0.0.1:PORT` the dashboard is on, and a poller in this
//! process opens its fleet page, its JSON twin and one workload page once a second for the whole run, as a
//! person or a script watching it would (`hack/bench-dashboard-cost.sh` compares such a run with one
//! without).
//!
//! Run through `hack/bench-recommender.sh` (release builds of both).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark harness: a panic is its failure report

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tailor_engine::model::{AggregateContainerState, AggregationsConfig, SampleSink as _};
use tailor_engine::units::Nanos;
use tailor_recommender::writers::checkpoint;
use tailor_tests::process::{
    Process, binary, free_port, proc_status_kib, workspace_root, write_kubeconfig,
};
use tailor_tests::standin::{ApiServer, Options};

struct Args {
    vpas: usize,
    pods_per_vpa: usize,
    namespaces: usize,
    loops: usize,
    interval_s: u64,
    qps: u64,
    history_days: u64,
    label: String,
    csv: Option<PathBuf>,
    /// More arguments for the recommender (`--recommender-arg ARG`, repeatable).
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        vpas: 5_000,
        pods_per_vpa: 10,
        namespaces: 50,
        loops: 4,
        interval_s: 0,
        qps: 1_000_000,
        history_days: 7,
        label: "after".into(),
        csv: None,
        extra: Vec::new(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: recommender_scale [--vpas N] [--pods-per-vpa P] [--namespaces K] [--loops L] \
                 [--interval-seconds S] [--qps Q] [--history-days D] [--label NAME] [--csv PATH] [--recommender-arg ARG]...";
    for pair in argv.chunks(2) {
        let raw = pair
            .get(1)
            .unwrap_or_else(|| panic!("{} needs a value ({usage})", pair[0]));
        let value = || -> u64 {
            raw.parse()
                .unwrap_or_else(|_| panic!("{} needs a number ({usage})", pair[0]))
        };
        match pair[0].as_str() {
            "--vpas" => a.vpas = value() as usize,
            "--pods-per-vpa" => a.pods_per_vpa = value() as usize,
            "--namespaces" => a.namespaces = value() as usize,
            "--loops" => a.loops = value() as usize,
            "--interval-seconds" => a.interval_s = value(),
            "--qps" => a.qps = value(),
            "--history-days" => a.history_days = value(),
            "--label" => a.label = raw.clone(),
            "--csv" => a.csv = Some(PathBuf::from(raw)),
            "--recommender-arg" => a.extra.push(raw.clone()),
            other => panic!("unknown argument {other} ({usage})"),
        }
    }
    assert!(a.loops >= 2, "--loops must be at least 2");
    a
}

fn managed_fields(manager: &str) -> Value {
    json!([{"manager": manager, "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-01T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                                        "f:ownerReferences": {".": {}}},
                         "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:env": {}}}},
                         "f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}}}}])
}

/// A running pod of Deployment `app` as `kubectl get -o json` shows it (about 3 KB of JSON).
fn pod(ns: &str, app: &str, hash: &str, p: usize) -> Value {
    let env: Vec<Value> = (0..8)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}-{app}")}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-{hash}-{p:05}"), "namespace": ns,
            "uid": format!("pod-{app}-{p}"), "generateName": format!("{app}-{hash}-"),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": hash, "team": "payments"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                                 "uid": format!("rs-{app}"), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields("kube-controller-manager")},
        "spec": {
            "nodeName": format!("node-{}", p % 97), "serviceAccountName": app, "restartPolicy": "Always",
            "containers": [{"name": "app", "image": format!("registry.example.com/team/{app}:1.24.0"),
                "env": env, "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "volumes": [{"name": "config", "configMap": {"name": format!("{app}-config")}}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", p / 250, p % 250),
            "startTime": "2026-11-01T10:00:00Z", "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T10:00:05Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "started": true, "restartCount": 0,
                "image": format!("registry.example.com/team/{app}:1.24.0"),
                "imageID": "registry.example.com/team/app@sha256:0123456789abcdef0123456789abcdef",
                "containerID": format!("containerd://{app}{p:05}0123456789abcdef"),
                "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}}]
        }
    })
}

/// Usage of pod `p` of VPA `v` in round `round`: (millicores, bytes), a steady level per pod (50m..450m,
/// 100..400 MiB) with up to ±10% of noise that changes every round, as a service under steady load looks.
fn usage(v: usize, p: usize, round: usize) -> (i64, i64) {
    let noise = |salt: usize| ((v * 31 + p * 17 + round * 7919 + salt) % 21) as i64 - 10;
    let cpu_level = 50 + ((v * 7 + p * 13) % 400) as i64;
    let mem_level = (100 + ((v * 3 + p * 5) % 300) as i64) * 1024 * 1024;
    (
        cpu_level + cpu_level * noise(1) / 100,
        mem_level + mem_level * noise(2) / 100,
    )
}

/// The PodMetrics of pod `p` of VPA `v` in loop `round` ([`usage`]).
fn pod_metrics(ns: &str, name: &str, v: usize, p: usize, round: usize) -> Value {
    let (cpu, mem) = usage(v, p, round);
    json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
        "metadata": {"name": name, "namespace": ns},
        "timestamp": "2026-11-01T10:00:00Z", "window": "30s",
        "containers": [{"name": "app", "usage": {"cpu": format!("{cpu}m"), "memory": mem.to_string()}}]
    })
}

/// The checkpoint of VPA `vpa` (index `v`, container `app`) after `days` days of [`usage`] of its `pods`
/// up to `now`: a CPU sample per pod every 5 minutes and a memory peak per pod per day (the highest of
/// the day's samples), built with the engine and written in the recommender's own format.
fn history_checkpoint(vpa: &Value, v: usize, pods: usize, days: u64, now: Nanos) -> Value {
    const STEP: Nanos = 300 * 1_000_000_000;
    const DAY: Nanos = 86_400 * 1_000_000_000;
    let start = now - days as Nanos * DAY;
    let mut agg = AggregateContainerState::new(&AggregationsConfig::default(), start);
    let mut round = 0usize;
    let mut day_end = start + DAY;
    let mut peaks = vec![0i64; pods];
    let mut t = start;
    while t <= now {
        for (p, peak) in peaks.iter_mut().enumerate() {
            let (cpu, mem) = usage(v, p, round);
            agg.add_cpu(cpu, t);
            *peak = (*peak).max(mem);
        }
        round += 1;
        t += STEP;
        if t >= day_end || t > now {
            for peak in &mut peaks {
                agg.add_memory(*peak, day_end.min(now));
                *peak = 0;
            }
            day_end += DAY;
        }
    }
    let vpa: tailor_crds::VerticalPodAutoscaler = serde_json::from_value(vpa.clone()).expect("vpa");
    let status = checkpoint::to_api_status(&agg.save_to_checkpoint(), now);
    let cp = checkpoint::build(&vpa.metadata, "app", status, None).expect("checkpoint");
    let mut cp = serde_json::to_value(cp).expect("checkpoint json");
    cp["apiVersion"] = json!("autoscaling.tailor.dev/v1");
    cp["kind"] = json!("VerticalPodAutoscalerCheckpoint");
    cp
}

/// Loads the cluster; returns the pods' (namespace, name, vpa index, pod index).
fn load(server: &ApiServer, a: &Args) -> Vec<(String, String, usize, usize)> {
    let now = tailor_recommender::run_loop::wall_now();
    let mut pods = Vec::with_capacity(a.vpas * a.pods_per_vpa);
    for ns in 0..a.namespaces {
        server
            .put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{ns}")}}))
            .expect("namespace");
    }
    for v in 0..a.vpas {
        let ns = format!("ns-{}", v % a.namespaces);
        let app = format!("app-{v}");
        let hash = format!("{:08x}", v * 131);
        let tmpl = json!({"metadata": {"labels": {"app": app, "pod-template-hash": hash, "team": "payments"}},
                          "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1"}]}});
        server
            .put(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": app, "namespace": ns, "uid": format!("d-{app}")},
                "spec": {"replicas": a.pods_per_vpa, "selector": {"matchLabels": {"app": app}}, "template": tmpl},
                "status": {"replicas": a.pods_per_vpa}}))
            .expect("deployment");
        server
            .put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("{app}-{hash}"), "namespace": ns, "uid": format!("rs-{app}"),
                    "labels": {"app": app, "pod-template-hash": hash},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                                         "uid": format!("d-{app}"), "controller": true}]},
                "spec": {"replicas": a.pods_per_vpa,
                         "selector": {"matchLabels": {"app": app, "pod-template-hash": hash}}, "template": tmpl},
                "status": {"replicas": a.pods_per_vpa}}))
            .expect("replicaset");
        let vpa = json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": app, "namespace": ns, "uid": format!("vpa-{app}")},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                     "updatePolicy": {"updateMode": "Off"}}});
        if a.history_days > 0 {
            server
                .put(history_checkpoint(
                    &vpa,
                    v,
                    a.pods_per_vpa,
                    a.history_days,
                    now,
                ))
                .expect("checkpoint");
        }
        server.put(vpa).expect("vpa");
        for p in 0..a.pods_per_vpa {
            let pd = pod(&ns, &app, &hash, p);
            let name = pd["metadata"]["name"].as_str().expect("name").to_string();
            server.put(pd).expect("pod");
            server
                .put(pod_metrics(&ns, &name, v, p, 0))
                .expect("metrics");
            pods.push((ns.clone(), name, v, p));
        }
    }
    pods
}

/// CPU seconds (user + system) the process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks as f64 / hz
}

fn field(l: &Value, k: &str) -> f64 {
    l.pointer(&format!("/fields/{k}"))
        .or_else(|| l.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

fn message(l: &Value) -> Option<&str> {
    l.get("message")
        .or_else(|| l.pointer("/fields/message"))
        .and_then(Value::as_str)
}

fn is_loop(l: &Value) -> bool {
    message(l) == Some("loop finished")
}

fn mib(bytes: f64) -> f64 {
    (bytes / 1048576.0 * 10.0).round() / 10.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let pods_total = a.vpas * a.pods_per_vpa;
    // Long enough for a loop and for the next round of usage to be stored in between.
    let interval = if a.interval_s > 0 {
        a.interval_s
    } else {
        (pods_total as u64 * 20 / 50_000).max(10)
    };
    let server = ApiServer::start_with(Options::default())
        .await
        .expect("stand-in");
    let started = Instant::now();
    let pods = load(&server, &a);
    eprintln!(
        "stand-in: {} VPAs, {} pods (+ PodMetrics) loaded in {:.1} s",
        a.vpas,
        pods.len(),
        started.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = write_kubeconfig(&server, dir.path(), "recommender-bench");
    let ops = format!("127.0.0.1:{}", free_port());
    let bin = binary("tailor-recommender");
    let argv: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--address",
        &ops,
        "--recommender-interval",
        &format!("{interval}s"),
        "--kube-api-qps",
        &a.qps.to_string(),
        "--kube-api-burst",
        &a.qps.min(u64::from(u32::MAX)).to_string(),
        "--checkpoints-timeout",
        "10m",
        "--log-format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(a.extra.iter().cloned())
    .collect();
    let mut rec = Process::spawn("recommender", &bin, &argv);
    let polls = Arc::new(AtomicU64::new(0));
    if let Some(addr) = (a.extra.iter()).find_map(|x| x.strip_prefix("--dashboard-address=")) {
        let addr: std::net::SocketAddr = addr.parse().expect("--dashboard-address=IP:PORT");
        let polls = polls.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                for path in ["/", "/api/v1/fleet", "/workloads/ns-0/app-0"] {
                    tailor_tests::process::http_get_status(addr, path).await;
                }
                polls.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let pid = rec.pid();
    eprintln!(
        "recommender {} (pid {pid}), loop every {interval} s",
        bin.display()
    );

    // RSS sampler: the peak since the last reset, every 10 ms.
    let peak_kib = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(proc_status_kib(pid, "VmRSS:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    let t0 = Instant::now();
    rec.wait_for_log(Duration::from_secs(1800), |l| {
        message(l) == Some("caches ready; starting the loop")
    })
    .await;
    let sync_s = t0.elapsed().as_secs_f64();
    let rss_synced = proc_status_kib(pid, "VmRSS:") * 1024;
    let peak_sync = peak_kib.swap(0, Ordering::Relaxed) * 1024;
    eprintln!(
        "caches synced in {sync_s:.1} s: RSS {} MiB (peak while syncing {} MiB)",
        mib(rss_synced as f64),
        mib(peak_sync as f64)
    );

    let csv_path = a.csv.clone().unwrap_or_else(|| {
        workspace_root()
            .join("target/bench-recommender")
            .join(format!("{}-{}.csv", a.label, pods_total))
    });
    if let Some(d) = csv_path.parent() {
        std::fs::create_dir_all(d).expect("csv directory");
    }
    let mut csv = std::fs::File::create(&csv_path).expect("csv");
    let header = "label,pods,vpas,loop,total_s,cpu_s,list_s,ingest_s,recommend_s,status_s,checkpoint_s,\
                  other_s,status_writes,checkpoints_written,samples,rss_after_list_mib,rss_after_ingest_mib,\
                  rss_after_status_mib,rss_after_checkpoints_mib,rss_end_mib,rss_peak_in_loop_mib,dashboard_s";
    writeln!(csv, "{header}").expect("csv");
    println!("{header}");

    let mut cpu_prev = cpu_seconds(pid);
    let mut cpus = Vec::new();
    let mut shares = [0f64; 6];
    for i in 1..=a.loops {
        // The i-th loop line.
        let deadline = Instant::now() + Duration::from_secs(interval * 10 + 600);
        let l = loop {
            let lines: Vec<Value> = rec.json_logs().into_iter().filter(is_loop).collect();
            if lines.len() >= i {
                break lines[i - 1].clone();
            }
            assert!(!rec.exited(), "the recommender exited");
            assert!(Instant::now() < deadline, "loop {i} never finished");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let cpu_now = cpu_seconds(pid);
        let cpu = cpu_now - cpu_prev;
        cpu_prev = cpu_now;
        let peak = peak_kib.swap(0, Ordering::Relaxed) * 1024;
        let rss_end = proc_status_kib(pid, "VmRSS:") * 1024;
        let p = [
            field(&l, "list_s"),
            field(&l, "ingest_s"),
            field(&l, "recommend_s"),
            field(&l, "status_s"),
            field(&l, "checkpoint_s"),
        ];
        let total = field(&l, "total_s");
        let other = total - p.iter().sum::<f64>();
        if i > 1 {
            cpus.push(cpu);
            for (s, v) in shares.iter_mut().zip(p.iter().chain([other].iter())) {
                *s += v;
            }
        }
        let row = format!(
            "{},{pods_total},{},{i},{total:.3},{cpu:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{other:.3},{},{},{},{},{},{},{},{},{},{:.3}",
            a.label,
            a.vpas,
            p[0],
            p[1],
            p[2],
            p[3],
            p[4],
            field(&l, "status_writes"),
            field(&l, "checkpoints"),
            field(&l, "samples"),
            mib(field(&l, "rss_after_list")),
            mib(field(&l, "rss_after_ingest")),
            mib(field(&l, "rss_after_status")),
            mib(field(&l, "rss_after_checkpoints")),
            mib(rss_end as f64),
            mib(peak as f64),
            field(&l, "dashboard_s"),
        );
        writeln!(csv, "{row}").expect("csv");
        println!("{row}");
        // New usage for the next loop (the stand-in stamps the time when it lists).
        if i < a.loops {
            let t = Instant::now();
            for (ns, name, v, pi) in &pods {
                server
                    .put(pod_metrics(ns, name, *v, *pi, i))
                    .expect("metrics");
            }
            let took = t.elapsed().as_secs_f64();
            if took > interval as f64 / 2.0 {
                eprintln!(
                    "warning: storing the next usage took {took:.1} s of the {interval} s interval"
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let hwm = proc_status_kib(pid, "VmHWM:") * 1024;
    let rss_end = proc_status_kib(pid, "VmRSS:") * 1024;
    let mean_cpu = cpus.iter().sum::<f64>() / cpus.len().max(1) as f64;
    let total_share: f64 = shares.iter().sum();
    let names = [
        "list",
        "ingest",
        "recommend",
        "status",
        "checkpoint",
        "other",
    ];
    let share_text: Vec<String> = names
        .iter()
        .zip(shares.iter())
        .map(|(n, s)| format!("{n} {:.0}%", 100.0 * s / total_share.max(1e-9)))
        .collect();
    eprintln!(
        "{} pods, {} VPAs: caches synced in {sync_s:.1} s; RSS synced {} MiB, end {} MiB, peak {} MiB; \
         CPU per loop (after the first) {mean_cpu:.2} s; wall-time shares (after the first): {}; csv {}",
        pods_total,
        a.vpas,
        mib(rss_synced as f64),
        mib(rss_end as f64),
        mib(hwm as f64),
        share_text.join(", "),
        csv_path.display()
    );
    rec.terminate(Duration::from_secs(30)).await;
    let polls = polls.load(Ordering::Relaxed);
    if polls > 0 {
        eprintln!("dashboard polled {polls} times (fleet page, JSON twin, a workload page)");
    }
    println!(
        "peak_rss_bytes_per_pod={} loop_seconds_per_50k_pods={:.3}",
        hwm / pods_total.max(1) as u64,
        mean_cpu * 50_000.0 / pods_total.max(1) as f64
    );
}
