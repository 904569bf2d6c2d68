//! A forward jump of the recommender's clock (docs/decisions/model-clock.md): the model's GC measures expiry
//! from the samples it receives, so the jump neither drops the live aggregates nor lets the next checkpoint save
//! the loss.

use crate::controller::{CHECKPOINTS, add_pods, sample_list, setup};
use crate::harness::*;
use tailor_recommender::process::config::ControllerConfig;

const DAY: i64 = 86_400;

fn samples_in_checkpoint(h: &Harness) -> i64 {
    h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap()["status"]["totalSamplesCount"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn a_forward_clock_jump_of_eight_days_keeps_every_live_aggregate() {
    let mut h = Harness::new(ControllerConfig::default()).await;
    setup(&mut h);
    add_pods(&mut h, 2);
    for i in 0..60 {
        h.loop_with(i * 60, Ok(sample_list(2, i))).await;
    }
    let before = target(&h.vpa("default", "web"), "app", "target");
    let samples = samples_in_checkpoint(&h);
    assert!(samples >= 100, "{samples}");
    // The process's clock jumps 8 days ahead; the metrics API still reports the pods' usage at its time.
    let (report, _) = h.loop_with(60 * 60 + 8 * DAY, Ok(sample_list(2, 60))).await;
    assert_eq!(report.aggregates_collected, 0);
    assert_eq!(report.checkpoints_written, 1);
    assert!(samples_in_checkpoint(&h) > samples);
    assert_eq!(target(&h.vpa("default", "web"), "app", "target"), before);
}

#[tokio::test]
async fn aggregates_of_pods_that_stop_reporting_still_expire() {
    // Every pod tracked, selected by a VPA or not.
    let mut h = Harness::new(ControllerConfig {
        memory_saver: false,
        ..ControllerConfig::default()
    })
    .await;
    setup(&mut h);
    add_pods(&mut h, 1);
    // Another workload's pod (its own aggregate), reporting only at first.
    h.writers
        .pods
        .handle(kube::runtime::watcher::Event::Apply(pod(
            "default",
            "other-0",
            &[("app", "other")],
            &["app"],
        )));
    let both = |secs: i64| {
        metrics_list(&[
            ("default", "web-0", secs, vec![("app", 100, 100 << 20)]),
            ("default", "other-0", secs, vec![("app", 100, 100 << 20)]),
        ])
    };
    let web =
        |secs: i64| metrics_list(&[("default", "web-0", secs, vec![("app", 100, 100 << 20)])]);
    for i in 0..10 {
        h.loop_with(i * 60, Ok(both(i * 60))).await;
    }
    assert_eq!(h.rec.model().aggregate_count(), 2);
    // Nine days in which only `web-0` reports: `other-0`'s aggregate expires, `web-0`'s lives.
    let mut collected = 0;
    for day in 1..=9 {
        let (report, _) = h.loop_with(day * DAY, Ok(web(day * DAY))).await;
        collected += report.aggregates_collected;
    }
    assert_eq!(collected, 1);
    assert_eq!(h.rec.model().aggregate_count(), 1);
}
