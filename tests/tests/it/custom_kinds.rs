//! Targets of a custom kind with a `/scale` subresource (an Argo Rollout, registered on the stand-in from its
//! CRD): the recommender resolves them through discovery and `GET …/scale`; the webhook must too
//! (docs/decisions/scale-lookups.md); the updater counts the replicas of a pod's creator of such a kind the
//! same way.

use std::time::Duration;

use serde_json::{Value, json};
use tailor_tests::process::{
    post_review, start_admission, start_recommender, start_updater, wait_admission_ready,
};
use tailor_tests::standin::ApiServer;
use tailor_tests::standin::tls::TestCa;

use crate::binaries::{assert_watches_clean, namespace, recommendation, vpa, workload};

const ROLLOUT_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Rollout, plural: rollouts, singular: rollout, shortNames: [ro]}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
      subresources:
        status: {}
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas,
                labelSelectorPath: .status.selector}
"#;

/// The CRD, a Rollout `canary` (selector in `status.selector`, as Argo writes it) with its ReplicaSet, two
/// running pods and their PodMetrics.
fn rollout(server: &ApiServer) {
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(ROLLOUT_CRD).unwrap();
    let text = workload("canary", "250m", "200Mi")
        .replacen(
            "apiVersion: apps/v1\nkind: Deployment",
            "apiVersion: argoproj.io/v1alpha1\nkind: Rollout",
            1,
        )
        .replacen(
            "status: {replicas: 2}",
            "status: {replicas: 2, selector: app=canary}",
            1,
        )
        .replace(
            "{apiVersion: apps/v1, kind: Deployment, name: canary",
            "{apiVersion: argoproj.io/v1alpha1, kind: Rollout, name: canary",
        );
    assert!(text.contains("kind: Rollout"));
    server.load_yaml(&text).unwrap();
    assert!(
        server
            .get("argoproj.io/v1alpha1", "Rollout", "shop", "canary")
            .is_some()
    );
}

