//! The recommender controller against reflector stores fed directly and the stand-in API server (in process):
//! exact requests for status, checkpoints and deletes, and the controller's scenarios: conditions, OOMs,
//! checkpoints and restores, API errors, VPA churn, profiles.

use crate::harness::*;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStateTerminated};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::watcher;
use serde_json::json;
use tailor_core::workload::SlimWorkload;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tailor_engine::model::Selector;
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer, TracePod, try_replay};
use tailor_recommender::process::config::ControllerConfig;
use tailor_recommender::views::slim::SlimContainerStatus;

const VPA_STATUS: &str = "/apis/autoscaling.tailor.dev/v1/namespaces/default/verticalpodautoscalers/web/status?&fieldManager=tailor-recommender";
pub(crate) const CHECKPOINTS: &str =
    "/apis/autoscaling.tailor.dev/v1/namespaces/default/verticalpodautoscalercheckpoints";

pub(crate) const APP: &[(&str, &str)] = &[("app", "workload")];

pub(crate) fn setup(h: &mut Harness) {
    setup_with(h, &vpa("default", "web", "Deployment", "web"));
}

/// The `web` Deployment and `v` (a VPA targeting it).
pub(crate) fn setup_with(h: &mut Harness, v: &VerticalPodAutoscaler) {
    h.writers
        .workloads
        .deployments
        .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
            "default", "web", APP,
        ))));
    h.apply_vpa(v);
}

pub(crate) fn add_pods(h: &mut Harness, n: usize) {
    for i in 0..n {
        h.writers.pods.handle(watcher::Event::Apply(pod(
            "default",
            &format!("web-{i}"),
            APP,
            &["app"],
        )));
    }
}

pub(crate) fn cpu_at(pod: usize, i: i64) -> i64 {
    125 * (1 + ((i * 7 + pod as i64 * 3) % 8))
}

pub(crate) fn mem_at(pod: usize, i: i64) -> i64 {
    200 * 1024 * 1024 + ((i * 13 + pod as i64 * 5) % 11) * 3 * 1024 * 1024
}

pub(crate) fn sample_list(pods: usize, i: i64) -> serde_json::Value {
    sample_list_every(pods, i, 60)
}

/// Loop `i`'s samples, taken at `i × step` seconds.
pub(crate) fn sample_list_every(pods: usize, i: i64, step: i64) -> serde_json::Value {
    let names: Vec<String> = (0..pods).map(|p| format!("web-{p}")).collect();
    let items: Vec<PodSample<'_>> = names
        .iter()
        .enumerate()
        .map(|(p, n)| {
            (
                "default",
                n.as_str(),
                i * step,
                vec![("app", cpu_at(p, i), mem_at(p, i))],
            )
        })
        .collect();
    metrics_list(&items)
}

#[tokio::test]
async fn new_vpa_without_pods_reports_no_pods_matched() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    let (report, reqs) = h.loop_with(0, Ok(metrics_list(&[]))).await;
    assert!(report.metrics_ok);
    let t0 = rfc3339(0);
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].uri, "/apis/metrics.k8s.io/v1beta1/pods?");
    assert_eq!(reqs[1].method, "PATCH");
    assert_eq!(reqs[1].uri, VPA_STATUS);
    assert_eq!(
        reqs[1].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        reqs[1].body,
        json!({"status": {
            "recommendation": null,
            "conditions": [
                {"type": "NoPodsMatched", "status": "True", "lastTransitionTime": t0,
                 "reason": "NoPodsMatched", "message": "No pods match this VPA object"},
                {"type": "RecommendationProvided", "status": "False", "lastTransitionTime": t0,
                 "reason": "NoPodsMatched", "message": "No pods match this VPA object"},
            ],
            "observedGeneration": 1,
        }})
    );
    // Nothing changed: no write at all on the next loop.
    let (_, reqs) = h.loop_with(60, Ok(metrics_list(&[]))).await;
    assert_eq!(
        reqs.iter().filter(|r| r.method != "GET").count(),
        0,
        "{reqs:#?}"
    );
}

#[tokio::test]
async fn unresolvable_target_is_config_unsupported() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    h.apply_vpa(&vpa("default", "web", "Deployment", "missing"));
    h.writers
        .workloads
        .replica_sets
        .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(
            &owned_replica_set("default", "web-abc", "web", APP),
        )));
    h.apply_vpa(&vpa("default", "child", "ReplicaSet", "web-abc"));
    let (_, reqs) = h.loop_with(0, Ok(metrics_list(&[]))).await;
    let web = reqs.iter().find(|r| r.uri == VPA_STATUS).unwrap();
    let conds = web.body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds[0]["type"], "ConfigUnsupported");
    assert_eq!(conds[0]["status"], "True");
    assert_eq!(
        conds[0]["message"],
        "Cannot read targetRef. Reason: Deployment default/missing does not exist"
    );
    assert_eq!(conds[1]["type"], "NoPodsMatched");
    assert_eq!(conds[2]["type"], "RecommendationProvided");
    assert_eq!(conds[2]["status"], "False");
    let child = reqs
        .iter()
        .find(|r| r.uri.contains("/verticalpodautoscalers/child/status"))
        .unwrap();
    assert_eq!(
        child.body["status"]["conditions"][0]["message"],
        "The target apps/v1.ReplicaSet/web-abc has a parent controller but it should point to a topmost well-known or scalable controller"
    );
}

