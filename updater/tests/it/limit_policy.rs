//! The VPA's limit policy (docs/limit-policy.md) in the updater's in-place resize, through `tailor plan`'s
//! path (the binary's iteration over a snapshot): the policy's limits are the resize's, a limit the policy
//! unsets is kept in proportion (the API server refuses removing a limit in place) and the resize event says
//! so, and an annotation that does not parse is a warning on the VPA while limits keep their ratio.

use json_patch::PatchOperation;
use serde_json::{Value, json};
use tailor_testkit::fixtures::{PodFixture, VpaFixture};
use tailor_updater::decisions::resize::plan_resize;
use tailor_updater::preview::plan::{Plan, plan};
use tailor_updater::preview::snapshot::Snapshot;
use tailor_updater::views::pods::CachedPod;

/// The VPA over Deployment `web`, annotated with the limit `policy`.
fn vpa(policy: &str) -> String {
    VpaFixture::new("shop", "web")
        .created("2026-01-01T00:00:00Z")
        .annotation("tailor.dev/limit-policy", policy)
        .target("Deployment", "web")
        .mode("InPlaceOrRecreate")
        .recommendation_bounds(
            "app",
            ("400m", "400Mi"),
            ("500m", "512Mi"),
            ("600m", "600Mi"),
        )
        .manifest()
}

/// A running pod of `web` asking 100m/128Mi, with `limits`.
fn pod(i: usize, limits: Value) -> String {
    PodFixture::new("shop", &format!("web-1-{i}"))
        .uid(&format!("uid-web-1-{i}"))
        .label("app", "web")
        .owner("ReplicaSet", "web-1")
        .container("app", json!({"cpu": "100m", "memory": "128Mi"}), limits)
        .image("app")
        .running_on("node-1", "2026-01-01T00:00:00Z")
        .qos("Burstable")
        .manifest()
}

/// Deployment `web` (two pods: the first without a CPU limit, the second with 400m) under the VPA annotated
/// with `policy`.
fn snapshot(policy: &str) -> Snapshot {
    let mut text = String::from(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: uid-web}
spec: {selector: {matchLabels: {app: web}}, template: {}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-1
  namespace: shop
  uid: uid-web-1
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: uid-web, controller: true}]
spec: {replicas: 2, selector: {matchLabels: {app: web}}}
"#,
    );
    text.push_str(&vpa(policy));
    text.push_str(&pod(0, json!({"memory": "256Mi"})));
    text.push_str(&pod(1, json!({"cpu": "400m", "memory": "256Mi"})));
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

async fn planned(policy: &str) -> Plan {
    let settings = crate::fixtures::in_place_plan_settings(false);
    plan(&snapshot(policy), &settings).await
}

/// The resize of each pod as `path → value`, `None` for a pod not resized.
fn resizes(plan: &Plan) -> Vec<Option<Vec<(String, Value)>>> {
    plan.pods
        .iter()
        .map(|p| {
            assert_eq!(p.action, "resize", "{p:?}");
            p.patch.as_ref().map(|ops| {
                ops.iter()
                    .map(|op| match op {
                        PatchOperation::Add(a) => (a.path.to_string(), a.value.clone()),
                        other => panic!("only add operations in a resize: {other:?}"),
                    })
                    .collect()
            })
        })
        .collect()
}

fn op(field: &str, resource: &str, value: &str) -> (String, Value) {
    (
        format!("/spec/containers/0/resources/{field}/{resource}"),
        Value::String(value.into()),
    )
}

#[tokio::test]
async fn in_place_resizes_follow_the_policy_and_keep_a_limit_they_cannot_remove() {
    let plan = planned("memory=request+256Mi,cpu=unset").await;
    let got = resizes(&plan);
    let requests = [
        op("requests", "cpu", "500m"),
        op("requests", "memory", "512Mi"),
    ];
    // No CPU limit: none is added; memory limit = request + 256Mi.
    let mut first = requests.to_vec();
    first.push(op("limits", "memory", "768Mi"));
    assert_eq!(got[0].as_deref(), Some(first.as_slice()));
    // A CPU limit the API server would not let the resize remove: kept in proportion (4 × 500m).
    let mut second = requests.to_vec();
    second.extend([op("limits", "cpu", "2"), op("limits", "memory", "768Mi")]);
    assert_eq!(got[1].as_deref(), Some(second.as_slice()));
    assert!(
        !plan.notes.iter().any(|n| n.contains("LimitPolicyInvalid")),
        "{:?}",
        plan.notes
    );
}

#[tokio::test]
async fn an_annotation_that_does_not_parse_is_a_warning_and_limits_keep_their_ratio() {
    let plan = planned("memory=request+256Mi,cpu=off").await;
    let warning = plan
        .notes
        .iter()
        .find(|n| n.starts_with("event LimitPolicyInvalid on VPA shop/web: "))
        .unwrap_or_else(|| panic!("{:?}", plan.notes));
    assert!(
        warning.contains("entry 2 \"cpu=off\": policy \"off\" is not keep-ratio"),
        "{warning}"
    );
    let got = resizes(&plan);
    assert!(
        got[1]
            .as_deref()
            .unwrap()
            .contains(&op("limits", "memory", "1Gi")),
        "keep-ratio (2 × 512Mi): {got:?}"
    );
}

#[test]
fn the_resize_plan_names_the_limit_it_kept() {
    let snapshot = snapshot("unset-cpu");
    let vpa = &snapshot.index.vpas()[0];
    let pod: &CachedPod = &snapshot.pods[1];
    let recommendation = vpa.status.as_ref().unwrap().recommendation.as_ref();
    let now = "2026-01-10T12:00:00Z".parse().unwrap();
    let resize = plan_resize(pod, vpa, recommendation, &[], false, now).unwrap();
    assert_eq!(
        resize.notes,
        [
            "cpu limit kept in proportion, not unset: the API server refuses removing a limit in place"
        ]
    );
    let event = tailor_updater::writers::events::resized_noting(&resize.notes);
    assert_eq!(
        event.message,
        "Pod was resized in place by VPA Updater. cpu limit kept in proportion, not unset: the API \
         server refuses removing a limit in place."
    );
}
