//! The real `tailor-updater` against the stand-in: it evicts (through the `pods/eviction` subresource) a pod
//! whose requests are outside its VPA's recommendation, but only while the webhook's status Lease says
//! admission is alive, and no more pods at once than the disruption budget allows; with
//! `InPlaceOrRecreate` it resizes through `pods/resize` instead.

use std::time::Duration;

use serde_json::json;
use tailor_tests::process::start_updater;
use tailor_tests::standin::ApiServer;

use crate::binaries::{namespace, vpa, workload};

/// A VPA over `web` in `mode` whose range (cpu 400m–600m, memory 400Mi–600Mi) the pods' requests
/// (100m, 64Mi) are below.
fn put_vpa_over_web(server: &ApiServer, mode: &str) {
    let mut v = vpa("web", "web");
    v["spec"]["updatePolicy"] = json!({"updateMode": mode});
    v["status"] = json!({"recommendation": {"containerRecommendations": [{"containerName": "app",
        "target": {"cpu": "500m", "memory": "512Mi"},
        "lowerBound": {"cpu": "400m", "memory": "400Mi"},
        "upperBound": {"cpu": "600m", "memory": "600Mi"}}]}});
    server.put(v).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_evicts_outside_the_recommendation_only_while_admission_is_alive() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    put_vpa_over_web(&server, "Recreate");
    let dir = tempfile::tempdir().unwrap();
    let up = start_updater(&server, dir.path(), "updater", &[]);
    let evictions = |s: &ApiServer| {
        s.requests()
            .into_iter()
            .filter(|r| r.user == "updater" && r.resource() == "pods/eviction")
            .count()
    };

    // No status Lease from the webhook: three loops, no eviction.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(evictions(&server), 0, "{}", up.log_lines().join("\n"));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.user == "updater" && r.resource() == "leases"),
        "the updater looks for the webhook's Lease"
    );

    // The webhook is alive: one of the two pods goes (the other stays, within the disruption budget).
    server
        .put(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "tailor-admission", "namespace": "kube-system"},
            "spec": {"holderIdentity": "admission", "leaseDurationSeconds": 60}}),
        )
        .unwrap();
    server
        .wait_for(Duration::from_secs(10), |s| {
            (evictions(s) > 0).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("no eviction:\n{}", up.log_lines().join("\n")));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = server.list("v1", "Pod", Some("shop"));
    assert_eq!(pods.len(), 1, "one pod evicted, one kept");
    assert_eq!(evictions(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_resizes_in_place_through_the_resize_subresource() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server
        .put(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "tailor-admission", "namespace": "kube-system"},
            "spec": {"holderIdentity": "admission", "leaseDurationSeconds": 60}}),
        )
        .unwrap();
    put_vpa_over_web(&server, "InPlaceOrRecreate");
    let dir = tempfile::tempdir().unwrap();
    let up = start_updater(&server, dir.path(), "updater", &[]);
    let resize = server
        .wait_for(Duration::from_secs(10), |s| {
            s.requests()
                .into_iter()
                .find(|r| r.user == "updater" && r.resource() == "pods/resize" && r.status == 200)
        })
        .await
        .unwrap_or_else(|| panic!("no resize:\n{}", up.log_lines().join("\n")));
    assert!(
        resize
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json-patch+json")),
        "{resize:?}"
    );
    let name = resize.target.as_ref().unwrap().name.clone().unwrap();
    // The pod patch that marks it updated in place follows the resize.
    server
        .wait_for(Duration::from_secs(10), |s| {
            s.requests().into_iter().find(|r| {
                r.user == "updater"
                    && r.resource() == "pods"
                    && r.method == "PATCH"
                    && r.status == 200
            })
        })
        .await
        .unwrap_or_else(|| panic!("no annotation patch:\n{}", up.log_lines().join("\n")));
    let pod = server.get("v1", "Pod", "shop", &name).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m",
        "the resize patch set the recommended request: {pod}"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["tailor.dev/in-place-updated"], "true",
        "{pod}"
    );
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.resource() == "pods/eviction"),
        "in place first: no eviction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_with_leader_election_takes_and_renews_its_lease() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server
        .load_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: tailor}\n")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--use-admission-controller-status=false",
        "--leader-elect",
        "--leader-elect-lease-namespace",
        "tailor",
        "--leader-elect-identity",
        "updater-a",
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ];
    let up = start_updater(&server, dir.path(), "updater", &flags);
    let lease = |s: &ApiServer| {
        s.get(
            "coordination.k8s.io/v1",
            "Lease",
            "tailor",
            "tailor-updater",
        )
    };
    let first = server
        .wait_for(Duration::from_secs(10), |s| {
            lease(s).filter(|l| l["spec"]["holderIdentity"] == "updater-a")
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "the updater never held its Lease:\n{}",
                up.log_lines().join("\n")
            )
        });
    // A renewal, answered (a request is recorded on arrival, with status 0 until answered).
    let renewal = server
        .wait_for(Duration::from_secs(10), |s| {
            s.requests().into_iter().find(|r| {
                r.user == "updater"
                    && r.resource() == "leases"
                    && r.verb() == "update"
                    && r.status == 200
            })
        })
        .await;
    assert!(
        renewal.is_some(),
        "the Lease was never renewed: {first}\n{}",
        up.log_lines().join("\n")
    );
    let now = lease(&server).unwrap();
    assert_eq!(now["spec"]["holderIdentity"], "updater-a", "{now}");
    assert_ne!(
        now["spec"]["renewTime"], first["spec"]["renewTime"],
        "{now}"
    );
    let writes: Vec<(String, u16)> = server
        .requests()
        .iter()
        .filter(|r| r.user == "updater" && r.resource() == "leases" && r.is_write())
        .map(|r| (r.verb(), r.status))
        .collect();
    assert_eq!(
        writes.first(),
        Some(&("create".to_string(), 201)),
        "a missing Lease is created: {writes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_records_a_repeated_event_as_a_series() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    put_vpa_over_web(&server, "Recreate");
    let dir = tempfile::tempdir().unwrap();
    // Every replica may go and one is enough: both pods are evicted, a second apart (the rate limit), so
    // the second "EvictedPod" event on the VPA repeats the first once that one is recorded.
    let up = start_updater(
        &server,
        dir.path(),
        "updater",
        &[
            "--use-admission-controller-status=false",
            "--min-replicas=1",
            "--eviction-tolerance=1.0",
            "--eviction-rate-limit=1",
            "--eviction-rate-burst=1",
        ],
    );
    let patched = server
        .wait_for(Duration::from_secs(15), |s| {
            s.requests().into_iter().find(|r| {
                r.user == "updater"
                    && r.verb() == "patch"
                    && r.resource() == "events"
                    && r.status == 200
            })
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no event series patched; requests: {:?}\n{}",
                server
                    .requests()
                    .iter()
                    .filter(|r| r.user == "updater" && r.is_write())
                    .map(|r| format!("{} {} -> {}", r.verb(), r.path, r.status))
                    .collect::<Vec<_>>(),
                up.log_lines().join("\n")
            )
        });
    let evictions = server
        .requests()
        .iter()
        .filter(|r| r.user == "updater" && r.resource() == "pods/eviction" && r.status == 201)
        .count();
    assert_eq!(evictions, 2, "both pods evicted");
    let event = server
        .list("events.k8s.io/v1", "Event", Some("shop"))
        .into_iter()
        .find(|e| {
            Some(e["metadata"]["name"].as_str().unwrap_or_default())
                == patched.target.as_ref().and_then(|t| t.name.as_deref())
        })
        .expect("the patched event exists");
    assert_eq!(event["reason"], "EvictedPod", "{event}");
    assert_eq!(event["series"]["count"], 2, "{event}");
}