fn trace_for(pods: usize, loops: i64) -> Trace {
    trace_every(pods, loops, 60)
}

/// The usage of `loops` loops `step` seconds apart, as a trace for `tailor recommend`.
fn trace_every(pods: usize, loops: i64, step: i64) -> Trace {
    Trace {
        id: "controller".into(),
        now: None,
        options: None,
        pods: Some(
            (0..pods)
                .map(|p| TracePod {
                    name: format!("web-{p}"),
                    labels: Some(labels(APP)),
                })
                .collect(),
        ),
        containers: (0..pods)
            .map(|p| TraceContainer {
                name: "app".into(),
                pod: Some(format!("web-{p}")),
                cpu_request_cores: None,
                memory_request_bytes: None,
                cpu_samples: (0..loops)
                    .map(|i| [(T0_SECS + i * step) as f64, cpu_at(p, i) as f64 / 1000.0])
                    .collect(),
                memory_samples: (0..loops)
                    .map(|i| [(T0_SECS + i * step) as f64, mem_at(p, i) as f64])
                    .collect(),
                ooms: vec![],
            })
            .collect(),
        policy: None,
        update_mode: None,
        annotations: None,
    }
}

#[tokio::test]
async fn pods_and_metrics_give_the_cli_numbers() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 3);
    // A pod no VPA selects stays out of the model (memory saver).
    h.writers.pods.handle(watcher::Event::Apply(pod(
        "default",
        "other",
        &[("app", "x")],
        &["app"],
    )));
    let loops = 40;
    let mut last = None;
    for i in 0..loops {
        let (report, _) = h.loop_with(i * 60, Ok(sample_list(3, i))).await;
        assert_eq!(report.pods, 3);
        assert_eq!(report.samples_accepted, 6);
        last = Some(report);
    }
    assert!(last.unwrap().metrics_ok);
    let v = h.vpa("default", "web");
    let out = try_replay(&trace_for(3, loops), &ReplayConfig::default(), false).unwrap();
    let r = &out.recommendations[0];
    assert_eq!(
        target(&v, "app", "target"),
        (r.target.cpu.unwrap(), r.target.memory.unwrap())
    );
    assert_eq!(
        target(&v, "app", "lowerBound"),
        (r.lower_bound.cpu.unwrap(), r.lower_bound.memory.unwrap())
    );
    assert_eq!(
        target(&v, "app", "upperBound"),
        (r.upper_bound.cpu.unwrap(), r.upper_bound.memory.unwrap())
    );
    let conds = v.status.as_ref().unwrap().conditions.clone().unwrap();
    let types: Vec<(&str, &str)> = conds
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("LowConfidence", "True"),
            ("RecommendationProvided", "True")
        ]
    );
}

fn oom_transition(h: &mut Harness, pod_name: &str, finished_secs: i64) {
    let mut running = pod("default", pod_name, APP, &["app"]);
    running.status.container_statuses = vec![SlimContainerStatus {
        name: "app".into(),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }),
        ..Default::default()
    }];
    h.writers
        .pods
        .handle(watcher::Event::Apply(running.clone()));
    let mut killed = running;
    killed.status.container_statuses = vec![SlimContainerStatus {
        name: "app".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some("OOMKilled".into()),
                exit_code: 137,
                finished_at: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(T0_SECS + finished_secs).unwrap(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }];
    h.writers.pods.handle(watcher::Event::Apply(killed));
}

#[tokio::test]
async fn oom_arriving_after_later_samples_still_bumps_memory() {
    let run = |with_oom: bool| async move {
        let mut h = Harness::new(ControllerConfig::default()).await;
        setup(&mut h);
        add_pods(&mut h, 1);
        for i in 0..10 {
            h.loop_with(i * 60, Ok(sample_list(1, i))).await;
        }
        let mut recorded = 0;
        if with_oom {
            // Killed at minute 3, observed only now (after samples up to minute 9).
            oom_transition(&mut h, "web-0", 180);
            let (report, _) = h.loop_with(600, Ok(sample_list(1, 10))).await;
            recorded = report.ooms_recorded;
        } else {
            h.loop_with(600, Ok(sample_list(1, 10))).await;
        }
        (
            target(&h.vpa("default", "web"), "app", "target").1,
            recorded,
        )
    };
    let (plain, _) = run(false).await;
    let (bumped, recorded) = run(true).await;
    assert_eq!(recorded, 1);
    // Request 300Mi → peak 400Mi (+100Mi minimum bump), well above the ~230Mi usage peak.
    assert!(bumped >= 400 * 1024 * 1024, "{bumped}");
    assert!(bumped > plain, "{bumped} vs {plain}");
}

