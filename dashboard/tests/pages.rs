//! The pages over made-up fleets: hostile text stays text, the fleet page stays small at 5,000 workloads,
//! the numbers on the page are the model's, and the JSON twin round-trips.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use tailor_dashboard::model::{
    ApiGroup, Bucket, Condition, Container, Distribution, Flag, Fleet, Resources, Source,
    UpdaterAction, Workload,
};
use tailor_dashboard::money::Prices;
use tailor_dashboard::query::FleetQuery;
use tailor_dashboard::{fleet_page, report, workload_page};

const HOSTILE: &str = "<script>alert(\"x\")</script>'\"&";

fn workload(ns: &str, vpa: &str, pods: i64) -> Workload {
    let usage = Distribution {
        buckets: vec![
            Bucket {
                start: 0.1,
                end: 0.11,
                weight: 3.0,
            },
            Bucket {
                start: 0.2,
                end: 0.22,
                weight: 7.0,
            },
        ],
        percentiles: vec![(0.5, 0.2), (0.9, 0.22)],
    };
    Workload {
        namespace: ns.into(),
        vpa: vpa.into(),
        kind: "Deployment".into(),
        name: vpa.into(),
        mode: "Off".into(),
        profile: None,
        pods,
        ooms_last_day: 0,
        containers: vec![Container {
            name: "app".into(),
            requests: Resources::new(500, 512 << 20),
            limits: Resources::new(1000, 1 << 30),
            target: Resources::new(250, 256 << 20),
            lower_bound: Resources::new(200, 200 << 20),
            upper_bound: Resources::new(400, 400 << 20),
            uncapped_target: Resources::new(250, 256 << 20),
            cpu_usage: Some(usage.into()),
            memory_usage: None,
        }]
        .into(),
        conditions: vec![Condition {
            type_: "RecommendationProvided".into(),
            status: "True".into(),
            ..Condition::default()
        }]
        .into(),
        flags: Default::default(),
        ..Workload::default()
    }
}

fn fleet(workloads: Vec<Workload>) -> Fleet {
    Fleet {
        source: Source {
            producer: "test".into(),
            generated_at: "2026-11-29T00:00:00Z".into(),
            kubectl_context: None,
        },
        prices: Default::default(),
        workloads,
    }
}

