//! Stored checkpoints that cannot be restored (docs/decisions/checkpoints.md): a bad object costs only its own
//! container's history — skipped, counted, named in its VPA's condition — and every other VPA is restored and
//! checkpointed as usual.

use crate::controller::{CHECKPOINTS, one_checkpoint, restarted, sample_list};
use crate::harness::*;
use serde_json::{Value, json};
use tailor_crds::VerticalPodAutoscalerCheckpoint;

/// `checkpoint` as VPA `name`'s (VPA `name` of the `web` Deployment added to `h`), `bad` with a bucket
/// weight the typed decoder refuses.
pub(crate) fn add_vpa(h: &mut Harness, checkpoint: &Value, name: &str, bad: bool) {
    h.apply_vpa(&vpa("default", name, "Deployment", "web"));
    let mut c = checkpoint.clone();
    c["metadata"]["name"] = json!(format!("{name}.app"));
    c["spec"]["vpaObjectName"] = json!(name);
    if bad {
        c["status"]["cpuHistogram"]["bucketWeights"] = json!({"16": -1});
    }
    h.apply_checkpoint_json(c);
}

fn condition(h: &Harness, vpa: &str, type_: &str) -> Option<(String, String)> {
    let v = h.vpa("default", vpa);
    v.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.message.unwrap_or_default()))
}

fn checkpoint_writes(requests: &[Recorded]) -> Vec<String> {
    let mut out: Vec<String> = requests
        .iter()
        .filter(|r| r.method == "PATCH" && r.uri.starts_with(CHECKPOINTS))
        .map(|r| r.uri.split('?').next().unwrap_or_default().to_string())
        .collect();
    out.sort();
    out
}

/// `good` VPAs with a good checkpoint and `bad` with a bad one, restarted: every good one restored, each
/// bad one skipped; returns the harness after the first loop.
async fn restart_with(good: usize, bad: usize) -> Harness {
    let (before, checkpoint) = one_checkpoint().await;
    let mut b = restarted(&before, 2, Vec::new()).await;
    for i in 0..good {
        add_vpa(&mut b, &checkpoint, &format!("good{i}"), false);
    }
    for i in 0..bad {
        add_vpa(&mut b, &checkpoint, &format!("bad{i}"), true);
    }
    let (report, requests) = b.loop_with(3600, Ok(metrics_list(&[]))).await;
    assert_eq!(report.checkpoints_restored, good as u64);
    assert_eq!(report.checkpoints_skipped, bad as u64);
    assert!(
        b.metrics.encode().contains(&format!(
            "errors_total{{kind=\"checkpoint_invalid\"}} {bad}"
        )),
        "{}",
        b.metrics.encode()
    );
    // Restored checkpoints count as written; `web` (none stored) and each skipped one are written now.
    let mut expected: Vec<String> = (0..bad)
        .map(|i| format!("{CHECKPOINTS}/bad{i}.app"))
        .collect();
    expected.push(format!("{CHECKPOINTS}/web.app"));
    assert_eq!(checkpoint_writes(&requests), expected);
    for i in 0..bad {
        // The bad object was replaced: it decodes again.
        let stored = b.api.object(&format!("{CHECKPOINTS}/bad{i}.app")).unwrap();
        serde_json::from_value::<VerticalPodAutoscalerCheckpoint>(stored).unwrap();
        let (status, message) = condition(&b, &format!("bad{i}"), "CheckpointSkipped").unwrap();
        assert_eq!(status, "True");
        assert!(message.contains(&format!("bad{i}.app")), "{message}");
        assert!(message.contains("-1") && message.len() < 400, "{message}");
    }
    for i in 0..good {
        assert_eq!(
            condition(&b, &format!("good{i}"), "CheckpointSkipped"),
            None
        );
    }
    b
}

#[tokio::test]
async fn a_bad_checkpoint_read_by_name_costs_only_its_own_history() {
    let mut b = restart_with(1, 1).await;
    // Checkpointing goes on for everyone: all three written when they age, no error.
    let (report, _) = b.loop_with(3600 + 600, Ok(sample_list(2, 70))).await;
    assert_eq!(report.checkpoint_errors, 0);
    assert_eq!(report.checkpoints_written, 3);
    // The condition stays for a day after the restore, then goes.
    assert!(condition(&b, "bad0", "CheckpointSkipped").is_some());
    b.loop_with(3600 + 86_400, Ok(sample_list(2, 80))).await;
    assert_eq!(condition(&b, "bad0", "CheckpointSkipped"), None);
}

