//! In-place resizes the API server would refuse are not sent (docs/decisions/resize-precheck.md), through
//! `tailor plan`'s path (the binary's iteration over a snapshot): a BestEffort pod that would gain requests is
//! evicted instead in `InPlaceOrRecreate` (upstream's fallback) and skipped with the reason in `InPlace`, where
//! the PATCH used to fail every interval. A pod read without `status.qosClass` (a snapshot from manifests) gets the
//! same check, its class computed from its spec.

use tailor_updater::preview::plan::plan;
use tailor_updater::preview::snapshot::Snapshot;

/// Deployment `web` with two pods that request nothing, under a VPA in `mode`; `reported` puts the API
/// server's `status.qosClass` on the pods.
fn snapshot(mode: &str, reported: bool) -> Snapshot {
    let qos = if reported {
        "\n  qosClass: BestEffort"
    } else {
        ""
    };
    let mut text = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop, uid: uid-web}}
spec: {{selector: {{matchLabels: {{app: web}}}}, template: {{}}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-1
  namespace: shop
  uid: uid-web-1
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: uid-web, controller: true}}]
spec: {{replicas: 2, selector: {{matchLabels: {{app: web}}}}}}
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {{name: web, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  updatePolicy: {{updateMode: {mode}}}
status:
  recommendation:
    containerRecommendations:
      - containerName: app
        target: {{cpu: 500m, memory: 512Mi}}
        lowerBound: {{cpu: 400m, memory: 400Mi}}
        upperBound: {{cpu: 600m, memory: 600Mi}}
"#
    );
    for i in 0..2 {
        text.push_str(&format!(
            r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1-{i}
  namespace: shop
  uid: uid-web-1-{i}
  labels: {{app: web}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: uid-web-1, controller: true}}]
spec:
  nodeName: node-1
  containers: [{{name: app, image: app}}]
status:
  phase: Running{qos}
  startTime: "2026-01-01T00:00:00Z"
"#
        ));
    }
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

async fn actions(mode: &str) -> Vec<(String, Option<String>)> {
    actions_of(mode, true).await
}

async fn actions_of(mode: &str, reported: bool) -> Vec<(String, Option<String>)> {
    let settings = crate::fixtures::in_place_plan_settings(true);
    plan(&snapshot(mode, reported), &settings)
        .await
        .pods
        .into_iter()
        .map(|p| (p.action.to_owned(), p.reason))
        .collect()
}

#[tokio::test]
async fn a_best_effort_pod_is_evicted_instead_of_resized_into_another_qos_class() {
    let got = actions("InPlaceOrRecreate").await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|(a, _)| a == "evict"), "{got:?}");
}

#[tokio::test]
async fn in_place_mode_skips_it_with_the_reason_instead_of_failing_every_interval() {
    let got = actions("InPlace").await;
    assert_eq!(got.len(), 2);
    for (action, reason) in &got {
        assert_eq!(action, "skip");
        let reason = reason.as_deref().unwrap_or_default();
        assert!(
            reason.starts_with("resize not sent")
                && reason.contains("from BestEffort to Burstable"),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn without_a_reported_class_the_class_comes_from_the_spec() {
    let got = actions_of("InPlace", false).await;
    assert_eq!(got.len(), 2);
    for (action, reason) in &got {
        assert_eq!(action, "skip");
        let reason = reason.as_deref().unwrap_or_default();
        assert!(reason.contains("from BestEffort to Burstable"), "{reason}");
    }
    let got = actions_of("InPlaceOrRecreate", false).await;
    assert!(got.iter().all(|(a, _)| a == "evict"), "{got:?}");
}
