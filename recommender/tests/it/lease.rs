//! Leader election against the mocked API server: the exact Lease calls for create, renew, a refused
//! attempt while another replica holds a fresh lease, take-over of an expired one, and release.

use std::time::Duration;

use crate::support::*;
use tailor_recommender::leader::{LeaderElector, LeaseSettings};

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

#[tokio::test]
async fn lease_create_renew_refuse_take_over_release() {
    let (client, api) = FakeApi::start();
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

    // Fresh lease held by pod-a: pod-b only looks.
    assert!(!b.try_acquire_or_renew(t(10)).await.unwrap());
    assert_eq!(calls(&api.take()), [call("GET", LEASE)]);

    // Expired (last renewal at +2s, 15s validity): pod-b takes over.
    assert!(b.try_acquire_or_renew(t(30)).await.unwrap());
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("PUT", &format!("{LEASE}?"))]
    );
    assert_eq!(reqs[1].body["spec"]["holderIdentity"], "pod-b");
    assert_eq!(reqs[1].body["spec"]["leaseTransitions"], 1);

    // pod-a no longer holds it: releasing is a read only; pod-b's release clears the holder.
    a.release().await.unwrap();
    assert_eq!(calls(&api.take()), [call("GET", LEASE)]);
    b.release().await.unwrap();
    let reqs = api.take();
    assert_eq!(
        calls(&reqs),
        [call("GET", LEASE), call("PUT", &format!("{LEASE}?"))]
    );
    assert!(reqs[1].body["spec"].get("holderIdentity").is_none());
    assert_eq!(reqs[1].body["spec"]["leaseDurationSeconds"], 1);
}
