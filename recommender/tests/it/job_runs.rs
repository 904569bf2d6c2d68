//! A CronJob's runs in the model: each run's pods carry their Job's labels (`controller-uid`, `job-name` and
//! their `batch.kubernetes.io/` forms), so each run gets its own aggregates, merged per container name when
//! its VPA is recommended (docs/decisions/job-runs.md). These tests hold that 10,000 finished runs neither
//! stall the loop nor stay in memory once their aggregates expire, on upstream's schedule (no sample for the
//! memory aggregation interval times its count, checked at each aggregate GC), and that another VPA's recommendation is the
//! same as without them. With a history store, each finished run's peak is read once and fed at its end; a
//! store that is down costs the runs' peaks and nothing else.

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use tailor_core::workload::SlimWorkload;
use tailor_recommender::process::config::ControllerConfig;
use tailor_recommender::views::slim::WatchedPod;
use tailor_testkit::fixtures::PodFixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::HistoryConfig;
use tailor_recommender::views::job_runs::{JobRunOptions, JobRunPeaks};
use tailor_tests::prom_stub::{Reply, stub};

use crate::controller::{APP, add_pods, cpu_at, mem_at};
use crate::harness::*;

const RUNS: usize = 10_000;
const HOUR: i64 = 3600;
/// Upstream's expiry: the memory aggregation interval (24 h) times its count (8), after the last sample.
const EXPIRY_HOURS: i64 = 24 * 8;

