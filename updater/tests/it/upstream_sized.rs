//! A workload an upstream VPA covers too (README, "Moving from upstream VPA"). When the upstream VPA is
//! seen (mode other than `Off`, same namespace and target), the updater stands down on the workload from
//! the first iteration: no eviction, no resize, whatever the pods carry, and the Tailor VPA's
//! `UpdatesBlocked` condition names the upstream VPA, announced by one event with the same text. Without
//! it, pods that carry one of upstream's marks (`vpaUpdates`, `vpaInPlaceUpdated`, `vpaObservedContainers`)
//! are left alone — an evicted pod would come back with upstream's numbers, forever. `tailor plan` says
//! the same (the plan lists the event in its notes).

use std::time::Duration;

use serde_json::{Value, json};
use tailor_kube::rate::RateSettings;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};
use tailor_updater::decisions::config::RestrictionConfig;
use tailor_updater::iteration::IterationConfig;
use tailor_updater::preview::plan::{PlanSettings, plan};
use tailor_updater::preview::snapshot::Snapshot;

/// Pod `name` of Deployment `web` (ReplicaSet `web-1`), requests below the VPA's range; `upstream` adds
/// upstream's annotation.
fn pod(name: &str, upstream: bool) -> String {
    let annotations = if upstream {
        json!({"vpaUpdates": "Pod resources updated by web: container 0: cpu request, memory request"})
    } else {
        json!({})
    };
    pod_with(name, annotations)
}

/// Pod `name` of Deployment `web` with `annotations`.
fn pod_with(name: &str, annotations: Value) -> String {
    PodFixture::new("shop", name)
        .uid(&format!("uid-{name}"))
        .label("app", "web")
        .annotations(annotations)
        .owner("ReplicaSet", "web-1")
        .owner_uid("uid-rs")
        .container(
            "app",
            json!({"cpu": "100m", "memory": "300Mi"}),
            Value::Null,
        )
        .image("app")
        .running_on("node-1", "2026-01-01T00:00:00Z")
        .condition("Ready", "True")
        .manifest()
}

fn snapshot(upstream_sized: &[bool]) -> Snapshot {
    let pods: Vec<String> = (upstream_sized.iter().enumerate())
        .map(|(i, upstream)| pod(&format!("web-{i}"), *upstream))
        .collect();
    snapshot_of("Recreate", &pods, "")
}

/// Deployment `web` (ReplicaSet `web-1`), its Tailor VPA in `mode`, `pods`, and `more` documents.
fn snapshot_of(mode: &str, pods: &[String], more: &str) -> Snapshot {
    let mut text = String::from(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: uid-web}
spec: {replicas: 4, selector: {matchLabels: {app: web}}, template: {}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-1
  namespace: shop
  uid: uid-rs
  labels: {app: web}
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: uid-web, controller: true}]
spec: {replicas: 4, selector: {matchLabels: {app: web}}, template: {}}
"#,
    );
    text.push_str(
        &VpaFixture::new("shop", "web")
            .created("2026-01-01T00:00:00Z")
            .target("Deployment", "web")
            .mode(mode)
            .recommendation_bounds(
                "app",
                ("400m", "400Mi"),
                ("500m", "512Mi"),
                ("600m", "600Mi"),
            )
            .manifest(),
    );
    for pod in pods {
        text.push_str(pod);
    }
    text.push_str(more);
    let mut s = Snapshot::default();
    s.add_file("snapshot.yaml", &text).unwrap();
    s
}

fn settings() -> PlanSettings {
    PlanSettings {
        iteration: IterationConfig::default(),
        restriction: RestrictionConfig::default(),
        rate: RateSettings::from_flags(-1.0, 1),
        interval: Duration::from_secs(60),
        status_lease: None,
        now: "2026-01-10T12:00:00Z".parse().unwrap(),
        floor: None,
        resize_rules: Default::default(),
    }
}

