//! Checkpoint names (docs/decisions/checkpoints.md): `<vpa>.<container>`, so no two (VPA, container) pairs
//! share an object as they do under upstream's `<vpa>-<container>`; objects under upstream's names are still
//! read, and deleted once the pair has its own.

use crate::controller::{CHECKPOINTS, one_checkpoint, restarted};
use crate::harness::*;
use kube::runtime::watcher;
use serde_json::json;
use tailor_core::workload::SlimWorkload;
use tailor_recommender::process::config::ControllerConfig;

/// VPA `web` over pods with container `api-app`, VPA `web-api` over pods with container `app`.
fn colliding(h: &mut Harness) {
    for (name, label, container) in [("web", "web", "api-app"), ("web-api", "api", "app")] {
        let sel = [("app", label)];
        h.writers
            .workloads
            .deployments
            .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
                "default", name, &sel,
            ))));
        h.writers.pods.handle(watcher::Event::Apply(pod(
            "default",
            &format!("{name}-0"),
            &sel,
            &[container],
        )));
        h.apply_vpa(&vpa("default", name, "Deployment", name));
    }
}

fn usage(i: i64) -> serde_json::Value {
    metrics_list(&[
        (
            "default",
            "web-0",
            i * 60,
            vec![("api-app", 900 + i % 7, 900 << 20)],
        ),
        (
            "default",
            "web-api-0",
            i * 60,
            vec![("app", 20 + i % 3, 30 << 20)],
        ),
    ])
}

#[tokio::test]
async fn two_vpas_whose_upstream_names_collide_keep_their_own_checkpoints() {
    let mut a = Harness::new(ControllerConfig::default()).await;
    colliding(&mut a);
    for i in 0..90 {
        a.loop_with(i * 60, Ok(usage(i))).await;
    }
    let stored = a.api.objects(&format!("{CHECKPOINTS}/"));
    let names: Vec<(&str, &str, &str)> = stored
        .iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap(),
                c["spec"]["vpaObjectName"].as_str().unwrap(),
                c["spec"]["containerName"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("web-api.app", "web-api", "app"),
            ("web.api-app", "web", "api-app")
        ]
    );
    // A restart restores each VPA's own history.
    let mut b = Harness::new(ControllerConfig::default()).await;
    colliding(&mut b);
    for v in ["web", "web-api"] {
        b.apply_vpa(&a.vpa("default", v));
    }
    for c in stored {
        b.apply_checkpoint_json(c);
    }
    let (report, _) = b.loop_with(90 * 60, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 2);
    for (v, container) in [("web", "api-app"), ("web-api", "app")] {
        assert_eq!(
            target(&a.vpa("default", v), container, "target"),
            target(&b.vpa("default", v), container, "target"),
            "{v}"
        );
    }
}

#[tokio::test]
async fn checkpoints_under_upstream_names_are_read_then_replaced() {
    let (before, mut checkpoint) = one_checkpoint().await;
    checkpoint["metadata"]["name"] = json!("web-app");
    let mut b = restarted(&before, 2, vec![checkpoint.clone()]).await;
    let (report, requests) = b.loop_with(3600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    let reads: Vec<&str> = requests
        .iter()
        .filter(|r| r.method == "GET" && r.uri.starts_with(CHECKPOINTS))
        .map(|r| r.uri.as_str())
        .collect();
    assert_eq!(reads, [format!("{CHECKPOINTS}/web-app")]);
    // Rewritten under the new name when it ages; the old one is deleted by the next GC.
    let (_, requests) = b.loop_with(3600 + 600, Ok(metrics_list(&[]))).await;
    assert!(
        requests
            .iter()
            .any(|r| r.method == "PATCH" && r.uri.starts_with(&format!("{CHECKPOINTS}/web.app?"))),
        "{requests:#?}"
    );
    b.reflect_checkpoints();
    let (_, requests) = b.loop_with(3600 + 1200, Ok(metrics_list(&[]))).await;
    let deletes: Vec<&str> = requests
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.uri.split('?').next().unwrap_or_default())
        .collect();
    assert_eq!(deletes, [format!("{CHECKPOINTS}/web-app")]);

    // Both names present (a restart before the GC): only the new one is read.
    let new = b.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap();
    let mut c = restarted(&before, 2, vec![checkpoint]).await;
    c.apply_checkpoint_json(new);
    let (report, requests) = c.loop_with(3600 + 1300, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, 1);
    let reads: Vec<&str> = requests
        .iter()
        .filter(|r| r.method == "GET" && r.uri.starts_with(CHECKPOINTS))
        .map(|r| r.uri.as_str())
        .collect();
    assert_eq!(reads, [format!("{CHECKPOINTS}/web.app")]);
}
