//! The loop's writes sent to a record ([`RecordedWrites`]) instead of the API server: two recommenders fed
//! the same objects and the same usage, one writing to the stand-in API server and one to a record, plan the
//! same writes in the same order — so a test or a dry run reading the record sees exactly what the API
//! server would get — and the recorded one sends the API server no write at all, Events included.

use std::sync::Arc;

use serde_json::{Value, json};
use tailor_recommender::process::config::ControllerConfig;
use tailor_recommender::writers::edge::{Recorded as Write, RecordedWrites};

use crate::checkpoint_faults::add_vpa;
use crate::controller::{add_pods, one_checkpoint, restarted, sample_list, setup};
use crate::harness::{Harness, Recorded};

/// A write as the API server received it: (kind, namespace, name, body).
type Seen = (&'static str, String, String, Value);

/// `v` as the API server reads it off the wire: printed and parsed back. serde_json's parser may land one
/// ulp off a printed float (a histogram's total weight), so the record is compared in the form the stand-in
/// stored, not as the struct serialised it.
fn as_read(v: Value) -> Value {
    serde_json::from_str(&v.to_string()).unwrap_or(Value::Null)
}

/// The writes among the stand-in's requests.
fn sent(requests: &[Recorded]) -> Vec<Seen> {
    let mut out = Vec::new();
    for r in requests {
        let path = r.uri.split('?').next().unwrap_or_default();
        let ns = (path.split("/namespaces/").nth(1))
            .and_then(|s| s.split('/').next())
            .unwrap_or_default()
            .to_owned();
        let name = path
            .trim_end_matches("/status")
            .rsplit('/')
            .next()
            .unwrap_or_default();
        match r.method.as_str() {
            "PATCH" if path.ends_with("/status") => {
                out.push(("status", ns, name.to_owned(), r.body.clone()))
            }
            "PATCH" => out.push(("checkpoint", ns, name.to_owned(), r.body.clone())),
            "DELETE" => out.push(("delete", ns, name.to_owned(), Value::Null)),
            "POST" if path.ends_with("/events") => {
                let b = &r.body;
                let what = json!({"reason": b["reason"], "action": b["action"], "note": b["note"]});
                let vpa = b["regarding"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                out.push(("event", ns, vpa, what));
            }
            _ => {}
        }
    }
    out
}

/// The record's writes in the same form.
fn recorded(writes: Vec<Write>) -> Vec<Seen> {
    writes
        .into_iter()
        .map(|w| match w {
            Write::Status(ns, name, body) => ("status", ns, name, as_read(body)),
            Write::Checkpoint(ns, name, object) => ("checkpoint", ns, name, as_read(object)),
            Write::Deleted(ns, name) => ("delete", ns, name, Value::Null),
            Write::Event(e, action) => {
                let what = json!({"reason": e.reason, "action": action, "note": e.note});
                ("event", e.namespace, e.name, what)
            }
        })
        .collect()
}

/// The recorded status writes as the requests the watch would have reflected.
fn as_requests(writes: &[Seen]) -> Vec<Recorded> {
    (writes.iter().filter(|w| w.0 == "status"))
        .map(|(_, ns, name, body)| Recorded {
            method: "PATCH".into(),
            uri: format!(
                "/apis/autoscaling.tailor.dev/v1/namespaces/{ns}/verticalpodautoscalers/{name}/status"
            ),
            content_type: Some("application/merge-patch+json".into()),
            body: body.clone(),
        })
        .collect()
}

#[tokio::test]
async fn recorded_writes_are_what_the_api_server_would_get_and_none_is_sent() {
    let mut through_api = Harness::new(ControllerConfig::default()).await;
    let mut dry = Harness::new(ControllerConfig::default()).await;
    let record = RecordedWrites::default();
    dry.rec.set_writes(Arc::new(record.clone()));
    for h in [&mut through_api, &mut dry] {
        setup(h);
        add_pods(h, 2);
    }
    let mut total = 0;
    for i in 0..5 {
        let (_, requests) = through_api.loop_with(i * 60, Ok(sample_list(2, i))).await;
        let expected = sent(&requests);
        let before = record.writes().len();
        let (_, dry_requests) = dry.loop_with(i * 60, Ok(sample_list(2, i))).await;
        assert_eq!(
            sent(&dry_requests),
            [],
            "loop {i}: the recorded recommender sent a write"
        );
        let got = recorded(record.writes().split_off(before));
        // The watch delivers the statuses the record holds, as it would have delivered the API's.
        dry.reflect_status_patches(&as_requests(&got));
        assert_eq!(
            got, expected,
            "loop {i}: the record differs from the API server's writes"
        );
        total += got.len();
    }
    let kinds: Vec<&str> = recorded(record.writes()).iter().map(|w| w.0).collect();
    assert!(
        kinds.contains(&"status") && kinds.contains(&"checkpoint"),
        "{kinds:?}"
    );
    assert!(total >= 2, "some writes were planned: {total}");
}

#[tokio::test]
async fn the_event_of_a_skipped_checkpoint_goes_to_the_record_and_not_to_the_api_server() {
    let (before, checkpoint) = one_checkpoint().await;
    let mut b = restarted(&before, 2, Vec::new()).await;
    let record = RecordedWrites::default();
    b.rec.set_writes(Arc::new(record.clone()));
    add_vpa(&mut b, &checkpoint, "bad", true);
    let (report, requests) = b.loop_with(3600, Ok(sample_list(2, 60))).await;
    assert_eq!(report.checkpoints_skipped, 1);
    let events: Vec<Seen> = (recorded(record.writes()).into_iter())
        .filter(|w| w.0 == "event")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let (_, ns, vpa, what) = &events[0];
    assert_eq!((ns.as_str(), vpa.as_str()), ("default", "bad"));
    assert_eq!(what["reason"], "CheckpointSkipped");
    assert_eq!(what["action"], "Restore");
    assert!(
        what["note"].as_str().is_some_and(|n| n.contains("bad.app")),
        "{what}"
    );
    assert_eq!(sent(&requests), [], "the recorded recommender sent a write");
    let posts: Vec<&str> = (requests.iter())
        .filter(|r| r.method != "GET")
        .map(|r| r.uri.as_str())
        .collect();
    assert!(posts.is_empty(), "requests other than reads: {posts:?}");
}
