//! Webhook memory in cluster mode (docs/decisions/webhook-compact-caches.md): the real `tailor-admission`
//! binary against the stand-in API server holding `--deployments` Deployments, each with `--revisions`
//! ReplicaSet revisions and a VPA, every object of realistic size (a pod template of several KB: containers
//! with env, probes, volume mounts, plus annotations, `managedFields` and status, as `kubectl get -o json`
//! shows them). Prints the webhook's RSS once its caches are synced, after a settling pause and after reviews,
//! and its peak; one JSON line.
//!
//! Run through `hack/bench-webhook-memory.sh` (release builds of both).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark harness: a panic is its failure report

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tailor_tests::process::{post_review, proc_status_kib, start_admission, wait_admission_ready};
use tailor_tests::standin::tls::TestCa;
use tailor_tests::standin::{ApiServer, Options};
use tailor_tests::workload_objects::objects;

struct Args {
    deployments: usize,
    revisions: usize,
    template_bytes: usize,
}

fn args() -> Args {
    let mut a = Args {
        deployments: 5_000,
        revisions: 10,
        template_bytes: 4_096,
    };
    const USAGE: &str =
        "usage: webhook_memory [--deployments N] [--revisions R] [--template-bytes B]";
    let refuse = |message: String| -> ! {
        eprintln!("{message}\n{USAGE}");
        std::process::exit(2)
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = || -> usize {
            pair.get(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| refuse(format!("{} needs a number", pair[0])))
        };
        match pair[0].as_str() {
            "--deployments" => a.deployments = value(),
            "--revisions" => a.revisions = value(),
            "--template-bytes" => a.template_bytes = value(),
            other => refuse(format!("unknown argument {other}")),
        }
    }
    a
}

fn pod_review(ns: &str, i: usize, hash: &str, uid: usize) -> Value {
    let app = format!("app-{i}");
    json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": format!("u-{uid}"), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": format!("{app}-{hash}-"), "namespace": ns,
                    "labels": {"app": app, "pod-template-hash": hash},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                                         "uid": "x", "controller": true}]},
                "spec": {"containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]}},
            "oldObject": null, "dryRun": false
        }
    })
}

#[tokio::main]
async fn main() {
    let a = args();
    let server = ApiServer::start_with(Options::default())
        .await
        .expect("stand-in");
    let started = Instant::now();
    let mut json_bytes = 0usize;
    let mut count = 0usize;
    for i in 0..a.deployments {
        let ns = format!("team-{}", i % 100);
        for o in objects(&ns, i, a.revisions, a.template_bytes) {
            json_bytes += o.to_string().len();
            server.put(o).expect("load");
            count += 1;
        }
    }
    eprintln!(
        "loaded {count} objects ({:.1} MiB of JSON) in {:.1} s",
        json_bytes as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("webhook-ca").expect("ca");
    let cert = ca.issue(&["localhost", "127.0.0.1"]).expect("cert");
    let started = Instant::now();
    let (adm, addrs) = start_admission(&server, dir.path(), "admission", &cert, &[]).await;
    let pid = adm.pid();
    wait_admission_ready(&adm, &addrs, Duration::from_secs(600)).await;
    let synced_s = started.elapsed().as_secs_f64();
    let rss_synced = proc_status_kib(pid, "VmRSS");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rss_settled = proc_status_kib(pid, "VmRSS");

    // Reviews of pods of the newest revision of a spread of Deployments: every one must be patched.
    let mut patched = 0;
    let reviews = 200;
    for k in 0..reviews {
        let i = (k * 7919) % a.deployments;
        let hash = format!("{:08x}", i * 131 + a.revisions - 1);
        let answer = post_review(
            addrs.webhook,
            &ca.ca_pem,
            &pod_review(&format!("team-{}", i % 100), i, &hash, k),
        )
        .await;
        if answer.pointer("/response/patch").is_some() {
            patched += 1;
        }
    }
    let rss_after = proc_status_kib(pid, "VmRSS");
    let hwm = proc_status_kib(pid, "VmHWM");
    let workload_objects = a.deployments * (a.revisions + 1);
    println!(
        "{}",
        json!({
            "deployments": a.deployments, "revisions": a.revisions, "objects": count,
            "json_mib": (json_bytes as f64 / 1048576.0 * 10.0).round() / 10.0,
            "avg_object_bytes": json_bytes / count.max(1),
            "synced_seconds": (synced_s * 10.0).round() / 10.0,
            "rss_synced_mib": rss_synced / 1024, "rss_settled_mib": rss_settled / 1024,
            "rss_after_reviews_mib": rss_after / 1024, "peak_rss_mib": hwm / 1024,
            "settled_bytes_per_workload_object": rss_settled * 1024 / workload_objects as u64,
            "reviews": reviews, "patched": patched,
        })
    );
    assert_eq!(patched, reviews, "every review must be patched");
}
