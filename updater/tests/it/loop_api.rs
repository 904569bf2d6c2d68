//! The updater's iteration against a fake API server (a served scenario of `tailor-testkit`): evictions,
//! in-place resizes, budgets, PodDisruptionBudgets, the webhook's lease and un-boosting, for each mode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::StatusCode;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, Status};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexObjects};
use tailor_kube::rate::RateSettings;
use tailor_testkit::scenario::{Journal, Received, Reply, api_server, failure_with_causes};
use tailor_updater::decisions::skip::Skip;
use tailor_updater::iteration::{Action, UpdaterState};
use tailor_updater::process::flags::UpdaterFlags;
use tailor_updater::process::metrics::Metrics;
use tailor_updater::run_loop::{Outcome, StatusCheck, Updater};
use tailor_updater::views::cache_view::{CacheView, ReplicaStores};
use tailor_updater::views::pods::CachedPod;
use tailor_updater::writers::api_actuator::ApiActuator;

/// The clock of the tests.
const NOW: &str = "2026-01-10T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn ago(secs: i64) -> String {
    let t = now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(secs))
        .unwrap();
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// What the fake API server answers, which the tests change between iterations.
#[derive(Default)]
struct State {
    lease: Option<Lease>,
    /// Pod name → HTTP codes of successive eviction answers (default 201).
    evictions: HashMap<String, Vec<u16>>,
    /// Pod name → resize answer: 200, or 403 with a NodeCapacity cause.
    resize: HashMap<String, u16>,
}

/// A fake API server: every request answered from [`State`] by [`answer`], and kept in the journal.
#[derive(Clone)]
struct FakeApi {
    state: Arc<Mutex<State>>,
    journal: Journal,
}

fn kruise_resources() -> APIResourceList {
    serde_json::from_value(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps.kruise.io/v1alpha1",
        "resources": [
            {"name": "clonesets", "singularName": "cloneset", "namespaced": true, "kind": "CloneSet", "verbs": ["get", "list", "watch"]},
            {"name": "clonesets/scale", "singularName": "", "namespaced": true, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}]}))
    .unwrap()
}

fn cloneset_scale() -> Scale {
    serde_json::from_value(json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 4}, "status": {"replicas": 4, "selector": "app=web"}}))
    .unwrap()
}

/// A Pod named `name` in `default` and nothing else, as a patch of it answers here.
fn named_pod(name: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.to_owned());
    pod.metadata.namespace = Some("default".to_owned());
    pod
}