#[tokio::test]
async fn pods_upstream_sized_are_left_alone_and_the_vpa_says_why() {
    let p = plan(&snapshot(&[true, true, false, false]), &settings()).await;
    for pod in &p.pods {
        let upstream = pod.pod == "web-0" || pod.pod == "web-1";
        if upstream {
            assert_eq!(pod.action, "skip", "{pod:?}");
            assert_eq!(
                pod.reason.as_deref(),
                Some("sized by upstream VPA (vpaUpdates)"),
                "{pod:?}"
            );
        }
    }
    // The pods Tailor's webhook sized are still updated.
    assert!(
        p.pods
            .iter()
            .any(|pod| pod.action == "evict" && (pod.pod == "web-2" || pod.pod == "web-3")),
        "{:?}",
        p.pods
    );
    let note = p
        .notes
        .iter()
        .find(|n| n.contains("SizedByUpstreamVPA"))
        .unwrap_or_else(|| panic!("no SizedByUpstreamVPA event in {:?}", p.notes));
    assert!(note.contains("2 of 4 pods"), "{note}");
}

#[tokio::test]
async fn without_upstreams_annotation_nothing_changes() {
    let p = plan(&snapshot(&[false, false, false, false]), &settings()).await;
    assert!(
        p.pods.iter().any(|pod| pod.action == "evict"),
        "{:?}",
        p.pods
    );
    assert!(
        !p.notes.iter().any(|n| n.contains("SizedByUpstreamVPA")),
        "{:?}",
        p.notes
    );
}

/// An upstream VPA `name` on `kind`/`target` in namespace `shop`, in `mode` (`None`: no updatePolicy).
fn upstream_vpa(name: &str, kind: &str, target: &str, mode: Option<&str>) -> String {
    let policy = mode.map_or(String::new(), |m| {
        format!("\n  updatePolicy: {{updateMode: \"{m}\"}}")
    });
    format!(
        r#"
---
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata: {{name: {name}, namespace: shop}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: {kind}, name: {target}}}{policy}
"#
    )
}

/// Four pods of `web` Tailor's webhook sized (no mark of upstream).
fn plain_pods() -> Vec<String> {
    (0..4).map(|i| pod(&format!("web-{i}"), false)).collect()
}

fn in_place_settings() -> PlanSettings {
    let mut s = settings();
    s.iteration.gates.in_place = true;
    s
}

#[tokio::test]
async fn beside_an_acting_upstream_vpa_nothing_is_updated_and_the_vpa_names_it() {
    for mode in ["InPlaceOrRecreate", "Recreate"] {
        let upstream = upstream_vpa("web-upstream", "Deployment", "web", Some(mode));
        let p = plan(
            &snapshot_of(mode, &plain_pods(), &upstream),
            &in_place_settings(),
        )
        .await;
        assert!(p.pods.is_empty(), "{mode}: {:?}", p.pods);
        assert_eq!(p.skipped_vpas.len(), 1, "{mode}");
        assert_eq!(p.skipped_vpas[0].reason, "upstream VPA shop/web-upstream");
        let events: Vec<&String> = p
            .notes
            .iter()
            .filter(|n| n.contains("SizedByUpstreamVPA"))
            .collect();
        assert_eq!(events.len(), 1, "{mode}: {:?}", p.notes);
        assert!(
            events[0].contains("upstream VPA shop/web-upstream (autoscaling.k8s.io/v1"),
            "{}",
            events[0]
        );
    }
}

#[tokio::test]
async fn an_upstream_vpa_without_update_policy_counts_as_acting() {
    // Upstream's default mode is Auto (evictions).
    let upstream = upstream_vpa("web-upstream", "Deployment", "web", None);
    let p = plan(
        &snapshot_of("Recreate", &plain_pods(), &upstream),
        &settings(),
    )
    .await;
    assert!(p.pods.is_empty(), "{:?}", p.pods);
}

#[tokio::test]
async fn an_upstream_vpa_that_is_off_or_elsewhere_changes_nothing() {
    for upstream in [
        upstream_vpa("web-upstream", "Deployment", "web", Some("Off")),
        upstream_vpa("api", "Deployment", "api", Some("Recreate")),
        upstream_vpa("web-sts", "StatefulSet", "web", Some("Recreate")),
    ] {
        let p = plan(
            &snapshot_of("Recreate", &plain_pods(), &upstream),
            &settings(),
        )
        .await;
        assert!(
            p.pods.iter().any(|pod| pod.action == "evict"),
            "{upstream}: {:?}",
            p.pods
        );
        assert!(p.skipped_vpas.is_empty(), "{:?}", p.skipped_vpas);
        assert!(
            !p.notes.iter().any(|n| n.contains("SizedByUpstreamVPA")),
            "{:?}",
            p.notes
        );
    }
}

