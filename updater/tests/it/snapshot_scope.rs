//! `tailor plan` without the chart's webhook-scope flags plans for the webhook as the snapshot registers it:
//! a snapshot holding Tailor's MutatingWebhookConfiguration, whose `namespaceSelector` leaves `kube-system`
//! out, gets no eviction planned there, as the deployed updater (given the same scope by the chart) makes
//! none; flags given on the command line still win.

use tailor_updater::decisions::scope::WebhookScope;
use tailor_updater::preview::plan::{PlanSettings, plan};
use tailor_updater::preview::snapshot::Snapshot;

/// Deployment `web` with two pods far below their VPA's range, in namespace `ns`.
fn workload(ns: &str) -> String {
    let mut text = format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, uid: uid-{ns}-web}}
spec: {{selector: {{matchLabels: {{app: web}}}}, template: {{}}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-1
  namespace: {ns}
  uid: uid-{ns}-web-1
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: uid-{ns}-web, controller: true}}]
spec: {{replicas: 2, selector: {{matchLabels: {{app: web}}}}}}
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {{name: web, namespace: {ns}, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  updatePolicy: {{updateMode: Recreate}}
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
  namespace: {ns}
  uid: uid-{ns}-web-1-{i}
  labels: {{app: web}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: uid-{ns}-web-1, controller: true}}]
spec:
  nodeName: node-1
  containers: [{{name: app, image: app, resources: {{requests: {{cpu: 100m, memory: 100Mi}}}}}}]
status:
  phase: Running
  startTime: "2026-01-01T00:00:00Z"
"#
        ));
    }
    text
}

/// Tailor's webhook configuration as the chart renders it (release namespace `tailor`).
const WEBHOOK: &str = r#"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: tailor-admission}
webhooks:
  - name: pods.admission.tailor.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig: {service: {namespace: tailor, name: tailor-admission, path: /mutate-pods}}
    rules: [{operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["pods"]}]
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: NotIn, values: [tailor, kube-system]}
  - name: vpa.admission.tailor.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig: {service: {namespace: tailor, name: tailor-admission, path: /mutate-vpas}}
"#;

fn settings() -> PlanSettings {
    crate::fixtures::plan_settings()
}

fn snapshot(with_webhook: bool) -> Snapshot {
    let mut text = workload("kube-system") + &workload("shop");
    if with_webhook {
        text.push_str(WEBHOOK);
    }
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

fn evicted_in(p: &tailor_updater::preview::plan::Plan, ns: &str) -> usize {
    p.pods
        .iter()
        .filter(|pod| pod.namespace == ns && pod.action == "evict")
        .count()
}

#[tokio::test]
async fn the_snapshots_webhook_configuration_scopes_the_plan() {
    let p = plan(&snapshot(true), &settings()).await;
    assert_eq!(evicted_in(&p, "kube-system"), 0, "{:?}", p.pods);
    assert_eq!(evicted_in(&p, "shop"), 2, "{:?}", p.pods);
    assert!(
        p.skipped_vpas
            .iter()
            .any(|s| s.vpa == "kube-system/web" && s.reason.contains("does not serve")),
        "{:?}",
        p.skipped_vpas
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("MutatingWebhookConfiguration")),
        "{:?}",
        p.notes
    );
    // Without the configuration (and without flags) nothing tells the plan: upstream's updater's answer.
    let p = plan(&snapshot(false), &settings()).await;
    assert_eq!(evicted_in(&p, "kube-system"), 2, "{:?}", p.pods);
    // Flags given win over the snapshot.
    let mut flagged = settings();
    flagged.iteration.webhook_scope = WebhookScope::parse("shop", "").unwrap();
    let p = plan(&snapshot(true), &flagged).await;
    assert_eq!(evicted_in(&p, "kube-system"), 2, "{:?}", p.pods);
    assert_eq!(evicted_in(&p, "shop"), 0, "{:?}", p.pods);
}