/// An upstream VPA (`autoscaling.k8s.io`, its CRD loaded) in `InPlaceOrRecreate` on the Tailor VPA's
/// workload: the updater lists and watches upstream VPAs, evicts and resizes nothing, and says why on its
/// VPA: `UpdatesBlocked` naming the upstream VPA, and one event with the same text over many loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updater_stands_down_beside_an_upstream_vpa() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "100m", "64Mi")).unwrap();
    server
        .put(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "verticalpodautoscalers.autoscaling.k8s.io"},
            "spec": {"group": "autoscaling.k8s.io", "scope": "Namespaced",
                "names": {"kind": "VerticalPodAutoscaler", "plural": "verticalpodautoscalers",
                    "singular": "verticalpodautoscaler"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        )
        .unwrap();
    server
        .put(
            json!({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web-upstream", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "updatePolicy": {"updateMode": "InPlaceOrRecreate"}}}),
        )
        .unwrap();
    put_vpa_over_web(&server, "InPlaceOrRecreate");
    let dir = tempfile::tempdir().unwrap();
    let up = start_updater(
        &server,
        dir.path(),
        "updater",
        &["--use-admission-controller-status=false"],
    );
    let blocked = |s: &ApiServer| {
        let v = s.get(
            crate::binaries::VPA_API,
            "VerticalPodAutoscaler",
            "shop",
            "web",
        )?;
        v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "UpdatesBlocked" && c["status"] == "True")
            .cloned()
    };
    let condition = server
        .wait_for(Duration::from_secs(15), blocked)
        .await
        .unwrap_or_else(|| panic!("no UpdatesBlocked:\n{}", up.log_lines().join("\n")));
    assert_eq!(condition["reason"], "SizedByUpstreamVPA", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with("upstream VPA shop/web-upstream "),
        "{message}"
    );
    // Several more loops (1 s apart): nothing changes, nothing is repeated.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let acted: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == "updater" && matches!(r.resource().as_str(), "pods/eviction" | "pods/resize")
        })
        .map(|r| format!("{} {}", r.verb(), r.path))
        .collect();
    assert!(acted.is_empty(), "{acted:?}");
    let events: Vec<serde_json::Value> = server
        .list("events.k8s.io/v1", "Event", Some("shop"))
        .into_iter()
        .filter(|e| e["reason"] == "SizedByUpstreamVPA")
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["note"], message.as_str(), "{events:#?}");
    assert!(events[0]["series"].is_null(), "{events:#?}");
    let watched = |verb: &str| {
        server.requests().iter().any(|r| {
            r.user == "updater"
                && r.verb() == verb
                && r.path
                    .starts_with("/apis/autoscaling.k8s.io/v1/verticalpodautoscalers")
        })
    };
    assert!(
        watched("list") && watched("watch"),
        "upstream VPAs are listed and watched"
    );
}
