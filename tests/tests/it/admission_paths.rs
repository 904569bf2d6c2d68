//! The real `tailor-admission` on code paths the other stand-in tests do not take, so that the RBAC check
//! (hack/checks/rbac.sh) sees their requests: self-managed certificates (the Secret created when missing,
//! replaced when emptied, the CA patched into the webhook configuration) and owners read live when the
//! caches miss them.

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tailor_testkit::fixtures::PodFixture;
use tailor_tests::process::{post_review, start_admission, wait_admission_ready};
use tailor_tests::standin::ApiServer;
use tailor_tests::standin::tls::TestCa;

use crate::binaries::{namespace, pod_review as review, vpa, workload};

const WAIT: Duration = Duration::from_secs(15);

fn b64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap_or_default())
        .unwrap_or_default()
}

/// The `data` key of the Secret, decoded, when present and not empty.
fn secret_key(server: &ApiServer, key: &str) -> Option<Vec<u8>> {
    let s = server.get("v1", "Secret", "tailor", "tailor-admission-tls")?;
    Some(b64(s.pointer(&format!("/data/{key}"))?)).filter(|b| !b.is_empty())
}

/// The `caBundle` of every webhook of the configuration, decoded.
fn ca_bundles(server: &ApiServer) -> Vec<Vec<u8>> {
    server
        .get(
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            "",
            "tailor-admission",
        )
        .and_then(|c| c["webhooks"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|w| b64(&w["clientConfig"]["caBundle"]))
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_managed_certificates_create_the_secret_and_patch_the_ca_bundle() {
    let server = ApiServer::start().await.unwrap();
    server
        .load_yaml(
            r#"
apiVersion: v1
kind: Namespace
metadata: {name: tailor}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: tailor-admission}
webhooks:
  - name: pods.admission.tailor.dev
    clientConfig: {service: {name: tailor-admission, namespace: tailor}}
  - name: vpa.admission.tailor.dev
    clientConfig: {service: {name: tailor-admission, namespace: tailor}}
"#,
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The serving certificate files are ignored with --self-signed-certs.
    let unused = TestCa::new("unused")
        .unwrap()
        .issue(&["localhost"])
        .unwrap();
    let flags = [
        "--self-signed-certs",
        "--namespace",
        "tailor",
        "--cert-secret",
        "tailor-admission-tls",
        "--webhook-config-name",
        "tailor-admission",
        "--webhook-service",
        "tailor-admission",
    ];
    let (adm, _) = start_admission(&server, dir.path(), "admission", &unused, &flags).await;
    let logs = || adm.log_lines().join("\n");

    // No Secret yet (deleted after the install): the webhook creates it, and its CA reaches every webhook.
    let first_ca = server
        .wait_for(WAIT, |s| {
            let ca = secret_key(s, "ca.crt")?;
            ca_bundles(s).iter().all(|b| contains(b, &ca)).then_some(ca)
        })
        .await
        .unwrap_or_else(|| panic!("no Secret with a CA in every caBundle:\n{}", logs()));
    for key in ["tls.crt", "tls.key"] {
        assert!(secret_key(&server, key).is_some(), "the Secret lacks {key}");
    }
    let reqs = server.requests();
    let by_admission = |verb: &str, resource: &str| {
        reqs.iter()
            .any(|r| r.user == "admission" && r.verb() == verb && r.resource() == resource)
    };
    assert!(by_admission("create", "secrets"), "the Secret is created");
    assert!(
        by_admission("patch", "mutatingwebhookconfigurations"),
        "the caBundle is patched"
    );

    // Both watches are up (so the change below is seen by the watch, not by a late first list).
    server
        .wait_for(WAIT, |s| {
            let watching = |resource: &str| {
                s.requests().iter().any(|r| {
                    r.user == "admission"
                        && r.verb() == "watch"
                        && r.resource() == resource
                        && r.status == 200
                })
            };
            (watching("secrets") && watching("mutatingwebhookconfigurations")).then_some(())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "the Secret and the configuration are not watched:\n{}",
                logs()
            )
        });

    // Someone empties the Secret: the watch sees it, the webhook replaces it with new material and publishes
    // the new CA (the old one is gone with the Secret's data, so nothing keeps it in the bundle).
    let mut emptied = server
        .get("v1", "Secret", "tailor", "tailor-admission-tls")
        .unwrap();
    emptied.as_object_mut().unwrap().remove("data");
    server.put(emptied).unwrap();
    let second_ca = server
        .wait_for(WAIT, |s| {
            let ca = secret_key(s, "ca.crt")?;
            (ca != first_ca && ca_bundles(s).iter().all(|b| contains(b, &ca))).then_some(ca)
        })
        .await
        .unwrap_or_else(|| panic!("the emptied Secret was not refilled:\n{}", logs()));
    assert_ne!(second_ca, first_ca);
    let reqs = server.requests();
    assert!(
        reqs.iter().any(|r| r.user == "admission"
            && r.verb() == "update"
            && r.resource() == "secrets"
            && (200..300).contains(&r.status)),
        "the Secret is replaced"
    );
}

/// A pod, its owner reference, in `shop`.
fn pod(kind: &str, api_version: &str, owner: &str) -> Value {
    PodFixture::generated("shop", &format!("{owner}-"))
        .label("app", "web")
        .owner_ref(api_version, kind, owner)
        .container_resources("app", Value::Null)
        .image("nginx")
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_missing_from_the_caches_are_read_live() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    // A ReplicaSet and a Job in the caches whose owners (a Deployment, a CronJob) are not.
    server
        .load_yaml(
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: fresh-1
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: fresh, uid: uid-fresh, controller: true}]
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: app, image: nginx}]}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: nightly-1
  namespace: shop
  ownerReferences: [{apiVersion: batch/v1, kind: CronJob, name: nightly, uid: uid-nightly, controller: true}]
