//! A workload an upstream VPA covers too (README, "Moving from upstream VPA"): its pods carry upstream's
//! `vpaUpdates` because upstream's webhook sized them after Tailor's. The updater leaves them alone — an
//! evicted pod would come back with upstream's numbers, forever — and says why in `tailor plan`, an event
//! and the `UpdatesBlocked` condition (the plan lists the event in its notes).

use std::time::Duration;

use tailor_updater::config::RestrictionConfig;
use tailor_updater::iteration::IterationConfig;
use tailor_updater::preview::plan::{PlanSettings, plan};
use tailor_updater::preview::snapshot::Snapshot;
use tailor_updater::rate_limit::RateSettings;

/// Pod `name` of Deployment `web` (ReplicaSet `web-1`), requests below the VPA's range; `upstream` adds
/// upstream's annotation.
fn pod(name: &str, upstream: bool) -> String {
    let annotations = if upstream {
        r#"{vpaUpdates: "Pod resources updated by web: container 0: cpu request, memory request"}"#
    } else {
        "{}"
    };
    format!(
        r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: shop
  uid: uid-{name}
  labels: {{app: web}}
  annotations: {annotations}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: uid-rs, controller: true}}]
spec:
  nodeName: node-1
  containers: [{{name: app, image: app, resources: {{requests: {{cpu: 100m, memory: 300Mi}}}}}}]
status:
  phase: Running
  startTime: "2026-01-01T00:00:00Z"
  conditions: [{{type: Ready, status: "True"}}]
"#
    )
}

fn snapshot(upstream_sized: &[bool]) -> Snapshot {
    let mut text = String::from(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: uid-web}
spec: {replicas: 4, selector: {matchLabels: {app: web}}, template: {}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-1
  namespace: shop
  uid: uid-rs
  labels: {app: web}
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: uid-web, controller: true}]
spec: {replicas: 4, selector: {matchLabels: {app: web}}, template: {}}
---
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
        target: {cpu: 500m, memory: 512Mi}
        lowerBound: {cpu: 400m, memory: 400Mi}
        upperBound: {cpu: 600m, memory: 600Mi}
"#,
    );
    for (i, upstream) in upstream_sized.iter().enumerate() {
        text.push_str(&pod(&format!("web-{i}"), *upstream));
    }
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

fn settings() -> PlanSettings {
    PlanSettings {
        iteration: IterationConfig::default(),
        restriction: RestrictionConfig::default(),
        rate: RateSettings::from_flags(-1.0, 1),
        interval: Duration::from_secs(60),
        status_lease: None,
        now: "2026-01-10T12:00:00Z".parse().unwrap(),
        floor: None,
        resize_rules: Default::default(),
    }
}

#[tokio::test]
async fn pods_upstream_sized_are_left_alone_and_the_vpa_says_why() {
    let p = plan(&snapshot(&[true, true, false, false]), &settings()).await;
    for pod in &p.pods {
        let upstream = pod.pod == "web-0" || pod.pod == "web-1";
        if upstream {
            assert_eq!(pod.action, "skip", "{pod:?}");
            assert_eq!(
                pod.reason.as_deref(),
                Some("sized by upstream VPA (vpaUpdates)"),
                "{pod:?}"
            );
        }
    }
    // The pods Tailor's webhook sized are still updated.
    assert!(
        p.pods
            .iter()
            .any(|pod| pod.action == "evict" && (pod.pod == "web-2" || pod.pod == "web-3")),
        "{:?}",
        p.pods
    );
    let note = p
        .notes
        .iter()
        .find(|n| n.contains("SizedByUpstreamVPA"))
        .unwrap_or_else(|| panic!("no SizedByUpstreamVPA event in {:?}", p.notes));
    assert!(note.contains("2 of 4 pods"), "{note}");
}

#[tokio::test]
async fn without_upstreams_annotation_nothing_changes() {
    let p = plan(&snapshot(&[false, false, false, false]), &settings()).await;
    assert!(
        p.pods.iter().any(|pod| pod.action == "evict"),
        "{:?}",
        p.pods
    );
    assert!(
        !p.notes.iter().any(|n| n.contains("SizedByUpstreamVPA")),
        "{:?}",
        p.notes
    );
}