/// Upstream's per-VPA OOM settings (a container policy's `oomBumpUpRatio` and `oomMinBumpUp`) bump the
/// memory of the VPA's OOMs with `--feature-gates=PerVPAConfig=true`, as upstream's recommender does behind
/// the same gate; without it the flags' bump applies, as upstream's does by default.
#[tokio::test]
async fn per_vpa_oom_settings_bump_memory_behind_the_gate() {
    let run = |gate: bool| async move {
        let mut h = Harness::new(ControllerConfig {
            per_vpa_config: gate,
            ..ControllerConfig::default()
        })
        .await;
        let mut v = vpa("default", "web", "Deployment", "web");
        v.spec.resource_policy = Some(
            serde_json::from_value(serde_json::json!({"containerPolicies": [{
                "containerName": "app", "oomBumpUpRatio": "3", "oomMinBumpUp": "0"
            }]}))
            .unwrap(),
        );
        setup_with(&mut h, &v);
        add_pods(&mut h, 1);
        for i in 0..10 {
            h.loop_with(i * 60, Ok(sample_list(1, i))).await;
        }
        oom_transition(&mut h, "web-0", 570);
        let (report, _) = h.loop_with(600, Ok(sample_list(1, 10))).await;
        assert_eq!(report.ooms_recorded, 1);
        target(&h.vpa("default", "web"), "app", "target").1
    };
    let flags = run(false).await;
    let per_vpa = run(true).await;
    // Request 300Mi: the flags' bump gives max(+100Mi, ×1.2) = 400Mi; the VPA's ×3 gives 900Mi.
    assert!(
        (400 * 1024 * 1024..900 * 1024 * 1024).contains(&flags),
        "{flags}"
    );
    assert!(per_vpa >= 900 * 1024 * 1024, "{per_vpa} vs {flags}");
}

/// The one request that writes a checkpoint: a server-side apply of the whole object.
fn checkpoint_apply(reqs: &[Recorded]) -> &Recorded {
    let writes: Vec<_> = reqs
        .iter()
        .filter(|r| r.uri.starts_with(CHECKPOINTS))
        .collect();
    assert_eq!(writes.len(), 1, "{reqs:#?}");
    let w = writes[0];
    assert_eq!(w.method, "PATCH");
    assert_eq!(
        w.uri,
        format!("{CHECKPOINTS}/web.app?&force=true&fieldManager=tailor-recommender")
    );
    assert_eq!(
        w.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    w
}

#[tokio::test]
async fn failed_writes_are_counted_as_errors_and_sent_again_next_loop() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    let status_path = VPA_STATUS.split('?').next().unwrap_or_default();
    let checkpoint_path = format!("{CHECKPOINTS}/web.app");
    h.api.fail("PATCH", status_path, 500);
    h.api.fail("PATCH", &checkpoint_path, 500);
    let (report, reqs) = h.loop_with(0, Ok(sample_list(1, 0))).await;
    assert_eq!((report.status_writes, report.status_errors), (0, 1));
    assert_eq!(
        (report.checkpoints_written, report.checkpoint_errors),
        (0, 1)
    );
    assert_eq!(checkpoint_apply(&reqs).method, "PATCH");
    // Nothing was remembered as written: the next loop writes both.
    h.api.stop_failing();
    let (report, reqs) = h.loop_with(60, Ok(sample_list(1, 1))).await;
    assert_eq!((report.status_writes, report.status_errors), (1, 0));
    assert_eq!(
        (report.checkpoints_written, report.checkpoint_errors),
        (1, 0)
    );
    assert!(reqs.iter().any(|r| r.uri == VPA_STATUS), "{reqs:#?}");
    assert!(h.api.object(&checkpoint_path).is_some());
}

