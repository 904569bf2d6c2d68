//! History as real installs store it, read with no flags: kube-prometheus-stack's label sets (`job="kubelet"`,
//! `metrics_path="/metrics/cadvisor"`, and the same metrics again from `/metrics/resource`, which must be passed
//! over), raw samples every 15 s, 2 m, 6 m and 1 h (a slow scrape, downsampled data), a counter reset inside a
//! series and a restart that starts a new series. Each interval is one namespace on one real Prometheus and one
//! real VictoriaMetrics; every recommendation through `--prometheus` must be within 1% of `--input` on the same
//! data, written as a trace with one sample per raw interval (per step where samples are denser than the step:
//! the step bounds the resolution).

use serde_json::{Value, json};

use crate::prometheus::{
    END, MIB, Rng, Sample, Server, by_id, start_prometheus, start_victoria_metrics, tailor,
    temp_dir,
};

const DAYS: i64 = 3;

/// One container of the synthetic store.
struct Ctr {
    pod: String,
    name: &'static str,
    /// Raw sample times (unix s), from the history's first second on.
    times: Vec<i64>,
    /// Cores used in the interval ending at `times[i]` (index 0 unused).
    cores: Vec<f64>,
    /// Working set at `times[i]`.
    bytes: Vec<f64>,
    /// The counter drops to zero just after this sample (a reset inside one series).
    reset_after: Option<usize>,
    /// The container restarts after this sample: a new series (new cgroup `id`) takes over.
    restart_after: Option<usize>,
}

