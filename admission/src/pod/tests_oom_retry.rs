//! The retry bump of a Job pod after its earlier attempts' OOM kills, through the whole review.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::tests::pod_request;
use super::*;
use crate::job_retries::{JobOomHistory, JobOoms};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_core::sizing::{OomBumpRule, PatchOptions};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexObjects};
use tailor_testkit::fixtures::{PodFixture, VpaFixture};

const MI: i64 = 1 << 20;

/// A Job history that answers `ooms` and counts the lookups.
struct Fixed {
    ooms: Option<JobOoms>,
    lookups: AtomicUsize,
}

impl JobOomHistory for Fixed {
    fn ooms(&self, namespace: &str, job_uid: &str) -> Option<Arc<JobOoms>> {
        assert_eq!((namespace, job_uid), ("default", "job-uid-1"));
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.ooms.clone().map(Arc::new)
    }
}

fn retries(ooms: Option<JobOoms>) -> (RetryBump, Arc<Fixed>) {
    let history = Arc::new(Fixed {
        ooms,
        lookups: AtomicUsize::new(0),
    });
    let bump = RetryBump {
        history: history.clone(),
        rule: OomBumpRule::default(),
    };
    (bump, history)
}

fn killed(bytes: i64) -> Option<JobOoms> {
    Some(JobOoms {
        killed_pods: 1,
        containers: vec![("task".into(), bytes)],
        last_killed: Some(("nightly-1-a".into(), "pod-uid".into())),
    })
}

fn cron_vpa(mode: &str) -> VerticalPodAutoscaler {
    VpaFixture::new("default", "nightly")
        .uid("vpa-uid")
        .target("CronJob", "nightly")
        .mode(mode)
        .container_policy(json!({"containerName": "*", "maxAllowed": {"memory": "1Gi"}}))
        .recommendation("task", "100m", "256Mi")
        .build()
}

fn index(mode: &str) -> Index {
    let job = serde_json::from_value(json!({
        "metadata": {"name": "nightly-1", "namespace": "default", "uid": "job-uid-1",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                                 "uid": "cj", "controller": true}]},
        "spec": {"template": {"metadata": {"labels": {"app": "nightly"}}}}
    }))
    .unwrap();
    let cron = serde_json::from_value(json!({
        "metadata": {"name": "nightly", "namespace": "default", "uid": "cj"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
            "metadata": {"labels": {"app": "nightly"}}}}}}
    }))
    .unwrap();
    Index::from_objects(IndexObjects {
        vpas: vec![cron_vpa(mode)],
        jobs: vec![job],
        cron_jobs: vec![cron],
        ..Default::default()
    })
}

fn job_pod() -> Value {
    let memory = json!({"memory": "256Mi"});
    PodFixture::generated("default", "nightly-1-")
        .label("app", "nightly")
        .owner("Job", "nightly-1")
        .owner_uid("job-uid-1")
        .spec_fields(json!({"restartPolicy": "Never"}))
        .container("task", memory.clone(), memory)
        .json()
}

fn review(
    index: &Index,
    memo: &PatchMemo,
    bump: &RetryBump,
) -> (Value, PodOutcome, Option<Box<OomRetry>>) {
    let p = job_pod();
    let body = pod_request(p.clone(), "v1");
    let (resp, outcome, retry) = review_pod_with(
        &crate::review::decode_one_pass(&body).unwrap(),
        index,
        &PatchOptions::default(),
        memo,
        Some(bump),
    );
    let patch: Patch = serde_json::from_slice(
        &(resp.patch.as_ref()).map_or_else(|| b"[]".to_vec(), |p| p.json().unwrap()),
    )
    .unwrap();
    let mut doc = p;
    json_patch::patch(&mut doc, &patch.0).unwrap();
    (doc, outcome, retry)
}

fn memory(doc: &Value) -> (i64, i64) {
    let r = &doc["spec"]["containers"][0]["resources"];
    let bytes = |v: &Value| {
        let q = Quantity(v.as_str().unwrap_or_default().to_owned());
        tailor_core::quantity::value(&q).unwrap()
    };
    (
        bytes(&r["requests"]["memory"]),
        bytes(&r["limits"]["memory"]),
    )
}

#[test]
fn a_retry_after_an_oom_kill_gets_the_bumped_memory_and_its_report() {
    let memo = PatchMemo::new(PatchOptions::default(), 1 << 20);
    let (bump, history) = retries(killed(256 * MI));
    let (doc, outcome, retry) = review(&index("Recreate"), &memo, &bump);
    assert!(matches!(outcome, PodOutcome::Patched { .. }), "{outcome:?}");
    assert_eq!(
        memory(&doc),
        (356 * MI, 356 * MI),
        "request and limit, in proportion"
    );
    let retry = retry.expect("reported");
    assert_eq!(
        (retry.name.as_str(), retry.job.as_str()),
        ("nightly", "nightly-1")
    );
    assert_eq!(retry.raises[0].target, Some(256 * MI));
    assert_eq!(
        retry.last_killed.as_ref().map(|(n, _)| n.as_str()),
        Some("nightly-1-a")
    );
    assert_eq!(history.lookups.load(Ordering::Relaxed), 1);
    // The raised answer is not memoised: the next pod is asked about again, and a Job without OOM kills
    // gets the VPA's target.
    let (bump, _) = retries(None);
    let index = index("Recreate");
    let (doc, _, retry) = review(&index, &memo, &bump);
    assert_eq!(memory(&doc), (256 * MI, 256 * MI));
    assert!(retry.is_none());
    // That answer is memoised (a Job pod's spec was decoded for the bump, its text still keys the memo): the
    // Job's next pod is answered from it.
    assert_eq!(super::tests::memo_metric(&memo, "hits_total"), 0);
    let (doc, _, _) = review(&index, &memo, &bump);
    assert_eq!(memory(&doc), (256 * MI, 256 * MI));
    assert_eq!(super::tests::memo_metric(&memo, "hits_total"), 1);
}

#[test]
fn retries_grow_until_max_allowed() {
    let memo = PatchMemo::new(PatchOptions::default(), 0);
    let mut at = 256 * MI;
    let mut sizes = Vec::new();
    for _ in 0..8 {
        let (bump, _) = retries(killed(at));
        let (doc, _, _) = review(&index("Auto"), &memo, &bump);
        at = memory(&doc).0;
        sizes.push(at / MI);
    }
    assert_eq!(
        sizes,
        [356, 456, 556, 667, 800, 960, 1024, 1024],
        "MiB, held at maxAllowed"
    );
}

#[test]
fn no_lookup_when_the_vpa_does_not_size_pods() {
    let memo = PatchMemo::new(PatchOptions::default(), 0);
    let (bump, history) = retries(killed(256 * MI));
    let (doc, outcome, retry) = review(&index("Off"), &memo, &bump);
    assert!(retry.is_none(), "{outcome:?}");
    assert_eq!(memory(&doc), (256 * MI, 256 * MI), "left as declared");
    assert_eq!(history.lookups.load(Ordering::Relaxed), 0);
}
