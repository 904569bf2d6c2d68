//! The real `tailor-recommender` and `tailor-admission` binaries against the stand-in API server, through a
//! kubeconfig, exactly as in a cluster (docs/design/principles.md §5;
//! docs/decisions/stand-in-api-server.md).
//!
//! The binaries must be built first (`cargo build -p tailor-recommender -p tailor-admission -p
//! tailor-updater`; `hack/test.sh` and `cargo test --workspace` do it): see
//! [`tailor_tests::process::binary`].

use std::time::Duration;

use serde_json::{Value, json};
use tailor_testkit::fixtures::VpaFixture;
use tailor_tests::process::{
    Process, post_review, start_admission, start_recommender, wait_admission_ready,
};
use tailor_tests::small_workload;
use tailor_tests::standin::tls::TestCa;
use tailor_tests::standin::{Action, ApiServer, DropMode, Fault, Match, Recorded};

pub(crate) const VPA_API: &str = "autoscaling.tailor.dev/v1";
const WAIT: Duration = Duration::from_secs(15);

/// A Deployment `app` in `shop` with its ReplicaSet, two running pods, and their PodMetrics.
pub(crate) fn workload(app: &str, cpu: &str, memory: &str) -> String {
    let mut out = small_workload::deployment_with_pods(app);
    for i in 0..2 {
        out.push_str(&small_workload::pod_metrics(app, i, cpu, memory));
    }
    out
}

/// A VPA `name` in `shop` over Deployment `target`.
pub(crate) fn vpa(name: &str, target: &str) -> Value {
    VpaFixture::new("shop", name)
        .target("Deployment", target)
        .json()
}

/// A pod `CREATE` review of `pod` in namespace `shop`, as the API server sends it.
pub(crate) fn pod_review(uid: &str, pod: &Value) -> Value {
    json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE", "userInfo": {"username": "controller"},
            "object": pod, "dryRun": false
        }
    })
}

pub(crate) fn namespace() -> &'static str {
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
}

/// The first container recommendation of VPA `name`, once it has target, lowerBound and upperBound.
pub(crate) fn recommendation(server: &ApiServer, name: &str) -> Option<Value> {
    let v = server.get(VPA_API, "VerticalPodAutoscaler", "shop", name)?;
    let r = v.pointer("/status/recommendation/containerRecommendations/0")?;
    ["target", "lowerBound", "upperBound"]
        .iter()
        .all(|k| {
            r.get(*k)
                .is_some_and(|x| x.get("cpu").is_some() && x.get("memory").is_some())
        })
        .then(|| r.clone())
}

/// The checkpoints of VPA `name` that carry histograms.
fn checkpoints_of(server: &ApiServer, name: &str) -> Vec<Value> {
    server
        .list(VPA_API, "VerticalPodAutoscalerCheckpoint", Some("shop"))
        .into_iter()
        .filter(|c| c.pointer("/spec/vpaObjectName").and_then(Value::as_str) == Some(name))
        .filter(|c| c.pointer("/status/cpuHistogram").is_some())
        .collect()
}

/// Waits for `what`, panicking with the process's logs if it does not come.
async fn wait<T>(
    server: &ApiServer,
    p: &Process,
    what: &str,
    check: impl FnMut(&ApiServer) -> Option<T>,
) -> T {
    match server.wait_for(WAIT, check).await {
        Some(v) => v,
        None => panic!(
            "{what}: not within {WAIT:?}; logs:\n{}",
            p.log_lines().join("\n")
        ),
    }
}

fn by<'a>(reqs: &'a [Recorded], user: &'a str) -> impl Iterator<Item = &'a Recorded> + 'a {
    reqs.iter().filter(move |r| r.user == user)
}

/// Panics if `p` logged a watch failure: every event the stand-in sends must decode, as the API server's do.
pub(crate) fn assert_watches_clean(p: &Process) {
    let failed: Vec<String> = p
        .json_logs()
        .into_iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("retrying"))
        })
        .map(|l| l.to_string())
        .collect();
    assert!(failed.is_empty(), "watch failures: {failed:#?}");
}

