//! Cluster mode, controllers of other kinds: the `/scale` cache the server builds its index with, against a
//! fake API server (a served scenario of `tailor-testkit`). A VPA over an Argo Rollout gets its
//! selector from discovery + `GET …/scale` in the background; pods of the Rollout's ReplicaSets then match,
//! and nothing is read again within the TTL.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::runtime::watcher;
use serde_json::json;
use tailor_admission::vpa_cache::VpaCacheWriter;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexObjects, ScaleLookup};
use tailor_kube::scale_cache::{ScaleCache, ScaleCacheSettings};
use tailor_testkit::scenario::{ApiServer, Journal, Reply, api_server, failure};

const ROLLOUTS: &str = "argoproj.io/v1alpha1";

/// Answers like an API server with Argo Rollouts installed; the journal holds the paths asked for.
fn serve(api: ApiServer) -> Journal {
    api.serve(|req| match req.path.as_str() {
        "/apis/argoproj.io/v1alpha1" => Reply::object(&rollout_resources()),
        "/apis/argoproj.io/v1alpha1/namespaces/shop/rollouts/web/scale" => {
            Reply::object(&rollout_scale())
        }
        _ => {
            let mut not_found = failure(StatusCode::NOT_FOUND, "NotFound");
            not_found.message = Some("the server could not find the requested resource".into());
            Reply::status(&not_found)
        }
    })
}

fn rollout_resources() -> APIResourceList {
    serde_json::from_value(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": ROLLOUTS,
        "resources": [
            {"name": "rollouts", "singularName": "rollout", "namespaced": true, "kind": "Rollout",
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"name": "rollouts/scale", "singularName": "", "namespaced": true, "kind": "Scale",
             "group": "autoscaling", "version": "v1", "verbs": ["get", "patch", "update"]}
        ]
    }))
    .expect("resource list")
}

fn rollout_scale() -> Scale {
    serde_json::from_value(json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "shop", "uid": "r-1", "resourceVersion": "7"},
        "spec": {"replicas": 3},
        "status": {"replicas": 3, "selector": "app=web,track notin (canary)"}
    }))
    .expect("scale")
}

fn vpa_over_rollout() -> VerticalPodAutoscaler {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"targetRef": {"apiVersion": ROLLOUTS, "kind": "Rollout", "name": "web"},
                 "updatePolicy": {"updateMode": "Initial"}}
    }))
    .expect("vpa")
}

fn replica_set() -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d9f", "namespace": "shop",
            "ownerReferences": [{"apiVersion": ROLLOUTS, "kind": "Rollout", "name": "web", "uid": "r-1",
                                 "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "web", "rollouts-pod-template-hash": "7d9f"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}
    }))
    .expect("replica set")
}

fn pod(track: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7d9f-", "namespace": "shop",
            "labels": {"app": "web", "track": track, "rollouts-pod-template-hash": "7d9f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                                 "uid": "rs-1", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "web"}]}
    }))
    .expect("pod")
}

#[tokio::test]
async fn rollout_pods_match_through_the_background_scale_cache() {
    let (client, api) = api_server("default");
    let asked = serve(api);

    let mut vpas = VpaCacheWriter::default();
    vpas.apply_watcher_event(&watcher::Event::Apply(vpa_over_rollout()));
    let cache = ScaleCache::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = ScaleCacheSettings {
        ttl: Duration::from_secs(600),
        period: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
    };
    tokio::spawn(
        cache
            .clone()
            .run(client, Arc::new(vpas.as_reader()), settings, async {
                let _ = stopped.await;
            }),
    );

    let index = Index::from_objects(IndexObjects {
        vpas: vec![vpa_over_rollout()],
        replica_sets: vec![replica_set()],
        ..Default::default()
    })
    .with_scale_lookup(Arc::new(cache.clone()));

    // The VPA's target is fetched without any review asking for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cache.lookup(ROLLOUTS, "Rollout", "shop", "web").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Rollout's /scale answer never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let matched = index
        .matching_vpa(&pod("stable"), "shop")
        .expect("chain resolves")
        .expect("the Rollout's pod matches its VPA");
    assert_eq!(matched.metadata.name.as_deref(), Some("web"));
    // The selector text's set operator is kept: a canary pod is outside the Rollout's selector.
    assert!(
        index
            .matching_vpa(&pod("canary"), "shop")
            .expect("chain")
            .is_none()
    );

    // A controller nobody targets is asked for once, answered "absent" (404), and not asked for again.
    assert!(
        cache
            .lookup("example.com/v1", "Widget", "shop", "w")
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        cache
            .lookup("example.com/v1", "Widget", "shop", "w")
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(());

    let paths = asked.paths();
    let count = |p: &str| paths.iter().filter(|x| x.as_str() == p).count();
    assert_eq!(
        count("/apis/argoproj.io/v1alpha1/namespaces/shop/rollouts/web/scale"),
        1,
        "within the TTL a /scale answer is read once: {paths:?}"
    );
    assert_eq!(
        count("/apis/example.com/v1"),
        1,
        "an absent kind is asked for once: {paths:?}"
    );
    let stats = cache.stats();
    assert!(stats.hits.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    assert_eq!(cache.len(), 2);
}
