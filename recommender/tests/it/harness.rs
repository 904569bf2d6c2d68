//! The controller's test harness (shared with `benches/scale.rs`): the stand-in API server
//! (`tailor_tests::standin`, the one fake API server of the workspace's tests) reached in process by a
//! kube client, with the views these tests read (requests, stored objects by path) and the metrics each
//! loop scrapes; object builders; and [`Harness`], a recommender over reflector stores fed directly.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::Client;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tailor_engine::units::Nanos;
use tailor_recommender::process::config::ControllerConfig;
use tailor_recommender::process::metrics::Metrics;
use tailor_recommender::run_loop::Recommender;
use tailor_recommender::views::checkpoint_index::CheckpointHead;
use tailor_recommender::views::oom::OomQueue;
use tailor_recommender::views::slim::WatchedPod;
use tailor_recommender::views::stores::{Stores, Writers, new_stores};
use tailor_recommender::views::watched_vpa::WatchedVpa;
use tailor_recommender::writers::ratelimit::RateLimiter;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};
use tailor_tests::standin::{Action, ApiServer, Fault, Match, Options};
use tower::ServiceExt as _;

/// Base time of the tests (2023-11-14T22:13:20Z).
pub const T0_SECS: i64 = 1_700_000_000;

/// Engine time `secs` seconds after [`T0_SECS`].
pub fn t(secs: i64) -> Nanos {
    (T0_SECS + secs) * 1_000_000_000
}

/// RFC 3339 of [`t`].
pub fn rfc3339(secs: i64) -> String {
    let ts = k8s_openapi::jiff::Timestamp::from_second(T0_SECS + secs).unwrap();
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One recorded request, as these tests read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Content type, if any.
    pub content_type: Option<String>,
    /// JSON body (`Null` if none).
    pub body: Value,
}

/// What the metrics API answers next: a PodMetrics list or an HTTP error code.
pub type MetricsAnswer = Result<Value, u16>;

/// The stand-in API server, shared by the recommender, a leader elector and the test.
#[derive(Clone)]
pub struct StandIn {
    server: Arc<ApiServer>,
}

/// The RBAC verb of `method` on a named object's path.
fn verb(method: &str) -> &'static str {
    match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// `method` requests of exactly `path`.
fn exactly(method: &str, path: &str) -> Match {
    Match {
        verb: Some(verb(method).into()),
        path: Some(path.into()),
        ..Match::default()
    }
}

impl StandIn {
    /// Starts a stand-in (plain HTTP, metrics timestamps as stored) and a client that reaches it in
    /// process.
    pub async fn start() -> (Client, StandIn) {
        let server = ApiServer::start_with(Options {
            tls: false,
            fresh_metrics: false,
            ..Options::default()
        })
        .await
        .expect("the stand-in API server starts");
        let router = server.router();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        (
            Client::new(service, "default"),
            StandIn {
                server: Arc::new(server),
            },
        )
    }

    /// From now on, `method` requests of `path` get no answer (a hung connection: a day's delay).
    pub fn hang(&self, method: &str, path: &str) {
        self.server.inject(Fault::new(
            exactly(method, path),
            Action::Delay(Duration::from_secs(24 * 3600)),
        ));
    }

    /// From now on, `method` requests of `path` are answered with a `Status` of `code`.
    pub fn fail(&self, method: &str, path: &str, code: u16) {
        self.server
            .inject(Fault::new(exactly(method, path), Action::Fail(code)));
    }

    /// Answers every request normally again (see [`StandIn::fail`], [`StandIn::hang`]).
    pub fn stop_failing(&self) {
        self.server.clear_faults();
    }

    /// Queues the answer of the next metrics list (without one, the list is empty).
    pub fn push_metrics(&self, a: MetricsAnswer) {
        let action = match a {
            Ok(list) => Action::Respond(200, list),
            Err(code) => Action::Fail(code),
        };
        let metrics = Match {
            verb: Some("list".into()),
            resource: Some("pods".into()),
            path_contains: Some("/apis/metrics.k8s.io/".into()),
            ..Match::default()
        };
        self.server.inject(Fault::new(metrics, action).times(1));
    }

    /// Every request since the last take, and forgets them.
    pub fn take(&self) -> Vec<Recorded> {
        self.server
            .take_requests()
            .into_iter()
            .map(|r| Recorded {
                method: r.method,
                uri: r.uri,
                content_type: r.content_type,
                body: r.body.unwrap_or(Value::Null),
            })
            .collect()
    }

    /// The stored object at `path` (`/apis/.../name`).
    pub fn object(&self, path: &str) -> Option<Value> {
        self.server.object_at(path)
    }

    /// Every stored object of the collection `prefix` names (`/apis/.../PLURAL/`), in name order.
    pub fn objects(&self, prefix: &str) -> Vec<Value> {
        self.server.list_at(prefix.trim_end_matches('/'))
    }

    /// Stores `v` (status included; the stand-in gives it a new `resourceVersion`), which must be the
    /// object at `path`.
    pub fn put_object(&self, path: &str, v: Value) {
        self.server.put(v).expect("the stand-in stores the object");
        assert!(
            self.object(path).is_some(),
            "the object put is not at {path}"
        );
    }