spec:
  template: {metadata: {labels: {app: web}}, spec: {restartPolicy: Never, containers: [{name: app, image: nginx}]}}
"#,
        )
        .unwrap();
    server.put(vpa("web", "web")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(&server, dir.path(), "admission", &cert, &[]).await;
    wait_admission_ready(&adm, &addrs, WAIT).await;
    // Pods whose owner, or whose owner's owner, no cache holds: one per well-known kind.
    let pods = [
        pod("ReplicaSet", "apps/v1", "gone-rs"),
        pod("StatefulSet", "apps/v1", "gone-sts"),
        pod("DaemonSet", "apps/v1", "gone-ds"),
        pod("Job", "batch/v1", "gone-job"),
        pod("ReplicationController", "v1", "gone-rc"),
        pod("ReplicaSet", "apps/v1", "fresh-1"),
        pod("Job", "batch/v1", "nightly-1"),
    ];
    for (i, p) in pods.iter().enumerate() {
        let answer = post_review(addrs.webhook, &ca.ca_pem, &review(&format!("r-{i}"), p)).await;
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        // Live reads are rate-limited (20 per second): stay well below.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let want: BTreeSet<&str> = [
        "replicasets/gone-rs",
        "statefulsets/gone-sts",
        "daemonsets/gone-ds",
        "jobs/gone-job",
        "replicationcontrollers/gone-rc",
        "deployments/fresh",
        "cronjobs/nightly",
    ]
    .into();
    let got = server
        .wait_for(WAIT, |s| {
            let got: BTreeSet<String> = s
                .requests()
                .iter()
                .filter(|r| r.user == "admission" && r.verb() == "get")
                .filter_map(|r| {
                    let t = r.target.as_ref()?;
                    Some(format!("{}/{}", t.resource, t.name.as_deref()?))
                })
                .collect();
            want.iter().all(|w| got.contains(*w)).then_some(got)
        })
        .await;
    assert!(
        got.is_some(),
        "not every missing owner was read live (want {want:?}); requests: {:?}\n{}",
        server
            .requests()
            .iter()
            .filter(|r| r.user == "admission" && r.verb() == "get")
            .map(|r| r.path.clone())
            .collect::<Vec<_>>(),
        adm.log_lines().join("\n")
    );
}

/// Lists of ReplicaSets `tailor-admission` sent.
fn replica_set_lists(server: &ApiServer) -> usize {
    let lists = server.requests();
    lists
        .iter()
        .filter(|r| r.user == "admission" && r.verb() == "list" && r.resource() == "replicasets")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_created_after_sync_arrive_through_the_watch_without_a_relist() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(&server, dir.path(), "admission", &cert, &[]).await;
    wait_admission_ready(&adm, &addrs, WAIT).await;
    let lists = replica_set_lists(&server);
    assert_eq!(lists, 1, "one initial list");
    // A rollout: the Deployment's next ReplicaSet appears after the caches synced.
    server
        .load_yaml(
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-8d2e
  namespace: shop
  uid: rs-web-2
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: dep-web, controller: true}]
spec:
  selector: {matchLabels: {app: web, pod-template-hash: 8d2e}}
  template: {metadata: {labels: {app: web, pod-template-hash: 8d2e}}, spec: {containers: [{name: app, image: nginx}]}}