/// CronJob `nightly`, its job template labelled `app=nightly`.
fn cron_job() -> CronJob {
    CronJob {
        metadata: ObjectMeta {
            name: Some("nightly".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(CronJobSpec {
            schedule: "* * * * *".into(),
            job_template: JobTemplateSpec {
                metadata: None,
                spec: Some(JobSpec {
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(labels(&[("app", "nightly")])),
                            ..Default::default()
                        }),
                        spec: None,
                    },
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The pod of run `run` in `phase`, with the labels the Job controller sets.
fn run_pod(run: usize, phase: &str) -> WatchedPod {
    let job = format!("nightly-{run}");
    let uid = format!("uid-{run}");
    let lbl = [
        ("app", "nightly"),
        ("controller-uid", uid.as_str()),
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
        ("job-name", job.as_str()),
        ("batch.kubernetes.io/job-name", job.as_str()),
    ];
    let mut p = full_pod("default", &format!("{job}-x"), &lbl, &["task"]);
    if let Some(s) = p.status.as_mut() {
        s.phase = Some(phase.into());
        if phase != "Running" {
            s.container_statuses = Some(vec![terminated("task", 0, 30)]);
        }
    }
    WatchedPod::from_pod(&p).unwrap()
}

/// The status of container `name` that ran from `start` to `end` (seconds after T0) and exited.
fn terminated(name: &str, start: i64, end: i64) -> k8s_openapi::api::core::v1::ContainerStatus {
    serde_json::from_value(
        serde_json::json!({"name": name, "restartCount": 0, "ready": false,
        "image": "x", "imageID": "y", "state": {"terminated": {"exitCode": 0,
            "startedAt": rfc3339(start), "finishedAt": rfc3339(end)}}}),
    )
    .unwrap()
}

/// One loop's metrics: the web pod, and the running runs' pods when `runs` is set.
fn samples(secs: i64, runs: bool) -> serde_json::Value {
    let names: Vec<String> = (0..RUNS).map(|r| format!("nightly-{r}-x")).collect();
    let mut items: Vec<PodSample<'_>> = vec![(
        "default",
        "web-0",
        secs,
        vec![("app", cpu_at(0, secs / 60), mem_at(0, secs / 60))],
    )];
    if runs {
        items.extend(names.iter().enumerate().map(|(r, n)| {
            let mcpu = 100 + (r % 10) as i64 * 10;
            ("default", n.as_str(), secs, vec![("task", mcpu, 64 << 20)])
        }));
    }
    metrics_list(&items)
}

async fn harness(with_cron_job: bool) -> Harness {
    harness_with(with_cron_job, ControllerConfig::default()).await
}

async fn harness_with(with_cron_job: bool, config: ControllerConfig) -> Harness {
    let mut h = Harness::new(config).await;
    crate::controller::setup(&mut h);
    add_pods(&mut h, 1);
    if with_cron_job {
        h.writers
            .workloads
            .cron_jobs
            .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&cron_job())));
        let mut v = vpa("default", "nightly", "CronJob", "nightly");
        if let Some(t) = v.spec.target_ref.as_mut() {
            t.api_version = Some("batch/v1".into());
        }
        h.apply_vpa(&v);
    }
    h
}

fn web_target(h: &Harness) -> (i64, i64) {
    target(&h.vpa("default", "web"), "app", "target")
}

/// 10,000 finished runs of one CronJob: the loop stays fast, the runs' aggregates expire 8 days (the memory
/// aggregation interval times its count) after their last sample whether their pods are still listed or gone, their label sets are released once the
/// pods are gone, and the web VPA's recommendation is the one it gets without the CronJob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_finished_runs_age_out_and_leave_other_vpas_alone() {
    let mut h = harness(true).await;
    let mut control = harness(false).await;
    assert_eq!(control.rec.model().aggregate_count(), 0);
    // Every run's peak is asked for; the store has none (an empty answer).
    let queries = Arc::new(AtomicUsize::new(0));
    let q = queries.clone();
    let server = stub(move |_, _| {
        q.fetch_add(1, Ordering::SeqCst);
        Reply::Full(
            200,
            r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#.into(),
        )
    });
    h.rec.set_job_runs(Some(job_runs(server.port, RUNS)));
    for r in 0..RUNS {
        h.writers
            .pods
            .handle(watcher::Event::Apply(run_pod(r, "Running")));
    }
    let (report, _) = h.loop_with(0, Ok(samples(0, true))).await;
    control.loop_with(0, Ok(samples(0, false))).await;
    assert_eq!(report.samples_accepted, 2 * (RUNS as u64 + 1));
    assert_eq!(h.rec.model().aggregate_count(), RUNS + 1);
    let running_heap = h.rec.model().histogram_heap_bytes();
    // Every run finishes; half of them fail.
    for r in 0..RUNS {
        let phase = if r % 2 == 0 { "Succeeded" } else { "Failed" };
        h.writers
            .pods
            .handle(watcher::Event::Apply(run_pod(r, phase)));
    }
    let mut slowest = 0.0f64;
    // Loops at these hours; each gets a web sample, which keeps the GC clock at `now` (run_loop::gc_clock).
    for hour in [
        1,
        2,
        3,
        100,
        EXPIRY_HOURS - 1,
        EXPIRY_HOURS,
        EXPIRY_HOURS + 1,
    ] {
        let secs = hour * HOUR;
        let (report, _) = h.loop_with(secs, Ok(samples(secs, false))).await;
        control.loop_with(secs, Ok(samples(secs, false))).await;
        slowest = slowest.max(report.phases.total_seconds);
        assert_eq!(report.pods, RUNS + 1, "finished pods stay in the model");
        assert_eq!(web_target(&h), web_target(&control), "hour {hour}");
        let nightly = h.vpa("default", "nightly");
        let recommended = nightly.status.and_then(|s| s.recommendation).is_some();
        assert!(
            recommended || hour >= EXPIRY_HOURS,
            "the runs' merged aggregates give the CronJob's VPA a recommendation (hour {hour})"
        );
        let expected = if hour < EXPIRY_HOURS { RUNS + 1 } else { 1 };
        assert_eq!(h.rec.model().aggregate_count(), expected, "hour {hour}");
    }
    assert_eq!(
        counted(&h, "queued"),
        RUNS as u64,
        "each run is queued once"
    );
    let asked = queries.load(Ordering::SeqCst);
    let expired_heap = h.rec.model().histogram_heap_bytes();
    assert_eq!(expired_heap, control.rec.model().histogram_heap_bytes());
    println!(
        "{RUNS} finished runs: slowest loop {slowest:.3} s, histogram heap {running_heap} bytes with \
         their aggregates, {expired_heap} after they expired; {asked} run peaks asked for meanwhile"
    );
    assert!(slowest < 20.0, "a loop took {slowest} s");
    // The finished pods are deleted (the Job's TTL or the CronJob's history limit): their slots and label
    // sets are released at the next GC.
    for r in 0..RUNS {
        h.writers
            .pods
            .handle(watcher::Event::Delete(run_pod(r, "Succeeded")));
    }
    for hour in EXPIRY_HOURS + 2..=EXPIRY_HOURS + 3 {
        let secs = hour * HOUR;
        let (report, _) = h.loop_with(secs, Ok(samples(secs, false))).await;
        control.loop_with(secs, Ok(samples(secs, false))).await;
        assert_eq!(report.pods, 1);
        assert_eq!(web_target(&h), web_target(&control));
    }
    let model = h.rec.model();
    assert_eq!(model.aggregate_count(), 1);
    assert_eq!(
        model.label_set_count(),
        control.rec.model().label_set_count()
    );
    let _ = APP;
}

