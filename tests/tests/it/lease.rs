//! Two real `tailor-recommender` processes with one leader Lease on the stand-in: exactly one writes; when
//! the leader is killed the other takes over within the lease duration; a leader that loses the lease (its
//! renewals fail) writes nothing afterwards. The stand-in records which process (kubeconfig token) sent
//! each request.

use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tailor_tests::process::{Process, start_recommender};
use tailor_tests::standin::{Action, ApiServer, Fault, Match, Recorded};

use crate::binaries::{namespace, recommendation, vpa, workload};

const LEASE_FLAGS: &[&str] = &[
    "--leader-elect",
    "--leader-elect-lease-namespace",
    "tailor",
    "--leader-elect-lease-duration",
    "3s",
    "--leader-elect-renew-deadline",
    "2s",
    "--leader-elect-retry-period",
    "500ms",
];

/// A write by the recommender to a VPA's status or a checkpoint.
fn is_tailor_write(r: &Recorded) -> bool {
    r.is_write()
        && (r.resource() == "verticalpodautoscalers/status"
            || r.resource() == "verticalpodautoscalercheckpoints")
}

fn holder(server: &ApiServer) -> Option<String> {
    server
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "tailor",
            "tailor-recommender",
        )?
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn start(server: &ApiServer, dir: &std::path::Path, who: &str) -> Process {
    let mut flags = LEASE_FLAGS.to_vec();
    flags.extend(["--leader-elect-identity", who]);
    start_recommender(server, dir, who, &flags).0
}

async fn two_replicas(server: &ApiServer, dir: &std::path::Path) -> (Process, Process, String) {
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "200Mi")).unwrap();
    server.put(vpa("web", "web")).unwrap();
    let a = start(server, dir, "recommender-a");
    let b = start(server, dir, "recommender-b");
    server
        .wait_for(Duration::from_secs(15), |s| recommendation(s, "web"))
        .await
        .unwrap_or_else(|| {
            panic!(
                "no recommendation:\n{}\n{}",
                a.log_lines().join("\n"),
                b.log_lines().join("\n")
            )
        });
    let leader = holder(server).expect("a lease holder");
    (a, b, leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_one_writer_and_failover_after_the_leader_dies() {
    let server = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, leader) = two_replicas(&server, dir.path()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writers: std::collections::BTreeSet<String> = server
        .requests()
        .into_iter()
        .filter(is_tailor_write)
        .map(|r| r.user)
        .collect();
    assert_eq!(
        writers.into_iter().collect::<Vec<_>>(),
        vec![leader.clone()],
        "only the lease holder writes"
    );

    // Kill the leader abruptly: the other replica takes over once the lease expires (3 s) and writes.
    let (mut dead, survivor) = if leader == "recommender-a" {
        (a, b)
    } else {
        (b, a)
    };
    let other = if leader == "recommender-a" {
        "recommender-b"
    } else {
        "recommender-a"
    };
    dead.kill();
    let killed = Instant::now();
    let first = server
        .wait_for(Duration::from_secs(10), |s| {
            s.requests()
                .into_iter()
                .find(|r| r.user == other && is_tailor_write(r) && r.at > killed)
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no failover within 10 s:\n{}",
                survivor.log_lines().join("\n")
            )
        });
    let took = first.at - killed;
    assert!(
        took <= Duration::from_secs(3) + Duration::from_millis(2500),
        "failover took {took:?}: more than the lease duration (3 s) plus a retry period and a loop"
    );
    assert_eq!(holder(&server).as_deref(), Some(other));
}

/// When `p` logged that it lost the lease (a WARN or ERROR line about the lease being lost).
fn lease_lost_at(p: &Process) -> Option<SystemTime> {
    p.json_logs().into_iter().find_map(|l| {
        let level = l["level"].as_str().unwrap_or_default();
        let text = l.to_string().to_lowercase();
        if !(level == "ERROR" || level == "WARN")
            || !text.contains("lease")
            || !text.contains("lost")
        {
            return None;
        }
        let t: k8s_openapi::jiff::Timestamp = l["timestamp"].as_str()?.parse().ok()?;
        Some(SystemTime::from(t))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_writes_nothing_after_losing_the_lease() {
    loses_the_lease(Action::Fail(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_writes_nothing_after_losing_the_lease() {
    loses_the_lease(Action::Delay(Duration::from_secs(3600))).await;
}

/// Two replicas; the leader's Lease requests get `renewal` from now on. It must log that it lost the lease
/// and write nothing after that.
async fn loses_the_lease(renewal: Action) {
    let server = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, leader) = two_replicas(&server, dir.path()).await;
    let (old, other) = if leader == "recommender-a" {
        (a, "recommender-b")
    } else {
        (b, "recommender-a")
    };
    // The leader's renewals start failing or hanging (and its checkpoint writes are slow, as on a busy API
    // server): it must notice within its renew deadline and stop writing at once; the other replica takes
    // over after the lease expires.
    server.inject(Fault::new(
        Match::verb("patch", "verticalpodautoscalercheckpoints").user(&leader),
        Action::Delay(Duration::from_millis(1500)),
    ));
    server.inject(Fault::new(Match::resource("leases").user(&leader), renewal));
    server
        .wait_for(Duration::from_secs(15), |s| {
            s.requests().into_iter().find(|r| {
                r.user == other
                    && r.resource() == "leases"
                    && r.is_write()
                    && (200..300).contains(&r.status)
            })
        })
        .await
        .expect("the other replica takes the lease");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lost = lease_lost_at(&old).unwrap_or_else(|| {
        panic!(
            "the old leader never logged that it lost the lease:\n{}",
            old.log_lines().join("\n")
        )
    });
    let late: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.user == leader && is_tailor_write(r) && r.wall > lost)
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert!(
        late.is_empty(),
        "the old leader wrote after it lost the lease: {late:?}"
    );
}