#[tokio::test]
async fn checkpoints_are_written_with_one_apply_each() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    let (report, reqs) = h.loop_with(0, Ok(sample_list(1, 0))).await;
    assert_eq!(report.checkpoints_written, 1);
    let body = &checkpoint_apply(&reqs).body;
    // The open window is left out of the histogram (as upstream) and kept in the annotation, listed by
    // pod: its end (as `at` minus the end) and its peak.
    let windows = format!(
        r#"{{"v":3,"at":{},"halfLife":86400000000000,"peaks":[],"pods":[["web-0",0,{}]]}}"#,
        t(86_400),
        mem_at(0, 0)
    );
    let mut expected = json!({
        "apiVersion": "autoscaling.tailor.dev/v1",
        "kind": "VerticalPodAutoscalerCheckpoint",
        "metadata": {
            "name": "web.app",
            "namespace": "default",
            "annotations": {"tailor.dev/open-memory-windows": windows},
            "ownerReferences": [{
                "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
                "name": "web", "uid": "uid-web", "controller": false, "blockOwnerDeletion": false,
            }],
        },
        "spec": {"vpaObjectName": "web", "containerName": "app"},
        "status": {
            "version": "v3",
            "totalSamplesCount": 1,
            "firstSampleStart": rfc3339(0),
            "lastSampleStart": rfc3339(0),
            "lastUpdateTime": rfc3339(0),
            "memoryHistogram": {"bucketWeights": {}, "referenceTimestamp": rfc3339(92_800), "totalWeight": 0.0},
        },
    });
    // One CPU sample: one bucket at full weight, decayed to the histogram's reference time.
    let cpu = &body["status"]["cpuHistogram"];
    assert_eq!(cpu["bucketWeights"], json!({"9": 10000}));
    assert_eq!(cpu["referenceTimestamp"], rfc3339(6_400));
    assert!(cpu["totalWeight"].as_f64().unwrap() > 0.0);
    expected["status"]["cpuHistogram"] = cpu.clone();
    assert_eq!(*body, expected);

    let (_, reqs) = h.loop_with(60, Ok(sample_list(1, 1))).await;
    let body = &checkpoint_apply(&reqs).body;
    // Same window, its peak now over both samples.
    expected["metadata"]["annotations"]["tailor.dev/open-memory-windows"] = json!(format!(
        r#"{{"v":3,"at":{},"halfLife":86400000000000,"peaks":[],"pods":[["web-0",0,{}]]}}"#,
        t(86_400),
        mem_at(0, 0).max(mem_at(0, 1))
    ));
    assert_eq!(body["metadata"], expected["metadata"]);
    assert_eq!(body["spec"], expected["spec"]);
    assert_eq!(body["status"]["totalSamplesCount"], 2);
    let stored = h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap();
    assert_eq!(stored["status"]["totalSamplesCount"], 2);
}

/// A second recommender after a restart: the `web` Deployment, the VPA as the first one left it, `pods`
/// pods and the checkpoints it wrote (as listed from the stand-in) in the store.
pub(crate) async fn restarted(
    before: &VerticalPodAutoscaler,
    pods: usize,
    checkpoints: Vec<serde_json::Value>,
) -> Harness {
    restarted_with(ControllerConfig::default(), before, pods, checkpoints).await
}

/// [`restarted`] with `cfg`.
pub(crate) async fn restarted_with(
    cfg: ControllerConfig,
    before: &VerticalPodAutoscaler,
    pods: usize,
    checkpoints: Vec<serde_json::Value>,
) -> Harness {
    let mut b = Harness::new(cfg).await;
    setup(&mut b);
    b.apply_vpa(before);
    add_pods(&mut b, pods);
    for c in checkpoints {
        let c: VerticalPodAutoscalerCheckpoint = serde_json::from_value(c).unwrap();
        b.apply_checkpoint(c);
    }
    b
}

