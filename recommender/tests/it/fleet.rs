//! The fleet controller over in-memory sources and a recording writer: what it writes, in which order,
//! at which rate, which events it records once, and what it never touches.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace as KubeNamespace;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::json;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::leader::Fence;
use tailor_kube::upstream_vpa::{UpstreamVpa, UpstreamVpas};
use tailor_recommender::fleet::controller::FleetController;
use tailor_recommender::fleet::metrics::FleetMetrics;
use tailor_recommender::fleet::writer::{EventTarget, FleetEvent, FleetWriter, WriteError};
use tailor_recommender::fleet::{FleetFlags, FleetView};
use tailor_recommender::views::watched_vpa::WatchedVpa;
use tailor_testkit::fixtures::VpaFixture;

/// One call the controller made.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    Apply {
        name: String,
        force: bool,
        mode: String,
    },
    Delete {
        name: String,
        uid: String,
    },
    Event {
        reason: &'static str,
        target: EventTarget,
        note: String,
    },
}

/// Records calls; answers a create of `conflict` with a conflict.
#[derive(Clone, Default)]
struct Recorder {
    calls: Arc<Mutex<Vec<Call>>>,
    conflict: Option<String>,
}

impl Recorder {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
}

impl FleetWriter for Recorder {
    async fn apply(&self, vpa: &VerticalPodAutoscaler, force: bool) -> Result<(), WriteError> {
        let name = vpa.metadata.name.clone().unwrap_or_default();
        if self.conflict.as_deref() == Some(name.as_str()) && !force {
            return Err(WriteError::Conflict("owned by kubectl".into()));
        }
        let mode = tailor_core::policy::update_mode(&vpa.spec).to_string();
        self.calls
            .lock()
            .expect("lock")
            .push(Call::Apply { name, force, mode });
        Ok(())
    }

    async fn delete(&self, _: &str, name: &str, uid: &str) -> Result<(), WriteError> {
        let call = Call::Delete {
            name: name.into(),
            uid: uid.into(),
        };
        self.calls.lock().expect("lock").push(call);
        Ok(())
    }

    async fn event(&self, e: &FleetEvent) {
        let call = Call::Event {
            reason: e.reason,
            target: e.target.clone(),
            note: e.note.clone(),
        };
        self.calls.lock().expect("lock").push(call);
    }
}

fn namespace(
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> KubeNamespace {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}}),
    )
    .expect("namespace")
}

fn deployment(ns: &str, name: &str, annotations: serde_json::Value) -> DynamicObject {
    let resource = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let mut o = DynamicObject::new(name, &resource).within(ns);
    o.metadata.uid = Some(format!("uid-{name}"));
    o.metadata.annotations = serde_json::from_value(annotations).ok();
    o
}

fn vpa(
    ns: &str,
    name: &str,
    target: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> WatchedVpa {
    let fixture = VpaFixture::new(ns, name)
        .uid(&format!("vpa-uid-{name}"))
        .labels(labels)
        .annotations(annotations)
        .target("Deployment", target)
        .mode("Off");
    serde_json::from_value(fixture.json()).expect("vpa")
}

/// A controller over one namespace `shop` labelled `mode`, with `deployments` and `vpas`, everything
/// listed; covered kinds other than Deployments are listed empty.
struct Fixture {
    view: FleetView,
    store: Writer<WatchedVpa>,
    writer: Recorder,
    metrics: Arc<FleetMetrics>,
    controller: FleetController<Recorder>,
}

fn fixture(flags: &[&str], writer: Recorder, upstream: UpstreamVpas) -> Fixture {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        fleet: FleetFlags,
    }
    let cli = <Cli as clap::Parser>::try_parse_from(["x", "--fleet-enabled"].iter().chain(flags))
        .expect("flags");
    let profiles = vec!["upstream".to_owned(), "cautious".to_owned()];
    let config = cli
        .fleet
        .config(Some("tailor"), profiles)
        .expect("valid")
        .expect("on");
    let view = FleetView::new(&config.kinds);
    view.apply_namespace(Event::Init);
    view.apply_namespace(Event::InitDone);
    let covered: Vec<String> = config.kinds.iter().map(|k| k.kind.clone()).collect();
    for i in 0..config.kinds.len() {
        view.apply_workload(i, Event::Init, &covered);
        view.apply_workload(i, Event::InitDone, &covered);
    }
    let mut store = Writer::default();
    store.apply_watcher_event(&Event::Init);
    store.apply_watcher_event(&Event::InitDone);
    let metrics = Arc::new(FleetMetrics::default());
    let controller = FleetController::new(
        config,
        view.clone(),
        store.as_reader(),
        upstream,
        None,
        writer.clone(),
        Fence::unfenced(),
        metrics.clone(),
    );
    Fixture {
        view,
        store,
        writer,
        metrics,
        controller,
    }
}

