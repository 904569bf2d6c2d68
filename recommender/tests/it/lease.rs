//! Leader election against the stand-in API server: the exact Lease calls for create, renew, a refused
//! attempt while another replica holds a fresh lease, take-over of an expired one, and release; expiry by
//! the local time at which the record last changed (clock skew of the holder does not matter); a hung call
//! times out and trips the renew deadline; after the lease is lost the recommender writes nothing.
//!
//! Time is tokio's paused clock: `tokio::time::advance` moves the local monotonic time the elector judges
//! expiry by, while the wall-clock stamps written into the lease are the explicit `t(..)` arguments.

use std::time::Duration;

use crate::harness::*;
use serde_json::{Value, json};
use tailor_kube::leader::{LeaderElector, LeaseSettings};
use tailor_kube::leader::{LeaseError, LeaseLost};
use tailor_recommender::Stopped;
use tailor_recommender::process::config::ControllerConfig;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/tailor/leases/tailor-recommender";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/tailor/leases";

fn elector(client: kube::Client, who: &str) -> LeaderElector {
    LeaderElector::new(
        client,
        LeaseSettings {
            name: "tailor-recommender".into(),
            namespace: "tailor".into(),
            identity: who.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        },
    )
}

fn calls(reqs: &[Recorded]) -> Vec<(String, String)> {
    reqs.iter()
        .map(|r| (r.method.clone(), r.uri.clone()))
        .collect()
}

fn call(m: &str, u: &str) -> (String, String) {
    (m.to_string(), u.to_string())
}

fn writes(reqs: &[Recorded]) -> Vec<(String, String)> {
    calls(reqs)
        .into_iter()
        .filter(|(m, _)| m != "GET")
        .collect()
}

/// A lease held by `holder` whose renewTime is `renew` (RFC 3339), at resourceVersion `rv`.
fn foreign_lease(holder: &str, renew: &str, rv: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "tailor-recommender", "namespace": "tailor", "resourceVersion": rv.to_string()},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": renew,
            "renewTime": renew,
            "leaseTransitions": 3,
        },
    })
}

async fn advance(secs: u64) {
    tokio::time::advance(Duration::from_secs(secs)).await;
}

