//! A VPA moved to another workload (docs/decisions/retargeted-vpas.md): the old workload's history and
//! checkpoints go, as upstream drops them; the VPA then recommends what a fresh VPA on the new workload does.

use crate::controller::{CHECKPOINTS, restarted};
use crate::harness::*;
use kube::runtime::watcher;
use tailor_core::workload::SlimWorkload;
use tailor_crds::VerticalPodAutoscalerCheckpoint;
use tailor_recommender::process::config::ControllerConfig;

const BIG: &[(&str, &str)] = &[("app", "big")];
const SMALL: &[(&str, &str)] = &[("app", "small")];

/// Loop `i`'s usage: the `big` pods at about 2 cores and 1.5 GiB, the `small` ones at about 10m and 40 MiB.
fn usage(i: i64) -> serde_json::Value {
    let wobble = i % 5;
    let items: Vec<PodSample<'_>> = vec![
        (
            "default",
            "big-0",
            i * 60,
            vec![("app", 2000 + wobble * 40, (1536 + wobble) << 20)],
        ),
        (
            "default",
            "big-1",
            i * 60,
            vec![("app", 1900 + wobble * 30, (1500 + wobble) << 20)],
        ),
        (
            "default",
            "small-0",
            i * 60,
            vec![("app", 10 + wobble, (40 + wobble) << 20)],
        ),
        (
            "default",
            "small-1",
            i * 60,
            vec![("app", 9 + wobble, (38 + wobble) << 20)],
        ),
    ];
    metrics_list(&items)
}

/// Both Deployments and their pods; VPA `web` on `big` and `fresh` on `small`.
fn cluster(h: &mut Harness) {
    for (name, sel) in [("big", BIG), ("small", SMALL)] {
        h.writers
            .workloads
            .deployments
            .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
                "default", name, sel,
            ))));
        for p in 0..2 {
            h.writers.pods.handle(watcher::Event::Apply(pod(
                "default",
                &format!("{name}-{p}"),
                sel,
                &["app"],
            )));
        }
    }
    h.apply_vpa(&vpa("default", "web", "Deployment", "big"));
    h.apply_vpa(&vpa("default", "fresh", "Deployment", "small"));
}

fn retargeted() -> tailor_crds::VerticalPodAutoscaler {
    let mut v = vpa("default", "web", "Deployment", "big");
    if let Some(t) = v.spec.target_ref.as_mut() {
        t.name = "small".into();
    }
    v
}

#[tokio::test]
async fn a_new_target_drops_the_old_workloads_history_and_checkpoints() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    cluster(&mut h);
    for i in 0..120 {
        h.loop_with(i * 60, Ok(usage(i))).await;
    }
    let cpu = |h: &Harness, v: &str| target(&h.vpa("default", v), "app", "target").0;
    assert!(cpu(&h, "web") > 1000, "{}", cpu(&h, "web"));
    let stored = h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap();
    assert!(stored["status"]["totalSamplesCount"].as_i64().unwrap() > 100);

    // Restarted: the big workload's history is restored into `web`.
    let mut h = restart(&h).await;
    let (report, _) = h.loop_with(120 * 60, Ok(usage(120))).await;
    assert_eq!(report.checkpoints_restored, 2);
    assert!(cpu(&h, "web") > 1000, "{}", cpu(&h, "web"));

    // Moved to the small Deployment (same object, same uid).
    h.reflect_checkpoints();
    h.apply_vpa(&retargeted());
    let (_, requests) = h.loop_with(121 * 60, Ok(usage(121))).await;
    // The old checkpoint is deleted, then the new state written.
    let touched: Vec<&str> = requests
        .iter()
        .filter(|r| r.uri.starts_with(&format!("{CHECKPOINTS}/web.app")))
        .map(|r| r.method.as_str())
        .collect();
    assert_eq!(touched, ["DELETE", "PATCH"]);
    // Recommends what a fresh VPA on the small Deployment does.
    assert_eq!(cpu(&h, "web"), cpu(&h, "fresh"));
    assert!(cpu(&h, "web") < 100, "{}", cpu(&h, "web"));
    let stored: VerticalPodAutoscalerCheckpoint =
        serde_json::from_value(h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap()).unwrap();
    let samples = stored.status.unwrap().total_samples_count.unwrap();
    assert!(
        samples < 300,
        "the old workload's {samples} samples were kept"
    );

    // Another restart restores the new workload's history only.
    let mut b = restart(&h).await;
    let (report, _) = b.loop_with(122 * 60, Ok(usage(122))).await;
    assert_eq!(report.checkpoints_restored, 2);
    assert_eq!(cpu(&b, "web"), cpu(&b, "fresh"));
}

/// A new process over `h`'s VPAs and checkpoints.
async fn restart(h: &Harness) -> Harness {
    let checkpoints = h.api.objects(&format!("{CHECKPOINTS}/"));
    let web = h.vpa("default", "web");
    let mut b = restarted(&web, 0, checkpoints).await;
    cluster(&mut b);
    b.apply_vpa(&web);
    b.apply_vpa(&h.vpa("default", "fresh"));
    b
}

#[tokio::test]
async fn a_target_that_cannot_be_read_for_a_while_keeps_the_history() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    cluster(&mut h);
    for i in 0..60 {
        h.loop_with(i * 60, Ok(usage(i))).await;
    }
    let before = target(&h.vpa("default", "web"), "app", "target");
    // The Deployment leaves the store (deleted and re-created, or a relist) and comes back.
    h.writers
        .workloads
        .deployments
        .apply_watcher_event(&watcher::Event::Delete(SlimWorkload::of(&deployment(
            "default", "big", BIG,
        ))));
    let (_, requests) = h.loop_with(60 * 60, Ok(usage(60))).await;
    h.writers
        .workloads
        .deployments
        .apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
            "default", "big", BIG,
        ))));
    let (_, more) = h.loop_with(61 * 60, Ok(usage(61))).await;
    assert!(
        !requests.iter().chain(&more).any(|r| r.method == "DELETE"),
        "a checkpoint was deleted"
    );
    let after = target(&h.vpa("default", "web"), "app", "target");
    assert!(
        (after.0 - before.0).abs() * 10 < before.0,
        "{before:?} → {after:?}"
    );
}
