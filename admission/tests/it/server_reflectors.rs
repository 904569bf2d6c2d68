//! In-cluster mode against a mocked API server (kube-rs `Client` over a tower-test service): one reflector
//! per cached kind lists its resource, readiness stays false until every initial list has been answered, and
//! the cached VPAs keep neither `managedFields` nor annotations.

use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::json;
use tailor_admission::{caches, server::Readiness};

const LISTS: [(&str, &str); 9] = [
    (
        "/apis/autoscaling.tailor.dev/v1/verticalpodautoscalers",
        "VerticalPodAutoscalerList",
    ),
    ("/apis/apps/v1/deployments", "DeploymentList"),
    ("/apis/apps/v1/replicasets", "ReplicaSetList"),
    ("/apis/apps/v1/statefulsets", "StatefulSetList"),
    ("/apis/apps/v1/daemonsets", "DaemonSetList"),
    ("/apis/batch/v1/jobs", "JobList"),
    ("/apis/batch/v1/cronjobs", "CronJobList"),
    (
        "/api/v1/replicationcontrollers",
        "ReplicationControllerList",
    ),
    ("/api/v1/limitranges", "LimitRangeList"),
];

#[tokio::test]
async fn ready_only_after_every_initial_list() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let readiness = Readiness::new();
    let stores = caches::start_reflectors(client, "", readiness.clone());

    let mut listed = std::collections::BTreeSet::new();
    let mut held_watches = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while listed.len() < LISTS.len() {
        assert!(
            !readiness.is_ready(),
            "ready before all lists were answered: {listed:?}"
        );
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (req, send) = tokio::time::timeout(remaining, handle.next_request())
            .await
            .expect("reflectors did not list every kind")
            .expect("service dropped");
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        if query.contains("watch=true") {
            held_watches.push(send); // keep the watch open (no events)
            continue;
        }
        let (_, kind) = LISTS
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("unexpected {path}"));
        // Hold back the last kind for a moment to show readiness waits for it.
        if listed.len() == LISTS.len() - 1 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!readiness.is_ready());
        }
        let items = if *kind == "VerticalPodAutoscalerList" {
            json!([{
                "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "5",
                    "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "autoscaling.tailor.dev/v1"}],
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
            }])
        } else {
            json!([])
        };
        let body = json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "10"}, "items": items});
        send.send_response(
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
        listed.insert(path);
    }

    let deadline = Instant::now() + Duration::from_secs(10);
    while !readiness.is_ready() {
        assert!(
            Instant::now() < deadline,
            "not ready after every list was answered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let vpas = stores.vpas.active_targeting("shop", "Deployment", "web");
    assert_eq!(vpas.len(), 1);
    let meta = &vpas[0].metadata;
    assert!(meta.managed_fields.is_none(), "{meta:?}");
    assert!(meta.annotations.is_none(), "{meta:?}");
    drop(held_watches);
}