fn eviction(s: &mut State, pod: &str) -> Reply {
    let code = s
        .evictions
        .get_mut(pod)
        .and_then(|q| {
            if q.is_empty() {
                None
            } else {
                Some(q.remove(0))
            }
        })
        .unwrap_or(201);
    if code == 429 {
        let refused = [("DisruptionBudget", "")];
        let status =
            failure_with_causes(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", &refused);
        Reply::status(&status)
    } else {
        let evicted = Status {
            status: Some("Success".into()),
            ..Status::default()
        };
        Reply::object(&evicted).code(StatusCode::CREATED)
    }
}

fn resize(s: &State, pod: &str) -> Reply {
    match s.resize.get(pod).copied().unwrap_or(200) {
        403 => {
            let cause = [("NodeCapacity", "node too small")];
            Reply::status(&failure_with_causes(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &cause,
            ))
        }
        _ => Reply::object(&named_pod(pod)),
    }
}

/// Routes `req` over the state: discovery and `/scale` of an OpenKruise CloneSet, the webhook's Lease,
/// evictions and resizes as the state says, patches of the VPA and of pods; anything else (Events, status
/// writes) is created as sent.
fn answer(s: &mut State, req: &Received) -> Reply {
    let segments: Vec<&str> = req.path.split('/').collect();
    let pod = segments
        .iter()
        .position(|s| *s == "pods")
        .and_then(|i| segments.get(i + 1))
        .map(|s| s.to_string());
    let path = req.path.as_str();
    if path == "/apis/apps.kruise.io/v1alpha1" {
        return Reply::object(&kruise_resources());
    }
    if path == "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/web/scale" {
        return Reply::object(&cloneset_scale());
    }
    if path.contains("/leases/") {
        return match &s.lease {
            Some(l) => Reply::object(l),
            None => Reply::status(&failure_with_causes(StatusCode::NOT_FOUND, "NotFound", &[])),
        };
    }
    if path.ends_with("/eviction") {
        return eviction(s, &pod.unwrap_or_default());
    }
    if path.ends_with("/resize") {
        return resize(s, &pod.unwrap_or_default());
    }
    if req.method == "PATCH" && path.contains("/verticalpodautoscalers/") {
        let vpa: VerticalPodAutoscaler = serde_json::from_value(
            json!({"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}),
        )
        .unwrap();
        return Reply::object(&vpa);
    }
    if let Some(pod) = pod.filter(|_| req.method == "PATCH") {
        return Reply::object(&named_pod(&pod));
    }
    Reply::json(req.body.clone()).code(StatusCode::CREATED)
}

impl FakeApi {
    fn start() -> (Client, FakeApi) {
        let (client, server) = api_server("default");
        let state = Arc::new(Mutex::new(State::default()));
        let routed = state.clone();
        let journal = server.serve(move |req| answer(&mut routed.lock().unwrap(), req));
        (client, FakeApi { state, journal })
    }

    fn take(&self) -> Vec<Received> {
        self.journal.take()
    }

    fn set_lease(&self, renewed_secs_ago: Option<i64>) {
        self.state.lock().unwrap().lease = renewed_secs_ago.map(|s| {
            serde_json::from_value(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "tailor-admission", "namespace": "tailor", "creationTimestamp": ago(86400)},
                   "spec": {"holderIdentity": "tailor-admission-0", "renewTime": format!("{}.000000Z", ago(s).trim_end_matches('Z'))}}))
            .unwrap()
        });
    }
}

fn vpa(mode: &str, extra_spec: Value) -> VerticalPodAutoscaler {
    let mut spec = json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "updatePolicy": {"updateMode": mode},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default", "uid": "vpa-uid", "creationTimestamp": ago(86400)},
        "spec": spec,
        "status": {"recommendation": {"containerRecommendations": [{
            "containerName": "app",
            "target": {"cpu": "250m", "memory": "256Mi"},
            "lowerBound": {"cpu": "120m", "memory": "200Mi"},
            "upperBound": {"cpu": "400m", "memory": "512Mi"},
            "uncappedTarget": {"cpu": "250m", "memory": "256Mi"}}]}}
    }))
    .unwrap()
}

fn pod(i: usize, cpu: &str, extra: Value) -> Pod {
    let memory = if cpu == "100m" { "128Mi" } else { "256Mi" };
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-1-{i}"), "namespace": "default", "uid": format!("uid-{i}"),
            "labels": {"app": "web"},
            // Admitted through Tailor's webhook, as every pod of a VPA is while it runs.
            "annotations": {"tailor.dev/observed-containers": "app"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "app",
            "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": "1", "memory": "512Mi"}}}]},
        "status": {"phase": "Running", "startTime": ago(2 * 86400),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ago(2 * 86400)}]}
    });
    merge(&mut p, &extra);
    serde_json::from_value(p).unwrap()
}

fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e.clone(),
    }
}

struct Harness {
    api: FakeApi,
    updater: Updater,
    pods: Arc<Mutex<Vec<Arc<CachedPod>>>>,
}