#[tokio::test]
async fn every_mark_upstream_leaves_on_a_pod_is_recognised() {
    for (mark, annotations) in [
        ("vpaInPlaceUpdated", json!({"vpaInPlaceUpdated": "true"})),
        (
            "vpaObservedContainers",
            json!({"vpaObservedContainers": "app"}),
        ),
        (
            "vpaUpdates",
            json!({"vpaUpdates": "Pod resources updated by web"}),
        ),
    ] {
        let pods = [pod_with("web-0", annotations), pod("web-1", false)];
        let p = plan(
            &snapshot_of("InPlaceOrRecreate", &pods, ""),
            &in_place_settings(),
        )
        .await;
        let web0 = p.pods.iter().find(|pod| pod.pod == "web-0").expect("web-0");
        assert_eq!(web0.action, "skip", "{mark}: {web0:?}");
        assert_eq!(
            web0.reason.as_deref(),
            Some(format!("sized by upstream VPA ({mark})").as_str())
        );
        let note = p
            .notes
            .iter()
            .find(|n| n.contains("SizedByUpstreamVPA"))
            .unwrap_or_else(|| panic!("{mark}: no event in {:?}", p.notes));
        assert!(
            note.contains(&format!(
                "1 of 2 pods carry upstream VPA's annotation {mark}"
            )),
            "{note}"
        );
    }
}

/// The binary's loop over the same objects: iterations of [`Updater::iterate`] with an actuator that
/// records what it is asked to do and, like the VPA cache, shows the conditions it wrote (or not, when
/// `cache_lags`).
mod loop_runs {
    use std::sync::{Arc, Mutex};

    use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCondition};
    use tailor_kube::upstream_vpa::UpstreamVpas;
    use tailor_updater::decisions::config::RestrictionConfig;
    use tailor_updater::decisions::resize::ResizePlan;
    use tailor_updater::iteration::{ActError, Actuator, UpdaterState};
    use tailor_updater::preview::plan::SnapshotReplicas;
    use tailor_updater::preview::snapshot::Snapshot;
    use tailor_updater::process::metrics::Metrics;
    use tailor_updater::run_loop::{StatusCheck, Updater};
    use tailor_updater::views::cache_view::CacheView;
    use tailor_updater::views::pods::CachedPod;
    use tailor_updater::writers::events::UpdaterEvent;

    type Vpas = Arc<Mutex<Vec<Arc<VerticalPodAutoscaler>>>>;

    pub struct Recorder {
        pub evictions: usize,
        pub resizes: usize,
        pub events: Vec<UpdaterEvent>,
        pub conditions: Vec<VerticalPodAutoscalerCondition>,
        vpas: Vpas,
        cache_lags: bool,
    }

    impl Actuator for Recorder {
        async fn wait_eviction(&mut self) -> Result<(), ActError> {
            Ok(())
        }
        async fn wait_in_place(&mut self) -> Result<(), ActError> {
            Ok(())
        }
        async fn evict(&mut self, _pod: &CachedPod) -> Result<(), ActError> {
            self.evictions += 1;
            Ok(())
        }
        async fn resize(&mut self, _pod: &CachedPod, _plan: &ResizePlan) -> Result<(), ActError> {
            self.resizes += 1;
            Ok(())
        }
        fn event(&mut self, _pod: &CachedPod, _vpa: &VerticalPodAutoscaler, _e: UpdaterEvent) {}
        fn vpa_event(&mut self, _vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
            self.events.push(event);
        }
        async fn set_conditions(
            &mut self,
            vpa: &VerticalPodAutoscaler,
            conditions: Vec<VerticalPodAutoscalerCondition>,
        ) -> Result<(), ActError> {
            self.conditions = conditions.clone();
            if !self.cache_lags {
                let mut updated = vpa.clone();
                updated
                    .status
                    .get_or_insert_with(Default::default)
                    .conditions = Some(conditions);
                *self.vpas.lock().unwrap() = vec![Arc::new(updated)];
            }
            Ok(())
        }
    }

    /// The updater over `s` (in-place gate on), its actuator a [`Recorder`].
    pub fn updater(
        s: &Snapshot,
        cache_lags: bool,
    ) -> Updater<CacheView<SnapshotReplicas>, Recorder, StatusCheck> {
        let mut config = super::in_place_settings().iteration;
        config.gates.in_place = true;
        let now = super::settings().now;
        let mut view = CacheView::new(
            s.index.index(),
            SnapshotReplicas::of(s),
            RestrictionConfig::default(),
            config.gates,
            now,
        );
        view.upstream = Some(UpstreamVpas::fixed(s.upstream_vpas.clone()));
        let vpas: Vpas = Arc::new(Mutex::new(
            s.index.vpas().iter().cloned().map(Arc::new).collect(),
        ));
        let (listed, pods) = (vpas.clone(), s.pods.clone());
        Updater {
            config,
            state: UpdaterState::default(),
            view,
            actuator: Recorder {
                evictions: 0,
                resizes: 0,
                events: Vec::new(),
                conditions: Vec::new(),
                vpas,
                cache_lags,
            },
            status: None,
            vpas: Box::new(move || listed.lock().unwrap().clone()),
            pods: Box::new(move || pods.clone()),
            metrics: Arc::new(Metrics::new()),
        }
    }
}