fn boxes(interval: i64, seed: u64) -> Vec<Ctr> {
    let t0 = END - DAYS * 86_400;
    let mut rng = Rng(seed);
    let specs: [(&str, &'static str, f64, f64); 3] = [
        ("web-6c9f8d7b5c-a1b2c", "app", 0.40, 300.0),
        ("web-6c9f8d7b5c-d3e4f", "app", 0.40, 300.0),
        ("db-0", "postgres", 1.20, 2000.0),
    ];
    let n = (DAYS * 86_400 / interval) as usize;
    specs
        .iter()
        .enumerate()
        .map(|(i, &(pod, name, base, mib))| {
            let times: Vec<i64> = (0..=n).map(|k| t0 + k as i64 * interval).collect();
            let mut cores = Vec::new();
            let mut bytes = Vec::new();
            for &t in &times {
                let hour = ((t - t0) / 3600) as f64;
                let daily = 1.0 + 0.5 * (hour * std::f64::consts::PI / 12.0).sin();
                cores.push(base * daily * (0.5 + rng.next()));
                bytes.push((mib * daily * (0.8 + 0.3 * rng.next()) * MIB).floor());
            }
            Ctr {
                pod: pod.to_string(),
                name,
                times,
                cores,
                bytes,
                reset_after: (i == 0).then_some(n / 2),
                // Just before a multiple of 4 samples: at 15 s, the new series starts on a minute.
                restart_after: (i == 1).then_some((n / 3 / 4) * 4 + 3),
            }
        })
        .collect()
}

/// kube-prometheus-stack's cAdvisor labels (plus the `id` that changes with a restart).
fn kubelet_labels(ns: &str, b: &Ctr, path: &str, generation: u32) -> Vec<(&'static str, String)> {
    vec![
        ("job", "kubelet".into()),
        ("metrics_path", path.into()),
        ("service", "kube-prometheus-stack-kubelet".into()),
        ("endpoint", "https-metrics".into()),
        ("instance", "10.0.0.7:10250".into()),
        ("node", "node-a".into()),
        ("namespace", ns.into()),
        ("pod", b.pod.clone()),
        ("container", b.name.into()),
        ("image", format!("docker.io/library/{}:1", b.name)),
        (
            "id",
            format!("/kubepods.slice/pod-{}/cri-containerd-{generation}", b.pod),
        ),
    ]
}

/// The series of one namespace: cAdvisor (twice: the resource endpoint reports twice the usage, so reading
/// it would show), a pod-level series without container, and kube-state-metrics owners.
fn store(ns: &str, bs: &[Ctr]) -> Vec<(&'static str, Sample)> {
    let mut out = Vec::new();
    for b in bs {
        for (path, scale) in [("/metrics/cadvisor", 1.0), ("/metrics/resource", 2.0)] {
            // The counter, split into series at a restart.
            let mut series: Vec<Vec<(i64, f64)>> = vec![Vec::new()];
            let mut total = 5000.0;
            for (k, &t) in b.times.iter().enumerate() {
                if k > 0 {
                    let inc = b.cores[k] * (t - b.times[k - 1]) as f64 * scale;
                    total = if b.reset_after == Some(k - 1) {
                        // Reset just after the previous sample: the counter restarted from zero.
                        inc
                    } else {
                        total + inc
                    };
                    if b.restart_after == Some(k - 1) {
                        series.push(Vec::new());
                        total = 3.0;
                    }
                }
                if let Some(s) = series.last_mut() {
                    s.push((t, total));
                }
            }
            for (g, pts) in series.into_iter().enumerate() {
                let l = kubelet_labels(ns, b, path, g as u32);
                out.push(("container_cpu_usage_seconds_total", (l, pts)));
            }
            let l = kubelet_labels(ns, b, path, 0);
            let mem: Vec<(i64, f64)> = b
                .times
                .iter()
                .zip(&b.bytes)
                .map(|(&t, &v)| (t, v * scale))
                .collect();
            out.push(("container_memory_working_set_bytes", (l, mem)));
        }
        // The pod's own cgroup: no container label; never a container.
        let pod_level = vec![
            ("job", "kubelet".to_string()),
            ("metrics_path", "/metrics/cadvisor".to_string()),
            ("namespace", ns.to_string()),
            ("pod", b.pod.clone()),
        ];
        let pts = b.times.iter().map(|&t| (t, 1e9)).collect();
        out.push(("container_memory_working_set_bytes", (pod_level, pts)));
    }
    let ksm = |extra: Vec<(&'static str, String)>| {
        let mut l = vec![
            ("job", "kube-state-metrics".to_string()),
            (
                "service",
                "kube-prometheus-stack-kube-state-metrics".to_string(),
            ),
            ("namespace", ns.to_string()),
        ];
        l.extend(extra);
        l
    };
    let sparse: Vec<(i64, f64)> = bs[0].times.iter().step_by(10).map(|&t| (t, 1.0)).collect();
    for b in bs {
        let (kind, owner) = if b.pod.starts_with("web-") {
            ("ReplicaSet", "web-6c9f8d7b5c")
        } else {
            ("StatefulSet", "db")
        };
        let l = ksm(vec![
            ("pod", b.pod.clone()),
            ("owner_kind", kind.into()),
            ("owner_name", owner.into()),
            ("owner_is_controller", "true".into()),
        ]);
        out.push(("kube_pod_owner", (l, sparse.clone())));
    }
    let l = ksm(vec![
        ("replicaset", "web-6c9f8d7b5c".into()),
        ("owner_kind", "Deployment".into()),
        ("owner_name", "web".into()),
    ]);
    out.push(("kube_replicaset_owner", (l, sparse)));
    out
}

/// The same data as traces, CPU at `resolution` (seconds, a multiple of the raw interval): the average
/// over each span, as the counter between two samples `resolution` apart gives it.
fn traces(ns: &str, bs: &[Ctr], resolution: i64) -> Value {
    let mut out = Vec::new();
    for (id, prefix) in [("db", "db-"), ("web", "web-")] {
        let mut containers = Vec::new();
        let mut pods = Vec::new();
        for b in bs.iter().filter(|b| b.pod.starts_with(prefix)) {
            pods.push(json!({"name": b.pod, "labels": {"app": id}}));
            let interval = b.times[1] - b.times[0];
            let per = (resolution / interval).max(1) as usize;
            let mut cpu = Vec::new();
            let mut k = 1;
            while k + per - 1 < b.times.len() {
                let span = k..k + per;
                // The new series' first sample only starts its counter: the usage before it is not dated.
                if b.restart_after.is_some_and(|r| span.contains(&(r + 1))) {
                    k += per;
                    continue;
                }
                let avg = span.clone().map(|j| b.cores[j]).sum::<f64>() / per as f64;
                cpu.push(json!([b.times[k + per - 1], avg]));
                k += per;
            }
            let mem: Vec<Value> = (1..b.times.len())
                .map(|k| json!([b.times[k], b.bytes[k]]))
                .collect();
            containers.push(json!({
                "name": b.name, "pod": b.pod, "cpu_samples": cpu, "memory_samples": mem,
            }));
        }
        out.push(
            json!({"id": format!("{ns}/{id}"), "now": END, "pods": pods, "containers": containers}),
        );
    }
    Value::Array(out)
}

fn from_input(trace: &Value) -> Value {
    let dir = temp_dir("stores-trace");
    let path = dir.join("trace.json");
    std::fs::write(&path, serde_json::to_vec(trace).unwrap()).unwrap();
    let out = tailor(&["recommend", "-i", path.to_str().unwrap(), "-o", "json"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every number of `got` within 1% of `want`.
fn assert_within_1pct(want: &Value, got: &Value, what: &str) {
    let (w, g) = (by_id(want), by_id(got));
    assert_eq!(
        w.keys().collect::<Vec<_>>(),
        g.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (id, wo) in &w {
        let (wr, gr) = (
            wo["recommendations"].as_array().unwrap(),
            g[id]["recommendations"].as_array().unwrap(),
        );
        assert_eq!(wr.len(), gr.len(), "{what} {id}");
        assert!(!wr.is_empty(), "{what} {id}: no recommendation");
        for (a, b) in wr.iter().zip(gr) {
            for bound in ["target", "lowerBound", "upperBound", "uncappedTarget"] {
                for res in ["cpu", "memory"] {
                    let (x, y) = (
                        a[bound][res].as_f64().unwrap(),
                        b[bound][res].as_f64().unwrap(),
                    );
                    assert!(
                        (x - y).abs() <= 0.01 * x.abs().max(1.0),
                        "{what} {id}/{}: {bound}.{res}: --input {x}, --prometheus {y}",
                        a["containerName"]
                    );
                }
            }
        }
    }
}

/// (namespace, raw interval in seconds, seed).
const STORES: [(&str, i64, u64); 4] = [
    ("scrape-15s", 15, 11),
    ("scrape-2m", 120, 12),
    ("scrape-6m", 360, 13),
    ("downsampled-1h", 3600, 14),
];

fn all_series() -> Vec<(&'static str, Sample)> {
    STORES
        .iter()
        .flat_map(|&(ns, i, seed)| store(ns, &boxes(i, seed)))
        .collect()
}

fn check(server: &Server, name: &str) {
    let end = END.to_string();
    for (ns, interval, seed) in STORES {
        let bs = boxes(interval, seed);
        let mut steps = vec![("1m", 60)];
        if interval < 60 {
            // A step down to the scrape interval reads every sample.
            steps.push(("15s", 15));
        }
        for (step, step_s) in steps {
            let want = from_input(&traces(ns, &bs, step_s.max(interval)));
            let out = tailor(&[
                "recommend",
                "--prometheus",
                &server.url,
                "--history",
                "3d",
                "--end",
                &end,
                "-n",
                ns,
                "--step",
                step,
                "-o",
                "json",
            ]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{name} {ns}: {err}");
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_within_1pct(&want, &got, &format!("{name} {ns} step {step}"));
            assert!(
                err.contains(
                    "reading 3 containers from job \"kubelet\" metrics_path \"/metrics/cadvisor\" \
                     (3 also scraped as job \"kubelet\" metrics_path \"/metrics/resource\": passed over"
                ),
                "{name} {ns}: {err}"
            );
        }
    }
    // The job flag narrows the choice; within the job, the cAdvisor path still wins.
    let (ns, interval, seed) = STORES[2];
    let base = from_input(&traces(ns, &boxes(interval, seed), interval));
    let out = tailor(&[
        "recommend",
        "--prometheus",
        &server.url,
        "--history",
        "3d",
        "--end",
        &end,
        "-n",
        ns,
        "-o",
        "json",
        "--prometheus-cadvisor-job-name",
        "kubelet",
    ]);
    assert!(out.status.success());
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_within_1pct(&base, &got, &format!("{name} {ns} with the job flag"));
    // A cluster matcher that matches nothing: no containers, exit 2, the message names the flags.
    let out = tailor(&[
        "recommend",
        "--prometheus",
        &server.url,
        "--history",
        "3d",
        "--end",
        &end,
        "--cluster-label",
        "cluster",
        "--cluster",
        "other",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster cluster=\"other\""), "{err}");
}

#[test]
fn kube_prometheus_stack_on_prometheus_at_every_interval() {
    let server = start_prometheus(&all_series());
    check(&server, "prometheus");
}

#[test]
fn kube_prometheus_stack_on_victoria_metrics_at_every_interval() {
    let server = start_victoria_metrics(&all_series());
    check(&server, "victoria-metrics");
}