fn clear_status(server: &ApiServer, name: &str) {
    let mut v = server
        .get(VPA_API, "VerticalPodAutoscaler", "shop", name)
        .unwrap();
    v.as_object_mut().unwrap().remove("status");
    server.put(v).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommender_writes_status_and_checkpoints_and_restores_them_after_a_restart() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "200Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // First process: usage from PodMetrics → status and checkpoints.
    let (mut rec, _) = start_recommender(&server, dir.path(), "recommender-1", &[]);
    // Usage is 250m: above the 25m floor a VPA without usage gets.
    let first = wait(&server, &rec, "a recommendation from usage", |s| {
        recommendation(s, "web").filter(|r| r["target"]["cpu"] != "25m")
    })
    .await;
    assert!(first["target"]["cpu"].as_str().is_some(), "{first}");
    wait(&server, &rec, "checkpoints", |s| {
        let c = checkpoints_of(s, "web");
        (!c.is_empty()).then_some(c)
    })
    .await;
    let reqs = server.requests();
    let status_patch = by(&reqs, "recommender-1")
        .find(|r| r.verb() == "patch" && r.resource() == "verticalpodautoscalers/status")
        .expect("the status is written through the status subresource");
    assert_eq!(
        status_patch.field_manager.as_deref(),
        Some("tailor-recommender")
    );
    assert!(
        status_patch
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/merge-patch+json")),
        "{status_patch:?}"
    );
    let apply = by(&reqs, "recommender-1")
        .find(|r| r.verb() == "patch" && r.resource() == "verticalpodautoscalercheckpoints")
        .expect("checkpoints are written");
    assert_eq!(apply.field_manager.as_deref(), Some("tailor-recommender"));
    assert!(
        apply
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/apply-patch+yaml")),
        "checkpoints are server-side applied: {apply:?}"
    );
    assert!(by(&reqs, "recommender-1").any(|r| {
        r.verb() == "list"
            && r.resource() == "pods"
            && r.target
                .as_ref()
                .is_some_and(|t| t.group == "metrics.k8s.io")
    }));
    // A loop later, the checkpoint events have reached the recommender's watch, and decoded.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_watches_clean(&rec);
    assert!(
        rec.terminate(Duration::from_secs(10)).await,
        "the recommender exits 0 on SIGTERM:\n{}",
        rec.log_lines().join("\n")
    );
    let last = recommendation(&server, "web").unwrap();

    // Second process, with no usage at all and the status wiped: only the checkpoints can give it a
    // recommendation, and its very first status write must carry one.
    for pm in server.list("metrics.k8s.io/v1beta1", "PodMetrics", Some("shop")) {
        let name = pm["metadata"]["name"].as_str().unwrap();
        assert!(server.delete("metrics.k8s.io/v1beta1", "PodMetrics", "shop", name));
    }
    clear_status(&server, "web");
    server.clear_requests();
    // This one on a runtime with a thread per CPU (the default is one thread): both kinds run for real.
    let (mut rec2, _) = start_recommender(
        &server,
        dir.path(),
        "recommender-2",
        &["--runtime-threads", "0"],
    );
    let restored = wait(&server, &rec2, "a restored recommendation", |s| {
        recommendation(s, "web")
    })
    .await;
    let reqs = server.requests();
    assert!(
        by(&reqs, "recommender-2")
            .any(|r| r.verb() == "list" && r.resource() == "verticalpodautoscalercheckpoints"),
        "the new process reads the checkpoints"
    );
    let first_write = by(&reqs, "recommender-2")
        .find(|r| r.verb() == "patch" && r.resource() == "verticalpodautoscalers/status")
        .unwrap();
    assert_eq!(
        first_write
            .body
            .as_ref()
            .and_then(|b| b.pointer("/status/recommendation/containerRecommendations/0/target")),
        Some(&last["target"]),
        "the first status write after the restart carries the restored recommendation: {:?}",
        first_write.body
    );
    assert_eq!(
        restored["target"], last["target"],
        "restored target = the target before the restart"
    );
    assert!(rec2.terminate(Duration::from_secs(10)).await);

    // Control: without the checkpoints, the same start gives only the floor (the minimum per pod), with
    // upstream's rule for containers without samples (by default Tailor publishes nothing for them).
    for c in server.list(VPA_API, "VerticalPodAutoscalerCheckpoint", Some("shop")) {
        let name = c["metadata"]["name"].as_str().unwrap();
        server.delete(VPA_API, "VerticalPodAutoscalerCheckpoint", "shop", name);
    }
    clear_status(&server, "web");
    let (rec3, _) = start_recommender(
        &server,
        dir.path(),
        "recommender-3",
        &["--recommend-without-samples"],
    );
    let floor = wait(&server, &rec3, "a status without checkpoints", |s| {
        recommendation(s, "web")
    })
    .await;
    assert_eq!(
        floor["target"]["cpu"], "25m",
        "no checkpoints, no usage: {floor}"
    );
    assert_ne!(floor["target"], restored["target"]);
}

