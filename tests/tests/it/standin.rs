//! The stand-in API server against a real kube-rs client (the client the binaries use): discovery, writes
//! with conflicts, subresources, watches that resume, bookmarks and 410 Gone, faults, and the record of
//! who sent what.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{
    Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, Config, discovery};
use serde_json::json;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tailor_tests::standin::{Action, ApiServer, DropMode, Fault, Match, Options};

const FIXTURES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: nginx}]}
status: {replicas: 2}
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: shop}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
"#;

async fn client(server: &ApiServer, user: &str) -> Client {
    let kubeconfig: Kubeconfig = serde_json::from_str(&server.kubeconfig(user)).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn kube_client_reads_writes_and_discovers() {
    let server = ApiServer::start().await.unwrap();
    assert_eq!(server.load_yaml(FIXTURES).unwrap(), 3);
    let c = client(&server, "alice").await;

    // Discovery finds built-in and custom kinds, with their subresources.
    let (ar, caps) = discovery::pinned_kind(&c, &GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .await
        .unwrap();
    assert_eq!(ar.plural, "deployments");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "scale"));
    let (ar, _) = discovery::pinned_kind(
        &c,
        &GroupVersionKind::gvk("autoscaling.tailor.dev", "v1", "VerticalPodAutoscaler"),
    )
    .await
    .unwrap();
    assert_eq!(ar.plural, "verticalpodautoscalers");
    discovery::pinned_kind(
        &c,
        &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
    )
    .await
    .unwrap();

    // Typed reads.
    let vpas: Api<VerticalPodAutoscaler> = Api::namespaced(c.clone(), "shop");
    let list = vpas.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    // Status subresource: a merge patch of /status changes status only; a patch of the object keeps it.
    let pp = PatchParams::default();
    vpas.patch_status(
        "web",
        &pp,
        &Patch::Merge(json!({"status": {"conditions": [{"type": "RecommendationProvided", "status": "False"}]},
            "spec": {"targetRef": {"name": "ignored"}}})),
    )
    .await
    .unwrap();
    let v = vpas.get("web").await.unwrap();
    assert_eq!(v.spec.target_ref.as_ref().unwrap().name, "web");
    assert!(v.status.is_some());
    vpas.patch(
        "web",
        &pp,
        &Patch::Merge(json!({"status": null, "metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    assert!(vpas.get("web").await.unwrap().status.is_some());

    // Server-side apply creates; a stale resourceVersion conflicts.
    let cps: Api<VerticalPodAutoscalerCheckpoint> = Api::namespaced(c.clone(), "shop");
    let cp = json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscalerCheckpoint",
        "metadata": {"name": "web-app"}, "spec": {"vpaObjectName": "web", "containerName": "app"}});
    cps.patch(
        "web-app",
        &PatchParams::apply("writer").force(),
        &Patch::Apply(&cp),
    )
    .await
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let mut lease: Lease = serde_json::from_value(json!({"metadata": {"name": "l"},
        "spec": {"holderIdentity": "a"}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    lease.metadata.resource_version = created.metadata.resource_version.clone();
    leases
        .replace("l", &PostParams::default(), &lease)
        .await
        .unwrap();
    let err = leases
        .replace("l", &PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(s) if s.code == 409),
        "stale replace"
    );
    let err = leases
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(s) if s.code == 409),
        "create twice"
    );

    // Scale subresource.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "shop");
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    deployments
        .patch_scale("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 5}})))
        .await
        .unwrap();
    let d = deployments.get("web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2));

    // JSON patch and strategic merge on a dynamic object.
    deployments
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}})),
        )
        .await
        .unwrap();
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}
    ]))
    .unwrap();
    deployments
        .patch("web", &pp, &Patch::<()>::Json(p))
        .await
        .unwrap();
    let d = deployments.get("web").await.unwrap();
    assert_eq!(
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("nginx:2")
    );

    // The record says who did what.
    let writes: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_write())
        .collect();
    assert!(writes.iter().all(|r| r.user == "alice"));
    assert!(writes.iter().any(|r| r.verb() == "patch"
        && r.resource() == "verticalpodautoscalercheckpoints"
        && r.field_manager.as_deref() == Some("writer")));
    assert!(
        writes
            .iter()
            .any(|r| r.verb() == "patch" && r.resource() == "verticalpodautoscalers/status")
    );

    // Faults.
    server.inject(Fault::new(Match::verb("get", "deployments"), Action::Fail(500)).times(1));
    let err = deployments.get("web").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 500));
    deployments.get("web").await.unwrap();
    server.inject(Fault::new(Match::verb("patch", "deployments"), Action::Conflict).times(1));
    let err = deployments
        .patch("web", &pp, &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
}

