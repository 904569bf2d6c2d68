//! Quota fit in the updater (docs/decisions/quota-fit.md), through `tailor plan`'s path (the binary's iteration
//! over a snapshot): two pods asking 100m of CPU whose recommendation wants 500m, in a namespace whose
//! ResourceQuota leaves more or less headroom. A resize whose raise does not fit is not sent; an eviction
//! whose replacement quota fit would size as the pod is now is not made (it would repeat forever).

use tailor_updater::preview::plan::plan;
use tailor_updater::preview::snapshot::Snapshot;

fn snapshot(mode: &str, used_cpu: Option<&str>) -> Snapshot {
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
    if let Some(used) = used_cpu {
        text.push_str(&format!(
            r#"
---
apiVersion: v1
kind: ResourceQuota
metadata: {{name: compute, namespace: shop}}
spec: {{hard: {{requests.cpu: "1"}}}}
status: {{hard: {{requests.cpu: "1"}}, used: {{requests.cpu: {used}}}}}
"#
        ));
    }
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
  containers: [{{name: app, image: app, resources: {{requests: {{cpu: 100m, memory: 512Mi}}}}}}]
status:
  phase: Running
  qosClass: Burstable
  startTime: "2026-01-01T00:00:00Z"
"#
        ));
    }
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

async fn actions(mode: &str, used_cpu: Option<&str>) -> Vec<(String, Option<String>)> {
    planned(mode, used_cpu).await.0
}

/// The pods' actions and reasons, and the plan's notes (the warning events among them).
async fn planned(
    mode: &str,
    used_cpu: Option<&str>,
) -> (Vec<(String, Option<String>)>, Vec<String>) {
    let settings = crate::fixtures::in_place_plan_settings(true);
    let planned = plan(&snapshot(mode, used_cpu), &settings).await;
    let pods = planned
        .pods
        .into_iter()
        .map(|p| (p.action.to_owned(), p.reason))
        .collect();
    (pods, planned.notes)
}

fn all(got: &[(String, Option<String>)], action: &str) -> bool {
    got.len() == 2 && got.iter().all(|(a, _)| a == action)
}

#[tokio::test]
async fn without_a_quota_or_with_room_the_pods_are_resized_or_evicted_as_before() {
    for used in [None, Some("200m")] {
        let got = actions("InPlaceOrRecreate", used).await;
        assert!(all(&got, "resize"), "{used:?}: {got:?}");
        let got = actions("Recreate", used).await;
        assert!(all(&got, "evict"), "{used:?}: {got:?}");
    }
}

#[tokio::test]
async fn a_raise_that_does_not_fit_in_place_is_not_sent() {
    // 700m used, 200m of it the two pods': 300m free, less than one pod's 400m raise.
    let got = actions("InPlace", Some("700m")).await;
    assert_eq!(got.len(), 2, "{got:?}");
    for (action, reason) in &got {
        let reason = reason.as_deref().unwrap_or_default();
        assert_eq!(action, "skip", "{reason}");
        assert!(
            reason.starts_with("quota: cpu raise cut to")
                && reason.contains("ResourceQuota compute (requests.cpu headroom 300m)"),
            "{reason}"
        );
    }
    // InPlaceOrRecreate: the replacement would get part of the raise, so the pod is evicted instead.
    let got = actions("InPlaceOrRecreate", Some("700m")).await;
    assert!(got.iter().any(|(a, _)| a == "evict"), "{got:?}");
}

#[tokio::test]
async fn no_eviction_when_the_replacement_would_be_the_same() {
    let (got, notes) = planned("Recreate", Some("1")).await;
    assert_eq!(got.len(), 2, "{got:?}");
    // The VPA says so: a warning event (and the UpdatesBlocked condition) with reason QuotaFit.
    assert!(
        notes
            .iter()
            .any(|n| n.contains("QuotaFit") && n.contains("2 pods are not updated")),
        "{notes:?}"
    );
    for (action, reason) in &got {
        let reason = reason.as_deref().unwrap_or_default();
        assert_eq!(action, "skip", "{reason}");
        assert_eq!(
            reason,
            "quota: cpu raise dropped to fit ResourceQuota compute (requests.cpu headroom 0)"
        );
    }
}
