//! Targets of a custom kind with a `/scale` subresource (an Argo Rollout, registered on the stand-in from its
//! CRD): the recommender resolves them through discovery and `GET …/scale`; the webhook must too (issue 12
//! defect 1); the updater counts the replicas of a pod's creator of such a kind the same way.

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
async fn updater_reads_the_replica_count_of_a_custom_kind_through_scale() {
    let server = ApiServer::start().await.unwrap();
    rollout(&server);
    // A pod the Rollout created itself (as an OpenKruise CloneSet does): the updater counts its creator's
    // replicas through `/scale`, since it caches no such kind.
    server
        .put(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "canary-direct", "namespace": "shop", "uid": "pod-canary-direct",
                "labels": {"app": "canary"},
                "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                    "name": "canary", "uid": "dep-canary", "controller": true}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let up = start_updater(
        &server,
        dir.path(),
        "updater",
        &["--use-admission-controller-status=false"],
    );
    let read = server
        .wait_for(Duration::from_secs(10), |s| {
            s.requests().into_iter().find(|r| {
                r.user == "updater"
                    && r.verb() == "get"
                    && r.resource() == "rollouts/scale"
                    && r.status == 200
            })
        })
        .await;
    assert!(
        read.is_some(),
        "the updater never read the Rollout's /scale:\n{}",
        up.log_lines().join("\n")
    );
    assert_eq!(
        read.unwrap().target.and_then(|t| t.name).as_deref(),
        Some("canary")
    );
}
