//! A CronJob's finished runs through the real `tailor-recommender` binary against the stand-in API server,
//! with a stub Prometheus as its history store (docs/decisions/job-runs.md): 10,000 finished Job pods of one
//! CronJob are still listed next to a Deployment. Each run's peak is asked for once and recommended from, the
//! Deployment's VPA is recommended from its own usage, and the process stays small.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_testkit::fixtures::PodFixture;
use tailor_tests::process::{http_get_body, proc_status_kib, start_recommender};
use tailor_tests::prom_stub::{Reply, healthy, stub};
use tailor_tests::standin::ApiServer;

use crate::binaries::{VPA_API, namespace, recommendation, vpa, workload};

const RUNS: usize = 10_000;
const WAIT: Duration = Duration::from_secs(120);

fn cron_job() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "uid-nightly"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
            "metadata": {"labels": {"app": "nightly"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "task", "image": "task:1"}]}}}}},
    })
}

/// Run `run`'s pod, Succeeded (or Failed, for odd runs) after 20 seconds.
fn run_pod(run: usize) -> Value {
    let job = format!("nightly-{run}");
    let uid = format!("uid-{job}");
    let phase = if run.is_multiple_of(2) {
        "Succeeded"
    } else {
        "Failed"
    };
    PodFixture::new("shop", &format!("{job}-x"))
        .uid(&uid)
        .label("app", "nightly")
        .label("controller-uid", &uid)
        .label("job-name", &job)
        .label("batch.kubernetes.io/controller-uid", &uid)
        .label("batch.kubernetes.io/job-name", &job)
        .spec_fields(json!({"restartPolicy": "Never"}))
        .container_resources("task", Value::Null)
        .image("task:1")
        .phase(phase)
        .container_status(json!({"name": "task", "restartCount": 0, "ready": false,
            "image": "task:1", "imageID": "x",
            "state": {"terminated": {"exitCode": run % 2, "startedAt": "2026-11-01T10:00:00Z",
                "finishedAt": "2026-11-01T10:00:20Z"}}}))
        .json()
}

/// A counter of the recommender's `/metrics`, 0 while absent.
fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_finished_runs_get_their_peaks_once_and_leave_the_deployment_alone() {
    // The store: 1 GiB and 1.5 cores for each run; a healthy history otherwise (it holds no `shop` pod).
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let store = stub(move |r, _| {
        if r.path == "/api/v1/query" && r.get("query").contains("label_replace") {
            a.fetch_add(1, Ordering::SeqCst);
            return Reply::Full(
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[
                    {"metric":{"resource":"memory"},"value":[1761991220,"1073741824"]},
                    {"metric":{"resource":"cpu"},"value":[1761991220,"1.5"]}]}}"#
                    .into(),
            );
        }
        Reply::Full(200, healthy(r))
    });
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "200Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    server.put(cron_job()).unwrap();
    let mut nightly = vpa("nightly", "nightly");
    nightly["spec"]["targetRef"] =
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"});
    server.put(nightly).unwrap();
    for r in 0..RUNS {
        server.put(run_pod(r)).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", store.port);
    let args = [
        "--prometheus-address",
        &url,
        "--job-run-peaks-qps",
        "2000",
        "--prometheus-concurrency",
        "4",
    ];
    let started = Instant::now();
    let (rec, metrics) = start_recommender(&server, dir.path(), "recommender", &args);
    let logs = || rec.log_lines().join("\n");
    let fed = "tailor_recommender_job_run_peaks_total{result=\"fed\"}";
    let deadline = Instant::now() + WAIT;
    loop {
        let text = http_get_body(metrics, "/metrics").await;
        if counter(&text, fed) >= 2 * RUNS as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every run's peak fed:\n{text}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_fed = started.elapsed();
    // The next loops ask for nothing again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        RUNS,
        "each run is asked for once"
    );
    let text = http_get_body(metrics, "/metrics").await;
    let queued = "tailor_recommender_job_run_peaks_total{result=\"queued\"}";
    assert_eq!(counter(&text, queued), RUNS as u64, "{text}");
    let nightly = server
        .wait_for(WAIT, |s| {
            let v = s.get(VPA_API, "VerticalPodAutoscaler", "shop", "nightly")?;
            let m = v.pointer("/status/recommendation/containerRecommendations/0/target/memory")?;
            let q = Quantity(m.as_str()?.to_string());
            tailor_core::quantity::amount("memory", &q)
                .ok()
                .filter(|&b| b >= 1 << 30)
        })
        .await;
    assert!(
        nightly.is_some(),
        "the CronJob's VPA below the runs' 1 GiB peak:\n{}",
        logs()
    );
    let web = server
        .wait_for(WAIT, |s| {
            recommendation(s, "web").filter(|r| r["target"]["cpu"] != "25m")
        })
        .await
        .unwrap_or_else(|| panic!("no recommendation for web:\n{}", logs()));
    assert!(web["target"]["cpu"].as_str().is_some(), "{web}");
    let peak_kib = proc_status_kib(rec.pid(), "VmHWM:");
    println!(
        "{RUNS} finished runs: every peak fed {:.1} s after start; the recommender's peak RSS {} MiB",
        all_fed.as_secs_f64(),
        peak_kib / 1024
    );
    assert!(peak_kib < 512 * 1024, "peak RSS {peak_kib} KiB");
}