/// Waits until a recorded request matches `pred`.
async fn wait_request(
    server: &ApiServer,
    p: &Process,
    what: &str,
    pred: impl Fn(&Recorded) -> bool,
) -> Recorded {
    wait(server, p, what, |s| {
        s.requests().into_iter().find(|r| pred(r))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_resume_without_losing_a_vpa() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    for app in ["web", "api", "batch"] {
        server.load_yaml(&workload(app, "100m", "64Mi")).unwrap();
    }
    server.put(vpa("web", "web")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let user = "recommender";
    let (rec, _) = start_recommender(&server, dir.path(), user, &[]);
    wait(&server, &rec, "the first recommendation", |s| {
        recommendation(s, "web")
    })
    .await;
    let is_vpa = |r: &Recorded| r.user == user && r.resource() == "verticalpodautoscalers";

    // 1. The VPA watch breaks and cannot be re-established for a moment; a VPA is created meanwhile. The
    //    watch resumes from its last resourceVersion and replays the creation, without a new list.
    server.clear_requests();
    server.inject(Fault::new(
        Match::verb("watch", "verticalpodautoscalers"),
        Action::Fail(500),
    ));
    server.drop_watches(DropMode::Abort);
    wait_request(&server, &rec, "a refused VPA watch", |r| {
        is_vpa(r) && r.verb() == "watch" && r.status == 500
    })
    .await;
    let created = server.put(vpa("web-2", "api")).unwrap();
    let created_rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    server.clear_faults();
    wait(
        &server,
        &rec,
        "a recommendation for the VPA created while the watch was down",
        |s| recommendation(s, "web-2"),
    )
    .await;
    let reqs = server.requests();
    let resumed = reqs
        .iter()
        .find(|r| is_vpa(r) && r.verb() == "watch" && r.status == 200)
        .expect("the VPA watch resumed");
    let from: u64 = resumed.query["resourceVersion"].parse().unwrap();
    assert!(
        from < created_rv,
        "resumed from {from}, before the creation at {created_rv}"
    );
    assert!(
        !reqs.iter().any(|r| is_vpa(r) && r.verb() == "list"),
        "resumed by watch, not by a new list"
    );

    // 2. Same, but the change log is compacted meanwhile: the resumed watch gets 410 Gone, and the
    //    recommender lists again and still sees the new VPA.
    server.clear_requests();
    server.inject(Fault::new(
        Match::verb("watch", "verticalpodautoscalers"),
        Action::Fail(500),
    ));
    server.drop_watches(DropMode::Clean);
    wait_request(&server, &rec, "a refused VPA watch", |r| {
        is_vpa(r) && r.verb() == "watch" && r.status == 500
    })
    .await;
    server.put(vpa("web-3", "batch")).unwrap();
    server.compact();
    server.clear_faults();
    wait(
        &server,
        &rec,
        "a recommendation for the VPA created before the compaction",
        |s| recommendation(s, "web-3"),
    )
    .await;
    assert!(
        server
            .requests()
            .iter()
            .any(|r| is_vpa(r) && r.verb() == "list"),
        "410 Gone leads to a new list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_in_cluster_mode_patches_a_pod_of_a_deployment() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    let mut v = vpa("web", "web");
    v["status"] = json!({"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": "250m", "memory": "256Mi"}}]}});
    server.put(v.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(
        &server,
        dir.path(),
        "admission",
        &cert,
        &["--status-lease-update-interval", "1s"],
    )
    .await;
    wait_admission_ready(&adm, &addrs, WAIT).await;

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7c9f-", "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": "7c9f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9f",
                "uid": "rs-web", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "nginx",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    });
    let review = |uid: &str| {
        json!({
            "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop", "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": pod, "oldObject": null, "dryRun": false,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
            }
        })
    };
    let requests_after = |answer: &Value| -> Value {
        use base64::Engine as _;
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        let Some(patch) = answer["response"]["patch"].as_str() else {
            return pod["spec"]["containers"][0]["resources"]["requests"].clone();
        };
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        patched["spec"]["containers"][0]["resources"]["requests"].clone()
    };
    let ca_pem = ca.ca_pem.as_str();
    let answer = post_review(addrs.webhook, ca_pem, &review("r-1")).await;
    assert_eq!(answer["response"]["uid"], "r-1");
    assert_eq!(
        requests_after(&answer),
        json!({"cpu": "250m", "memory": "256Mi"}),
        "{answer}"
    );

    // A new recommendation reaches the webhook through its watch.
    v["status"]["recommendation"]["containerRecommendations"][0]["target"]["cpu"] = json!("300m");
    server.put(v).unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let answer = post_review(addrs.webhook, ca_pem, &review("r-2")).await;
        if requests_after(&answer)["cpu"] == "300m" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new recommendation never arrived: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The webhook keeps its status Lease once its caches synced (renewed at its next check, within a
    // second), as the updater expects, and wrote nothing else.
    let deadline = tokio::time::Instant::now() + WAIT;
    let lease = loop {
        let lease = server.get(
            "coordination.k8s.io/v1",
            "Lease",
            "kube-system",
            "tailor-admission",
        );
        if let Some(lease) = lease {
            break lease;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the status Lease was never written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        lease
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .is_some()
    );
    wait_request(&server, &adm, "a renewal of the status Lease", |r| {
        r.user == "admission"
            && r.verb() == "update"
            && r.resource() == "leases"
            && (200..300).contains(&r.status)
    })
    .await;
    let reqs = server.requests();
    let writes: Vec<String> = by(&reqs, "admission")
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}", r.verb(), r.resource()))
        .collect();
    assert!(
        writes.iter().all(|w| w.ends_with(" leases")),
        "the webhook writes only its Lease: {writes:?}"
    );
    assert_watches_clean(&adm);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommender_rides_out_api_faults_and_collects_orphaned_checkpoints() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "200Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    // A slow first pod list, two failed status writes, an unavailable metrics API once, a conflict on the
    // first checkpoint write.
    server.inject(
        Fault::new(
            Match::verb("list", "pods"),
            Action::Delay(Duration::from_secs(1)),
        )
        .times(1),
    );
    server.inject(
        Fault::new(
            Match::verb("patch", "verticalpodautoscalers").subresource("status"),
            Action::Fail(500),
        )
        .times(2),
    );
    server.inject(
        Fault::new(
            Match {
                path_contains: Some("/apis/metrics.k8s.io/".into()),
                ..Match::any()
            },
            Action::Fail(503),
        )
        .times(1),
    );
    server.inject(
        Fault::new(
            Match::verb("patch", "verticalpodautoscalercheckpoints"),
            Action::Conflict,
        )
        .times(1),
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut rec, _) = start_recommender(
        &server,
        dir.path(),
        "recommender",
        &["--checkpoints-gc-interval", "1s"],
    );
    wait(&server, &rec, "a recommendation despite the faults", |s| {
        recommendation(s, "web").filter(|r| r["target"]["cpu"] != "25m")
    })
    .await;
    wait(&server, &rec, "checkpoints despite the conflict", |s| {
        let c = checkpoints_of(s, "web");
        (!c.is_empty()).then_some(c)
    })
    .await;
    // The answers of the first three status writes (0 while one is still in flight).
    let statuses = wait(&server, &rec, "three answered status writes", |s| {
        let statuses: Vec<u16> = s
            .requests()
            .iter()
            .filter(|r| r.resource() == "verticalpodautoscalers/status")
            .map(|r| r.status)
            .take(3)
            .collect();
        (statuses.len() == 3 && !statuses.contains(&0)).then_some(statuses)
    })
    .await;
    let reqs = server.requests();
    assert_eq!(
        statuses.get(..3),
        Some(&[500, 500, 200][..]),
        "{statuses:?}"
    );
    assert!(reqs.iter().any(|r| r.status == 503));
    assert!(!rec.exited(), "the faults do not stop the recommender");

    // The VPA goes: its checkpoints are garbage-collected.
    assert!(server.delete(VPA_API, "VerticalPodAutoscaler", "shop", "web"));
    wait(&server, &rec, "the orphaned checkpoint deleted", |s| {
        s.list(VPA_API, "VerticalPodAutoscalerCheckpoint", Some("shop"))
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.verb() == "delete" && r.resource() == "verticalpodautoscalercheckpoints")
    );
}

/// `--kube-api-qps`/`--kube-api-burst` belong to the recommender alone, the one binary that honours them
/// (docs/decisions/flags-where-honoured.md): the updater and the webhook, which accepted and ignored them, now
/// refuse them.
#[test]
fn only_the_recommender_accepts_the_client_rate_flags() {
    for (name, accepts) in [
        ("tailor-recommender", true),
        ("tailor-updater", false),
        ("tailor-admission", false),
    ] {
        let out = std::process::Command::new(tailor_tests::process::binary(name))
            .args(["--kube-api-qps", "5", "--kube-api-burst", "10", "--help"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.success(),
            accepts,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
