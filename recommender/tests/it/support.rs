//! Test support for the controller: a fake API server behind kube-rs's mock service (tower-test) that
//! records every request and answers like the API server would for the calls the recommender makes,
//! plus object builders and a harness that feeds reflector stores directly.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::Client;
use kube::client::Body;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tailor_crds::{
    CrossVersionObjectReference, VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint,
    VerticalPodAutoscalerSpec,
};
use tailor_engine::units::Nanos;
use tailor_recommender::checkpoint_index::CheckpointHead;
use tailor_recommender::config::ControllerConfig;
use tailor_recommender::metrics::Metrics;
use tailor_recommender::oom::OomQueue;
use tailor_recommender::ratelimit::RateLimiter;
use tailor_recommender::run_loop::Recommender;
use tailor_recommender::slim::SlimPod;
use tailor_recommender::stores::{Stores, Writers, new_stores};
use tailor_recommender::watched_vpa::WatchedVpa;

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

/// One recorded request.
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

type Responder = tower_test::mock::SendResponse<Response<Body>>;

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    metrics: VecDeque<MetricsAnswer>,
    objects: HashMap<String, Value>,
    lean: bool,
    /// (method, path) of requests that are never answered (a hung connection).
    hang: Vec<(String, String)>,
    /// The responders of hung requests, kept so the client keeps waiting.
    hung: Vec<Responder>,
    /// (method, path, HTTP code) of requests answered with that error `Status`.
    fail: Vec<(String, String, u16)>,
}

/// The fake API server.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