#[tokio::test]
async fn a_bad_checkpoint_in_a_listed_page_costs_only_its_own_history() {
    // More than are read one by one: listed, and the page with a bad object still restores the others.
    let mut b = restart_with(20, 2).await;
    let (report, _) = b.loop_with(3600 + 600, Ok(sample_list(2, 70))).await;
    assert_eq!(report.checkpoint_errors, 0);
    assert_eq!(report.checkpoints_written, 23);
}

/// Three hours of `millicores` for both pods of `web`, from `from` seconds, every 10 minutes.
async fn busy(h: &mut Harness, from: i64, millicores: i64) {
    for i in 0..18 {
        let t = from + i * 600;
        let items: Vec<PodSample<'_>> = ["web-0", "web-1"]
            .into_iter()
            .map(|p| ("default", p, t, vec![("app", millicores, 200 << 20)]))
            .collect();
        h.loop_with(t, Ok(metrics_list(&items))).await;
    }
}

#[tokio::test]
async fn a_checkpoint_reference_far_in_the_future_does_not_freeze_cpu() {
    let (before, checkpoint) = one_checkpoint().await;
    let mut future = checkpoint.clone();
    future["status"]["cpuHistogram"]["referenceTimestamp"] = json!(rfc3339(365 * 86_400));
    let mut good = restarted(&before, 2, vec![checkpoint]).await;
    let mut bad = restarted(&before, 2, vec![future]).await;
    busy(&mut good, 3600, 4000).await;
    busy(&mut bad, 3600, 4000).await;
    let cpu = |h: &Harness| target(&h.vpa("default", "web"), "app", "target").0;
    // New usage moves the recommendation, with the far-future reference as with the real one.
    assert!(cpu(&good) > target(&before, "app", "target").0);
    assert_eq!(cpu(&bad), cpu(&good));
}

#[tokio::test]
async fn an_absurd_total_weight_is_skipped_like_any_bad_checkpoint() {
    let (before, mut checkpoint) = one_checkpoint().await;
    checkpoint["status"]["memoryHistogram"]["totalWeight"] = json!(1.7e308);
    let mut b = restarted(&before, 2, Vec::new()).await;
    b.apply_checkpoint_json(checkpoint);
    let (report, _) = b.loop_with(3600, Ok(metrics_list(&[]))).await;
    assert_eq!(
        (report.checkpoints_restored, report.checkpoints_skipped),
        (0, 1)
    );
    let (status, message) = condition(&b, "web", "CheckpointSkipped").unwrap();
    assert_eq!(status, "True");
    assert!(message.contains("totalWeight"), "{message}");
    assert!(
        b.metrics
            .encode()
            .contains("errors_total{kind=\"checkpoint_invalid\"} 1")
    );
}

#[tokio::test]
async fn ooms_replayed_after_a_restart_are_not_counted_twice() {
    use tailor_recommender::views::oom::{OomRecord, OomSource};
    let (before, checkpoint) = one_checkpoint().await;
    // Written at the last loop of the first process (59 minutes in).
    let written = tailor_recommender::time::parse_rfc3339(
        checkpoint["status"]["lastUpdateTime"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(written, t(59 * 60));
    let mut b = restarted(&before, 2, vec![checkpoint]).await;
    let oom = |secs: i64| OomRecord {
        namespace: "default".into(),
        pod: "web-0".into(),
        container: "app".into(),
        time: t(secs),
        memory_bytes: 1 << 30,
        source: OomSource::Eviction,
    };
    // The restart replays an eviction of 50 minutes in (the checkpoint holds it) and sees a new one.
    b.loop_with(3600, Ok(sample_list(2, 60))).await;
    b.ooms.push([oom(50 * 60), oom(3630)]);
    let (report, _) = b.loop_with(3660, Ok(sample_list(2, 61))).await;
    assert_eq!((report.ooms_recorded, report.ooms_rejected), (1, 1));
    let metrics = b.metrics.encode();
    assert!(
        metrics.contains("source=\"eviction\",result=\"checkpointed\"} 1"),
        "{metrics}"
    );
}