fn harness(
    vpa: VerticalPodAutoscaler,
    replicas: i32,
    pods: Vec<Pod>,
    gates: &str,
    lease_secs_ago: Option<i64>,
) -> Harness {
    use clap::Parser;
    #[derive(Parser)]
    struct F {
        #[command(flatten)]
        u: UpdaterFlags,
    }
    let flags = F::try_parse_from(["t", "--feature-gates", gates])
        .unwrap()
        .u;
    let (client, api) = FakeApi::start();
    api.set_lease(lease_secs_ago);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "dep"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
    }))
    .unwrap();
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "default", "uid": "rs",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "dep", "controller": true}]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let index = Index::from_objects(IndexObjects {
        vpas: vec![vpa.clone()],
        deployments: vec![deployment],
        replica_sets: vec![rs.clone()],
        ..Default::default()
    });
    let mut rs_writer: Writer<ReplicaSet> = Writer::default();
    rs_writer.apply_watcher_event(&watcher::Event::Apply(rs));
    let replicas = ReplicaStores {
        replica_sets: rs_writer.as_reader(),
        stateful_sets: Writer::default().as_reader(),
        replication_controllers: Writer::default().as_reader(),
        daemon_sets: Writer::default().as_reader(),
        scaled: Default::default(),
    };
    let pods: Arc<Mutex<Vec<Arc<CachedPod>>>> = Arc::new(Mutex::new(
        pods.into_iter()
            .map(|p| Arc::new(CachedPod::from(p)))
            .collect(),
    ));
    let listed = pods.clone();
    let vpas = vec![Arc::new(vpa)];
    let updater = Updater {
        config: flags.iteration_config(""),
        state: UpdaterState::default(),
        view: CacheView::new(
            index,
            replicas,
            flags.restriction_config(),
            flags.feature_gates,
            now(),
        ),
        actuator: ApiActuator::new(
            client.clone(),
            RateSettings::from_flags(-1.0, 1),
            tokio::time::Instant::now(),
        ),
        status: Some(StatusCheck {
            api: Api::namespaced(client, "tailor"),
            name: "tailor-admission".into(),
            timeout: std::time::Duration::from_secs(60),
        }),
        vpas: Box::new(move || vpas.clone()),
        pods: Box::new(move || listed.lock().unwrap().clone()),
        metrics: Arc::new(Metrics::new()),
    };
    Harness { api, updater, pods }
}

impl Harness {
    async fn iterate(&mut self) -> (Outcome, Vec<Received>) {
        self.iterate_at(now()).await
    }

    async fn iterate_at(&mut self, at: Timestamp) -> (Outcome, Vec<Received>) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let outcome = self.updater.iterate(at, deadline).await;
        // Events are recorded in the background.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        (outcome, self.api.take())
    }

    fn set_pods(&self, pods: Vec<Pod>) {
        *self.pods.lock().unwrap() = pods
            .into_iter()
            .map(|p| Arc::new(CachedPod::from(p)))
            .collect();
    }
}

fn evicted(reqs: &[Received]) -> Vec<String> {
    let mut out: Vec<String> = reqs
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .filter_map(|r| r.path.split('/').rev().nth(1).map(str::to_owned))
        .collect();
    out.sort();
    out
}

fn resized(reqs: &[Received]) -> Vec<&Received> {
    reqs.iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/resize"))
        .collect()
}

fn four_pods(cpu: &str) -> Vec<Pod> {
    (0..4).map(|i| pod(i, cpu, json!({}))).collect()
}