impl FakeApi {
    /// Starts serving a mock client.
    pub fn start() -> (Client, FakeApi) {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = FakeApi::default();
        let server = api.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                if server.hangs(&req) {
                    server.state.lock().unwrap().hung.push(send);
                    continue;
                }
                let (code, body) = server.answer(req).await;
                let resp = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                send.send_response(resp);
            }
        });
        (Client::new(svc, "default"), api)
    }

    /// From now on, `method` requests of `path` get no answer at all (a hung connection); they are
    /// recorded without their body.
    pub fn hang(&self, method: &str, path: &str) {
        self.state
            .lock()
            .unwrap()
            .hang
            .push((method.into(), path.into()));
    }

    /// From now on, `method` requests of `path` are recorded and answered with a `Status` of `code`.
    pub fn fail(&self, method: &str, path: &str, code: u16) {
        self.state
            .lock()
            .unwrap()
            .fail
            .push((method.into(), path.into(), code));
    }

    /// Answers every request normally again (see [`FakeApi::fail`]).
    pub fn stop_failing(&self) {
        self.state.lock().unwrap().fail.clear();
    }

    /// Answers every request again (requests already hung stay unanswered).
    pub fn stop_hanging(&self) {
        self.state.lock().unwrap().hang.clear();
    }

    /// Records and parks `req` if it is to hang.
    fn hangs(&self, req: &Request<Body>) -> bool {
        let mut s = self.state.lock().unwrap();
        let key = (req.method().to_string(), req.uri().path().to_string());
        if !s.hang.contains(&key) {
            return false;
        }
        s.requests.push(Recorded {
            method: key.0,
            uri: req.uri().to_string(),
            content_type: None,
            body: Value::Null,
        });
        true
    }

    /// Queues the answer of the next metrics list.
    pub fn push_metrics(&self, a: MetricsAnswer) {
        self.state.lock().unwrap().metrics.push_back(a);
    }

    /// Lean mode (scale tests): request bodies are not kept and written objects are not stored; writes
    /// answer with a minimal object.
    pub fn set_lean(&self, lean: bool) {
        self.state.lock().unwrap().lean = lean;
    }

    /// Every request so far, and forgets them.
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().unwrap().requests)
    }

    /// A stored object by path (`/apis/.../name`).
    pub fn object(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Every stored object whose path starts with `prefix`.
    pub fn objects(&self, prefix: &str) -> Vec<Value> {
        let s = self.state.lock().unwrap();
        let mut keys: Vec<&String> = s.objects.keys().filter(|k| k.starts_with(prefix)).collect();
        keys.sort();
        keys.into_iter().map(|k| s.objects[k].clone()).collect()
    }

    /// Puts an object at a path.
    pub fn put_object(&self, path: &str, v: Value) {
        self.state.lock().unwrap().objects.insert(path.into(), v);
    }

    async fn answer(&self, req: Request<Body>) -> (u16, Value) {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let path = req.uri().path().to_string();
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let mut s = self.state.lock().unwrap();
        s.requests.push(Recorded {
            method: method.clone(),
            uri: uri.clone(),
            content_type: content_type.clone(),
            body: body.clone(),
        });
        if let Some(&(_, _, code)) = s.fail.iter().find(|(m, p, _)| *m == method && *p == path) {
            return (code, status(code, "InternalError"));
        }
        if path.starts_with("/apis/metrics.k8s.io/") {
            return match s.metrics.pop_front() {
                Some(Ok(v)) => (200, v),
                Some(Err(code)) => (code, status(code, "ServiceUnavailable")),
                None => (200, metrics_list(&[])),
            };
        }
        if path.ends_with("/status") && method == "PATCH" {
            // A VPA status patch: answer with the VPA carrying the patched status.
            let name = path
                .trim_end_matches("/status")
                .rsplit('/')
                .next()
                .unwrap_or_default();
            return (
                200,
                json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
                       "metadata": {"name": name}, "spec": {}, "status": body["status"]}),
            );
        }
        let collection = method == "POST";
        match method.as_str() {
            "GET" => match s.objects.get(&path) {
                Some(v) => (200, v.clone()),
                None => match collection_items(&s.objects, &path) {
                    // Pages of `limit` items; the continue token is the next item's position.
                    Some(items) => {
                        let query = |key: &str| {
                            uri.split_once('?')
                                .map(|(_, q)| q)
                                .unwrap_or_default()
                                .split('&')
                                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                                .and_then(|v| v.parse::<usize>().ok())
                        };
                        let from = query("continue").unwrap_or(0);
                        let to =
                            query("limit").map_or(items.len(), |l| (from + l).min(items.len()));
                        let mut metadata = json!({});
                        if to < items.len() {
                            metadata["continue"] = json!(to.to_string());
                        }
                        let page = items.get(from..to).unwrap_or_default().to_vec();
                        (
                            200,
                            json!({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": page}),
                        )
                    }
                    None => (404, status(404, "NotFound")),
                },
            },
            "POST" if collection => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let key = format!("{path}/{name}");
                if s.objects.contains_key(&key) {
                    return (409, status(409, "AlreadyExists"));
                }
                let mut obj = body.clone();
                obj["metadata"]["resourceVersion"] = json!("1");
                s.objects.insert(key, obj.clone());
                (201, obj)
            }
            "PUT" => {
                // A replace: optimistic concurrency on resourceVersion, which it then bumps.
                let Some(stored) = s.objects.get(&path) else {
                    return (404, status(404, "NotFound"));
                };
                let stored_rv = stored["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                if let Some(rv) = body["metadata"]["resourceVersion"].as_str()
                    && rv != stored_rv.to_string()
                {
                    return (409, status(409, "Conflict"));
                }
                let mut obj = body.clone();
                obj["metadata"]["resourceVersion"] = json!((stored_rv + 1).to_string());
                s.objects.insert(path, obj.clone());
                (200, obj)
            }
            "PATCH" if content_type.as_deref() == Some("application/apply-patch+yaml") => {
                // Server-side apply: creates the object or merges the applied fields into it.
                let mut obj = s.objects.get(&path).cloned().unwrap_or(Value::Null);
                let created = obj.is_null();
                json_patch::merge(&mut obj, &body);
                // The checkpoint CRD declares `bucketWeights` an atomic map: an apply replaces it whole
                // (a merge would keep keys of the stored map the apply does not name).
                for h in ["cpuHistogram", "memoryHistogram"] {
                    if let Some(w) = body["status"][h].get("bucketWeights") {
                        obj["status"][h]["bucketWeights"] = w.clone();
                    }
                }
                obj["metadata"]["resourceVersion"] = json!("1");
                s.objects.insert(path, obj.clone());
                (if created { 201 } else { 200 }, obj)
            }
            "PATCH" => {
                let Some(mut obj) = s.objects.get(&path).cloned() else {
                    return (404, status(404, "NotFound"));
                };
                let patch: json_patch::Patch = serde_json::from_value(body).unwrap();
                json_patch::patch(&mut obj, &patch).unwrap();
                s.objects.insert(path, obj.clone());
                (200, obj)
            }
            "DELETE" => match s.objects.remove(&path) {
                Some(v) => (200, v),
                None => (404, status(404, "NotFound")),
            },
            _ => (404, status(404, "NotFound")),
        }
    }
}

