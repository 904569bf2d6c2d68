//! The webhook's status Lease against a mocked API server (kube-rs `Client` over a tower-test service): the
//! exact calls and bodies for a missing Lease (created), an existing one (renewed with its resourceVersion),
//! a lost race (409 ignored), a failing API server (retried, then the error), and the settings' fallbacks.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use serde_json::{Value, json};
use tailor_admission::status_lease::{StatusLease, StatusLeaseError, StatusLeaseSettings};

use crate::mock_api::respond;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Send = tower_test::mock::SendResponse<Response<Body>>;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/tailor/leases/tailor-admission";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/tailor/leases";

fn settings() -> StatusLeaseSettings {
    StatusLeaseSettings {
        name: "tailor-admission".into(),
        namespace: "tailor".into(),
        holder: "tailor-admission-7d9f-abcde".into(),
        interval: Duration::from_secs(10),
    }
}

fn lease() -> (StatusLease, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (
        StatusLease::new(kube::Client::new(service, "tailor"), settings()),
        handle,
    )
}

async fn expect(handle: &mut Handle, method: Method, path: &str) -> (Value, Send) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(60), handle.next_request())
        .await
        .expect("the expected API call did not come")
        .expect("service dropped");
    assert_eq!(req.method(), method, "{}", req.uri());
    assert_eq!(req.uri().path(), path);
    let body = req.into_body().collect_bytes().await.unwrap();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    (body, send)
}

fn status(code: StatusCode, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code.as_u16()})
}

fn stored_lease(renew_time: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "tailor-admission", "namespace": "tailor", "resourceVersion": "41"},
        "spec": {"holderIdentity": "tailor-admission-old-pod", "leaseDurationSeconds": 10,
                 "renewTime": renew_time}})
}

fn now() -> Timestamp {
    "2026-11-23T22:40:00.123456Z".parse().unwrap()
}