#[tokio::test]
async fn recreate_evicts_pods_outside_their_bounds_within_the_tolerance() {
    let mut h = harness(
        vpa("Recreate", json!({})),
        4,
        four_pods("100m"),
        "",
        Some(5),
    );
    let (outcome, reqs) = h.iterate().await;
    assert!(matches!(outcome, Outcome::Ran(_)), "{outcome:?}");
    // 4 replicas × tolerance 0.5: two of them per iteration.
    assert_eq!(evicted(&reqs).len(), 2, "{reqs:?}");
    assert!(resized(&reqs).is_empty());
    assert!(
        reqs.iter()
            .any(|r| r.path.contains("/events") && r.body.to_string().contains("EvictedByVPA")),
        "the eviction is recorded as an event: {reqs:?}"
    );
    // The evicted two are gone; their replacements are Pending with the new requests: nothing more.
    let mut next: Vec<Pod> = (2..4).map(|i| pod(i, "100m", json!({}))).collect();
    for i in 4..6 {
        next.push(pod(
            i,
            "250m",
            json!({"status": {"phase": "Pending", "startTime": ago(10)}}),
        ));
    }
    h.set_pods(next);
    let (_, reqs) = h.iterate().await;
    assert!(
        evicted(&reqs).is_empty(),
        "running 2 of 4 must leave the others alone: {reqs:?}"
    );
    // Once the replacements run, the last two old pods go.
    let mut next: Vec<Pod> = (2..4).map(|i| pod(i, "100m", json!({}))).collect();
    for i in 4..6 {
        next.push(pod(i, "250m", json!({"status": {"startTime": ago(10)}})));
    }
    h.set_pods(next);
    let (_, reqs) = h.iterate().await;
    assert_eq!(evicted(&reqs), vec!["web-1-2", "web-1-3"]);
}

