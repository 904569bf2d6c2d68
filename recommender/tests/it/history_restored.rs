//! Prometheus down after a restart (docs/decisions/history-bootstrap.md): a VPA restored from its checkpoints
//! loads no history and keeps being checkpointed; new VPAs wait for one of a bounded number of history loads.

use std::time::{Duration, Instant};

use crate::controller::{CHECKPOINTS, one_checkpoint, restarted_with, sample_list};
use crate::harness::*;
use tailor_engine::model::AggregationsConfig;
use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::HistoryConfig;
use tailor_recommender::Recommender;
use tailor_recommender::process::config::ControllerConfig;
use tailor_recommender::views::history::{HistoryBootstrap, HistoryOptions};
use tailor_recommender::writers::ratelimit::RateLimiter;

/// History from a Prometheus that refuses every connection, `concurrency` loads at once.
fn unreachable_history(concurrency: usize) -> HistoryBootstrap {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = PromClient::new(ClientConfig {
        url: format!("http://127.0.0.1:{port}"),
        retries: 0,
        backoff: Duration::from_millis(10),
        read_timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .unwrap();
    HistoryBootstrap::new(
        HistoryOptions {
            client,
            query: HistoryConfig::default(),
            length: Duration::from_secs(3600),
            retry_after: Duration::from_millis(20),
            concurrency,
        },
        AggregationsConfig::default(),
    )
}

fn condition(h: &Harness, vpa: &str, type_: &str) -> bool {
    h.vpa("default", vpa)
        .status
        .and_then(|s| s.conditions)
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test]
async fn a_restored_vpa_loads_no_history_and_is_checkpointed_with_prometheus_down() {
    let (before, checkpoint) = one_checkpoint().await;
    let cfg = ControllerConfig {
        checkpoints_min_change: 0.0,
        ..ControllerConfig::default()
    };
    let mut b = restarted_with(cfg.clone(), &before, 2, vec![checkpoint]).await;
    b.apply_vpa(&vpa("default", "fresh", "Deployment", "web"));
    b.rec = Recommender::new(
        cfg,
        b.client.clone(),
        b.stores.clone(),
        b.ooms.clone(),
        b.metrics.clone(),
        RateLimiter::unlimited(),
    )
    .with_history(unreachable_history(4));
    let mut written = Vec::new();
    for i in 0..12 {
        let (report, requests) = b.loop_with(3600 + i * 60, Ok(sample_list(2, 60 + i))).await;
        if i == 0 {
            assert_eq!(report.checkpoints_restored, 1);
        }
        written.extend(
            requests
                .iter()
                .filter(|r| r.method == "PATCH" && r.uri.starts_with(CHECKPOINTS))
                .map(|r| r.uri.split('?').next().unwrap_or_default().to_string()),
        );
    }
    // `web` (restored) fetches nothing and is checkpointed; `fresh` keeps fetching and is not.
    assert!(!condition(&b, "web", "FetchingHistory"));
    assert!(condition(&b, "fresh", "FetchingHistory"));
    let web = format!("{CHECKPOINTS}/web.app");
    assert!(
        written.iter().filter(|w| **w == web).count() >= 10,
        "{written:?}"
    );
    // (The writer reads `FetchingHistory` from the stored status: only the first loop, before the
    // condition is stored, writes `fresh`.)
    assert!(
        written.iter().filter(|w| w.ends_with("/fresh.app")).count() <= 1,
        "{written:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_loads_run_at_most_the_concurrency_at_once() {
    let mut h = unreachable_history(2);
    let keys: Vec<(String, String)> = (0..5)
        .map(|i| ("default".to_string(), format!("vpa-{i}")))
        .collect();
    for k in &keys {
        h.start(k.clone(), "Deployment", &k.1, 1_700_000_000_000);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut retrying, mut waiting) = (0, 0);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let messages: Vec<String> = keys.iter().filter_map(|k| h.fetching(k)).collect();
        retrying = messages.iter().filter(|m| m.contains("Retrying")).count();
        waiting = messages.iter().filter(|m| m.contains("Waiting")).count();
        if retrying == 2 {
            break;
        }
    }
    assert_eq!((retrying, waiting), (2, 3));
    // Still so after many retries of the two that run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = keys
        .iter()
        .filter_map(|k| h.fetching(k))
        .filter(|m| m.contains("Waiting"))
        .count();
    assert_eq!(waiting, 3);
    for k in &keys {
        h.forget(k);
    }
}
