//! The controller's history bootstrap ([`tailor_recommender::views::history`]) against a faulty Prometheus, played by
//! the stub shared with the `tailor` CLI's tests (`tests/src/prom_stub.rs`, in `tailor-tests`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tailor_engine::model::AggregationsConfig;
use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::HistoryConfig;
use tailor_recommender::time::to_time_secs;
use tailor_recommender::views::history::{
    HistoryBootstrap, HistoryOptions, history_end, merge_into,
};
use tailor_recommender::writers::status_writer::{Findings, plan_status};

use tailor_tests::prom_stub::{END, Reply, healthy, is_history, stub, window_start};

/// The controller's history bootstrap: while the server fails the VPA shows `FetchingHistory` with the
/// reason; a load that fails half-way resumes (after `retry_after`) from where it stopped; the finished
/// aggregates hold every CPU sample exactly once, and the condition is removed.
#[test]
fn controller_bootstrap_retries_resumes_and_counts_once() {
    let split = END - 7200;
    let down = Arc::new(AtomicBool::new(true));
    let cpu_fails = Arc::new(AtomicUsize::new(0));
    let (d, cf) = (down.clone(), cpu_fails.clone());
    let s = stub(move |r, _| {
        if d.load(Ordering::SeqCst) {
            return Reply::Full(503, "starting".into());
        }
        // The third CPU window fails twice (one try + one retry): the load stops and later resumes.
        if is_history(r)
            && r.get("query").contains("cpu")
            && window_start(r) > split
            && cf.fetch_add(1, Ordering::SeqCst) < 2
        {
            return Reply::Full(503, "busy".into());
        }
        Reply::Full(200, healthy(r))
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = PromClient::new(ClientConfig {
        url: format!("http://127.0.0.1:{}", s.port),
        retries: 1,
        backoff: Duration::from_millis(10),
        read_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap();
    let opts = HistoryOptions {
        client,
        query: HistoryConfig {
            max_points_per_series: 60,
            ..Default::default()
        },
        length: Duration::from_secs(3 * 3600),
        retry_after: Duration::from_millis(200),
        concurrency: 4,
    };
    let key = ("a".to_string(), "vpa".to_string());
    let t = to_time_secs(END).unwrap();
    rt.block_on(async {
        let mut h = HistoryBootstrap::new(opts, AggregationsConfig::default());
        h.start(key.clone(), "Deployment", "w", END * 1000);
        assert!(h.started(&key));
        // Server down: the task keeps retrying and says so.
        let mut msg = String::new();
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            msg = h.fetching(&key).unwrap_or_default();
            if msg.contains("Retrying") {
                break;
            }
        }
        assert!(msg.contains("Retrying") && msg.contains("503"), "{msg}");
        let status = plan_status(
            &[],
            &Findings {
                fetching_history: Some(msg),
                ..Default::default()
            },
            &t,
        );
        let c = status.conditions.clone().unwrap();
        assert!(
            c.iter()
                .any(|c| c.type_ == "FetchingHistory" && c.status == "True")
        );
        down.store(false, Ordering::SeqCst);
        let mut done = Vec::new();
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            done = h.poll().await;
            if !done.is_empty() {
                break;
            }
        }
        assert_eq!(done.len(), 1, "the history task finished");
        assert!(h.fetching(&key).is_none());
        assert!(
            cpu_fails.load(Ordering::SeqCst) >= 3,
            "the load failed and resumed"
        );
        let (k, aggs) = done.pop().unwrap();
        assert_eq!(k, key);
        let agg = &aggs["c"];
        // Two pods x 180 steps, each CPU sample once across the failure and the resume.
        assert_eq!(agg.total_samples_count, 360);
        // Merging into restored state adds to it; history ends before the restored state begins.
        let mut initial = BTreeMap::new();
        merge_into(&mut initial, aggs.clone());
        merge_into(&mut initial, aggs);
        assert_eq!(initial["c"].total_samples_count, 720);
        let first_ms = initial["c"].first_sample_start / 1_000_000;
        assert_eq!(history_end(&initial, END * 1000), first_ms - 1);
        // Done: the condition is removed.
        let status = plan_status(
            status.conditions.as_deref().unwrap_or_default(),
            &Findings::default(),
            &t,
        );
        assert!(
            !status
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "FetchingHistory")
        );
    });
}