fn covered() -> Vec<String> {
    [
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "CronJob",
        "Rollout",
    ]
    .map(String::from)
    .to_vec()
}

fn applies(calls: &[Call]) -> Vec<(String, bool, String)> {
    (calls.iter())
        .filter_map(|c| match c {
            Call::Apply { name, force, mode } => Some((name.clone(), *force, mode.clone())),
            _ => None,
        })
        .collect()
}

fn events(calls: &[Call]) -> Vec<&'static str> {
    (calls.iter())
        .filter_map(|c| match c {
            Call::Event { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn nothing_is_planned_before_upstream_vpas_are_listed_then_each_workload_gets_one_vpa_once() {
    let f = fixture(&[], Recorder::default(), UpstreamVpas::pending());
    f.view.apply_namespace(Event::Apply(namespace(
        "shop",
        json!({"tailor.dev/vpa": "Off"}),
        json!({}),
    )));
    for name in ["web", "api"] {
        f.view.apply_workload(
            0,
            Event::Apply(deployment("shop", name, json!({}))),
            &covered(),
        );
    }
    assert!(
        !f.controller.ready(),
        "upstream VPAs not listed yet: a VPA created now could be a second autoscaler"
    );
    let mut f = fixture(&[], Recorder::default(), UpstreamVpas::fixed([]));
    f.view.apply_namespace(Event::Apply(namespace(
        "shop",
        json!({"tailor.dev/vpa": "Off"}),
        json!({}),
    )));
    for name in ["web", "api"] {
        f.view.apply_workload(
            0,
            Event::Apply(deployment("shop", name, json!({}))),
            &covered(),
        );
    }
    assert!(f.controller.ready());
    let report = f.controller.pass(Duration::from_secs(30)).await;
    assert_eq!(
        (report.planned_applies, report.written, report.pending),
        (2, 2, 0)
    );
    let calls = f.writer.take();
    assert_eq!(
        applies(&calls),
        [
            ("api-deployment".into(), false, "Off".into()),
            ("web-deployment".into(), false, "Off".into())
        ]
    );
    assert_eq!(events(&calls), ["FleetCreated", "FleetCreated"]);
    let Call::Event { note, target, .. } = &calls[1] else {
        panic!("an event: {calls:?}")
    };
    assert_eq!(
        target,
        &EventTarget::Vpa("shop".into(), "api-deployment".into())
    );
    assert_eq!(
        note,
        "created for Deployment api in mode Off by namespace shop label tailor.dev/vpa=Off"
    );
    // The watch has not shown the VPAs yet: the next pass does not write them again.
    let report = f.controller.pass(Duration::from_secs(30)).await;
    assert_eq!((report.planned_applies, report.written), (2, 0));
    assert!(f.writer.take().is_empty());
    // Once the watch shows them, nothing is written either (and the memo of the writes is let go).
    let managed = json!({"app.kubernetes.io/managed-by": "tailor"});
    let policy = json!({"tailor.dev/fleet-policy": "namespace shop label tailor.dev/vpa=Off"});
    for name in ["web", "api"] {
        let mut v = vpa(
            "shop",
            &format!("{name}-deployment"),
            name,
            managed.clone(),
            policy.clone(),
        );
        v.spec.target_ref = Some(tailor_crds::CrossVersionObjectReference {
            api_version: Some("apps/v1".into()),
            kind: "Deployment".into(),
            name: name.into(),
        });
        f.store.apply_watcher_event(&Event::Apply(v));
    }
    let report = f.controller.pass(Duration::from_secs(30)).await;
    assert_eq!(
        (report.planned_applies, report.written),
        (0, 0),
        "{report:?}"
    );
    let text = gauge(&f.metrics, "Off");
    assert_eq!(text, 2);
}

fn gauge(metrics: &FleetMetrics, mode: &'static str) -> i64 {
    metrics.vpas.get_or_create(&vec![("mode", mode)]).get()
}

/// On tokio's paused clock (time moves only when every task waits), so the count is the bucket's and the
/// budget's, whatever the speed of the machine.
#[tokio::test(start_paused = true)]
async fn writes_keep_to_the_rate_and_a_pass_stops_at_its_budget() {
    let mut f = fixture(
        &["--fleet-qps", "20", "--fleet-burst", "1"],
        Recorder::default(),
        UpstreamVpas::fixed([]),
    );
    f.view.apply_namespace(Event::Apply(namespace(
        "shop",
        json!({"tailor.dev/vpa": "Off"}),
        json!({}),
    )));
    for i in 0..40 {
        f.view.apply_workload(
            0,
            Event::Apply(deployment("shop", &format!("w{i:02}"), json!({}))),
            &covered(),
        );
    }
    let started = tokio::time::Instant::now();
    let report = f.controller.pass(Duration::from_millis(500)).await;
    let took = started.elapsed();
    // 20 per second with one token saved: a write at 0 ms and one every 50 ms; the write begun before the
    // half second ends is the last (the eleventh), the rest are left for the next pass.
    assert!(
        (10..=11).contains(&report.written),
        "{report:?} in {took:?}"
    );
    assert_eq!(report.pending, 40 - report.written);
    assert!(
        took >= Duration::from_millis(450) && took <= Duration::from_millis(550),
        "{took:?}"
    );
}

#[tokio::test]
async fn the_users_vpas_are_never_touched_and_created_ones_follow_the_label() {
    let upstream = UpstreamVpas::fixed(UpstreamVpa::of(
        serde_json::from_value(json!({"metadata": {"name": "old", "namespace": "shop"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "legacy"}, "updatePolicy": {"updateMode": "Off"}}}))
        .expect("upstream"),
    ));
    let mut f = fixture(
        &[],
        Recorder {
            conflict: Some("taken-deployment".into()),
            ..Recorder::default()
        },
        upstream,
    );
    f.view.apply_namespace(Event::Apply(namespace(
        "shop",
        json!({"tailor.dev/vpa": "Recreate"}),
        json!({}),
    )));
    for (name, annotations) in [
        ("web", json!({})),
        ("mine", json!({})),
        ("legacy", json!({})),
        ("quiet", json!({"tailor.dev/vpa": "false"})),
        ("taken", json!({})),
    ] {
        f.view.apply_workload(
            0,
            Event::Apply(deployment("shop", name, annotations)),
            &covered(),
        );
    }
    let managed = json!({"app.kubernetes.io/managed-by": "tailor"});
    let policy = json!({"tailor.dev/fleet-policy": "namespace shop label tailor.dev/vpa=Off"});
    for v in [
        vpa("shop", "users-vpa", "mine", json!({}), json!({})),
        // Created by the fleet before the user wrote theirs.
        vpa(
            "shop",
            "mine-deployment",
            "mine",
            managed.clone(),
            policy.clone(),
        ),
        // Created by the fleet in mode Off: the namespace now says Recreate.
        vpa(
            "shop",
            "web-deployment",
            "web",
            managed.clone(),
            policy.clone(),
        ),
    ] {
        f.store.apply_watcher_event(&Event::Apply(v));
    }
    f.controller.pass(Duration::from_secs(30)).await;
    let calls = f.writer.take();
    // Deletes first, with the UID seen; the changed VPA forced back, the new one never forced.
    let first_write = calls.iter().find(|c| !matches!(c, Call::Event { .. }));
    assert_eq!(
        first_write,
        Some(&Call::Delete {
            name: "mine-deployment".into(),
            uid: "vpa-uid-mine-deployment".into()
        })
    );
    assert_eq!(
        applies(&calls),
        [("web-deployment".into(), true, "Recreate".into())]
    );
    let mut reasons = events(&calls);
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "FleetDeleted",
            "FleetSkipped",
            "FleetSkipped",
            "FleetSkipped",
            "FleetUpdated"
        ]
    );
    // A creation over a VPA someone else wrote (not in the store yet) is refused, not forced.
    let conflicts = f
        .metrics
        .writes
        .get_or_create(&vec![("action", "create"), ("result", "conflict")])
        .get();
    assert_eq!(conflicts, 1);
    let skipped = f
        .metrics
        .skipped
        .get_or_create(&vec![("reason", "TargetedByUpstreamVPA")])
        .get();
    assert_eq!(skipped, 1);
    // The skips are reported once, not every pass.
    f.controller.pass(Duration::from_secs(30)).await;
    assert!(
        events(&f.writer.take())
            .iter()
            .all(|r| *r != "FleetSkipped")
    );
    // Label removed: the fleet's VPAs go (those the store shows), the user's stays.
    f.view
        .apply_namespace(Event::Apply(namespace("shop", json!({}), json!({}))));
    f.controller.pass(Duration::from_secs(30)).await;
    let deleted: Vec<String> = (f.writer.take().into_iter())
        .filter_map(|c| match c {
            Call::Delete { name, .. } => Some(name),
            _ => None,
        })
        .collect();
    assert_eq!(
        deleted,
        ["web-deployment"],
        "mine-deployment was deleted already; users-vpa is the user's"
    );
}