#[tokio::test(start_paused = true)]
async fn lease_create_renew_refuse_take_over_release() {
    let (client, api) = StandIn::start().await;
    let a = elector(client.clone(), "pod-a");
    let b = elector(client, "pod-b");

    assert!(a.try_acquire_or_renew(t(0)).await.unwrap());
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("POST", &format!("{LEASES}?"))]
    );
    let spec = &reqs[1].body["spec"];
    assert_eq!(reqs[1].body["metadata"]["name"], "tailor-recommender");
    assert_eq!(spec["holderIdentity"], "pod-a");
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["leaseTransitions"], 0);
    assert!(
        spec["renewTime"]
            .as_str()
            .unwrap()
            .starts_with("2023-11-14T22:13:20")
    );
    assert!(a.fence().allows_writes());

    advance(2).await;
    assert!(a.try_acquire_or_renew(t(2)).await.unwrap());
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("PUT", &format!("{LEASE}?"))]
    );
    assert_eq!(reqs[1].body["metadata"]["resourceVersion"], "1");
    assert!(
        reqs[1].body["spec"]["renewTime"]
            .as_str()
            .unwrap()
            .starts_with("2023-11-14T22:13:22")
    );

    // Fresh lease held by pod-a: pod-b only looks (and starts its own clock for the record it saw).
    advance(8).await;
    assert!(!b.try_acquire_or_renew(t(10)).await.unwrap());
    assert_eq!(calls(&api.take()), [call("GET", LEASE)]);
    assert!(!b.fence().allows_writes());

    // 14 s of pod-b's local time without a change: still valid. 16 s: expired, pod-b takes over.
    advance(14).await;
    assert!(!b.try_acquire_or_renew(t(24)).await.unwrap());
    api.take();
    advance(2).await;
    assert!(b.try_acquire_or_renew(t(26)).await.unwrap());
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("PUT", &format!("{LEASE}?"))]
    );
    assert_eq!(reqs[1].body["spec"]["holderIdentity"], "pod-b");
    assert_eq!(reqs[1].body["spec"]["leaseTransitions"], 1);
    assert!(b.fence().allows_writes());
    // pod-a did not renew for 24 s: its fence closed at its renew deadline.
    assert!(!a.fence().allows_writes());

    // pod-a no longer holds it: releasing is a read only; pod-b's release clears the holder.
    a.release().await.unwrap();
    assert_eq!(calls(&api.take()), [call("GET", LEASE)]);
    b.release().await.unwrap();
    assert!(!b.fence().allows_writes());
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("PUT", &format!("{LEASE}?"))]
    );
    assert!(reqs[1].body["spec"].get("holderIdentity").is_none());
    assert_eq!(reqs[1].body["spec"]["leaseDurationSeconds"], 1);

    // A released lease is taken at once, without waiting for it to expire.
    assert!(a.try_acquire_or_renew(t(27)).await.unwrap());
    let reqs = api.take();
    assert_eq!(reqs[1].body["spec"]["holderIdentity"], "pod-a");
    assert_eq!(reqs[1].body["spec"]["leaseTransitions"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_clock_is_far_behind_keeps_the_lease_while_it_renews() {
    let (client, api) = StandIn::start().await;
    // pod-x's clock is 23 years late: its renewTime is always long past by our clock.
    let past = "2000-01-01T00:00:00.000000Z";
    api.put_object(LEASE, foreign_lease("pod-x", past, 5));
    let b = elector(client, "pod-b");
    assert!(!b.try_acquire_or_renew(t(0)).await.unwrap());
    for i in 1..=6u64 {
        advance(10).await;
        // pod-x renews: a new resourceVersion (and a renewTime that is still in the past for us).
        let renew = format!("2000-01-01T00:00:{:02}.000000Z", i * 10);
        api.put_object(LEASE, foreign_lease("pod-x", &renew, 5 + i));
        assert!(
            !b.try_acquire_or_renew(t(10 * i as i64)).await.unwrap(),
            "pod-b took the lease while pod-x kept renewing it (round {i})"
        );
    }
    assert!(writes(&api.take()).is_empty());
    // pod-x stops renewing: after the lease duration of pod-b's local time, pod-b takes over.
    advance(14).await;
    assert!(!b.try_acquire_or_renew(t(74)).await.unwrap());
    advance(2).await;
    assert!(b.try_acquire_or_renew(t(76)).await.unwrap());
    let put = api.take().into_iter().find(|r| r.method == "PUT").unwrap();
    assert_eq!(put.body["spec"]["holderIdentity"], "pod-b");
    assert_eq!(put.body["spec"]["leaseTransitions"], 4);
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_clock_is_far_ahead_expires_by_local_time() {
    let (client, api) = StandIn::start().await;
    // pod-x's clock is 77 years early; it died right after this renewal.
    api.put_object(
        LEASE,
        foreign_lease("pod-x", "2100-01-01T00:00:00.000000Z", 7),
    );
    let b = elector(client, "pod-b");
    assert!(!b.try_acquire_or_renew(t(0)).await.unwrap());
    advance(14).await;
    assert!(!b.try_acquire_or_renew(t(14)).await.unwrap());
    advance(2).await;
    assert!(
        b.try_acquire_or_renew(t(16)).await.unwrap(),
        "a dead holder's renewTime in the future must not keep the lease"
    );
    assert_eq!(
        api.object(LEASE).unwrap()["spec"]["holderIdentity"],
        "pod-b"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_get_times_out() {
    let (client, api) = StandIn::start().await;
    let a = elector(client, "pod-a");
    api.hang("GET", LEASE);
    let start = tokio::time::Instant::now();
    let err = a.try_acquire_or_renew(t(0)).await.unwrap_err();
    assert!(
        matches!(err, LeaseError::Timeout { op: "get", .. }),
        "{err:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert!(!a.fence().allows_writes());
}

#[tokio::test(start_paused = true)]
async fn a_hung_renewal_trips_the_renew_deadline() {
    let (client, api) = StandIn::start().await;
    let a = elector(client, "pod-a");
    let acquired = tokio::time::Instant::now();
    assert!(a.try_acquire_or_renew(t(0)).await.unwrap());
    api.take();
    let fence = a.fence();
    api.hang("GET", LEASE);
    let lost = a.hold().await;
    // Renewals at +2, +4, +6, +8 time out after 2 s each; the deadline is 10 s after the last success.
    assert!(matches!(lost, LeaseLost::Renewal { .. }), "{lost:?}");
    let after = acquired.elapsed();
    assert!(
        after <= Duration::from_secs(10),
        "lease given up {after:?} after the last renewal"
    );
    assert!(!fence.allows_writes());
    // No write was attempted, only the hung reads.
    assert!(writes(&api.take()).is_empty());
}

fn setup_workload(h: &mut Harness) {
    use kube::runtime::watcher;
    use tailor_core::workload::SlimWorkload;
    let app = &[("app", "workload")];
    h.writers
        .workloads
        .deployments
        .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
            "default", "web", app,
        ))));
    h.apply_vpa(&vpa("default", "web", "Deployment", "web"));
    h.writers.pods.handle(watcher::Event::Apply(pod(
        "default",
        "web-0",
        app,
        &["app"],
    )));
}

fn samples(i: i64) -> Value {
    metrics_list(&[(
        "default",
        "web-0",
        i * 60,
        vec![("app", 200 + i, 300 * 1024 * 1024 + i * 1024 * 1024)],
    )])
}

#[tokio::test(start_paused = true)]
async fn after_the_lease_is_lost_the_recommender_writes_nothing() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup_workload(&mut h);
    let a = elector(h.client.clone(), "pod-a");
    assert!(a.try_acquire_or_renew(t(0)).await.unwrap());
    h.rec.set_fence(a.fence());
    h.api.take();

    // The leader writes status and checkpoints.
    let (report, reqs) = h.loop_with(0, Ok(samples(0))).await;
    assert!(
        report.status_writes >= 1 && report.checkpoints_written >= 1,
        "{report:?}"
    );
    assert!(!writes(&reqs).is_empty());

    // Another replica takes the lease over (as after a partition); pod-a learns it at its next renewal.
    let mut taken = h.api.object(LEASE).unwrap();
    taken["spec"]["holderIdentity"] = json!("pod-b");
    taken["metadata"]["resourceVersion"] = json!("99");
    h.api.put_object(LEASE, taken);
    let lost = a.hold().await;
    assert!(matches!(lost, LeaseLost::Taken { .. }), "{lost:?}");
    h.api.take();

    // No write of any kind: the loop, the final checkpoints, and run() stops at once.
    let (report, reqs) = h.loop_with(60, Ok(samples(1))).await;
    assert!(writes(&reqs).is_empty(), "{reqs:#?}");
    assert_eq!((report.status_writes, report.checkpoints_written), (0, 0));
    let report = h.rec.final_checkpoints(t(61)).await;
    assert_eq!(report.checkpoints_written, 0);
    assert_eq!(
        h.rec.run(std::future::pending::<()>(), |_| {}).await,
        Stopped::LeaseLost
    );
    assert!(writes(&h.api.take()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn past_the_renew_deadline_writes_stop_even_before_the_elector_notices() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup_workload(&mut h);
    let a = elector(h.client.clone(), "pod-a");
    assert!(a.try_acquire_or_renew(t(0)).await.unwrap());
    h.rec.set_fence(a.fence());
    h.api.take();
    let (_, reqs) = h.loop_with(0, Ok(samples(0))).await;
    assert!(!writes(&reqs).is_empty());
    // No renewal for longer than the renew deadline (nobody ran hold()): writes stop.
    advance(11).await;
    let (_, reqs) = h.loop_with(60, Ok(samples(1))).await;
    assert!(writes(&reqs).is_empty(), "{reqs:#?}");
    assert_eq!(h.rec.final_checkpoints(t(61)).await.checkpoints_written, 0);
}

#[tokio::test(start_paused = true)]
async fn on_shutdown_the_leader_writes_final_checkpoints_then_releases() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup_workload(&mut h);
    let a = elector(h.client.clone(), "pod-a");
    assert!(a.try_acquire_or_renew(t(0)).await.unwrap());
    h.rec.set_fence(a.fence());
    h.loop_with(0, Ok(samples(0))).await;
    h.api.take();
    // SIGTERM before the next tick: run() returns without another loop.
    assert_eq!(
        h.rec.run(std::future::ready(()), |_| {}).await,
        Stopped::Shutdown
    );
    let report = h.rec.final_checkpoints(t(30)).await;
    assert_eq!(report.checkpoints_written, 1);
    a.release().await.unwrap();
    let reqs = h.api.take();
    let puts: Vec<&Recorded> = reqs.iter().filter(|r| r.method == "PUT").collect();
    assert_eq!(puts.len(), 1, "{reqs:#?}");
    assert!(puts[0].body["spec"].get("holderIdentity").is_none());
    // After the release nothing more is written.
    assert_eq!(h.rec.final_checkpoints(t(31)).await.checkpoints_written, 0);
}