#[tokio::test]
async fn restart_from_checkpoints_reproduces_the_recommendation() {
    let mut a = Harness::new(ControllerConfig::default()).await;
    setup(&mut a);
    add_pods(&mut a, 2);
    // Two days and a bit, one sample every 10 minutes: closed windows plus an open one.
    let loops = 300;
    for i in 0..loops {
        a.loop_with(i * 600, Ok(sample_list(2, i * 10))).await;
    }
    let before = a.vpa("default", "web");
    let checkpoints = a.api.objects(&format!("{CHECKPOINTS}/"));
    assert_eq!(checkpoints.len(), 1);

    let mut b = restarted(&before, 2, checkpoints).await;
    // No new usage: the restored state alone must give the same numbers.
    let (report, _) = b.loop_with(loops * 600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    let after = b.vpa("default", "web");
    for field in ["target", "lowerBound", "upperBound"] {
        let (c0, m0) = target(&before, "app", field);
        let (c1, m1) = target(&after, "app", field);
        let close = |x: i64, y: i64| ((x - y).abs() as f64) <= 0.01 * x.max(y) as f64;
        assert!(
            close(c0, c1) && close(m0, m1),
            "{field}: ({c0}, {m0}) vs ({c1}, {m1})"
        );
    }
}

#[tokio::test]
async fn restored_checkpoints_count_as_written_until_they_age() {
    // The first process writes its checkpoint in every loop (no minimum change).
    let mut a = Harness::new(ControllerConfig {
        checkpoints_min_change: 0.0,
        ..ControllerConfig::default()
    })
    .await;
    setup(&mut a);
    add_pods(&mut a, 2);
    let loops = 200;
    for i in 0..loops {
        a.loop_with(i * 600, Ok(sample_list(2, i * 10))).await;
    }
    let last = (loops - 1) * 600;
    let before = a.vpa("default", "web");
    let checkpoints = a.api.objects(&format!("{CHECKPOINTS}/"));
    assert_eq!(checkpoints.len(), 1);

    let mut b = restarted(&before, 2, checkpoints).await;
    // Restarted a minute after the last write, with no new usage: restored, and not rewritten.
    let (report, requests) = b.loop_with(last + 60, Ok(metrics_list(&[]))).await;
    let counts =
        |r: &tailor_recommender::LoopReport| (r.checkpoints_written, r.checkpoints_unchanged);
    assert_eq!(report.checkpoints_restored, 1);
    assert_eq!(counts(&report), (0, 1));
    // The checkpoint was read back (one GET) and not written.
    let touched: Vec<&str> = requests
        .iter()
        .filter(|r| r.uri.starts_with(CHECKPOINTS))
        .map(|r| r.method.as_str())
        .collect();
    assert_eq!(touched, ["GET"]);
    let (report, _) = b.loop_with(last + 300, Ok(metrics_list(&[]))).await;
    assert_eq!(counts(&report), (0, 1));
    // `--checkpoints-max-age` (10 minutes) after the restored write: rewritten.
    let (report, _) = b.loop_with(last + 600, Ok(metrics_list(&[]))).await;
    assert_eq!(counts(&report), (1, 0));
}

/// A first recommender's checkpoint of `web` after an hour of usage.
pub(crate) async fn one_checkpoint() -> (VerticalPodAutoscaler, serde_json::Value) {
    let mut a = Harness::new(ControllerConfig::default()).await;
    setup(&mut a);
    add_pods(&mut a, 2);
    for i in 0..60 {
        a.loop_with(i * 60, Ok(sample_list(2, i))).await;
    }
    let mut checkpoints = a.api.objects(&format!("{CHECKPOINTS}/"));
    assert_eq!(checkpoints.len(), 1);
    (a.vpa("default", "web"), checkpoints.remove(0))
}

#[tokio::test]
async fn checkpoints_of_many_vpas_are_read_by_listing_them_and_of_a_few_one_by_one() {
    let (before, checkpoint) = one_checkpoint().await;
    // 300 VPAs with a checkpoint each: all checkpoints listed, in pages of 250, no single reads.
    let mut b = restarted(&before, 2, Vec::new()).await;
    // A VPA `name` of the `web` Deployment, with a copy of the checkpoint as its own.
    let add = |b: &mut Harness, name: &str| {
        b.apply_vpa(&vpa("default", name, "Deployment", "web"));
        let mut c = checkpoint.clone();
        c["metadata"]["name"] = json!(format!("{name}.app"));
        c["spec"]["vpaObjectName"] = json!(name);
        b.apply_checkpoint(serde_json::from_value(c).unwrap());
    };
    let checkpoint_reads = |requests: &[Recorded]| -> Vec<String> {
        requests
            .iter()
            .filter(|r| r.method == "GET" && r.uri.contains("verticalpodautoscalercheckpoints"))
            .map(|r| r.uri.clone())
            .collect()
    };
    for i in 0..300 {
        add(&mut b, &format!("w{i}"));
    }
    let (report, requests) = b.loop_with(3600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 300);
    assert_eq!(
        checkpoint_reads(&requests),
        [
            "/apis/autoscaling.tailor.dev/v1/verticalpodautoscalercheckpoints?&limit=250",
            "/apis/autoscaling.tailor.dev/v1/verticalpodautoscalercheckpoints?&limit=250&continue=250"
        ]
    );
    // Restored counts as written: only `web`, restarted without a checkpoint, gets one in this loop.
    assert_eq!(report.checkpoints_written, 1);
    // A VPA created later with a checkpoint of its own: read by name.
    add(&mut b, "late");
    let (report, requests) = b.loop_with(3660, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    assert_eq!(
        checkpoint_reads(&requests),
        [format!("{CHECKPOINTS}/late.app")]
    );
}

#[tokio::test]
async fn checkpoints_that_cannot_be_read_are_neither_overwritten_nor_lost() {
    let (before, checkpoint) = one_checkpoint().await;
    let mut b = restarted(&before, 2, vec![checkpoint]).await;
    // As this API server stores it (its own resourceVersion), which must not change.
    let stored = b.api.object(&format!("{CHECKPOINTS}/web.app"));
    assert!(stored.is_some());
    b.api.fail("GET", &format!("{CHECKPOINTS}/web.app"), 500);
    // Usage arrives, but the stored histograms cannot be read: nothing is restored, and the checkpoint is
    // not overwritten with the new process's hour-less state.
    let (report, requests) = b.loop_with(3600, Ok(sample_list(2, 60))).await;
    assert_eq!(report.checkpoints_restored, 0);
    assert_eq!(report.checkpoints_written, 0);
    assert!(
        !requests
            .iter()
            .any(|r| r.method == "PATCH" && r.uri.starts_with(CHECKPOINTS))
    );
    assert!(
        b.metrics
            .encode()
            .contains("errors_total{kind=\"checkpoint_load\"} 1"),
        "{}",
        b.metrics.encode()
    );
    assert_eq!(b.api.object(&format!("{CHECKPOINTS}/web.app")), stored);
    // The next loop reads it again, and restores it.
    b.api.stop_failing();
    let (report, _) = b.loop_with(3660, Ok(sample_list(2, 61))).await;
    assert_eq!(report.checkpoints_restored, 1);
}

#[tokio::test]
async fn the_checkpoint_apply_owns_only_tailors_annotation() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    // Someone else annotated the stored checkpoint.
    h.api.put_object(
        &format!("{CHECKPOINTS}/web.app"),
        json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscalerCheckpoint",
               "metadata": {"name": "web.app", "namespace": "default", "resourceVersion": "7",
                            "annotations": {"example.com/team": "payments"}},
               "spec": {"vpaObjectName": "web", "containerName": "app"}}),
    );
    let (_, reqs) = h.loop_with(0, Ok(sample_list(1, 0))).await;
    // A server-side apply (never a JSON patch of /metadata/annotations, never a PUT of a stale copy)
    // whose only annotation is Tailor's key: the field manager owns that key and nothing else there.
    let apply = checkpoint_apply(&reqs);
    let annotations = apply.body["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        ["tailor.dev/open-memory-windows"]
    );
    assert!(apply.body["metadata"].get("resourceVersion").is_none());
    assert!(
        reqs.iter()
            .all(|r| !(r.uri.starts_with(CHECKPOINTS) && r.method == "PUT")),
        "{reqs:#?}"
    );
    let stored = h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap();
    assert_eq!(
        stored["metadata"]["annotations"]["example.com/team"],
        "payments"
    );
}

