//! In-cluster mode against a mocked API server (`tailor-testkit`'s scenarios, answered step by step): one
//! reflector per cached kind lists its resource, readiness stays false until every initial list has been
//! answered, and the cached VPAs keep neither `managedFields` nor annotations.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{LimitRange, ReplicationController};
use serde_json::json;
use tailor_admission::{caches, server::Readiness};
use tailor_crds::VerticalPodAutoscaler;
use tailor_testkit::scenario::{Reply, api_server};

/// An empty list of `K`.
fn empty<K>() -> Reply
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    Reply::list::<K>(&[], "10")
}

/// The one VPA, with the managed fields and annotations the cache drops.
fn vpas() -> Reply {
    let vpa: VerticalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "5",
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "autoscaling.tailor.dev/v1"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    }))
    .unwrap();
    Reply::list(&[vpa], "10")
}

/// A list path and its answer.
type List = (&'static str, fn() -> Reply);

const LISTS: [List; 9] = [
    (
        "/apis/autoscaling.tailor.dev/v1/verticalpodautoscalers",
        vpas,
    ),
    ("/apis/apps/v1/deployments", empty::<Deployment>),
    ("/apis/apps/v1/replicasets", empty::<ReplicaSet>),
    ("/apis/apps/v1/statefulsets", empty::<StatefulSet>),
    ("/apis/apps/v1/daemonsets", empty::<DaemonSet>),
    ("/apis/batch/v1/jobs", empty::<Job>),
    ("/apis/batch/v1/cronjobs", empty::<CronJob>),
    (
        "/api/v1/replicationcontrollers",
        empty::<ReplicationController>,
    ),
    ("/api/v1/limitranges", empty::<LimitRange>),
];

#[tokio::test]
async fn ready_only_after_every_initial_list() {
    let (client, mut api) = api_server("default");
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
        let request = tokio::time::timeout(remaining, api.next())
            .await
            .expect("reflectors did not list every kind");
        let path = request.received.path.clone();
        if request.received.query.contains("watch=true") {
            held_watches.push(request.hold()); // keep the watch open (no events)
            continue;
        }
        let (_, list) = LISTS
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("unexpected {path}"));
        // Hold back the last kind for a moment to show readiness waits for it.
        if listed.len() == LISTS.len() - 1 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!readiness.is_ready());
        }
        request.reply(list());
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
