//! The real `tailor-recommender`'s dashboard against the stand-in API server: the pages show the numbers of
//! the VPA status, their JSON twins carry them, hostile annotation values stay text, every method but GET
//! and HEAD gets 405, and a page view costs the API server nothing.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tailor_tests::process::{free_port, http_get_body, http_get_status, start_recommender};
use tailor_tests::standin::ApiServer;

use crate::binaries::{VPA_API, namespace, recommendation, vpa, workload};

const WAIT: Duration = Duration::from_secs(20);
const HOSTILE: &str = "<script>alert(\"x\")</script>";

/// The status line's code of `method path` (no body).
async fn status_of(addr: SocketAddr, method: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The node the small workload's pods run on, an m6i.
const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-1, labels: {node.kubernetes.io/instance-type: m6i.large}}\nstatus: {allocatable: {cpu: '2', memory: 8Gi}}\n";

/// A core/v1 Event on pod `api-7c9f-0`, recorded by `component`.
fn updater_event(name: &str, component: &str, reason: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "involvedObject": {"kind": "Pod", "name": "api-7c9f-0", "namespace": "shop"},
        "reason": reason, "type": "Normal", "message": "Pod was resized in place by VPA Updater.",
        "reportingComponent": component, "source": {"component": component}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_vpa_status_and_refuses_everything_but_reading() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml(namespace()).unwrap();
    server.load_yaml(&workload("web", "250m", "300Mi")).unwrap();
    let mut web = vpa("web", "web");
    web["metadata"]["annotations"] = serde_json::json!({"tailor.dev/profile": HOSTILE});
    server.put(web).unwrap();
    // The api pods have limits; they run on an m6i node; the updater resized one of them.
    let api = workload("api", "100m", "100Mi").replace(
        "resources: {requests: {cpu: 100m, memory: 128Mi}}",
        "resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}",
    );
    server.load_yaml(&api).unwrap();
    server.load_yaml(NODE).unwrap();
    for (name, component, reason) in [
        ("resize-1", "tailor-updater", "InPlaceResizedByVPA"),
        ("kubelet-1", "kubelet", "Pulled"),
    ] {
        server.put(updater_event(name, component, reason)).unwrap();
    }
    server.put(vpa("api", "api")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dashboard = addr.to_string();
    let (rec, metrics) = start_recommender(
        &server,
        dir.path(),
        "recommender-dashboard",
        &[
            "--dashboard-address",
            &dashboard,
            "--recommendation-metrics",
            "--price-instance-family",
            "m6i=1/0",
        ],
    );
    server
        .wait_for(WAIT, |s| recommendation(s, "api"))
        .await
        .unwrap_or_else(|| panic!("no recommendation:\n{}", rec.log_lines().join("\n")));
    // The page follows the loop after the status write: wait until the fleet shows the recommendation.
    let mut answer = Value::Null;
    for _ in 0..40 {
        answer = serde_json::from_str(&http_get_body(addr, "/api/v1/fleet").await)
            .unwrap_or(Value::Null);
        let has_target = answer["workloads"].as_array().is_some_and(|w| {
            w.iter().any(|w| {
                w["vpa"] == "api" && w["containers"][0]["target"]["cpuMillicores"].is_i64()
            })
        });
        if has_target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stored = server
        .get(VPA_API, "VerticalPodAutoscaler", "shop", "api")
        .unwrap();
    let target = &stored["status"]["recommendation"]["containerRecommendations"][0]["target"];
    let api = (answer["workloads"].as_array().unwrap().iter())
        .find(|w| w["vpa"] == "api")
        .unwrap_or_else(|| panic!("{answer}"));
    let shown = &api["containers"][0]["target"];
    let cpu = tailor_core::quantity::Amount::parse(
        &k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            target["cpu"].as_str().unwrap().into(),
        ),
    )
    .unwrap();
    assert_eq!(
        shown["cpuMillicores"].as_i64().map(i128::from),
        cpu.millis_i128(),
        "{answer}"
    );
    assert_eq!(api["pods"], 2, "{api}");
    assert_eq!(
        api["containers"][0]["limits"]["memoryBytes"],
        256 << 20,
        "{api}"
    );
    assert_eq!(
        api["admittedUnsized"], 2,
        "no pod carries the webhook's mark: {api}"
    );
    assert_eq!(api["instanceFamily"], "m6i", "{api}");
    let actions = api["updaterActions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let reasons: Vec<&str> = actions
        .iter()
        .filter_map(|a| a["reason"].as_str())
        .collect();
    assert_eq!(
        reasons,
        ["InPlaceResizedByVPA"],
        "the updater's only: {api}"
    );
    assert_eq!(actions[0]["object"], "Pod/api-7c9f-0", "{api}");
    // The same target as a gauge (cores), when --recommendation-metrics asks for it.
    let exported = http_get_body(metrics, "/metrics").await;
    let series = format!(
        "tailor_vpa_recommendation{{namespace=\"shop\",vpa=\"api\",container=\"app\",resource=\"cpu\",bound=\"target\"}} {}",
        cpu.millis_i128().unwrap() as f64 / 1000.0
    );
    assert!(
        exported.lines().any(|l| l.starts_with(&series)),
        "{series}\n{exported}"
    );
    assert_eq!(answer["summary"]["fleet"]["workloads"], 2, "{answer}");
    // The pages: the fleet lists both; hostile text is escaped; the workload page has its chart.
    let page = http_get_body(addr, "/").await;
    assert!(
        page.contains("data-vpa=\"api\"") && page.contains("data-vpa=\"web\""),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    assert!(page.contains("&lt;script&gt;"), "{page}");
    let web_page = http_get_body(addr, "/workloads/shop/web").await;
    assert!(!web_page.contains("<script>"), "{web_page}");
    assert!(web_page.contains("class=\"usage\""), "{web_page}");
    assert_eq!(http_get_status(addr, "/workloads/shop/nope").await, 404);
    // A query far past the bounds is cut, not refused or echoed whole.
    let long = http_get_body(addr, &format!("/?ns={}&page=99999999999", "x".repeat(4000))).await;
    assert!(
        long.contains("data-matched=\"0\""),
        "{}",
        &long[..long.len().min(2000)]
    );
    assert!(
        !long.contains(&"x".repeat(254)),
        "the namespace filter is cut to 253 characters"
    );
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        assert_eq!(status_of(addr, method, "/").await, 405, "{method} /");
        assert_eq!(
            status_of(addr, method, "/api/v1/fleet").await,
            405,
            "{method} /api/v1/fleet"
        );
    }
    assert_eq!(status_of(addr, "HEAD", "/").await, 200);
    // A page view costs the API server nothing.
    server.clear_requests();
    for path in [
        "/",
        "/workloads/shop/web",
        "/api/v1/fleet",
        "/api/v1/workloads/shop/api",
    ] {
        assert_eq!(http_get_status(addr, path).await, 200, "{path}");
    }
    // The loop goes on (its list of PodMetrics, its writes); nothing is read by name for a page.
    let reads: Vec<String> = (server.requests().into_iter())
        .filter(|r| {
            r.user == "recommender-dashboard" && r.verb() == "get" && !r.path.ends_with("/scale")
        })
        .map(|r| r.path.clone())
        .collect();
    assert!(reads.is_empty(), "{reads:?}");
}