"#,
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = post_review(
        addrs.webhook,
        &ca.ca_pem,
        &review("r-1", &pod("ReplicaSet", "apps/v1", "web-8d2e")),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = server.requests();
    let live = requests
        .iter()
        .filter(|r| r.user == "admission" && r.verb() == "get")
        .filter_map(|r| r.target.as_ref()?.name.clone())
        .collect::<Vec<_>>();
    // The watch delivered the ReplicaSet: no live read, and the watch went on (no second list).
    assert!(
        !live.contains(&"web-8d2e".to_owned()),
        "read live: {live:?}"
    );
    assert_eq!(replica_set_lists(&server), 1, "relisted");
    let logs = adm.log_lines().join("\n");
    assert!(!logs.contains("watch failed"), "{logs}");
}

/// Quota fit (docs/decisions/quota-fit.md): the webhook caches the namespace's ResourceQuota, cuts the raise to
/// its headroom, says so in the updates annotation and records a `QuotaFit` Event on the VPA (through
/// events.k8s.io).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_fit_cuts_the_patch_and_records_an_event() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server
        .load_yaml(
            r#"
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: shop}
spec: {hard: {requests.cpu: 500m}}
status: {hard: {requests.cpu: 500m}, used: {requests.cpu: 400m}}
"#,
        )
        .unwrap();
    let (_dir, ca, adm, addrs) = webhook_with_recommendation(&server, "1").await;
    let mut p = pod("ReplicaSet", "apps/v1", "web-7c9f");
    p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "50m"}});
    let answer = post_review(addrs.webhook, &ca.ca_pem, &review("q-1", &p)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patch = b64(&answer["response"]["patch"]);
    let ops: Vec<Value> = serde_json::from_slice(&patch).unwrap_or_default();
    let cpu = ops
        .iter()
        .find(|op| op["path"] == "/spec/containers/0/resources/requests/cpu")
        .map(|op| op["value"].clone());
    // 100m free for the new pod, which asks 50m of it: raised to 100m, not to 1.
    assert_eq!(cpu, Some(json!("100m")), "{ops:?}");
    let note = ops
        .iter()
        .find(|op| op["path"] == "/metadata/annotations/tailor.dev~1updates")
        .and_then(|op| op["value"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        note.contains("ResourceQuota compute (requests.cpu headroom 100m)"),
        "{note}"
    );
    let event = vpa_event(&server, &adm, "QuotaFit").await;
    assert_eq!(event["regarding"]["name"], "web", "{event}");
    assert!(
        event["note"]
            .as_str()
            .unwrap_or_default()
            .contains("web-7c9f-"),
        "{event}"
    );
}

/// A pod whose ReplicaSet neither the caches nor the API server know (docs/decisions/unsized-admissions.md):
/// admitted unsized, and the VPA on the Deployment that ReplicaSet's name was made from gets a
/// `PodAdmittedUnsized` Event saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_admitted_unsized_is_reported_on_its_likely_vpa() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    let (_dir, ca, adm, addrs) = webhook_with_recommendation(&server, "300m").await;
    let p = pod("ReplicaSet", "apps/v1", "web-0dd1");
    let answer = post_review(addrs.webhook, &ca.ca_pem, &review("u-1", &p)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["patch"].is_null(), "{answer}");
    let event = vpa_event(&server, &adm, "PodAdmittedUnsized").await;
    assert_eq!(event["regarding"]["name"], "web", "{event}");
    assert_eq!(event["type"], "Warning", "{event}");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("web-0dd1") && note.contains("unsized_owner_missing"),
        "{event}"
    );
}

/// VPA `shop/web` on Deployment `web`, recommending `cpu` for container `app`, and the real webhook serving
/// it from the stand-in's caches, ready (with its temporary directory, CA, process and addresses).
async fn webhook_with_recommendation(
    server: &ApiServer,
    cpu: &str,
) -> (
    tempfile::TempDir,
    TestCa,
    tailor_tests::process::Process,
    tailor_tests::process::AdmissionAddrs,
) {
    let mut v = vpa("web", "web");
    v["status"] = json!({"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": cpu, "memory": "64Mi"}}]}});
    server.put(v).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook-ca").unwrap();
    let cert = ca.issue(&["localhost", "127.0.0.1"]).unwrap();
    let (adm, addrs) = start_admission(server, dir.path(), "admission", &cert, &[]).await;
    wait_admission_ready(&adm, &addrs, WAIT).await;
    (dir, ca, adm, addrs)
}

/// The Event with `reason` the webhook wrote in namespace `shop` (through events.k8s.io), once it exists.
async fn vpa_event(
    server: &ApiServer,
    adm: &tailor_tests::process::Process,
    reason: &str,
) -> Value {
    server
        .wait_for(WAIT, |s| {
            s.list("events.k8s.io/v1", "Event", Some("shop"))
                .into_iter()
                .find(|e| e["reason"] == reason)
        })
        .await
        .unwrap_or_else(|| panic!("no {reason} event:\n{}", adm.log_lines().join("\n")))
}