#[tokio::test]
async fn the_open_windows_of_4000_pods_fit_in_a_bounded_annotation_and_restore() {
    let pods = 4000;
    let mut a = Harness::new(ControllerConfig::default()).await;
    setup(&mut a);
    add_pods(&mut a, pods);
    for i in 0..3 {
        a.loop_with(i * 600, Ok(sample_list(pods, i * 10))).await;
    }
    let before = a.vpa("default", "web");
    let checkpoints = a.api.objects(&format!("{CHECKPOINTS}/"));
    assert_eq!(checkpoints.len(), 1);
    let annotation = checkpoints[0]["metadata"]["annotations"]["tailor.dev/open-memory-windows"]
        .as_str()
        .unwrap();
    // Under the API server's 256 KiB of annotations (short pod names: every window listed).
    assert!(
        annotation.len() < tailor_recommender::writers::checkpoint::LISTED_WINDOW_BYTES + 8 * 1024,
        "annotation of {} bytes for {pods} pods",
        annotation.len()
    );

    // A restart restores the same numbers from the bounded annotation.
    let mut b = restarted(&before, pods, checkpoints).await;
    let (report, _) = b.loop_with(3 * 600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    let after = b.vpa("default", "web");
    // Memory comes from the status histogram plus the annotation's windows: the same numbers. (CPU is not
    // compared: this synthetic usage spreads evenly over 8 buckets, so the median sits exactly on a bucket
    // boundary, which the status histogram's integer weights, upstream's format, may move either way.)
    for field in ["target", "lowerBound", "upperBound"] {
        let (_, m0) = target(&before, "app", field);
        let (_, m1) = target(&after, "app", field);
        assert_eq!(m0, m1, "memory {field}");
    }
}

#[tokio::test]
async fn checkpoints_in_the_per_pod_format_are_still_restored() {
    let mut a = Harness::new(ControllerConfig::default()).await;
    setup(&mut a);
    add_pods(&mut a, 2);
    for i in 0..300 {
        a.loop_with(i * 600, Ok(sample_list(2, i * 10))).await;
    }
    let before = a.vpa("default", "web");
    let mut checkpoints = a.api.objects(&format!("{CHECKPOINTS}/"));
    // Rewrite the annotation in the format Tailor wrote before the aggregate: one entry per pod.
    let text = checkpoints[0]["metadata"]["annotations"]["tailor.dev/open-memory-windows"]
        .as_str()
        .unwrap()
        .to_string();
    let aggregate: serde_json::Value = serde_json::from_str(&text).unwrap();
    let at = aggregate["at"].as_i64().unwrap();
    let per_pod: Vec<serde_json::Value> = aggregate["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| json!({"pod": w[0], "end": at - w[1].as_i64().unwrap(), "peak": w[2]}))
        .collect();
    assert_eq!(per_pod.len(), 2);
    checkpoints[0]["metadata"]["annotations"]["tailor.dev/open-memory-windows"] =
        json!(serde_json::to_string(&per_pod).unwrap());

    let mut b = restarted(&before, 2, checkpoints).await;
    let (report, _) = b.loop_with(300 * 600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    let after = b.vpa("default", "web");
    let (c0, m0) = target(&before, "app", "target");
    let (c1, m1) = target(&after, "app", "target");
    let close = |x: i64, y: i64| ((x - y).abs() as f64) <= 0.05 * x.max(y) as f64;
    assert!(
        close(c0, c1) && close(m0, m1),
        "({c0}, {m0}) vs ({c1}, {m1})"
    );
}

#[tokio::test]
async fn deleted_vpa_checkpoints_are_removed() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    for (vpa_name, container) in [("web", "app"), ("gone", "app"), ("gone", "sidecar")] {
        let mut c = VerticalPodAutoscalerCheckpoint::new(
            &format!("{vpa_name}-{container}"),
            tailor_crds::VerticalPodAutoscalerCheckpointSpec {
                vpa_object_name: Some(vpa_name.into()),
                container_name: Some(container.into()),
            },
        );
        c.metadata.namespace = Some("default".into());
        h.api.put_object(
            &format!("{CHECKPOINTS}/{vpa_name}-{container}"),
            serde_json::to_value(&c).unwrap(),
        );
        h.apply_checkpoint(c);
    }
    let (report, reqs) = h.loop_with(0, Ok(metrics_list(&[]))).await;
    let deletes: Vec<&str> = reqs
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.uri.as_str())
        .collect();
    assert_eq!(
        deletes,
        [
            format!("{CHECKPOINTS}/gone-app?"),
            format!("{CHECKPOINTS}/gone-sidecar?")
        ],
        "{reqs:#?}"
    );
    assert_eq!(report.checkpoints_deleted, 2);
    // GC runs again only after --checkpoints-gc-interval.
    let (_, reqs) = h.loop_with(60, Ok(metrics_list(&[]))).await;
    assert!(reqs.iter().all(|r| r.method != "DELETE"));
}

#[tokio::test]
async fn metrics_api_errors_keep_the_last_recommendation() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    for i in 0..5 {
        h.loop_with(i * 60, Ok(sample_list(1, i))).await;
    }
    let before = h.vpa("default", "web").status;
    let (report, reqs) = h.loop_with(300, Err(503)).await;
    assert!(!report.metrics_ok);
    assert!(
        reqs.iter()
            .all(|r| !r.uri.contains("/verticalpodautoscalers/")),
        "{reqs:#?}"
    );
    assert_eq!(h.vpa("default", "web").status, before);
    let metrics = h.metrics.encode();
    assert!(metrics.contains("tailor_recommender_errors_total{kind=\"metrics_api\"} 1"));
    // The model's table sizes are exported: one VPA, one pod.
    for table in ["vpas", "pods"] {
        let line = format!("tailor_recommender_model_slots{{table=\"{table}\"}} 1");
        assert!(metrics.contains(&line), "{line} missing in:\n{metrics}");
    }
}