#[test]
fn hostile_names_and_messages_stay_text() {
    let mut w = workload("shop", "web", 2);
    w.profile = Some(HOSTILE.into());
    w.explain = HOSTILE.into();
    w.conditions = vec![Condition {
        message: HOSTILE.into(),
        ..w.conditions[0].clone()
    }]
    .into();
    w.containers[0].name = HOSTILE.into();
    w.updater_actions = vec![UpdaterAction {
        reason: HOSTILE.into(),
        message: HOSTILE.into(),
        object: HOSTILE.into(),
        ..UpdaterAction::default()
    }]
    .into();
    let f = fleet(vec![w]);
    for page in [
        fleet_page(&f, &FleetQuery::default()),
        workload_page(&f, "shop", "web").unwrap(),
        report(&f),
    ] {
        assert!(!page.contains("<script"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"),
            "{page}"
        );
    }
    // A name in a link is percent-encoded, never raw.
    let odd = fleet(vec![workload("shop", "a\"b<c", 1)]);
    let page = fleet_page(&odd, &FleetQuery::default());
    assert!(
        page.contains("href=\"/workloads/shop/a%22b%3Cc\""),
        "{page}"
    );
}

#[test]
fn the_fleet_page_is_paged_and_small_at_five_thousand_workloads() {
    let workloads: Vec<Workload> = (0..5000)
        .map(|i| workload(&format!("ns-{:02}", i % 50), &format!("vpa-{i:05}"), 10))
        .collect();
    let f = fleet(workloads);
    let page = fleet_page(&f, &FleetQuery::default());
    assert!(page.len() <= 1 << 20, "{} bytes", page.len());
    assert_eq!(page.matches("class=\"workload\"").count(), 100);
    assert!(page.contains("data-matched=\"5000\""));
    assert!(page.contains("rel=\"next\""));
    let last = fleet_page(&f, &FleetQuery::parse([("page", "49")]));
    assert_eq!(last.matches("class=\"workload\"").count(), 100);
    assert!(!last.contains("rel=\"next\""));
    let one_ns = fleet_page(&f, &FleetQuery::parse([("ns", "ns-07")]));
    assert!(one_ns.contains("data-matched=\"100\""));
}

#[test]
fn the_numbers_on_the_pages_are_the_models() {
    let mut w = workload("shop", "web", 2);
    w.flags = [Flag::Oom].into();
    w.ooms_last_day = 3;
    let f = fleet(vec![w, workload("shop", "api", 1)]);
    let page = fleet_page(&f, &FleetQuery::default());
    // Requested: 3 pods × 500m = 1.50 cores; at the targets 3 × 250m = 750m.
    assert!(
        page.contains("<td id=\"requested-cpu\">1.50</td>"),
        "{page}"
    );
    assert!(
        page.contains("<td id=\"recommended-cpu\">750m</td>"),
        "{page}"
    );
    assert!(
        page.contains("data-flag=\"Oom\" data-count=\"1\""),
        "{page}"
    );
    let web = workload_page(&f, "shop", "web").unwrap();
    assert!(web.contains("data-ooms=\"3\""));
    assert!(
        web.contains("class=\"request\"") && web.contains("class=\"target\""),
        "{web}"
    );
    assert!(
        web.contains("data-value=\"0.25\""),
        "the target line at 250m: {web}"
    );
    assert!(workload_page(&f, "shop", "missing").is_none());
    let json = serde_json::to_string(&f).unwrap();
    let back: Fleet = serde_json::from_str(&json).unwrap();
    assert_eq!(back, f);
    assert!(json.contains("\"cpuMillicores\":250"), "{json}");
}

#[test]
fn unsized_pods_actions_and_family_prices_show_on_the_workload_page() {
    let mut w = workload("shop", "web", 2);
    w.admitted_unsized = 2;
    w.flags = [Flag::AdmittedUnsized].into();
    w.instance_family = Some("m6i".into());
    w.updater_actions = vec![UpdaterAction {
        time: "2026-11-29T00:00:00Z".into(),
        type_: "Normal".into(),
        reason: "InPlaceResizedByVPA".into(),
        object: "Pod/web-1".into(),
        message: "Pod was resized in place by VPA Updater.".into(),
    }]
    .into();
    let mut f = fleet(vec![w, workload("shop", "api", 1)]);
    f.prices = Prices::default().with_families(&["m6i=1/0"]).unwrap();
    let page = workload_page(&f, "shop", "web").unwrap();
    assert!(
        page.contains("id=\"admitted-unsized\" data-count=\"2\""),
        "{page}"
    );
    assert!(
        page.contains("data-reason=\"InPlaceResizedByVPA\""),
        "{page}"
    );
    assert!(page.contains("Pod/web-1"), "{page}");
    // 2 pods × 500m at 1 per vCPU-hour, 730 hours; memory free on m6i.
    assert!(page.contains("730.00 USD requested"), "{page}");
    let api = workload_page(&f, "shop", "api").unwrap();
    assert!(api.contains("id=\"no-actions\""), "{api}");
    let fleet_html = fleet_page(&f, &FleetQuery::default());
    assert!(
        fleet_html.contains("data-flag=\"AdmittedUnsized\" data-count=\"1\""),
        "{fleet_html}"
    );
    assert!(fleet_html.contains("data-family=\"m6i\""), "{fleet_html}");
    // The family's prices are the web workload's; the other workload keeps the defaults.
    let s = tailor_dashboard::summary::Summary::of(&f.workloads, &f.prices);
    let api_monthly = f.prices.monthly(Resources::new(500, 512 << 20));
    assert!((s.fleet.requested_monthly - (730.0 + api_monthly)).abs() < 1e-6);
}

#[test]
fn the_kubectl_line_names_the_vpas_own_api_group() {
    let mut upstream = workload("shop", "legacy", 1);
    upstream.api_group = ApiGroup::Upstream;
    let f = fleet(vec![workload("shop", "web", 1), upstream]);
    let tailor = workload_page(&f, "shop", "web").unwrap();
    assert!(
        tailor.contains(
            "kubectl get verticalpodautoscalers.autoscaling.tailor.dev -n shop web -o yaml"
        ),
        "{tailor}"
    );
    let legacy = workload_page(&f, "shop", "legacy").unwrap();
    assert!(
        legacy.contains(
            "kubectl get verticalpodautoscalers.autoscaling.k8s.io -n shop legacy -o yaml"
        ),
        "{legacy}"
    );
    // Tailor's own group is the default, so the twin leaves it out.
    let json = serde_json::to_value(&f.workloads).unwrap();
    assert!(json[0].get("apiGroup").is_none() && json[1]["apiGroup"] == "autoscaling.k8s.io");
}
