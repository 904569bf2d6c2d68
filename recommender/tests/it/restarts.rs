//! Restarts lose nothing and count nothing twice (docs/decisions/open-memory-windows.md): a recommender
//! restarted many times, with usage that varies, holds the memory histogram of one that never restarted.

use crate::controller::{CHECKPOINTS, add_pods, restarted_with, sample_list_every, setup};
use crate::harness::*;
use serde_json::Value;
use tailor_recommender::process::config::ControllerConfig;

/// Loops 30 minutes apart, over five days (five memory windows per pod, some closed between restarts).
const STEP: i64 = 1800;
const LOOPS: i64 = 240;
const PODS: usize = 3;

fn config() -> ControllerConfig {
    // Every loop writes its checkpoint, so a restart starts from the previous loop's state.
    ControllerConfig {
        checkpoints_min_change: 0.0,
        ..ControllerConfig::default()
    }
}

fn stored_checkpoint(h: &Harness) -> Value {
    h.api.object(&format!("{CHECKPOINTS}/web.app")).unwrap()
}

/// (total weight decayed to the tests' base time, bucket → weight) of a stored checkpoint's memory histogram, with
/// the open windows of its annotation. (The reference time of a decaying histogram may differ between two
/// processes holding the same histogram: the total weight is compared at one time.)
fn memory(cp: &Value) -> (f64, Vec<(String, i64)>, String) {
    let h = &cp["status"]["memoryHistogram"];
    let reference = h["referenceTimestamp"]
        .as_str()
        .and_then(tailor_recommender::time::parse_rfc3339)
        .unwrap();
    let half_life = 86_400e9;
    let weights = h["bucketWeights"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
        .collect();
    let windows = cp["metadata"]["annotations"]["tailor.dev/open-memory-windows"]
        .as_str()
        .unwrap()
        .to_string();
    let total = h["totalWeight"].as_f64().unwrap() * ((reference - t(0)) as f64 / half_life).exp2();
    (total, weights, windows)
}

#[tokio::test]
async fn many_restarts_with_varying_usage_give_the_histogram_of_no_restart() {
    let mut once = Harness::new(config()).await;
    setup(&mut once);
    add_pods(&mut once, PODS);
    let mut restarting = Harness::new(config()).await;
    setup(&mut restarting);
    add_pods(&mut restarting, PODS);
    let mut restarts = 0;
    for i in 0..LOOPS {
        // Restarts at irregular loops: inside windows, and right after one closes.
        if i > 0 && (i % 7 == 0 || i % 48 == 1) {
            let vpa = restarting.vpa("default", "web");
            let checkpoints = restarting.api.objects(&format!("{CHECKPOINTS}/"));
            restarting = restarted_with(config(), &vpa, PODS, checkpoints).await;
            restarts += 1;
        }
        // Usage varies per loop and per pod, and climbs on the third day.
        let usage = sample_list_every(PODS, i + (i / 96) * 5, STEP);
        let usage = retime(usage, i * STEP);
        let (a, _) = once.loop_with(i * STEP, Ok(usage.clone())).await;
        let (b, _) = restarting.loop_with(i * STEP, Ok(usage)).await;
        assert_eq!(a.samples_accepted, b.samples_accepted, "loop {i}");
        let (ta, wa, oa) = memory(&stored_checkpoint(&once));
        let (tb, wb, ob) = memory(&stored_checkpoint(&restarting));
        assert!(
            (ta - tb).abs() <= 1e-9 * ta.max(1.0),
            "loop {i} after {restarts} restarts: memory totalWeight {ta} without restarts, {tb} with"
        );
        assert_eq!(oa, ob, "loop {i}: open windows");
        // Bucket weights are stored scaled to 10000 and rounded: a restart may move one by a unit.
        assert_eq!(wa.len(), wb.len(), "loop {i}: {wa:?} vs {wb:?}");
        for ((ka, va), (kb, vb)) in wa.iter().zip(&wb) {
            assert_eq!(ka, kb, "loop {i}");
            assert!((va - vb).abs() <= 2, "loop {i}, bucket {ka}: {va} vs {vb}");
        }
    }
    assert!(restarts > 30, "{restarts}");
    let (a, b) = (once.vpa("default", "web"), restarting.vpa("default", "web"));
    for field in ["target", "lowerBound", "upperBound"] {
        assert_eq!(
            target(&a, "app", field).1,
            target(&b, "app", field).1,
            "memory {field}"
        );
    }
}

/// `list` with every sample's timestamp set to `secs`.
fn retime(mut list: Value, secs: i64) -> Value {
    for item in list["items"].as_array_mut().unwrap() {
        item["timestamp"] = Value::String(rfc3339(secs));
    }
    list
}

/// `--restore-open-memory-windows=false` restarts as upstream does: the current memory-peak window is lost, so a
/// spike before the restart never reaches the histogram; with the default the restarted recommender gives the
/// numbers of one that never restarted.
#[tokio::test]
async fn without_restoring_open_windows_a_restart_loses_the_current_memory_peak() {
    const MI: i64 = 1024 * 1024;
    // Three loops at 900 Mi, a restart inside the first memory window, then 200 Mi until that window (24 h) and
    // the next one's first loop are over.
    let usage = |i: i64| {
        let mem = if i < 3 { 900 * MI } else { 200 * MI };
        metrics_list(&[("default", "web-0", i * STEP, vec![("app", 100, mem)])])
    };
    let memory_target = |restore: Option<bool>| async move {
        let mut h = Harness::new(config()).await;
        setup(&mut h);
        add_pods(&mut h, 1);
        for i in 0..60 {
            if let (Some(restore), 3) = (restore, i) {
                let vpa = h.vpa("default", "web");
                let checkpoints = h.api.objects(&format!("{CHECKPOINTS}/"));
                let cfg = ControllerConfig {
                    restore_open_windows: restore,
                    ..config()
                };
                h = restarted_with(cfg, &vpa, 1, checkpoints).await;
            }
            h.loop_with(i * STEP, Ok(usage(i))).await;
        }
        target(&h.vpa("default", "web"), "app", "target").1
    };
    let never = memory_target(None).await;
    let restored = memory_target(Some(true)).await;
    let dropped = memory_target(Some(false)).await;
    assert_eq!(restored, never, "the default restores the open window");
    assert!(
        never > 900 * MI,
        "the spike's window counts without a restart: {never}"
    );
    assert!(
        dropped < 300 * MI,
        "upstream's restart loses the spike's window: {dropped} (without a restart {never})"
    );
}