#[tokio::test]
async fn eviction_events_become_ooms_with_their_usage() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    for i in 0..3 {
        h.loop_with(i * 60, Ok(sample_list(1, i))).await;
    }
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "web-0.1", "namespace": "default", "creationTimestamp": rfc3339(150),
            "annotations": {"offending_containers": "app", "offending_containers_usage": "1Gi",
                            "starved_resource": "memory"}},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "default"},
        "reason": "Evicted",
    }))
    .unwrap();
    let records = tailor_recommender::views::oom::eviction_ooms(&ev);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].memory_bytes, 1 << 30);
    h.ooms.push(records);
    let (report, _) = h.loop_with(180, Ok(sample_list(1, 3))).await;
    assert_eq!(report.ooms_recorded, 1);
    // max(1Gi × 1.2, 1Gi + 100Mi) = 1.2Gi peak.
    assert!(target(&h.vpa("default", "web"), "app", "target").1 >= 1288490188);
}

#[tokio::test]
async fn vpa_churn_does_not_grow_the_model() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    for (name, sel) in [("web", APP), ("other", &[("app", "other")][..])] {
        h.writers
            .workloads
            .deployments
            .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
                "default", name, sel,
            ))));
    }
    // One VPA lives through the churn: its index and selector must stay valid.
    h.apply_vpa(&vpa("default", "stay", "Deployment", "web"));
    h.rec.sync_vpas();
    for i in 0..10_000 {
        let mut v = vpa("default", "churn", "Deployment", "web");
        v.metadata.uid = Some(format!("uid-churn-{i}"));
        h.apply_vpa(&v);
        assert_eq!(h.rec.sync_vpas().len(), 2);
        // A new target: a new selector for the same VPA.
        if let Some(t) = v.spec.target_ref.as_mut() {
            t.name = "other".into();
        }
        h.apply_vpa(&v);
        assert_eq!(h.rec.sync_vpas().len(), 2);
        h.delete_vpa(&v);
        assert_eq!(h.rec.sync_vpas().len(), 1);
    }
    let model = h.rec.model().vpas();
    assert_eq!(model.len(), 2, "the VPA table grew with churn");
    let live: Vec<(&str, bool)> = model
        .iter()
        .map(|v| (v.name.as_str(), v.selector == Selector::Nothing))
        .collect();
    assert!(live.contains(&("stay", false)), "{live:?}");
    assert!(live.contains(&("churn", true)), "{live:?}");
}

