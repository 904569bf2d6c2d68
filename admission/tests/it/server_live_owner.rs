//! Cluster mode, a pod whose owner the caches do not hold yet (a rollout's new ReplicaSet): the index reads it
//! live through [`LiveOwners`] against a fake API server (a served scenario of `tailor-testkit`), within its
//! bounds — one read per owner, "absent" remembered, a slow server costs the review at most the timeout, and
//! reads over the rate are shed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::StatusCode;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tailor_admission::live_owners::{LiveOwners, OWNER_READS};
use tailor_admission::live_reads::ReadSettings;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexObjects};
use tailor_testkit::scenario::{ApiServer, Journal, Reply, api_server, failure};

const RS_PATH: &str = "/apis/apps/v1/namespaces/shop/replicasets/";

/// `web-new` exists, `slow` answers after 3 s, everything else is 404; the journal holds the paths asked for.
fn serve(api: ApiServer) -> Journal {
    api.serve(|req| {
        let name = req.path.strip_prefix(RS_PATH).unwrap_or_default();
        match name {
            // A new ReplicaSet read while a burst of its pods is reviewed.
            "burst" => Reply::object(&replica_set(name)).after(Duration::from_millis(200)),
            "web-new" => Reply::object(&replica_set(name)),
            "slow" => Reply::json(json!({}))
                .code(StatusCode::NOT_FOUND)
                .after(Duration::from_secs(3)),
            _ => {
                let mut not_found = failure(StatusCode::NOT_FOUND, "NotFound");
                not_found.message = Some("not found".into());
                Reply::status(&not_found)
            }
        }
    })
}

fn replica_set(name: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "shop", "uid": "rs-2",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "d-1", "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "web"}]}}}
    }))
    .expect("replica set")
}

fn vpa() -> VerticalPodAutoscaler {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "updatePolicy": {"updateMode": "Initial"}}
    }))
    .expect("vpa")
}

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "d-1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}
    }))
    .expect("deployment")
}

fn pod(owner: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("{owner}-"), "namespace": "shop", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                 "uid": "x", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "web"}]}
    }))
    .expect("pod")
}

/// Matches `pod(owner)` on a runtime worker (as a small review) or on the blocking pool (a large one).
async fn matches(index: &Arc<Index>, owner: &str, blocking: bool) -> (bool, Duration) {
    let index = index.clone();
    let pod = pod(owner);
    let run = move || {
        let started = Instant::now();
        let matched = matches!(index.matching_vpa(&pod, "shop"), Ok(Some(_)));
        (matched, started.elapsed())
    };
    if blocking {
        tokio::task::spawn_blocking(run).await.expect("join")
    } else {
        tokio::spawn(async move { run() }).await.expect("join")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_missing_from_the_cache_are_read_live_within_bounds() {
    let (client, api) = api_server("default");
    let asked = serve(api);
    let settings = ReadSettings {
        timeout: Duration::from_millis(500),
        in_flight: 2,
        per_second: 4,
        ttl: Duration::from_secs(30),
    };
    let live = Arc::new(LiveOwners::new(
        client,
        tokio::runtime::Handle::current(),
        settings,
    ));
    // The caches hold the VPA and its Deployment, not the new ReplicaSet.
    let index = Arc::new(
        Index::from_objects(IndexObjects {
            vpas: vec![vpa()],
            deployments: vec![deployment()],
            ..Default::default()
        })
        .with_owner_fallback(live.clone()),
    );

    // The new ReplicaSet's pod matches, from a worker and from the blocking pool; it is read once.
    assert!(matches(&index, "web-new", false).await.0);
    assert!(matches(&index, "web-new", true).await.0);
    // An owner that does not exist: no match, and the 404 is remembered.
    assert!(!matches(&index, "gone", false).await.0);
    assert!(!matches(&index, "gone", false).await.0);
    // A server that does not answer costs the review the timeout, not more.
    let (matched, waited) = matches(&index, "slow", false).await;
    assert!(!matched);
    assert!(waited < Duration::from_millis(1500), "waited {waited:?}");

    let paths = asked.paths();
    let count = |name: &str| {
        paths
            .iter()
            .filter(|p| p.as_str() == format!("{RS_PATH}{name}"))
            .count()
    };
    assert_eq!(count("web-new"), 1, "{paths:?}");
    assert_eq!(count("gone"), 1, "{paths:?}");
    assert_eq!(count("slow"), 1, "{paths:?}");
    let stats = live.stats();
    assert_eq!(stats.found.load(Ordering::Relaxed), 1);
    assert_eq!(stats.absent.load(Ordering::Relaxed), 1);
    assert_eq!(stats.failed.load(Ordering::Relaxed), 1);

    // A flood of pods naming owners that do not exist: reads beyond the rate are shed at once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    for i in 0..50 {
        assert!(!matches(&index, &format!("bogus-{i}"), false).await.0);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(stats.shed.load(Ordering::Relaxed) >= 40, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_new_replica_sets_pods_waits_on_one_read() {
    let (client, api) = api_server("default");
    let asked = serve(api);
    // The default bounds: two reads in flight.
    let live = Arc::new(LiveOwners::new(
        client,
        tokio::runtime::Handle::current(),
        OWNER_READS,
    ));
    let index = Arc::new(
        Index::from_objects(IndexObjects {
            vpas: vec![vpa()],
            deployments: vec![deployment()],
            ..Default::default()
        })
        .with_owner_fallback(live.clone()),
    );
    // Eight pods of the new ReplicaSet at once (reviews run in parallel on the blocking pool and the
    // workers): every one is sized.
    let burst: Vec<_> = (0..8)
        .map(|i| {
            let index = index.clone();
            tokio::spawn(async move { matches(&index, "burst", i % 2 == 0).await.0 })
        })
        .collect();
    for b in burst {
        assert!(b.await.unwrap(), "a pod of the burst was admitted unsized");
    }
    let mut reads = 0;
    for p in asked.paths() {
        assert_eq!(p, format!("{RS_PATH}burst"));
        reads += 1;
    }
    assert_eq!(reads, 1, "one read for the whole burst");
    let stats = live.stats();
    assert_eq!(stats.shed.load(Ordering::Relaxed), 0, "{stats:?}");
    assert_eq!(stats.found.load(Ordering::Relaxed), 1, "{stats:?}");
}