#[tokio::test]
async fn a_refused_policy_is_one_warning_and_a_kind_not_listed_is_left_alone() {
    let mut f = fixture(&[], Recorder::default(), UpstreamVpas::fixed([]));
    f.view.apply_namespace(Event::Apply(namespace(
        "bad",
        json!({"tailor.dev/vpa": "Sometimes"}),
        json!({}),
    )));
    f.view.apply_namespace(Event::Apply(namespace(
        "tailor",
        json!({"tailor.dev/vpa": "Off"}),
        json!({}),
    )));
    f.view.apply_workload(
        0,
        Event::Apply(deployment("bad", "web", json!({}))),
        &covered(),
    );
    f.view.apply_workload(
        0,
        Event::Apply(deployment("tailor", "tailor-recommender", json!({}))),
        &covered(),
    );
    // A malformed default in a third namespace, and a good one beside them all.
    let malformed = json!({"tailor.dev/min-allowed": "memory=lots"});
    for (ns, annotations) in [("typo", malformed), ("good", json!({}))] {
        let labels = json!({"tailor.dev/vpa": "Off"});
        f.view
            .apply_namespace(Event::Apply(namespace(ns, labels, annotations)));
        let web = deployment(ns, "web", json!({}));
        f.view.apply_workload(0, Event::Apply(web), &covered());
    }
    f.controller.pass(Duration::from_secs(30)).await;
    let calls = f.writer.take();
    // Nothing from the refused policies; the rest of the fleet is unaffected.
    assert_eq!(
        applies(&calls),
        [("web-deployment".into(), false, "Off".into())]
    );
    let notes: Vec<String> = (calls.iter())
        .filter_map(|c| match c {
            Call::Event {
                reason: "FleetPolicyRefused",
                note,
                ..
            } => Some(note.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 3, "{calls:?}");
    let typo = |n: &String| n.contains("namespace typo") && n.contains("tailor.dev/min-allowed");
    assert!(notes.iter().any(typo), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("tailor.dev/vpa=\"Sometimes\" is not a mode")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("namespace tailor is protected")),
        "{notes:?}"
    );
    f.controller.pass(Duration::from_secs(30)).await;
    let again = f.writer.take();
    assert!(
        events(&again).is_empty(),
        "refusals are reported once: {again:?}"
    );
    // A created VPA whose kind has no list is neither kept nor deleted.
    let mut f = fixture(&[], Recorder::default(), UpstreamVpas::fixed([]));
    let managed = json!({"app.kubernetes.io/managed-by": "tailor"});
    let policy = json!({"tailor.dev/fleet-policy": "x"});
    let mut rollout = vpa("shop", "r-rollout", "r", managed, policy);
    if let Some(t) = rollout.spec.target_ref.as_mut() {
        t.kind = "Widget".into();
    }
    f.store.apply_watcher_event(&Event::Apply(rollout));
    f.view.apply_namespace(Event::Apply(namespace(
        "shop",
        json!({"tailor.dev/vpa": "Off"}),
        json!({}),
    )));
    f.controller.pass(Duration::from_secs(30)).await;
    assert!(f.writer.take().is_empty());
}