/// A webhook outage the Lease does not show (the process renews it, the API server cannot reach it): the
/// replacements of the first evictions come back without Tailor's annotations, and the workload's evictions
/// pause — condition and event — with one probe eviction after the pause's period, until a replacement
/// comes back sized.
#[tokio::test]
async fn evictions_pause_when_a_replacement_comes_back_unsized() {
    let mut h = harness(
        vpa("Recreate", json!({})),
        4,
        four_pods("100m"),
        "",
        Some(5),
    );
    let (_, reqs) = h.iterate().await;
    assert_eq!(evicted(&reqs), vec!["web-1-0", "web-1-1"]);
    // The replacements run with their old requests and without the webhook's annotation.
    let unsized_extra =
        json!({"metadata": {"annotations": null}, "status": {"startTime": ago(10)}});
    let mut next: Vec<Pod> = (2..4).map(|i| pod(i, "100m", json!({}))).collect();
    next.extend((4..6).map(|i| pod(i, "100m", unsized_extra.clone())));
    h.set_pods(next.clone());
    let (_, mut reqs) = h.iterate().await;
    // The event follows the condition's write through the event queue, a task of its own: wait for it
    // (whatever this machine's speed), at most 10 s.
    let event_seen = |reqs: &[Received]| {
        reqs.iter().any(|r| {
            r.path.contains("/events") && r.body.to_string().contains("ReplacementsUnsized")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !event_seen(&reqs) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        reqs.extend(h.api.take());
    }
    assert!(evicted(&reqs).is_empty(), "evictions must pause: {reqs:?}");
    let said = |reqs: &[Received], what: &str| {
        reqs.iter().any(|r| {
            r.body.to_string().contains(what) && r.body.to_string().contains("ReplacementsUnsized")
        })
    };
    assert!(said(&reqs, "UpdatesBlocked"), "the condition: {reqs:?}");
    assert!(event_seen(&reqs), "the event: {reqs:?}");
    let h_metrics = h.updater.metrics.encode();
    assert!(
        h_metrics.contains("tailor_updater_evictions_paused_workloads 1"),
        "{h_metrics}"
    );
    assert!(
        h_metrics.contains("tailor_updater_unsized_replacements_total{"),
        "{h_metrics}"
    );
    // Still paused a minute later.
    let later = |secs: i64| {
        now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .unwrap()
    };
    // The webhook renews its Lease all along (the outage is between the API server and the webhook).
    h.api.set_lease(Some(-60));
    let (_, reqs) = h.iterate_at(later(60)).await;
    assert!(evicted(&reqs).is_empty(), "{reqs:?}");
    // After the pause's period one probe goes, and only one.
    let probe_at =
        i64::try_from(tailor_updater::decisions::replacements::PROBE_AFTER.as_secs()).unwrap() + 1;
    h.api.set_lease(Some(-probe_at));
    let (_, reqs) = h.iterate_at(later(probe_at)).await;
    assert_eq!(evicted(&reqs).len(), 1, "one probe: {reqs:?}");
    // Its replacement comes back sized: the webhook is back, and the last old pod goes.
    let mut next: Vec<Pod> = vec![pod(3, "100m", json!({}))];
    next.extend((4..6).map(|i| pod(i, "100m", unsized_extra.clone())));
    next.push(pod(6, "250m", json!({"status": {"startTime": ago(10)}})));
    h.set_pods(next);
    h.api.set_lease(Some(-probe_at - 10));
    let (_, reqs) = h.iterate_at(later(probe_at + 10)).await;
    assert!(evicted(&reqs).contains(&"web-1-3".to_string()), "{reqs:?}");
}

#[tokio::test]
async fn in_place_or_recreate_resizes_in_place_and_evicts_after_an_infeasible_resize() {
    let mut h = harness(
        vpa("InPlaceOrRecreate", json!({})),
        4,
        four_pods("100m"),
        "",
        Some(5),
    );
    let (outcome, reqs) = h.iterate().await;
    let Outcome::Ran(report) = outcome else {
        panic!("{outcome:?}")
    };
    let patches = resized(&reqs);
    assert_eq!(patches.len(), 2, "tolerance 2 of 4: {reqs:?}");
    assert!(evicted(&reqs).is_empty());
    let ops = patches[0].body.as_array().unwrap();
    assert!(ops.contains(&json!({"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "250m"})), "{ops:?}");
    assert!(ops.contains(&json!({"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "2500m"})), "limits keep their ratio: {ops:?}");
    assert!(
        reqs.iter()
            .any(|r| r.method == "PATCH" && r.path.ends_with("/pods/web-1-0")
                || r.path.ends_with("/pods/web-1-1"))
    );
    assert_eq!(report.resizes, 2);
    // The kubelet finds the resized two infeasible: they are evicted instead.
    let infeasible = json!({"status": {"conditions": [
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
        {"type": "Ready", "status": "True"}]}});
    let mut next: Vec<Pod> = (0..2).map(|i| pod(i, "100m", infeasible.clone())).collect();
    next.extend((2..4).map(|i| pod(i, "250m", json!({}))));
    h.set_pods(next);
    let (_, reqs) = h.iterate().await;
    assert_eq!(evicted(&reqs), vec!["web-1-0", "web-1-1"], "{reqs:?}");
    assert!(resized(&reqs).is_empty());
}

#[tokio::test]
async fn in_place_never_evicts_and_remembers_an_infeasible_resize() {
    let mut h = harness(
        vpa("InPlace", json!({})),
        4,
        four_pods("100m"),
        "InPlace=true",
        Some(5),
    );
    for i in 0..4 {
        h.api
            .state
            .lock()
            .unwrap()
            .resize
            .insert(format!("web-1-{i}"), 403);
    }
    // Refused resizes do not consume the budget: all four are tried, none is evicted.
    let (outcome, reqs) = h.iterate().await;
    assert_eq!(resized(&reqs).len(), 4, "{outcome:?}");
    assert!(evicted(&reqs).is_empty(), "InPlace never evicts: {reqs:?}");
    let text = h.updater.metrics.encode();
    assert!(
        text.contains("reason=\"InPlaceUpdateInfeasible\""),
        "{text}"
    );
    // With the same recommendation they are not tried again, and still not evicted.
    let (outcome, reqs) = h.iterate().await;
    let Outcome::Ran(report) = outcome else {
        panic!()
    };
    assert!(evicted(&reqs).is_empty());
    assert!(resized(&reqs).is_empty(), "{reqs:?}");
    let cached = report.vpas[0]
        .pods
        .values()
        .filter(|a| **a == Action::Skip(Skip::InfeasibleCached))
        .count();
    assert_eq!(cached, 4, "{:?}", report.vpas[0].pods);
    assert!(
        reqs.iter()
            .any(|r| r.body.to_string().contains("InPlaceResizeSkipped")),
        "each skip is an event: {reqs:?}"
    );
}

#[tokio::test]
async fn min_replicas_and_tolerance_hold_over_iterations() {
    let pods: Vec<Pod> = (0..3).map(|i| pod(i, "100m", json!({}))).collect();
    let mut h = harness(vpa("Recreate", json!({})), 3, pods.clone(), "", Some(5));
    for _ in 0..3 {
        let (_, reqs) = h.iterate().await;
        // 3 × 0.5 = 1 pod per iteration (the fake API does not delete the pods).
        assert_eq!(evicted(&reqs).len(), 1, "{reqs:?}");
    }
    let mut h = harness(
        vpa(
            "Recreate",
            json!({"updatePolicy": {"updateMode": "Recreate", "minReplicas": 4}}),
        ),
        3,
        pods,
        "",
        Some(5),
    );
    for _ in 0..3 {
        let (outcome, reqs) = h.iterate().await;
        assert!(
            evicted(&reqs).is_empty(),
            "3 live pods < minReplicas 4: {reqs:?}"
        );
        let Outcome::Ran(report) = outcome else {
            panic!()
        };
        assert!(
            report.vpas[0]
                .pods
                .values()
                .all(|a| *a == Action::Skip(Skip::BelowMinReplicas))
        );
    }
}

#[tokio::test]
async fn a_disruption_budget_refusal_is_retried_next_iteration() {
    let pods: Vec<Pod> = (0..3).map(|i| pod(i, "100m", json!({}))).collect();
    let mut h = harness(vpa("Recreate", json!({})), 3, pods, "", Some(5));
    for i in 0..3 {
        h.api
            .state
            .lock()
            .unwrap()
            .evictions
            .insert(format!("web-1-{i}"), vec![429]);
    }
    let (outcome, reqs) = h.iterate().await;
    let Outcome::Ran(report) = outcome else {
        panic!()
    };
    assert_eq!(report.evictions, 0);
    assert_eq!(
        evicted(&reqs).len(),
        3,
        "every refusal leaves the budget unspent: {reqs:?}"
    );
    assert!(
        report.vpas[0]
            .pods
            .values()
            .all(|a| *a == Action::Skip(Skip::DisruptionBudget))
    );
    let text = h.updater.metrics.encode();
    assert!(text.contains("tailor_updater_failed_eviction_attempts_total{vpa_size_log2=\"1\",update_mode=\"Recreate\",reason=\"EvictionError\""), "{text}");
    let (outcome, _) = h.iterate().await;
    let Outcome::Ran(report) = outcome else {
        panic!()
    };
    assert_eq!(report.evictions, 1, "the PDB allows it now");
}

#[tokio::test]
async fn nothing_happens_while_the_webhook_lease_is_stale_or_missing() {
    for lease in [Some(300), None] {
        let mut h = harness(vpa("Recreate", json!({})), 4, four_pods("100m"), "", lease);
        let (outcome, reqs) = h.iterate().await;
        assert!(
            matches!(outcome, Outcome::AdmissionNotAlive(_)),
            "{outcome:?}"
        );
        assert!(
            reqs.iter()
                .all(|r| r.method == "GET" && r.path.contains("/leases/")),
            "{reqs:?}"
        );
        assert!(
            h.updater
                .metrics
                .encode()
                .contains("tailor_updater_admission_alive 0")
        );
    }
}

#[tokio::test]
async fn a_boosted_pod_is_unboosted_in_place() {
    let boost = json!({"resourcePolicy": {"containerPolicies": [{"containerName": "app", "startupBoost": {"cpu": {"type": "Factor", "factor": 4, "durationSeconds": 30}}}]}});
    let boosted = pod(
        0,
        "1",
        json!({"metadata": {"annotations": {"cpu-startup-boost.tailor.dev/app": "{\"requests\":{\"cpu\":\"250m\",\"memory\":\"256Mi\"},\"limits\":{\"cpu\":\"1\",\"memory\":\"256Mi\"}}"}},
               "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ago(120)}]}}),
    );
    // A single replica: the boost annotation keeps its group so that it can be un-boosted.
    let mut h = harness(
        vpa("Initial", boost),
        1,
        vec![boosted],
        "CPUStartupBoost=true",
        Some(5),
    );
    let (_, reqs) = h.iterate().await;
    let patches = resized(&reqs);
    assert_eq!(patches.len(), 1, "{reqs:?}");
    let ops = patches[0].body.as_array().unwrap();
    assert!(ops.contains(&json!({"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "250m"})), "{ops:?}");
    let annotations = reqs
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/pods/web-1-0"))
        .expect("annotation patch");
    assert!(
        annotations.body.as_array().unwrap().contains(&json!({"op": "remove", "path": "/metadata/annotations/cpu-startup-boost.tailor.dev~1app"})),
        "{annotations:?}"
    );
    assert!(evicted(&reqs).is_empty());
}

#[tokio::test]
async fn controllers_of_other_kinds_get_their_replica_count_from_scale() {
    use tailor_updater::decisions::config::RestrictionConfig;
    use tailor_updater::decisions::restriction::{
        Creator, InPlaceTimers, ReplicaLookup, Restriction,
    };
    use tailor_updater::views::cache_view::ScaleReplicas;
    let (client, _api) = FakeApi::start();
    let owned = |i: usize| {
        pod(
            i,
            "100m",
            json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web", "uid": "cs", "controller": true}]}}),
        )
    };
    let pods: Vec<Arc<CachedPod>> = (0..4)
        .map(|i| Arc::new(CachedPod::from(owned(i))))
        .collect();
    let scaled = ScaleReplicas::default();
    scaled
        .refresh(
            &client,
            ScaleReplicas::wanted(&pods, |_, _| true),
            std::time::Duration::from_secs(5),
        )
        .await;
    let creator = Creator::of(&pods[0]);
    assert_eq!(scaled.get(&creator), Some(4));
    let stores = ReplicaStores {
        replica_sets: Writer::default().as_reader(),
        stateful_sets: Writer::default().as_reader(),
        replication_controllers: Writer::default().as_reader(),
        daemon_sets: Writer::default().as_reader(),
        scaled,
    };
    assert_eq!(stores.configured(&creator, 4), Ok(4));
    // 4 replicas × 0.5: two of the four may go, not all four (upstream: 0 configured, all four).
    let mut restriction = Restriction::new(
        &vpa("Recreate", json!({})),
        &pods,
        &stores,
        &RestrictionConfig::default(),
        Default::default(),
    );
    let mut timers = InPlaceTimers::default();
    let mut evicted = 0;
    for p in &pods {
        if restriction.can_evict(p, &mut timers, now()).is_ok() {
            restriction.evicted(p);
            evicted += 1;
        }
    }
    assert_eq!(evicted, 2);
    // Without the /scale answer upstream's rule stands: nothing protects them.
    let blind = ReplicaStores {
        scaled: ScaleReplicas::default(),
        ..stores
    };
    let mut restriction = Restriction::new(
        &vpa("Recreate", json!({})),
        &pods,
        &blind,
        &RestrictionConfig::default(),
        Default::default(),
    );
    let mut evicted = 0;
    for p in &pods {
        if restriction.can_evict(p, &mut timers, now()).is_ok() {
            restriction.evicted(p);
            evicted += 1;
        }
    }
    assert_eq!(evicted, 4);
}