fn rollout_vpa() -> Value {
    let mut v = vpa("canary", "canary");
    v["spec"]["targetRef"] =
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "canary"});
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommender_resolves_a_custom_kind_through_scale() {
    let server = ApiServer::start().await.unwrap();
    rollout(&server);
    server.put(rollout_vpa()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (rec, _) = start_recommender(&server, dir.path(), "recommender", &[]);
    let r = server
        .wait_for(Duration::from_secs(15), |s| {
            recommendation(s, "canary").filter(|r| r["target"]["cpu"] != "25m")
        })
        .await
        .unwrap_or_else(|| panic!("no recommendation:\n{}", rec.log_lines().join("\n")));
    assert!(r["target"]["memory"].is_string());
    let reqs = server.requests();
    assert!(
        reqs.iter().any(|r| r.method == "GET"
            && r.resource() == "rollouts/scale"
            && r.object() == "shop/canary"),
        "the selector comes from GET …/rollouts/canary/scale"
    );
    assert!(
        reqs.iter()
            .any(|r| r.method == "GET" && r.path == "/apis/argoproj.io/v1alpha1"),
        "the resource comes from discovery"
    );
    assert_watches_clean(&rec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_patches_a_pod_of_a_custom_kind_with_scale() {
    let server = ApiServer::start().await.unwrap();
    rollout(&server);
    let mut v = rollout_vpa();
    v["status"] = json!({"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": "250m", "memory": "256Mi"}}]}});
    server.put(v).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(&server, dir.path(), "admission", &cert, &[]).await;
    wait_admission_ready(&adm, &addrs, Duration::from_secs(15)).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "canary-7c9f-", "namespace": "shop",
            "labels": {"app": "canary", "pod-template-hash": "7c9f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "canary-7c9f",
                "uid": "rs-canary", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}
    });
    let review = json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "r-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE", "userInfo": {"username": "rs-controller"},
            "object": pod, "dryRun": false
        }
    });
    // The scale lookup may be filled in the background: give it a few tries.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = post_review(addrs.webhook, &ca.ca_pem, &review).await;
        if answer["response"]["patch"].is_string() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod of a Rollout is admitted unpatched: {answer}\n{}",
            adm.log_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_evicts_pods_of_a_custom_kind_within_its_scale_replica_count() {
    // The binary's index once had no `/scale` lookup (docs/decisions/scale-lookups.md), so a VPA over a Rollout
    // was "without selector" every iteration while `tailor plan` evicted. Two pods the Rollout created itself
    // (as an OpenKruise CloneSet does), requests below the VPA's range: the binary resolves the Rollout through
    // `/scale`, counts its 2 replicas there, and evicts one pod (2 × tolerance 0.5), not both (upstream: 0
    // configured replicas, every pod at once); the second is then alone, below `--min-replicas`, and stays.
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(ROLLOUT_CRD).unwrap();
    server
        .load_yaml(
            "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: canary, namespace: shop, uid: ro-canary}\n\
             spec: {replicas: 2, selector: {matchLabels: {app: canary}}}\nstatus: {replicas: 2, selector: app=canary}\n",
        )
        .unwrap();
    for i in 0..2 {
        server
            .put(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("canary-{i}"), "namespace": "shop", "uid": format!("pod-canary-{i}"),
                    "labels": {"app": "canary"},
                    "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                        "name": "canary", "uid": "ro-canary", "controller": true}]},
                "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "nginx",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
                "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
            }))
            .unwrap();
    }
    let mut v = rollout_vpa();
    v["spec"]["updatePolicy"] = json!({"updateMode": "Recreate"});
    v["status"] = json!({"recommendation": {"containerRecommendations": [{"containerName": "app",
        "target": {"cpu": "500m", "memory": "512Mi"},
        "lowerBound": {"cpu": "400m", "memory": "400Mi"},
        "upperBound": {"cpu": "600m", "memory": "600Mi"}}]}});
    server.put(v).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut up = start_updater(
        &server,
        dir.path(),
        "updater",
        &["--use-admission-controller-status=false"],
    );
    let evictions = |s: &ApiServer| -> Vec<String> {
        s.requests()
            .into_iter()
            .filter(|r| r.user == "updater" && r.resource() == "pods/eviction" && r.status == 201)
            .map(|r| r.object())
            .collect()
    };
    server
        .wait_for(Duration::from_secs(15), |s| {
            (!evictions(s).is_empty()).then_some(())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no pod of the Rollout evicted:\n{}",
                up.log_lines().join("\n")
            )
        });
    // Three more iterations: the remaining pod stays.
    let after = iterations(&up) + 3;
    wait_iterations(&mut up, after, Duration::from_secs(20)).await;
    assert_eq!(evictions(&server).len(), 1, "{:?}", evictions(&server));
    assert_eq!(server.list("v1", "Pod", Some("shop")).len(), 1);
    let reqs = server.requests();
    assert!(
        reqs.iter().any(|r| r.user == "updater"
            && r.verb() == "get"
            && r.resource() == "rollouts/scale"
            && r.object() == "shop/canary"
            && r.status == 200),
        "the updater resolves the Rollout through its /scale"
    );
    up.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_looks_up_no_scale_for_pods_no_vpa_governs() {
    // docs/decisions/scale-lookups.md: 20 static pods (owned by their Node) and 5 pods of a Tekton TaskRun, no
    // VPA over them: the updater used to send a discovery GET and a `/scale` GET per owner and iteration,
    // failures never remembered. A VPA elsewhere in the namespace keeps the iteration running.
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    let mut pods = String::new();
    for i in 0..20 {
        pods.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: static-{i}\n  namespace: shop\n  uid: static-{i}\n  \
             ownerReferences: [{{apiVersion: v1, kind: Node, name: node-{i}, uid: node-{i}, controller: true}}]\n\
             spec: {{nodeName: node-{i}, containers: [{{name: app, image: nginx}}]}}\nstatus: {{phase: Running}}\n"
        ));
    }
    for i in 0..5 {
        pods.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: task-{i}\n  namespace: shop\n  uid: task-{i}\n  \
             ownerReferences: [{{apiVersion: tekton.dev/v1, kind: TaskRun, name: run-{i}, uid: run-{i}, controller: true}}]\n\
             spec: {{nodeName: node-1, containers: [{{name: step, image: busybox}}]}}\nstatus: {{phase: Running}}\n"
        ));
    }
    server.load_yaml(&pods).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut up = start_updater(
        &server,
        dir.path(),
        "updater",
        &["--use-admission-controller-status=false"],
    );
    wait_iterations(&mut up, 4, Duration::from_secs(30)).await;
    let lookups: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == "updater"
                && (r.resource().ends_with("/scale")
                    || r.path.starts_with("/apis/tekton.dev")
                    || r.path == "/api/v1" && r.method == "GET")
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        lookups.is_empty(),
        "lookups for owners no VPA names: {lookups:?}"
    );
    up.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_lookups_of_governed_owners_are_bounded_and_their_absence_remembered() {
    // docs/decisions/scale-lookups.md: 40 Tekton TaskRuns, each named by a Tailor VPA, none with a `/scale` the API
    // server knows (its discovery does not serve tekton.dev). Each owner is looked up at most once for the
    // VPA's selector and once for the pods' replica count, and the answer "no /scale" is remembered for
    // SCALE_TTL (10 min): later iterations send no lookup at all.
    const RUNS: usize = 40;
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    let mut objects = String::new();
    for i in 0..RUNS {
        objects.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: task-{i}\n  namespace: shop\n  uid: task-{i}\n  \
             ownerReferences: [{{apiVersion: tekton.dev/v1, kind: TaskRun, name: run-{i}, uid: run-{i}, controller: true}}]\n\
             spec: {{nodeName: node-1, containers: [{{name: step, image: busybox}}]}}\nstatus: {{phase: Running}}\n"
        ));
    }
    server.load_yaml(&objects).unwrap();
    for i in 0..RUNS {
        let mut v = vpa(&format!("run-{i}"), "unused");
        v["spec"]["targetRef"] =
            json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": format!("run-{i}")});
        v["status"] = json!({"recommendation": {"containerRecommendations": [{"containerName": "step",
            "target": {"cpu": "300m", "memory": "300Mi"}, "lowerBound": {"cpu": "300m", "memory": "300Mi"},
            "upperBound": {"cpu": "300m", "memory": "300Mi"}}]}});
        server.put(v).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut up = start_updater(
        &server,
        dir.path(),
        "updater",
        &["--use-admission-controller-status=false"],
    );
    let lookups = || -> Vec<String> {
        server
            .requests()
            .into_iter()
            .filter(|r| {
                r.user == "updater"
                    && !r.path.contains("/pods")
                    && !r.path.contains("verticalpodautoscalers")
            })
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    };
    wait_iterations(&mut up, 4, Duration::from_secs(60)).await;
    let first = lookups();
    // Discovery of tekton.dev/v1 (which the API server does not serve) and any /scale GET: for the VPAs'
    // targets (their selectors) and the pods' creators (replica counts), each remembered once answered.
    let tekton = |l: &[String]| l.iter().filter(|p| p.contains("/apis/tekton.dev")).count();
    assert!(
        tekton(&first) > 0,
        "no lookup of the governed owners: {first:?}"
    );
    assert!(
        tekton(&first) <= 2 * RUNS,
        "{} lookups for {RUNS} owners in 4 iterations: {first:?}",
        tekton(&first)
    );
    let seen = iterations(&up);
    wait_iterations(&mut up, seen + 3, Duration::from_secs(60)).await;
    let later = lookups();
    assert_eq!(
        tekton(&later),
        tekton(&first),
        "lookups again although every owner's absence was remembered: {:?}",
        &later[first.len()..]
    );
    up.kill();
}

/// The updater's finished iterations, from its log.
fn iterations(p: &tailor_tests::process::Process) -> usize {
    p.json_logs()
        .iter()
        .filter(|l| l["message"] == "iteration done")
        .count()
}

/// Waits until the updater has finished `n` iterations, failing after `within`.
async fn wait_iterations(up: &mut tailor_tests::process::Process, n: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while iterations(up) < n {
        assert!(!up.exited(), "{}", up.log_lines().join("\n"));
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            up.log_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