#[tokio::test]
async fn missing_lease_is_created_with_holder_duration_and_renew_time() {
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew_once(now()).await });
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::NOT_FOUND,
        status(StatusCode::NOT_FOUND, "NotFound"),
    );
    let (body, send) = expect(&mut api, Method::POST, LEASES).await;
    assert_eq!(body["metadata"]["name"], "tailor-admission");
    assert_eq!(body["metadata"]["namespace"], "tailor");
    assert_eq!(
        body["spec"]["holderIdentity"],
        "tailor-admission-7d9f-abcde"
    );
    assert_eq!(body["spec"]["leaseDurationSeconds"], 10);
    assert_eq!(body["spec"]["renewTime"], "2026-11-23T22:40:00.123456Z");
    let mut created = body.clone();
    created["metadata"]["resourceVersion"] = json!("1");
    respond(send, StatusCode::CREATED, created);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn existing_lease_is_renewed_with_its_resource_version() {
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew_once(now()).await });
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::OK,
        stored_lease("2026-11-23T22:39:50.000000Z"),
    );
    let (body, send) = expect(&mut api, Method::PUT, LEASE).await;
    assert_eq!(body["metadata"]["resourceVersion"], "41");
    assert_eq!(
        body["spec"]["holderIdentity"],
        "tailor-admission-7d9f-abcde"
    );
    assert_eq!(body["spec"]["leaseDurationSeconds"], 10);
    assert_eq!(body["spec"]["renewTime"], "2026-11-23T22:40:00.123456Z");
    respond(send, StatusCode::OK, body);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn conflicts_and_already_exists_are_not_errors() {
    // Another replica replaced the Lease between our read and write: 409 Conflict on the PUT.
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew_once(now()).await });
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::OK,
        stored_lease("2026-11-23T22:39:50.000000Z"),
    );
    let (_, send) = expect(&mut api, Method::PUT, LEASE).await;
    respond(
        send,
        StatusCode::CONFLICT,
        status(StatusCode::CONFLICT, "Conflict"),
    );
    task.await.unwrap().unwrap();

    // Another replica created it first: 409 AlreadyExists on the POST.
    let (lease, mut api) = self::lease();
    let task = tokio::spawn(async move { lease.renew_once(now()).await });
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::NOT_FOUND,
        status(StatusCode::NOT_FOUND, "NotFound"),
    );
    let (_, send) = expect(&mut api, Method::POST, LEASES).await;
    respond(
        send,
        StatusCode::CONFLICT,
        status(StatusCode::CONFLICT, "AlreadyExists"),
    );
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn renewal_retries_three_times_then_reports_the_error() {
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew().await });
    for _ in 0..3 {
        let (_, send) = expect(&mut api, Method::GET, LEASE).await;
        respond(
            send,
            StatusCode::FORBIDDEN,
            status(StatusCode::FORBIDDEN, "Forbidden"),
        );
    }
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, StatusLeaseError::Api { source: kube::Error::Api(s), .. } if s.code == 403),
        "{err}"
    );
    assert!(err.to_string().contains("tailor/tailor-admission"), "{err}");
    // No fourth attempt: the client is gone without another request.
    let next = tokio::time::timeout(Duration::from_secs(5), api.next_request()).await;
    assert!(!matches!(next, Ok(Some(_))), "a fourth attempt was made");
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_retried_and_can_succeed() {
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew().await });
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::INTERNAL_SERVER_ERROR,
        status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    );
    let (_, send) = expect(&mut api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::OK,
        stored_lease("2026-11-23T22:39:50.000000Z"),
    );
    let (body, send) = expect(&mut api, Method::PUT, LEASE).await;
    respond(send, StatusCode::OK, body);
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_attempt_times_out_after_one_interval() {
    let (lease, mut api) = lease();
    let task = tokio::spawn(async move { lease.renew().await });
    // Hold every request without answering; each attempt gives up after the 10 s interval.
    let mut held = Vec::new();
    for _ in 0..3 {
        let (_, send) = expect(&mut api, Method::GET, LEASE).await;
        held.push(send);
    }
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(err, StatusLeaseError::Timeout { after, .. } if after == Duration::from_secs(10)),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn run_renews_every_interval_until_shutdown() {
    let (lease, mut api) = lease();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(lease.run(|_| true, async move {
        let _ = stopped.await;
    }));
    let start = tokio::time::Instant::now();
    for round in 0..3 {
        let (_, send) = expect(&mut api, Method::GET, LEASE).await;
        assert_eq!(start.elapsed().as_secs(), round * 10, "renewal {round}");
        respond(
            send,
            StatusCode::OK,
            stored_lease("2026-11-23T22:39:50.000000Z"),
        );
        let (body, send) = expect(&mut api, Method::PUT, LEASE).await;
        respond(send, StatusCode::OK, body);
    }
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[test]
fn settings_fall_back_to_namespace_env_then_kube_system_and_pod_name_then_host_name() {
    let ten = Duration::from_secs(10);
    let s = StatusLeaseSettings::resolve(
        "tailor-admission",
        "",
        Some("tailor"),
        &[Some("pod-1"), Some("host")],
        ten,
    )
    .unwrap();
    assert_eq!(
        (s.namespace.as_str(), s.holder.as_str()),
        ("tailor", "pod-1")
    );
    let s =
        StatusLeaseSettings::resolve("l", "flag-ns", Some("tailor"), &[None, Some("host")], ten)
            .unwrap();
    assert_eq!(
        (s.namespace.as_str(), s.holder.as_str()),
        ("flag-ns", "host")
    );
    let s = StatusLeaseSettings::resolve("l", " ", Some(""), &[Some(""), None], ten).unwrap();
    assert_eq!(
        (s.namespace.as_str(), s.holder.as_str()),
        ("kube-system", "l")
    );
    assert_eq!(s.duration_seconds(), 10);
    let short = StatusLeaseSettings {
        interval: Duration::from_millis(300),
        ..s
    };
    assert_eq!(short.duration_seconds(), 1);

    let err = StatusLeaseSettings::resolve("l", "", None, &[], Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("greater than zero"), "{err}");
    let long = "x".repeat(254);
    let err = StatusLeaseSettings::resolve(&long, "", None, &[], ten).unwrap_err();
    assert!(err.to_string().contains("1 to 253 characters"), "{err}");
    let err = StatusLeaseSettings::resolve("", "", None, &[], ten).unwrap_err();
    assert!(err.to_string().contains("name"), "{err}");
}

/// Answers one renewal (GET, then PUT).
async fn renew(api: &mut Handle) {
    let (_, send) = expect(api, Method::GET, LEASE).await;
    respond(
        send,
        StatusCode::OK,
        stored_lease("2026-11-23T22:39:50.000000Z"),
    );
    let (body, send) = expect(api, Method::PUT, LEASE).await;
    respond(send, StatusCode::OK, body);
}

/// Whether the mock API server has a request waiting.
async fn pending(api: &mut Handle) -> bool {
    futures::FutureExt::now_or_never(api.next_request()).is_some()
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_only_while_the_caches_are_synced_and_current() {
    use tailor_admission::server::Readiness;
    let (lease, mut api) = lease();
    let readiness = Readiness::new();
    let gate = readiness.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(
        lease.run(move |quiet| gate.may_renew_lease(quiet), async move {
            let _ = stopped.await;
        }),
    );
    let start = tokio::time::Instant::now();
    // Caches not synced: 35 s pass without a write.
    tokio::time::sleep(Duration::from_millis(35_500)).await;
    assert!(!pending(&mut api).await, "renewed before the caches synced");
    readiness.set_synced();
    // Renewed at the next check (every second), then every interval.
    renew(&mut api).await;
    assert_eq!(
        start.elapsed().as_secs(),
        36,
        "first renewal after the sync"
    );
    renew(&mut api).await;
    assert_eq!(start.elapsed().as_secs(), 46);
    // A watch fails at 50 s: not renewed at 56 s, but at 60 s (an interval without failure).
    tokio::time::sleep(Duration::from_secs(4)).await;
    readiness.record_watch_error();
    tokio::time::sleep(Duration::from_millis(9_500)).await;
    assert!(!pending(&mut api).await, "renewed with a watch failing");
    renew(&mut api).await;
    assert_eq!(start.elapsed().as_secs(), 60);
    // A watch failing every few seconds (the caches are lost): never renewed.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        readiness.record_watch_error();
        assert!(!pending(&mut api).await, "renewed with the caches lost");
    }
    // Shutting down (the watches quiet again): not renewed either.
    readiness.set_stopping();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!pending(&mut api).await, "renewed while shutting down");
    stop.send(()).unwrap();
    task.await.unwrap();
}