/// Run `run` of `nightly`, finished (Succeeded) after running from `start` to `end` (seconds after T0).
fn finished_run_pod(run: usize, start: i64, end: i64) -> WatchedPod {
    let job = format!("nightly-{run}");
    let pod = PodFixture::new("default", &format!("{job}-x"))
        .label("app", "nightly")
        .label("job-name", &job)
        .label("batch.kubernetes.io/job-name", &job)
        .container_resources("task", serde_json::Value::Null)
        .phase("Succeeded")
        .container_status(serde_json::json!({"name": "task", "restartCount": 0,
            "ready": false, "image": "x", "imageID": "y",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": rfc3339(start), "finishedAt": rfc3339(end)}}}))
        .build();
    WatchedPod::from_pod(&pod).unwrap()
}

/// A run's peak as the store answers it: 1 GiB and 1.5 cores.
fn peak_answer() -> String {
    let t = T0_SECS;
    format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[
            {{"metric":{{"resource":"memory"}},"value":[{t},"1073741824"]}},
            {{"metric":{{"resource":"cpu"}},"value":[{t},"1.5"]}}]}}}}"#
    )
}

/// Run peaks read from the stub on `port`, 1,000 queries a second, two at once.
fn job_runs(port: u16, max_pending: usize) -> JobRunPeaks {
    let client = PromClient::new(ClientConfig {
        url: format!("http://127.0.0.1:{port}"),
        retries: 0,
        query_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap();
    JobRunPeaks::new(JobRunOptions {
        client,
        query: HistoryConfig::default(),
        max_pending,
        qps: 1000.0,
        concurrency: 2,
    })
}

fn counted(h: &Harness, result: &'static str) -> u64 {
    h.metrics
        .job_run_peaks
        .get_or_create(&vec![("result", result)])
        .get()
}

/// Waits (at most 10 s) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three short runs nobody scraped get their peaks from the store, once each, in the loop after the queries
/// answer; the CronJob's VPA is recommended from them. With the store down, two more runs are skipped and
/// counted, the loop does not wait, and the web VPA is recommended as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_get_their_peak_from_the_store_once() {
    let queries = Arc::new(AtomicUsize::new(0));
    let down = Arc::new(AtomicBool::new(false));
    let (q, d) = (queries.clone(), down.clone());
    let server = stub(move |r, _| {
        if d.load(Ordering::SeqCst) {
            return Reply::Full(503, "down".into());
        }
        if r.path == "/api/v1/query" && r.get("query").contains("nightly-") {
            q.fetch_add(1, Ordering::SeqCst);
        }
        Reply::Full(200, peak_answer())
    });
    let mut h = harness(true).await;
    let mut control = harness(false).await;
    h.rec.set_job_runs(Some(job_runs(server.port, 100)));
    for r in 0..3 {
        h.writers
            .pods
            .handle(watcher::Event::Apply(finished_run_pod(
                r,
                10 * r as i64,
                10 * r as i64 + 20,
            )));
    }
    h.loop_with(60, Ok(samples(60, false))).await;
    assert_eq!(counted(&h, "queued"), 3);
    until("three run-peak queries", || {
        queries.load(Ordering::SeqCst) == 3
    })
    .await;
    // The answers are fed in a later loop; wait until the worker handed them back.
    let mut secs = 120;
    while counted(&h, "fed") < 6 {
        h.loop_with(secs, Ok(samples(secs, false))).await;
        // Leave the worker time to hand the answers back, whatever this machine's speed.
        tokio::time::sleep(Duration::from_millis(50)).await;
        secs += 60;
        assert!(secs < 60 * 200, "the peaks were never fed");
    }
    let (mcpu, bytes) = target(&h.vpa("default", "nightly"), "task", "target");
    assert!(
        bytes >= 1 << 30,
        "memory target {bytes} below the run's 1 GiB peak"
    );
    assert!(mcpu >= 1500, "CPU target {mcpu}m below the run's 1.5 cores");
    // At most once: later loops query nothing again.
    for _ in 0..3 {
        h.loop_with(secs, Ok(samples(secs, false))).await;
        secs += 60;
    }
    assert_eq!(queries.load(Ordering::SeqCst), 3);
    assert_eq!(counted(&h, "queued"), 3);
    // The store goes down: two more runs are skipped, counted as failed; no loop waits for them.
    down.store(true, Ordering::SeqCst);
    for r in 3..5 {
        h.writers
            .pods
            .handle(watcher::Event::Apply(finished_run_pod(
                r,
                secs - 50,
                secs - 30,
            )));
    }
    let mut slowest = 0.0f64;
    while counted(&h, "failed") < 2 {
        let (report, _) = h.loop_with(secs, Ok(samples(secs, false))).await;
        slowest = slowest.max(report.phases.total_seconds);
        tokio::time::sleep(Duration::from_millis(50)).await;
        secs += 60;
        assert!(secs < 60 * 400, "the failed runs were never counted");
    }
    assert_eq!(counted(&h, "fed"), 6);
    assert!(slowest < 2.0, "a loop took {slowest} s with the store down");
    for s in (60..secs).step_by(60) {
        control.loop_with(s, Ok(samples(s, false))).await;
    }
    assert_eq!(web_target(&h), web_target(&control));
}

/// `--job-target-memory-percentile` (docs/jobs.md): a CronJob's VPA gets its memory target from the runs' higher
/// percentile, a Deployment's VPA beside it keeps upstream's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_memory_percentile_raises_only_job_targets() {
    const N: usize = 100;
    let mut upstream = harness(true).await;
    let config = ControllerConfig {
        job_target_memory_percentile: Some(0.99),
        ..ControllerConfig::default()
    };
    let mut jobs = harness_with(true, config).await;
    // Runs of one process whose peaks differ: 200 MiB plus 8 MiB for each run before.
    let names: Vec<String> = (0..N).map(|r| format!("nightly-{r}-x")).collect();
    let mut items: Vec<PodSample<'_>> = vec![(
        "default",
        "web-0",
        0,
        vec![("app", cpu_at(0, 0), mem_at(0, 0))],
    )];
    items.extend((names.iter().enumerate()).map(|(r, n)| {
        (
            "default",
            n.as_str(),
            0,
            vec![("task", 100, (200 + 8 * r as i64) << 20)],
        )
    }));
    let samples = metrics_list(&items);
    for h in [&mut upstream, &mut jobs] {
        for r in 0..N {
            h.writers
                .pods
                .handle(watcher::Event::Apply(run_pod(r, "Running")));
        }
        h.loop_with(0, Ok(samples.clone())).await;
    }
    let memory = |h: &Harness| target(&h.vpa("default", "nightly"), "task", "target").1;
    let (p90, p99) = (memory(&upstream), memory(&jobs));
    assert!(p99 > p90, "p99 {p99} not above p90 {p90}");
    assert_eq!(
        web_target(&jobs),
        web_target(&upstream),
        "the Deployment's VPA keeps upstream's percentile"
    );
}