    /// Deletes the object `v` names, if stored.
    fn delete_object(&self, v: &Value) {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
        self.server.delete(
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/namespace"),
            s("/metadata/name"),
        );
    }

    /// Forgets the change log (no watch reads it here): keeps a long benchmark's memory to the objects.
    pub fn compact(&self) {
        self.server.compact();
    }
}

/// One pod's metrics: `(namespace, pod, timestamp secs, [(container, millicores, bytes)])`.
pub type PodSample<'a> = (&'a str, &'a str, i64, Vec<(&'a str, i64, i64)>);

/// A PodMetrics list.
pub fn metrics_list(items: &[PodSample<'_>]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(ns, pod, ts, cs)| {
            json!({
                "metadata": {"name": pod, "namespace": ns},
                "timestamp": rfc3339(*ts), "window": "30s",
                "containers": cs.iter().map(|(n, m, b)| json!({
                    "name": n, "usage": {"cpu": format!("{m}m"), "memory": format!("{b}")}
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetricsList", "metadata": {}, "items": items})
}

/// Labels of the test workload.
pub fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Tailor VPA targeting `kind/target`.
pub fn vpa(ns: &str, name: &str, kind: &str, target: &str) -> VerticalPodAutoscaler {
    VpaFixture::new(ns, name)
        .uid(&format!("uid-{name}"))
        .generation(1)
        .target_ref("apps/v1", kind, target)
        .build()
}

/// A Deployment selecting `sel`.
pub fn deployment(ns: &str, name: &str, sel: &[(&str, &str)]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            selector: LabelSelector {
                match_labels: Some(labels(sel)),
                ..Default::default()
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// A ReplicaSet controlled by Deployment `owner`.
pub fn owned_replica_set(ns: &str, name: &str, owner: &str, sel: &[(&str, &str)]) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: owner.into(),
                uid: "d".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels(sel)),
                ..Default::default()
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// A running pod with the given containers (memory request 300Mi each), in the form the pod watch
/// delivers.
pub fn pod(ns: &str, name: &str, lbl: &[(&str, &str)], containers: &[&str]) -> WatchedPod {
    WatchedPod::from_pod(&full_pod(ns, name, lbl, containers)).unwrap()
}

/// The full Pod behind [`pod`].
pub fn full_pod(ns: &str, name: &str, lbl: &[(&str, &str)], containers: &[&str]) -> Pod {
    let pod = PodFixture::new(ns, name).labels(json!(labels(lbl)));
    containers
        .iter()
        .fold(pod, |p, c| {
            p.container(c, json!({"memory": "300Mi"}), Value::Null)
        })
        .phase("Running")
        .build()
}

/// `(namespace, name)` of a VPA.
fn vpa_key(v: &VerticalPodAutoscaler) -> (String, String) {
    (
        v.metadata.namespace.clone().unwrap_or_default(),
        v.metadata.name.clone().unwrap_or_default(),
    )
}

/// Stores fed directly, a recommender over the stand-in API server and its writers.
pub struct Harness {
    pub api: StandIn,
    /// A client of the same stand-in (for a leader elector next to the recommender).
    pub client: Client,
    pub stores: Stores,
    pub writers: Writers,
    pub ooms: OomQueue,
    pub metrics: Arc<Metrics>,
    pub rec: Recommender,
    /// The VPAs as the API server holds them (the store keeps them reduced, as [`WatchedVpa`]).
    vpas: BTreeMap<(String, String), VerticalPodAutoscaler>,
}

impl Harness {
    /// A harness with `cfg` (ready stores, no objects).
    pub async fn new(cfg: ControllerConfig) -> Harness {
        let (client, api) = StandIn::start().await;
        let ooms = OomQueue::default();
        let (stores, mut writers) = new_stores(ooms.clone());
        // Mark every store ready (an empty relist).
        writers.vpas.apply_watcher_event(&watcher::Event::InitDone);
        writers
            .checkpoints
            .apply_watcher_event(&watcher::Event::InitDone);
        writers
            .workloads
            .deployments
            .apply_watcher_event(&watcher::Event::InitDone);
        let metrics = Arc::new(Metrics::new());
        let rec = Recommender::new(
            cfg,
            client.clone(),
            stores.clone(),
            ooms.clone(),
            metrics.clone(),
            RateLimiter::unlimited(),
        );
        Harness {
            api,
            client,
            stores,
            writers,
            ooms,
            metrics,
            rec,
            vpas: BTreeMap::new(),
        }
    }

    /// Adds or updates a VPA in the stand-in and delivers it to the store (as the watch would).
    pub fn apply_vpa(&mut self, v: &VerticalPodAutoscaler) {
        let value = serde_json::to_value(v).unwrap();
        let path = format!(
            "/apis/autoscaling.tailor.dev/v1/namespaces/{}/verticalpodautoscalers/{}",
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default()
        );
        self.api.put_object(&path, value);
        self.vpas.insert(vpa_key(v), v.clone());
        self.writers
            .vpas
            .apply_watcher_event(&watcher::Event::Apply(WatchedVpa::from(v.clone())));
    }

    /// Deletes a VPA from the stand-in and the store (as the watch would).
    pub fn delete_vpa(&mut self, v: &VerticalPodAutoscaler) {
        self.api.delete_object(&serde_json::to_value(v).unwrap());
        self.vpas.remove(&vpa_key(v));
        self.writers
            .vpas
            .apply_watcher_event(&watcher::Event::Delete(WatchedVpa::from(v.clone())));
    }

    /// Stores a checkpoint in the stand-in and delivers it to the checkpoint watch (which keeps
    /// only its VPA and container; restoring reads it back from the API).
    pub fn apply_checkpoint(&mut self, c: VerticalPodAutoscalerCheckpoint) {
        let ns = c.metadata.namespace.clone().unwrap_or_default();
        let name = c.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&c).unwrap();
        self.api.put_object(
            &format!("/apis/autoscaling.tailor.dev/v1/namespaces/{ns}/verticalpodautoscalercheckpoints/{name}"),
            value.clone(),
        );
        let head: CheckpointHead = serde_json::from_value(value).unwrap();
        self.writers
            .checkpoints
            .apply_watcher_event(&watcher::Event::Apply(head));
    }

    /// Stores a checkpoint given as JSON (which need not decode as the typed object) and delivers its
    /// metadata and spec to the checkpoint watch.
    pub fn apply_checkpoint_json(&mut self, value: Value) {
        let ns = value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.api.put_object(
            &format!("/apis/autoscaling.tailor.dev/v1/namespaces/{ns}/verticalpodautoscalercheckpoints/{name}"),
            value.clone(),
        );
        let head: CheckpointHead = serde_json::from_value(value).unwrap();
        self.writers
            .checkpoints
            .apply_watcher_event(&watcher::Event::Apply(head));
    }

    /// Simulates the checkpoint watch delivering every checkpoint the stand-in holds.
    pub fn reflect_checkpoints(&mut self) {
        for c in self
            .api
            .objects("/apis/autoscaling.tailor.dev/v1/verticalpodautoscalercheckpoints")
        {
            let head: CheckpointHead = serde_json::from_value(c).unwrap();
            self.writers
                .checkpoints
                .apply_watcher_event(&watcher::Event::Apply(head));
        }
    }

    /// Simulates the watch delivering the VPA status a patch wrote.
    pub fn reflect_status_patches(&mut self, requests: &[Recorded]) {
        for r in requests {
            if r.method != "PATCH" || !r.uri.contains("/verticalpodautoscalers/") {
                continue;
            }
            let path = r.uri.split('?').next().unwrap_or_default();
            let name = path
                .trim_end_matches("/status")
                .rsplit('/')
                .next()
                .unwrap_or_default();
            let ns = path
                .split("/namespaces/")
                .nth(1)
                .and_then(|s| s.split('/').next())
                .unwrap_or_default();
            let Some(mut v) = self.vpas.get(&(ns.to_string(), name.to_string())).cloned() else {
                continue;
            };
            let mut status = serde_json::to_value(&v.status).unwrap();
            if status.is_null() {
                status = json!({});
            }
            json_patch::merge(&mut status, &r.body["status"]);
            v.status = serde_json::from_value(status).unwrap();
            self.apply_vpa(&v);
        }
    }

    /// Runs one loop with the given metrics answer; reflects status patches; returns the requests.
    pub async fn loop_with(
        &mut self,
        now_secs: i64,
        metrics: MetricsAnswer,
    ) -> (tailor_recommender::LoopReport, Vec<Recorded>) {
        self.api.push_metrics(metrics);
        let report = self.rec.run_once(t(now_secs)).await;
        let requests = self.api.take();
        self.reflect_status_patches(&requests);
        (report, requests)
    }

    /// The VPA as the API server holds it (with every status patch merged).
    pub fn vpa(&self, ns: &str, name: &str) -> VerticalPodAutoscaler {
        self.vpas[&(ns.to_string(), name.to_string())].clone()
    }
}

/// The target of a container in a VPA's status, as (millicores, bytes).
pub fn target(v: &VerticalPodAutoscaler, container: &str, field: &str) -> (i64, i64) {
    let recs = v
        .status
        .as_ref()
        .unwrap()
        .recommendation
        .as_ref()
        .unwrap()
        .container_recommendations
        .as_ref()
        .unwrap();
    let r = recs
        .iter()
        .find(|r| r.container_name.as_deref() == Some(container))
        .unwrap();
    let list = match field {
        "target" => r.target.clone(),
        "lowerBound" => r.lower_bound.clone().unwrap(),
        "upperBound" => r.upper_bound.clone().unwrap(),
        _ => r.uncapped_target.clone().unwrap(),
    };
    (
        tailor_core::quantity::amount("cpu", &list["cpu"]).unwrap(),
        tailor_core::quantity::amount("memory", &list["memory"]).unwrap(),
    )
}
