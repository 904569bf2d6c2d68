//! Fleet onboarding by the real `tailor-recommender` against the stand-in API server: a labelled namespace
//! gets one Tailor VPA per covered workload (a custom kind with `/scale` included, a workload an upstream
//! VPA targets left out), written by server-side apply as `tailor-fleet`; the label removed, they go.
//! The requests recorded here are what the chart's fleet RBAC is checked against (hack/checks/rbac.sh).

use std::time::Duration;

use serde_json::{Value, json};
use tailor_tests::process::start_recommender;
use tailor_tests::standin::ApiServer;

use crate::binaries::{VPA_API, workload};

const WAIT: Duration = Duration::from_secs(20);

fn crd(group: &str, version: &str, kind: &str, plural: &str, scale: bool) -> Value {
    let mut subresources = json!({"status": {}});
    if scale {
        subresources["scale"] = json!({"specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"});
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": version, "served": true, "storage": true, "subresources": subresources,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn shop(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "labels": labels, "annotations": {"tailor.dev/profile": "cautious",
            "tailor.dev/min-allowed": "memory=32Mi"}}})
}

fn fleet_vpas(server: &ApiServer) -> Vec<Value> {
    let mut vpas: Vec<Value> = (server
        .list(VPA_API, "VerticalPodAutoscaler", Some("shop"))
        .into_iter())
    .filter(|v| v["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tailor")
    .collect();
    vpas.sort_by_key(|v| {
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    vpas
}

fn names(vpas: &[Value]) -> Vec<String> {
    vpas.iter()
        .map(|v| {
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommender_onboards_a_labelled_namespace_and_lets_go_when_the_label_goes() {
    let server = ApiServer::start().await.unwrap();
    server.put(shop(json!({"tailor.dev/vpa": "Off"}))).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server.load_yaml(&workload("api", "100m", "64Mi")).unwrap();
    server
        .load_yaml(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: shop, uid: sts-db}\n\
             spec: {selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}}}\n---\n\
             apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly, namespace: shop, uid: cj-nightly}\n\
             spec: {schedule: '0 3 * * *', jobTemplate: {spec: {template: {metadata: {labels: {app: nightly}}}}}}\n---\n\
             apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: shop, uid: ds-agent,\n\
               annotations: {tailor.dev/vpa: 'false'}}\n\
             spec: {selector: {matchLabels: {app: agent}}, template: {metadata: {labels: {app: agent}}}}\n",
        )
        .unwrap();
    server
        .put(crd("argoproj.io", "v1alpha1", "Rollout", "rollouts", true))
        .unwrap();
    server
        .put(
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "canary", "namespace": "shop", "uid": "ro-canary"},
            "spec": {"replicas": 1}, "status": {"replicas": 1, "selector": "app=canary"}}),
        )
        .unwrap();
    server
        .put(crd(
            "autoscaling.k8s.io",
            "v1",
            "VerticalPodAutoscaler",
            "verticalpodautoscalers",
            false,
        ))
        .unwrap();
    server
        .put(
            json!({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "api-upstream", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                "updatePolicy": {"updateMode": "Off"}}}),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--fleet-enabled",
        "--fleet-resync-interval",
        "1s",
        "--fleet-qps",
        "50",
    ];
    let (rec, _) = start_recommender(&server, dir.path(), "recommender-fleet", &flags);
    let want = [
        "canary-rollout",
        "db-statefulset",
        "nightly-cronjob",
        "web-deployment",
    ];
    let created = server
        .wait_for(WAIT, |s| {
            let vpas = fleet_vpas(s);
            (names(&vpas) == want).then_some(vpas)
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "VPAs: {:?}\n{}",
                names(&fleet_vpas(&server)),
                rec.log_lines().join("\n")
            )
        });
    let web = &created[3];
    assert_eq!(
        web["metadata"]["ownerReferences"][0]["uid"], "dep-web",
        "{web}"
    );
    assert_eq!(
        web["metadata"]["annotations"]["tailor.dev/profile"], "cautious",
        "{web}"
    );
    assert_eq!(
        web["metadata"]["annotations"]["tailor.dev/fleet-policy"],
        "namespace shop label tailor.dev/vpa=Off",
        "{web}"
    );
    assert_eq!(web["spec"]["updatePolicy"]["updateMode"], "Off", "{web}");
    let policy = &web["spec"]["resourcePolicy"]["containerPolicies"][0];
    assert_eq!(
        (
            policy["containerName"].as_str(),
            policy["minAllowed"]["memory"].as_str()
        ),
        (Some("*"), Some("32Mi"))
    );
    let canary = &created[0];
    assert_eq!(
        canary["spec"]["targetRef"]["apiVersion"], "argoproj.io/v1alpha1",
        "{canary}"
    );
    // Written by server-side apply under the fleet's own field manager.
    let applies: Vec<_> = (server.requests().into_iter())
        .filter(|r| {
            r.user == "recommender-fleet"
                && r.verb() == "patch"
                && r.resource() == "verticalpodautoscalers"
        })
        .collect();
    assert!(!applies.is_empty());
    assert!(
        applies
            .iter()
            .all(|r| r.field_manager.as_deref() == Some("tailor-fleet")),
        "{applies:?}"
    );
    // The upstream-covered and the opted-out workloads got none; the decisions are events.
    // Each event follows its VPA's write, so the last one may still be on its way.
    let events = (server.wait_for(WAIT, |s| {
        let events = s.list("events.k8s.io/v1", "Event", None);
        let n = (events.iter())
            .filter(|e| e["reason"] == "FleetCreated")
            .count();
        (n >= 4).then_some(events)
    }))
    .await
    .unwrap_or_else(|| server.list("events.k8s.io/v1", "Event", None));
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(
        reasons.iter().filter(|r| **r == "FleetCreated").count(),
        4,
        "{reasons:?}"
    );
    let skipped: Vec<&str> = (events.iter())
        .filter(|e| e["reason"] == "FleetSkipped")
        .filter_map(|e| e["note"].as_str())
        .collect();
    assert!(
        skipped
            .iter()
            .any(|n| n.contains("Deployment api") && n.contains("TargetedByUpstreamVPA")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|n| n.contains("DaemonSet agent") && n.contains("OptedOut")),
        "{skipped:?}"
    );
    // The label removed: every created VPA goes.
    server.put(shop(json!({}))).unwrap();
    server
        .wait_for(WAIT, |s| fleet_vpas(s).is_empty().then_some(()))
        .await
        .unwrap_or_else(|| {
            panic!(
                "left: {:?}\n{}",
                names(&fleet_vpas(&server)),
                rec.log_lines().join("\n")
            )
        });
    let deleted = (server.requests().into_iter())
        .filter(|r| {
            r.user == "recommender-fleet"
                && r.verb() == "delete"
                && r.resource() == "verticalpodautoscalers"
        })
        .count();
    assert_eq!(deleted, 4);
    crate::binaries::assert_watches_clean(&rec);
}