/// The profile a VPA gets: its `tailor.dev/profile` annotation, else `--profile`; the numbers are the CLI's with
/// the profile applied to the flags.
#[tokio::test]
async fn profile_by_annotation_and_flag() {
    use tailor_engine::profile::{PROFILE_ANNOTATION, by_name};
    let balanced = by_name("balanced").unwrap().unwrap();
    let saver = by_name("saver").unwrap().unwrap();
    // (annotation, --profile, profile expected)
    for (annotation, global, expected) in [
        (Some("balanced"), None, Some(balanced)),
        (None, Some(saver), Some(saver)),
        (Some("upstream"), Some(saver), None),
    ] {
        let cfg = ControllerConfig {
            profile: global,
            ..ControllerConfig::default()
        };
        let mut h = Harness::new(cfg).await;
        let mut v = vpa("default", "web", "Deployment", "web");
        if let Some(a) = annotation {
            v.metadata.annotations = Some([(PROFILE_ANNOTATION.to_string(), a.to_string())].into());
        }
        setup_with(&mut h, &v);
        add_pods(&mut h, 2);
        let loops = 30;
        for i in 0..loops {
            h.loop_with(i * 60, Ok(sample_list(2, i))).await;
        }
        let mut config = ReplayConfig::default();
        if let Some(p) = expected {
            config.recommender = p.apply(&config.recommender);
        }
        let out = try_replay(&trace_for(2, loops), &config, false).unwrap();
        let r = &out.recommendations[0];
        let upstream = try_replay(&trace_for(2, loops), &ReplayConfig::default(), false).unwrap();
        // The data tells the profiles apart from upstream, so an ignored profile fails.
        assert_eq!(
            expected.is_some(),
            upstream.recommendations[0].target != r.target
        );
        assert_eq!(
            target(&h.vpa("default", "web"), "app", "target"),
            (r.target.cpu.unwrap(), r.target.memory.unwrap()),
            "{annotation:?} {:?}",
            global.map(|p| p.name)
        );
    }
}

/// `diurnal` takes CPU from the hourly histograms for a VPA resized in place, and its all-day settings for one
/// in `Recreate` mode (a pod admitted at night would keep its night request): both as `tailor recommend` computes
/// them, after 26 hours of samples every 10 minutes.
#[tokio::test]
async fn diurnal_follows_the_hours_only_for_vpas_resized_in_place() {
    use tailor_crds::{PodUpdatePolicy, UpdateMode};
    use tailor_engine::profile::{PROFILE_ANNOTATION, by_name};
    let diurnal = by_name("diurnal").unwrap().unwrap();
    let (step, loops) = (600, 26 * 6);
    let mut expected = Vec::new();
    for hourly in [true, false] {
        let mut config = ReplayConfig::default();
        config.recommender = diurnal.apply(&config.recommender);
        config.aggregations.cpu_time_of_day = true;
        if !hourly {
            config.recommender.cpu_time_of_day = None;
        }
        let out = try_replay(&trace_every(2, loops, step), &config, false).unwrap();
        let t = out.recommendations[0].target;
        expected.push((t.cpu.unwrap(), t.memory.unwrap()));
    }
    assert_ne!(expected[0], expected[1], "the data must tell the two apart");
    for (mode, want) in [
        (UpdateMode::InPlaceOrRecreate, expected[0]),
        (UpdateMode::Recreate, expected[1]),
    ] {
        let mut cfg = ControllerConfig::default();
        cfg.aggregations.cpu_time_of_day = true;
        let mut h = Harness::new(cfg).await;
        let mut v = vpa("default", "web", "Deployment", "web");
        v.metadata.annotations =
            Some([(PROFILE_ANNOTATION.to_string(), "diurnal".to_string())].into());
        v.spec.update_policy = Some(PodUpdatePolicy {
            update_mode: Some(mode.clone()),
            ..Default::default()
        });
        setup_with(&mut h, &v);
        add_pods(&mut h, 2);
        for i in 0..loops {
            h.loop_with(i * step, Ok(sample_list_every(2, i, step)))
                .await;
        }
        assert_eq!(
            target(&h.vpa("default", "web"), "app", "target"),
            want,
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn checkpoints_are_rewritten_when_their_histograms_moved_or_at_the_maximum_age() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 1);
    let mut written = Vec::new();
    for i in 0..60 {
        let (report, _) = h.loop_with(i * 60, Ok(sample_list(1, i))).await;
        assert_eq!(
            report.checkpoints_written + report.checkpoints_unchanged,
            1,
            "loop {i}: {report:?}"
        );
        written.push(report.checkpoints_written);
    }
    println!("checkpoint writes per loop: {written:?}");
    // Young histograms move with every sample: written every loop at first.
    assert!(written[..5].iter().all(|w| *w == 1), "{written:?}");
    // Once the shape settles, only every 10 minutes (the maximum age), never less often.
    let writes: Vec<usize> = (0..60).filter(|i| written[*i] == 1).collect();
    assert!(writes.len() < 30, "{written:?}");
    assert!(writes.windows(2).all(|w| w[1] - w[0] <= 10), "{writes:?}");
    // Skipped loops are counted.
    assert!(written[30..].contains(&0), "{written:?}");
}
