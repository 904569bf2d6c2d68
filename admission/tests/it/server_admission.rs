//! The real webhook end to end: manifests loaded as in standalone mode (`--vpa-dir`), the real server over real
//! TLS, AdmissionReviews as the API server sends them, and the returned base64 JSON Patch applied to the pod
//! with `json-patch`.

use std::{sync::Arc, time::Duration};

use crate::server_common::*;
use base64::Engine as _;
use serde_json::{Value, json};
use tailor_admission::{manifests, server::Readiness, webhook::Webhook};
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::FeatureGates;
use tailor_testkit::fixtures::PodFixture;

const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  updatePolicy: {updateMode: Recreate}
status:
  recommendation:
    containerRecommendations:
      - containerName: app
        lowerBound: {cpu: 100m, memory: 128Mi}
        target: {cpu: 250m, memory: 256Mi}
        uncappedTarget: {cpu: 250m, memory: 256Mi}
        upperBound: {cpu: "1", memory: 1Gi}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: d-1}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: nginx}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-5d9c
  namespace: shop
  uid: rs-1
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: d-1, controller: true}]
spec:
  selector: {matchLabels: {app: web, pod-template-hash: 5d9c}}
  template:
    metadata: {labels: {app: web, pod-template-hash: 5d9c}}
    spec: {containers: [{name: app, image: nginx}]}
---
# Same workload in a namespace with a container LimitRange capping cpu at 400m.
apiVersion: v1
kind: List
items:
  - apiVersion: autoscaling.tailor.dev/v1
    kind: VerticalPodAutoscaler
    metadata: {name: web, namespace: capped, creationTimestamp: "2026-01-01T00:00:00Z"}
    spec:
      targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
    status:
      recommendation:
        containerRecommendations:
          - containerName: app
            target: {cpu: 250m, memory: 256Mi}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: capped, uid: d-2}
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: app, image: nginx}]}
  - apiVersion: apps/v1
    kind: ReplicaSet
    metadata:
      name: web-5d9c
      namespace: capped
      uid: rs-2
      ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: d-2, controller: true}]
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: app, image: nginx}]}
  - apiVersion: v1
    kind: LimitRange
    metadata: {name: limits, namespace: capped}
    spec:
      limits:
        - type: Container
          max: {cpu: 400m}
"#;

/// A pod of ReplicaSet `web-5d9c` as the ReplicaSet controller creates it (no name yet, generateName set).
fn pod(namespace: &str, annotations: Option<Value>) -> Value {
    let pod = PodFixture::generated(namespace, "web-5d9c-")
        .label("app", "web")
        .label("pod-template-hash", "5d9c")
        .owner("ReplicaSet", "web-5d9c")
        .owner_uid(if namespace == "shop" { "rs-1" } else { "rs-2" })
        .owner_blocks_deletion()
        .container(
            "app",
            json!({"cpu": "100m", "memory": "100Mi"}),
            json!({"cpu": "200m", "memory": "200Mi"}),
        )
        .image("nginx")
        .container("sidecar", json!({"cpu": "10m"}), Value::Null)
        .image("envoy")
        .spec_fields(json!({
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "serviceAccountName": "default"
        }));
    let mut pod = match annotations {
        Some(a) => pod.annotations(a),
        None => pod,
    }
    .json();
    // As the API server sends a pod it has not created yet: an empty status.
    pod["status"] = json!({});
    pod
}

async fn start_webhook(dir: &std::path::Path) -> (Running, GeneratedCertsAlias) {
    let manifest_dir = dir.join("manifests");
    std::fs::create_dir(&manifest_dir).unwrap();
    std::fs::write(manifest_dir.join("shop.yaml"), MANIFESTS).unwrap();
    let loaded = manifests::load_dir(&manifest_dir).unwrap();
    assert_eq!(loaded.objects.vpas().len(), 2);
    let webhook = Webhook::new(
        loaded.objects.into_index(),
        FeatureGates::default(),
        PatchOptions::default(),
    );
    let certs = test_certs();
    let server = start(
        Arc::new(webhook),
        dir,
        &certs,
        Readiness::ready(),
        Duration::from_secs(60),
    )
    .await;
    (server, certs)
}

type GeneratedCertsAlias = tailor_admission::certs::GeneratedCerts;