#[tokio::test]
async fn the_loop_stands_down_with_one_event_that_says_what_the_condition_says() {
    for (mode, cache_lags) in [
        ("InPlaceOrRecreate", false),
        ("Recreate", false),
        ("InPlaceOrRecreate", true),
    ] {
        let upstream = upstream_vpa("web-upstream", "Deployment", "web", Some(mode));
        // Some pods carry upstream's marks, some do not: the upstream VPA decides, not the pods.
        let pods = [
            pod("web-0", false),
            pod_with("web-1", json!({"vpaInPlaceUpdated": "true"})),
            pod("web-2", true),
        ];
        let s = snapshot_of(mode, &pods, &upstream);
        let mut up = loop_runs::updater(&s, cache_lags);
        let now = settings().now;
        for _ in 0..5 {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            up.iterate(now, deadline).await;
        }
        let a = &up.actuator;
        assert_eq!((a.evictions, a.resizes), (0, 0), "{mode}");
        assert_eq!(
            a.events.len(),
            1,
            "{mode}, cache lags {cache_lags}: {:?}",
            a.events
        );
        let blocked = a
            .conditions
            .iter()
            .find(|c| c.type_ == "UpdatesBlocked")
            .expect("UpdatesBlocked");
        assert_eq!(blocked.reason.as_deref(), Some("SizedByUpstreamVPA"));
        assert_eq!(
            blocked.message.as_deref(),
            Some(a.events[0].message.as_str())
        );
        assert_eq!(a.events[0].reason, "SizedByUpstreamVPA");
        assert!(
            a.events[0]
                .message
                .starts_with("upstream VPA shop/web-upstream "),
            "{}",
            a.events[0].message
        );
    }
}

#[tokio::test]
async fn the_loop_acts_beside_an_upstream_vpa_that_is_off() {
    let upstream = upstream_vpa("web-upstream", "Deployment", "web", Some("Off"));
    let s = snapshot_of("InPlaceOrRecreate", &plain_pods(), &upstream);
    let mut up = loop_runs::updater(&s, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    up.iterate(settings().now, deadline).await;
    assert!(up.actuator.resizes > 0, "no resize");
    assert!(up.actuator.events.is_empty(), "{:?}", up.actuator.events);
}

#[tokio::test]
async fn nothing_is_updated_or_written_until_upstream_vpas_are_listed() {
    let s = snapshot_of("InPlaceOrRecreate", &plain_pods(), "");
    let mut up = loop_runs::updater(&s, false);
    up.view.upstream = Some(tailor_kube::upstream_vpa::UpstreamVpas::pending());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let outcome = up.iterate(settings().now, deadline).await;
    let a = &up.actuator;
    assert_eq!((a.evictions, a.resizes), (0, 0));
    // No condition write either: whatever the VPA says stays until the answer is known.
    assert!(a.conditions.is_empty() && a.events.is_empty());
    let tailor_updater::run_loop::Outcome::Ran(report) = outcome else {
        panic!("the iteration ran");
    };
    assert_eq!(report.skipped_vpas[0].2, "upstream VPAs not listed yet");
    // Once listed (none there), the updater acts.
    up.view.upstream = Some(tailor_kube::upstream_vpa::UpstreamVpas::fixed([]));
    up.iterate(settings().now, deadline).await;
    assert!(up.actuator.resizes > 0);
}