#[tokio::test]
async fn watches_resume_bookmark_and_expire() {
    let server = ApiServer::start_with(Options {
        bookmark_interval: Duration::from_millis(200),
        ..Options::default()
    })
    .await
    .unwrap();
    server.load_yaml(FIXTURES).unwrap();
    let c = client(&server, "watcher").await;
    let vpas: Api<DynamicObject> = Api::namespaced_with(
        c.clone(),
        "shop",
        &kube::core::ApiResource::erase::<VerticalPodAutoscaler>(&()),
    );
    let rv = vpas
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    // Changes after the listed version arrive, then bookmarks.
    let mut events = vpas
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut vpa = server
        .get(
            "autoscaling.tailor.dev/v1",
            "VerticalPodAutoscaler",
            "shop",
            "web",
        )
        .unwrap();
    vpa["metadata"]["name"] = json!("second");
    server.put(vpa).unwrap();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("second")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    let bookmark_rv = match tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Bookmark(b) => b.metadata.resource_version,
        other => panic!("expected BOOKMARK, got {other:?}"),
    };

    // A dropped watch ends; resuming from the last version replays what happened meanwhile.
    server.drop_watches(DropMode::Clean);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(e) = events.next().await {
                if e.is_err() {
                    break;
                }
            }
        })
        .await
        .is_ok(),
        "the dropped watch ends"
    );
    assert!(server.delete(
        "autoscaling.tailor.dev/v1",
        "VerticalPodAutoscaler",
        "shop",
        "second"
    ));
    let mut events = vpas
        .watch(&WatchParams::default(), &bookmark_rv)
        .await
        .unwrap()
        .boxed();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("second")),
        other => panic!("expected DELETED, got {other:?}"),
    }

    // After compaction, resuming from an old version is 410 Gone.
    server.compact();
    let mut events = vpas
        .watch(&WatchParams::default(), &bookmark_rv)
        .await
        .unwrap()
        .boxed();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 ERROR, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_selectors_follow_transitions_and_plain_http_works() {
    let server = ApiServer::start_with(Options {
        tls: false,
        ..Options::default()
    })
    .await
    .unwrap();
    assert!(server.url().starts_with("http://"));
    server
        .load_yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\n\
             spec: {containers: [{name: c, image: i}]}\nstatus: {phase: Pending}\n",
        )
        .unwrap();
    let c = client(&server, "bob").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c, "shop");
    let lp = ListParams::default().fields("status.phase!=Pending");
    let list = pods.list(&lp).await.unwrap();
    assert!(list.items.is_empty());
    let mut events = pods
        .watch(
            &WatchParams::default().fields("status.phase!=Pending"),
            &list.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let mut p = server.get("v1", "Pod", "shop", "p").unwrap();
    p["status"]["phase"] = json!("Running");
    server.put(p).unwrap();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("p")),
        other => panic!("a pod that starts matching is ADDED, got {other:?}"),
    }
    let r = server.requests();
    assert!(r.iter().any(|r| r.verb() == "watch" && r.user == "bob"));
}

#[tokio::test]
async fn lists_are_paged_unless_served_from_the_cache() {
    let server = ApiServer::start().await.unwrap();
    let mut yaml = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    for i in 0..5 {
        yaml.push_str(&format!(
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d{i}, namespace: shop}}\n\
             spec: {{selector: {{matchLabels: {{app: d{i}}}}}, template: {{metadata: {{labels: {{app: d{i}}}}}}}}}\n"
        ));
    }
    server.load_yaml(&yaml).unwrap();
    let api: Api<Deployment> = Api::namespaced(client(&server, "reader").await, "shop");
    // Resource version unset: pages of `limit`, a continue token while more remain.
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().expect("a continue token");
    let next = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(next.items.len(), 2);
    // kube-rs leaves `resourceVersion=0` out of a paged list (so the binaries always get pages)...
    let any = api
        .list(&ListParams::default().limit(2).match_any())
        .await
        .unwrap();
    assert_eq!(any.items.len(), 2);
    // ...because kube-apiserver answers `resourceVersion=0` from its watch cache, `limit` ignored.
    let request =
        http::Request::get("/apis/apps/v1/namespaces/shop/deployments?limit=2&resourceVersion=0")
            .body(Vec::new())
            .unwrap();
    let whole: kube::core::ObjectList<Deployment> = client(&server, "reader")
        .await
        .request(request)
        .await
        .unwrap();
    assert_eq!(whole.items.len(), 5);
    assert!(whole.metadata.continue_.is_none());
}