fn decode_patch(response: &Value) -> json_patch::Patch {
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(
            response["patch"]
                .as_str()
                .expect("patch is a base64 string"),
        )
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

#[tokio::test]
async fn pod_create_is_patched_from_the_vpa() {
    let dir = tempfile::tempdir().unwrap();
    let (server, certs) = start_webhook(dir.path()).await;
    let mut client = Client::connect(server.webhook, client_config(&certs.ca_cert_pem))
        .await
        .unwrap();

    // Plain namespace: requests from target, limits kept in proportion (2×).
    let original = pod("shop", None);
    let out = client
        .review(&pod_create_review("0c9a8d74-1", "shop", original.clone()))
        .await;
    let response = &out["response"];
    assert_eq!(response["uid"], "0c9a8d74-1");
    assert_eq!(response["allowed"], true);
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &decode_patch(response)).unwrap();
    let app = &patched["spec"]["containers"][0]["resources"];
    assert_eq!(
        app["requests"],
        json!({"cpu": "250m", "memory": "256Mi"}),
        "{patched}"
    );
    assert_eq!(
        app["limits"],
        json!({"cpu": "500m", "memory": "512Mi"}),
        "{patched}"
    );
    // No recommendation for the sidecar: untouched.
    assert_eq!(
        patched["spec"]["containers"][1]["resources"],
        original["spec"]["containers"][1]["resources"]
    );
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(
        annotations["tailor.dev/observed-containers"],
        "app, sidecar"
    );
    assert!(
        annotations["tailor.dev/updates"]
            .as_str()
            .unwrap()
            .contains("web"),
        "{annotations}"
    );

    // LimitRange max cpu 400m: the request is lowered so the proportional limit stays at 400m.
    let original = pod("capped", Some(json!({"team": "a"})));
    let out = client
        .review(&pod_create_review("0c9a8d74-2", "capped", original.clone()))
        .await;
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &decode_patch(&out["response"])).unwrap();
    let app = &patched["spec"]["containers"][0]["resources"];
    assert_eq!(
        app["requests"],
        json!({"cpu": "200m", "memory": "256Mi"}),
        "{patched}"
    );
    assert_eq!(
        app["limits"],
        json!({"cpu": "400m", "memory": "512Mi"}),
        "{patched}"
    );
    assert_eq!(patched["metadata"]["annotations"]["team"], "a");

    // A pod no VPA governs: allowed, no patch.
    let mut stray = pod("shop", None);
    stray["metadata"]["ownerReferences"] = json!([]);
    stray["metadata"]["labels"] = json!({"app": "other"});
    let out = client
        .review(&pod_create_review("0c9a8d74-3", "shop", stray))
        .await;
    assert_eq!(
        out["response"],
        json!({"uid": "0c9a8d74-3", "allowed": true})
    );

    // A pod upstream VPA already sized: left alone, and counted.
    let upstream = pod(
        "shop",
        Some(json!({"vpaUpdates": "Pod resources updated by web: container 0: cpu request"})),
    );
    let out = client
        .review(&pod_create_review("0c9a8d74-4", "shop", upstream))
        .await;
    assert_eq!(
        out["response"],
        json!({"uid": "0c9a8d74-4", "allowed": true})
    );

    let (_, metrics) = get_ops(server.ops, "/metrics").await;
    assert!(
        metrics.contains(r#"tailor_admission_reviews_total{resource="pod",result="patched"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tailor_admission_reviews_total{resource="pod",result="allowed"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("tailor_admission_pods_skipped_upstream_annotation_total 1"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn vpa_validation_and_defaulting() {
    let dir = tempfile::tempdir().unwrap();
    let (server, certs) = start_webhook(dir.path()).await;
    let mut client = Client::connect(server.webhook, client_config(&certs.ca_cert_pem))
        .await
        .unwrap();

    // minReplicas 0: denied with upstream's message, our group.
    let bad = json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "updatePolicy": {"updateMode": "Recreate", "minReplicas": 0}
        }
    });
    let out = client.review(&vpa_create_review("v-1", bad)).await;
    let response = &out["response"];
    assert_eq!(response["uid"], "v-1");
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "spec.updatePolicy.minReplicas: Invalid value: 0: minReplicas has to be positive"
        ),
        "{message}"
    );
    assert!(
        message.starts_with(r#"VerticalPodAutoscaler.autoscaling.tailor.dev "web" is invalid"#),
        "{message}"
    );
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");

    // No updatePolicy: allowed and defaulted to Recreate.
    let plain = json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    });
    let out = client
        .review(&vpa_create_review("v-2", plain.clone()))
        .await;
    assert_eq!(out["response"]["allowed"], true);
    let mut patched = plain.clone();
    json_patch::patch(&mut patched, &decode_patch(&out["response"])).unwrap();
    assert_eq!(
        patched["spec"]["updatePolicy"],
        json!({"updateMode": "Recreate"})
    );

    // Upstream's group goes nowhere: allowed untouched.
    let mut upstream = vpa_create_review("v-3", plain);
    upstream["request"]["resource"]["group"] = json!("autoscaling.k8s.io");
    let out = client.review(&upstream).await;
    assert_eq!(out["response"], json!({"uid": "v-3", "allowed": true}));

    let (_, metrics) = get_ops(server.ops, "/metrics").await;
    assert!(
        metrics.contains(r#"tailor_admission_reviews_total{resource="vpa",result="denied"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tailor_admission_reviews_total{resource="vpa",result="patched"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tailor_admission_reviews_total{resource="other",result="allowed"} 1"#),
        "{metrics}"
    );
    server.stop().await;
}