/// The items of the collection at `path` (`/api/v1/…` or `/apis/GROUP/VERSION/…`, then `PLURAL` or
/// `namespaces/NS/PLURAL`), in path order; `None` when `path` is not a collection.
fn collection_items(objects: &HashMap<String, Value>, path: &str) -> Option<Vec<Value>> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let base = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    let rest = segments.get(base..)?;
    let (namespace, plural) = match rest {
        [plural] => (None, *plural),
        ["namespaces", ns, plural] => (Some(*ns), *plural),
        _ => return None,
    };
    let prefix = segments[..base].join("/");
    let mut keys: Vec<&String> = objects
        .keys()
        .filter(|k| {
            let k: Vec<&str> = k.trim_start_matches('/').split('/').collect();
            k.len() == base + 4
                && k[..base].join("/") == prefix
                && k[base] == "namespaces"
                && namespace.is_none_or(|ns| k[base + 1] == ns)
                && k[base + 2] == plural
        })
        .collect();
    keys.sort();
    Some(keys.into_iter().map(|k| objects[k].clone()).collect())
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
    let mut v = VerticalPodAutoscaler::new(
        name,
        VerticalPodAutoscalerSpec {
            target_ref: Some(CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: kind.into(),
                name: target.into(),
            }),
            ..Default::default()
        },
    );
    v.metadata.namespace = Some(ns.into());
    v.metadata.uid = Some(format!("uid-{name}"));
    v.metadata.generation = Some(1);
    v
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
pub fn pod(ns: &str, name: &str, lbl: &[(&str, &str)], containers: &[&str]) -> SlimPod {
    SlimPod::from_pod(&full_pod(ns, name, lbl, containers)).unwrap()
}

/// The full Pod behind [`pod`].
pub fn full_pod(ns: &str, name: &str, lbl: &[(&str, &str)], containers: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels(lbl)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|c| Container {
                    name: c.to_string(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("memory".to_string(), Quantity("300Mi".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

/// `(namespace, name)` of a VPA.
fn vpa_key(v: &VerticalPodAutoscaler) -> (String, String) {
    (
        v.metadata.namespace.clone().unwrap_or_default(),
        v.metadata.name.clone().unwrap_or_default(),
    )
}

/// Stores fed directly, a recommender over the fake API and its writers.
pub struct Harness {
    pub api: FakeApi,
    /// A client of the same fake API (for a leader elector next to the recommender).
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
    pub fn new(cfg: ControllerConfig) -> Harness {
        let (client, api) = FakeApi::start();
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

    /// Adds or updates a VPA (the watch delivering it to the store).
    pub fn apply_vpa(&mut self, v: &VerticalPodAutoscaler) {
        self.vpas.insert(vpa_key(v), v.clone());
        self.writers
            .vpas
            .apply_watcher_event(&watcher::Event::Apply(WatchedVpa::from(v.clone())));
    }

    /// Deletes a VPA (the watch delivering the deletion to the store).
    pub fn delete_vpa(&mut self, v: &VerticalPodAutoscaler) {
        self.vpas.remove(&vpa_key(v));
        self.writers
            .vpas
            .apply_watcher_event(&watcher::Event::Delete(WatchedVpa::from(v.clone())));
    }

    /// Stores a checkpoint in the fake API server and delivers it to the checkpoint watch (which keeps
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

    /// Simulates the checkpoint watch delivering every checkpoint the fake API server holds.
    pub fn reflect_checkpoints(&mut self) {
        for c in self
            .api
            .objects("/apis/autoscaling.tailor.dev/v1/namespaces/")
            .into_iter()
            .filter(|c| c["kind"] == "VerticalPodAutoscalerCheckpoint")
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
