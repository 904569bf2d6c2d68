//! The webhook's status Lease against a mocked API server (typed scenarios of `tailor-testkit`): the exact
//! calls and bodies for a missing Lease (created), an existing one (renewed with its resourceVersion), a lost
//! race (409 ignored), a failing API server (retried, then the error), and the settings' fallbacks.

use std::time::Duration;

use http::{Method, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tailor_admission::status_lease::{StatusLease, StatusLeaseError, StatusLeaseSettings};
use tailor_testkit::scenario::{ApiServer, Reply, Scenario, Step, api_server};

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

fn lease() -> (StatusLease, ApiServer) {
    let (client, api) = api_server("tailor");
    (StatusLease::new(client, settings()), api)
}

fn stored_lease(renew_time: &str) -> Lease {
    serde_json::from_value(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "tailor-admission", "namespace": "tailor", "resourceVersion": "41"},
        "spec": {"holderIdentity": "tailor-admission-old-pod", "leaseDurationSeconds": 10,
                 "renewTime": renew_time}}),
    )
    .unwrap()
}

/// The GET of a renewal, answered with the Lease another pod renewed 10 s ago.
fn read_stored() -> Step {
    Step::get(LEASE).reply(Reply::object(&stored_lease("2026-11-23T22:39:50.000000Z")))
}

fn now() -> Timestamp {
    "2026-11-23T22:40:00.123456Z".parse().unwrap()
}

#[tokio::test]
async fn missing_lease_is_created_with_holder_duration_and_renew_time() {
    let (lease, api) = lease();
    let create = Step::post(LEASES)
        .check(|sent| {
            let body = &sent.body;
            assert_eq!(body["metadata"]["name"], "tailor-admission");
            assert_eq!(body["metadata"]["namespace"], "tailor");
            assert_eq!(
                body["spec"]["holderIdentity"],
                "tailor-admission-7d9f-abcde"
            );
            assert_eq!(body["spec"]["leaseDurationSeconds"], 10);
            assert_eq!(body["spec"]["renewTime"], "2026-11-23T22:40:00.123456Z");
        })
        .reply_with(|sent| {
            let mut created = sent.body.clone();
            created["metadata"]["resourceVersion"] = json!("1");
            Reply::json(created).code(StatusCode::CREATED)
        });
    let scenario = Scenario::new("a missing lease")
        .then(Step::get(LEASE).reply(Reply::error(StatusCode::NOT_FOUND, "NotFound")))
        .then(create);
    let (renewed, _) = api.verify(scenario, lease.renew_once(now())).await;
    renewed.unwrap();
}

#[tokio::test]
async fn existing_lease_is_renewed_with_its_resource_version() {
    let (lease, api) = lease();
    let replace = Step::put(LEASE).check(|sent| {
        let body = &sent.body;
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        assert_eq!(
            body["spec"]["holderIdentity"],
            "tailor-admission-7d9f-abcde"
        );
        assert_eq!(body["spec"]["leaseDurationSeconds"], 10);
        assert_eq!(body["spec"]["renewTime"], "2026-11-23T22:40:00.123456Z");
    });
    let scenario = Scenario::new("an existing lease")
        .then(read_stored())
        .then(replace.echo());
    let (renewed, _) = api.verify(scenario, lease.renew_once(now())).await;
    renewed.unwrap();
}

#[tokio::test]
async fn conflicts_and_already_exists_are_not_errors() {
    // Another replica replaced the Lease between our read and write: 409 Conflict on the PUT.
    let (lease, api) = lease();
    let conflict = Reply::error(StatusCode::CONFLICT, "Conflict");
    let scenario = Scenario::new("replaced by another replica")
        .then(read_stored())
        .then(Step::put(LEASE).reply(conflict));
    let (renewed, _) = api.verify(scenario, lease.renew_once(now())).await;
    renewed.unwrap();

    // Another replica created it first: 409 AlreadyExists on the POST.
    let (lease, api) = self::lease();
    let exists = Reply::error(StatusCode::CONFLICT, "AlreadyExists");
    let scenario = Scenario::new("created by another replica")
        .then(Step::get(LEASE).reply(Reply::error(StatusCode::NOT_FOUND, "NotFound")))
        .then(Step::post(LEASES).reply(exists));
    let (renewed, _) = api.verify(scenario, lease.renew_once(now())).await;
    renewed.unwrap();
}

#[tokio::test(start_paused = true)]
async fn renewal_retries_three_times_then_reports_the_error() {
    let (lease, api) = lease();
    let forbidden = Reply::error(StatusCode::FORBIDDEN, "Forbidden");
    let mut scenario = Scenario::new("every read forbidden");
    for _ in 0..3 {
        scenario = scenario.then(Step::get(LEASE).reply(forbidden.clone()));
    }
    // The lease (and its client) is gone with the future, as after a task.
    let (renewed, mut api) = api
        .verify(scenario, async move { lease.renew().await })
        .await;
    let err = renewed.unwrap_err();
    assert!(
        matches!(&err, StatusLeaseError::Api { source: kube::Error::Api(s), .. } if s.code == 403),
        "{err}"
    );
    assert!(err.to_string().contains("tailor/tailor-admission"), "{err}");
    // No fourth attempt: the client is gone without another request.
    api.quiet(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_retried_and_can_succeed() {
    let (lease, api) = lease();
    let failed = Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
    let scenario = Scenario::new("one failed read, then a renewal")
        .then(Step::get(LEASE).reply(failed))
        .then(read_stored())
        .then(Step::put(LEASE).echo());
    let (renewed, _) = api.verify(scenario, lease.renew()).await;
    renewed.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_attempt_times_out_after_one_interval() {
    let (lease, api) = lease();
    // Hold every request without answering; each attempt gives up after the 10 s interval.
    let scenario = Scenario::new("no read answered")
        .then(Step::get(LEASE).hold())
        .then(Step::get(LEASE).hold())
        .then(Step::get(LEASE).hold());
    let (renewed, _held) = api.verify(scenario, lease.renew()).await;
    let err = renewed.unwrap_err();
    assert!(
        matches!(err, StatusLeaseError::Timeout { after, .. } if after == Duration::from_secs(10)),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn run_renews_every_interval_until_shutdown() {
    let (lease, api) = lease();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let start = tokio::time::Instant::now();
    let mut scenario = Scenario::new("a renewal every interval");
    for round in 0..3 {
        let on_time = read_stored().check(move |_| {
            assert_eq!(start.elapsed().as_secs(), round * 10, "renewal {round}");
        });
        scenario = scenario.then(on_time).then(Step::put(LEASE).echo());
    }
    let renewals = api.run(scenario);
    let task = tokio::spawn(lease.run(|_| true, async move {
        let _ = stopped.await;
    }));
    let _api = renewals.done().await;
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
async fn renew(api: &mut ApiServer) {
    let stored = Reply::object(&stored_lease("2026-11-23T22:39:50.000000Z"));
    api.answer(Method::GET, LEASE, stored).await;
    api.expect(Method::PUT, LEASE).await.echo();
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
    assert!(!api.pending().await, "renewed before the caches synced");
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
    assert!(!api.pending().await, "renewed with a watch failing");
    renew(&mut api).await;
    assert_eq!(start.elapsed().as_secs(), 60);
    // A watch failing every few seconds (the caches are lost): never renewed.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        readiness.record_watch_error();
        assert!(!api.pending().await, "renewed with the caches lost");
    }
    // Shutting down (the watches quiet again): not renewed either.
    readiness.set_stopping();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!api.pending().await, "renewed while shutting down");
    stop.send(()).unwrap();
    task.await.unwrap();
}
