use k8s_openapi::api::core::v1::{LimitRange, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_core::sizing::{
    OBSERVED_CONTAINERS_ANNOTATION, PatchOptions, UPDATES_ANNOTATION, UPSTREAM_UPDATES_ANNOTATION,
};
use tailor_crds::VerticalPodAutoscaler;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};

use super::*;
use tailor_kube::index::{Index, IndexObjects};

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn web_vpa(policies: Value) -> VerticalPodAutoscaler {
    VpaFixture::new("default", "web-vpa")
        .created("2024-06-01T00:00:00Z")
        .target("Deployment", "web")
        .container_policies(policies)
        .recommendation("app", "200m", "256Mi")
        .recommendation("proxy", "50m", "64Mi")
        .build()
}

fn web_pod() -> Value {
    PodFixture::generated("default", "web-abc-")
        .label("app", "web")
        .owner("ReplicaSet", "web-abc")
        .owner_uid("1")
        .container("app", json!({"cpu": "100m"}), json!({"cpu": "400m"}))
        .init_container(json!({"name": "proxy", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}))
        .json()
}

fn apply(pod_json: &Value, patch: &Patch) -> Value {
    let mut doc = pod_json.clone();
    json_patch::patch(&mut doc, &patch.0).unwrap();
    doc
}

#[test]
fn native_sidecars_only_when_asked() {
    let p = web_pod();
    let v = web_vpa(json!([]));
    let off = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
    let doc = apply(&p, &off.patch);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "200m"
    );
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "800m"
    );
    assert_eq!(
        doc["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
        "10m"
    );
    assert_eq!(
        doc["metadata"]["annotations"][OBSERVED_CONTAINERS_ANNOTATION],
        "app"
    );

    let options = PatchOptions {
        native_sidecars: true,
        ..Default::default()
    };
    let on = patch_pod(&pod(p.clone()), &v, &[], &options).unwrap();
    let doc = apply(&p, &on.patch);
    assert_eq!(
        doc["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
        "50m"
    );
    assert_eq!(
        doc["spec"]["initContainers"][0]["resources"]["requests"]["memory"],
        "64Mi"
    );
    let updates = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(
        updates.contains("init container 0: cpu request, memory request"),
        "{updates}"
    );
}

#[test]
fn max_limit_request_ratio_only_when_asked() {
    let p = web_pod();
    let v = web_vpa(json!([]));
    let lr: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "lr", "namespace": "default"},
        "spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}
    }))
    .unwrap();
    // The LimitRange has no min/max/default, so upstream ignores it: the 1:4 ratio is kept.
    let plain = patch_pod(
        &pod(p.clone()),
        &v,
        std::slice::from_ref(&lr),
        &PatchOptions::default(),
    )
    .unwrap();
    assert_eq!(
        apply(&p, &plain.patch)["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "800m"
    );
    let options = PatchOptions {
        honor_max_limit_request_ratio: true,
        ..Default::default()
    };
    let capped = patch_pod(&pod(p.clone()), &v, &[lr], &options).unwrap();
    let doc = apply(&p, &capped.patch);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "400m"
    );
    let updates = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(
        updates.contains("cpu limit capped to maxLimitRequestRatio"),
        "{updates}"
    );
}

#[test]
fn upstream_managed_pods_are_left_alone() {
    let mut p = web_pod();
    p["metadata"]["annotations"] =
        json!({"vpaUpdates": "Pod resources updated by x: container 0: cpu request"});
    let result = patch_pod(&pod(p), &web_vpa(json!([])), &[], &PatchOptions::default()).unwrap();
    assert_eq!(result.skipped, Some(SkipReason::UpstreamManaged));
    assert!(result.patch.0.is_empty());
}

#[test]
fn a_pod_upstream_sized_after_tailor_loses_tailors_annotations() {
    // Tailor's webhook ran first, upstream's after it, and the API server calls Tailor again.
    let mut p = web_pod();
    p["metadata"]["annotations"] = json!({
        UPDATES_ANNOTATION: "Pod resources updated by web: container 0: cpu request",
        OBSERVED_CONTAINERS_ANNOTATION: "app",
        "vpaUpdates": "Pod resources updated by web: container 0: cpu request",
        "vpaObservedContainers": "app"
    });
    let result = patch_pod(
        &pod(p.clone()),
        &web_vpa(json!([])),
        &[],
        &PatchOptions::default(),
    )
    .unwrap();
    assert_eq!(result.skipped, Some(SkipReason::UpstreamManaged));
    let mut doc = p;
    json_patch::patch(&mut doc, &result.patch).unwrap();
    let annotations = doc["metadata"]["annotations"].as_object().unwrap();
    let mut keys: Vec<&str> = annotations.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["vpaObservedContainers", "vpaUpdates"], "{doc}");
    assert_eq!(
        doc["spec"],
        web_pod()["spec"],
        "the resources are upstream's, untouched"
    );
}

#[test]
fn a_pod_tailor_sized_earlier_in_the_admission_is_left_as_it_is() {
    // Another webhook changed the pod after Tailor's patch; the API server calls Tailor again.
    let mut p = web_pod();
    p["metadata"]["annotations"] =
        json!({UPDATES_ANNOTATION: "Pod resources updated by web: container 0: cpu request"});
    let result = patch_pod(&pod(p), &web_vpa(json!([])), &[], &PatchOptions::default()).unwrap();
    assert_eq!(result.skipped, Some(SkipReason::AlreadySized));
    assert!(result.patch.0.is_empty());
}

/// The body of a pod CREATE review as the API server sends it.
pub(super) fn pod_request(object: Value, version: &str) -> Vec<u8> {
    crate::review::tests::as_api_server_sends(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": version, "resource": "pods"},
            "name": "", "namespace": "default", "operation": "CREATE", "userInfo": {}, "object": object
        }
    }))
}

fn decoded(body: &[u8]) -> crate::review::Review<'_> {
    crate::review::decode_one_pass(body).unwrap()
}

fn web_index(vpas: Vec<VerticalPodAutoscaler>) -> Index {
    web_index_with(vpas, Vec::new())
}

fn web_index_with(vpas: Vec<VerticalPodAutoscaler>, limit_ranges: Vec<LimitRange>) -> Index {
    let rs = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "2", "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let deploy = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
    }))
    .unwrap();
    Index::from_objects(IndexObjects {
        vpas,
        deployments: vec![deploy],
        replica_sets: vec![rs],
        limit_ranges,
        ..Default::default()
    })
}

#[test]
fn review_pod_end_to_end() {
    let index = web_index(vec![web_vpa(json!([]))]);
    let p = web_pod();
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(p.clone(), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(
        matches!(&outcome, PodOutcome::Patched { vpa, limit_policy: None }
            if vpa.to_string() == "default/web-vpa"),
        "{outcome:?}"
    );
    assert!(resp.allowed);
    let patch: Patch =
        serde_json::from_slice(&resp.patch.as_ref().unwrap().json().unwrap()).unwrap();
    let doc = apply(&p, &patch);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "256Mi"
    );
    assert_eq!(
        doc["metadata"]["annotations"][OBSERVED_CONTAINERS_ANNOTATION],
        "app"
    );
}

#[test]
fn review_pod_never_denies() {
    let index = web_index(vec![web_vpa(json!([]))]);
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v2")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert!(matches!(outcome, PodOutcome::Error(_)));
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(json!({"spec": 3}), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert!(matches!(outcome, PodOutcome::Error(_)));
    // A broken recommendation is an error, not a denial.
    let mut bad = web_vpa(json!([]));
    if let Some(r) = bad.status.as_mut().and_then(|s| s.recommendation.as_mut()) {
        r.container_recommendations.as_mut().unwrap()[0]
            .target
            .insert("cpu".into(), Quantity("lots".into()));
    }
    let index = web_index(vec![bad]);
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert!(matches!(outcome, PodOutcome::Error(_)), "{outcome:?}");
    // No VPA: allowed, no annotations.
    let index = web_index(vec![]);
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert_eq!(outcome, PodOutcome::NoMatch { reason: None });
}

#[test]
fn negative_or_zero_recommendations_never_reach_a_pod() {
    let mut v = web_vpa(json!([]));
    let recs = v
        .status
        .as_mut()
        .and_then(|s| s.recommendation.as_mut())
        .and_then(|r| r.container_recommendations.as_mut())
        .unwrap();
    recs[0].target = [
        ("cpu".to_owned(), Quantity("-1".into())),
        ("memory".to_owned(), Quantity("0".into())),
    ]
    .into();
    let p = web_pod();
    let result = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
    let doc = apply(&p, &result.patch);
    let app = &doc["spec"]["containers"][0]["resources"];
    // The pod keeps what it asked for; nothing negative or zero is written.
    assert_eq!(app["requests"]["cpu"], "100m");
    assert_eq!(app["limits"]["cpu"], "400m");
    assert!(app["requests"].get("memory").is_none(), "{app}");
    let text = serde_json::to_string(&result.patch).unwrap();
    assert!(!text.contains("\"-"), "{text}");
}

#[test]
fn pod_level_resources_are_left_alone_and_said_so() {
    let v = web_vpa(json!([]));
    // CPU budgeted at pod level: memory is sized, CPU (request and limit) is not, and the annotation says why.
    let mut p = web_pod();
    p["spec"]["resources"] = json!({"requests": {"cpu": "150m"}, "limits": {"cpu": "500m"}});
    let result = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
    let doc = apply(&p, &result.patch);
    let app = &doc["spec"]["containers"][0]["resources"];
    assert_eq!(app["requests"]["cpu"], "100m");
    assert_eq!(app["limits"]["cpu"], "400m");
    assert_eq!(app["requests"]["memory"], "256Mi");
    assert_eq!(result.pod_level, ["cpu"]);
    let note = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(
        note.contains("container 0: ")
            && note.contains("memory request")
            && note.ends_with("cpu left alone: the pod sets pod-level resources"),
        "{note}"
    );

    // Both budgeted: no resource operation at all, the reason in the annotation, and its own outcome.
    p["spec"]["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let result = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
    assert!(result.updates.is_empty());
    assert_eq!(result.pod_level, ["cpu", "memory"]);
    let text = serde_json::to_string(&result.patch).unwrap();
    assert!(!text.contains("/resources/"), "{text}");
    assert!(text.contains("memory left alone"), "{text}");

    // A start-up CPU boost would raise the CPU request past the pod's budget: not applied either.
    let mut boosted = web_vpa(json!([]));
    boosted.spec.startup_boost =
        serde_json::from_value(json!({"cpu": {"type": "Factor", "factor": 2, "duration": "60s"}}))
            .unwrap();
    let options = PatchOptions {
        cpu_startup_boost: true,
        ..Default::default()
    };
    p["spec"]["resources"] = json!({"requests": {"cpu": "150m"}});
    let result = patch_pod(&pod(p.clone()), &boosted, &[], &options).unwrap();
    let text = serde_json::to_string(&result.patch).unwrap();
    assert!(!text.contains("cpu-startup-boost"), "{text}");
    assert!(!text.contains("requests/cpu"), "{text}");
}

/// An owner fallback that always gives `answer`.
struct Always(tailor_kube::index::OwnerAnswer);

impl tailor_kube::index::OwnerFallback for Always {
    fn lookup(&self, _: &str, _: &str, _: &str) -> tailor_kube::index::OwnerAnswer {
        self.0.clone()
    }
}

#[test]
fn pods_whose_owner_cannot_be_resolved_are_unsized_under_their_own_reason() {
    use crate::review::{ReviewResult, UnsizedReason};
    use tailor_kube::index::OwnerAnswer;
    // The pod's ReplicaSet is not in the caches (a new one); the VPA targets its Deployment.
    let index = |fallback: Option<OwnerAnswer>| {
        let deploy = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
        }))
        .unwrap();
        let index = Index::from_objects(IndexObjects {
            vpas: vec![web_vpa(json!([]))],
            deployments: vec![deploy],
            ..Default::default()
        });
        match fallback {
            Some(a) => index.with_owner_fallback(std::sync::Arc::new(Always(a))),
            None => index,
        }
    };
    for (fallback, reason, label) in [
        (None, UnsizedReason::OwnerMissing, "unsized_owner_missing"),
        (
            Some(OwnerAnswer::Absent),
            UnsizedReason::OwnerMissing,
            "unsized_owner_missing",
        ),
        (
            Some(OwnerAnswer::Shed),
            UnsizedReason::OwnerLookupShed,
            "unsized_owner_lookup_shed",
        ),
        (
            Some(OwnerAnswer::Failed),
            UnsizedReason::OwnerLookupFailed,
            "unsized_owner_lookup_failed",
        ),
    ] {
        let (resp, outcome) = review_pod(
            &decoded(&pod_request(web_pod(), "v1")),
            &index(fallback.clone()),
            &PatchOptions::default(),
            &PatchMemo::new(PatchOptions::default(), MEMO),
        );
        assert!(resp.allowed && resp.patch.is_none());
        let PodOutcome::Unsized {
            reason: got,
            detail,
            vpas,
            generate_name,
        } = outcome
        else {
            panic!("{fallback:?}: {outcome:?}");
        };
        assert_eq!(got, reason, "{fallback:?}");
        assert!(detail.contains("ReplicaSet default/web-abc"), "{detail}");
        // The VPA on Deployment web (web-vpa), whose ReplicaSet web-abc could not be read, hears of it.
        let names: Vec<&str> = vpas.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["web-vpa"], "{fallback:?}");
        assert_eq!(generate_name.as_deref(), Some("web-abc-"));
        assert_eq!(ReviewResult::Unsized(got).as_str(), label);
    }
    // Found live: sized.
    let rs = tailor_core::target::WorkloadInfo {
        owner: Some(
            serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "name": "web", "uid": "2", "controller": true}))
            .unwrap(),
        ),
        selector: Some(serde_json::from_value(json!({"matchLabels": {"app": "web"}})).unwrap()),
    };
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index(Some(OwnerAnswer::Found(rs))),
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(resp.patch.is_some(), "{outcome:?}");
}

#[test]
fn the_webhook_never_writes_below_the_pod_floor() {
    // Before the pod floor, a memory target of "1" gave a 1-byte request and (proportionally) a 2-byte limit.
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-abc-", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"memory": "200Mi"}}}]}
    });
    let v = VpaFixture::new("default", "web-vpa")
        .target("Deployment", "web")
        .recommendation("app", "200m", "1")
        .build();
    let upstream = patch_pod(&pod(p.clone()), &v, &[], &PatchOptions::default()).unwrap();
    let doc = apply(&p, &upstream.patch);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "2"
    );
    let options = PatchOptions {
        floor: Some(tailor_core::sizing::PodFloor::RECOMMENDER_MINIMUMS),
        ..Default::default()
    };
    let floored = patch_pod(&pod(p.clone()), &v, &[], &options).unwrap();
    let doc = apply(&p, &floored.patch);
    let resources = &doc["spec"]["containers"][0]["resources"];
    assert_eq!(resources["requests"]["memory"], "250Mi", "{resources}");
    assert_eq!(resources["limits"]["memory"], "500Mi", "{resources}");
    assert_eq!(
        resources["requests"]["cpu"], "200m",
        "above the floor: unchanged"
    );
}

#[test]
fn two_vpas_on_one_workload_are_named_in_the_response_warnings() {
    // The webhook sizes from the oldest VPA, as upstream, and says so in the updater's words (which updates
    // none of them: docs/decisions/conflicting-vpas.md).
    let older = web_vpa(json!([]));
    let mut newer = web_vpa(json!([]));
    newer.metadata.name = Some("web-recreate".into());
    newer.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2025-01-01T00:00:00Z".parse().unwrap(),
    ));
    let index = web_index(vec![newer, older]);
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(
        matches!(&outcome, PodOutcome::Patched { vpa, limit_policy: None }
            if vpa.to_string() == "default/web-vpa"),
        "{outcome:?}"
    );
    let warnings = resp.warnings.unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("2 VPAs (web-recreate, web-vpa) target Deployment default/web")
            && warnings[0].contains("oldest (web-vpa)"),
        "{warnings:?}"
    );
    // One VPA: no warning.
    let index = web_index(vec![web_vpa(json!([]))]);
    let (resp, _) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index,
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert_eq!(resp.warnings, None);
}

fn quota_index(used_cpu: &str) -> Index {
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "compute", "namespace": "default"},
        "spec": {"hard": {"requests.cpu": "1", "pods": "10"}},
        "status": {"hard": {"requests.cpu": "1", "pods": "10"}, "used": {"requests.cpu": used_cpu}}
    }))
    .unwrap();
    web_index(vec![web_vpa(json!([]))]).with_quotas(std::sync::Arc::new(
        tailor_kube::quota_cache::StaticQuotas::new(&[quota]),
    ))
}

#[test]
fn quota_fit_cuts_the_raise_and_says_why() {
    let p = web_pod();
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(p.clone(), "v1")),
        &quota_index("840m"),
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    let PodOutcome::QuotaFitted { vpa, fit, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(vpa, "default/web-vpa");
    assert_eq!(fit.outcome, tailor_core::quota::QuotaOutcome::Scaled);
    let patch: Patch =
        serde_json::from_slice(&resp.patch.as_ref().unwrap().json().unwrap()).unwrap();
    let doc = apply(&p, &patch);
    // 160m free; the pod already asks 110m (the sidecar counts): the app may reach 150m, its limit kept
    // in proportion.
    let app = &doc["spec"]["containers"][0]["resources"];
    assert_eq!(app["requests"]["cpu"], "150m");
    assert_eq!(app["limits"]["cpu"], "600m");
    assert_eq!(app["requests"]["memory"], "256Mi", "memory has no quota");
    let note = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(
        note.contains(
            "cpu raise cut to 50% to fit ResourceQuota compute (requests.cpu headroom 160m)"
        ),
        "{note}"
    );
}

#[test]
fn quota_fit_leaves_a_pod_that_does_not_fit_anyway_alone() {
    let p = web_pod();
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(p.clone(), "v1")),
        &quota_index("950m"),
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(
        matches!(&outcome, PodOutcome::QuotaFitted { fit, .. }
            if fit.outcome == tailor_core::quota::QuotaOutcome::LeftAlone),
        "{outcome:?}"
    );
    let patch: Patch =
        serde_json::from_slice(&resp.patch.as_ref().unwrap().json().unwrap()).unwrap();
    let doc = apply(&p, &patch);
    assert_eq!(doc["spec"], p["spec"], "no resource changed");
    let note = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(
        note,
        "Pod resources updated by web-vpa: resources left alone: the pod without Tailor's raises exceeds \
         ResourceQuota compute (requests.cpu headroom 50m)"
    );
    // Room for everything: an ordinary patch.
    let (_, outcome) = review_pod(
        &decoded(&pod_request(p, "v1")),
        &quota_index("0"),
        &PatchOptions::default(),
        &PatchMemo::new(PatchOptions::default(), MEMO),
    );
    assert!(matches!(outcome, PodOutcome::Patched { .. }), "{outcome:?}");
}

/// The patch memo's size in these tests: the webhook's default.
const MEMO: usize = crate::flags::DEFAULT_PATCH_MEMO_BYTES;

/// The memo's metric `tailor_admission_patch_memo_<name>`, as `/metrics` shows it.
pub(super) fn memo_metric(memo: &PatchMemo, name: &str) -> usize {
    let mut registry = prometheus_client::registry::Registry::with_prefix("tailor_admission");
    memo.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let prefix = format!("tailor_admission_patch_memo_{name} ");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap();
    line[prefix.len()..].trim().parse().unwrap()
}

/// The response's patch and the outcome of a pod review against `index`, reviewed with `memo`.
fn memo_review(
    pod: &Value,
    index: &Index,
    options: &PatchOptions,
    memo: &PatchMemo,
) -> (Option<Vec<u8>>, Option<Vec<String>>, PodOutcome) {
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(pod.clone(), "v1")),
        index,
        options,
        memo,
    );
    (
        resp.patch.map(|p| p.json().unwrap()),
        resp.warnings,
        outcome,
    )
}

#[test]
fn pods_of_one_template_share_one_answer() {
    let index = web_index(vec![web_vpa(json!([]))]);
    let options = PatchOptions::default();
    let memo = PatchMemo::new(options.clone(), MEMO);
    // Each pod of a ReplicaSet gets its own service account token volume (a random name) mounted in each
    // container: a field sizing does not read.
    let with_token = |name: &str| {
        let mut pod = web_pod();
        pod["spec"]["volumes"] = json!([{"name": name, "projected": {"sources": []}}]);
        for list in ["containers", "initContainers"] {
            pod["spec"][list][0]["volumeMounts"] = json!([{"name": name, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
        }
        pod
    };
    let first = memo_review(
        &with_token("kube-api-access-abcde"),
        &index,
        &options,
        &memo,
    );
    assert_eq!(memo_metric(&memo, "hits_total"), 0);
    // Another pod of the same ReplicaSet: other name, other labels besides the selector's, another token.
    let mut next = with_token("kube-api-access-vwxyz");
    next["metadata"]["name"] = json!("web-abc-x1");
    next["metadata"]["labels"]["pod-template-hash"] = json!("abc");
    let second = memo_review(&next, &index, &options, &memo);
    assert_eq!(memo_metric(&memo, "hits_total"), 1);
    assert_eq!(first, second);
    assert!(first.0.is_some() && matches!(first.2, PodOutcome::Patched { .. }));
    assert!(memo_metric(&memo, "size_bytes") > 0 && memo_metric(&memo, "size_bytes") <= MEMO);
}

#[test]
fn a_sizing_field_of_the_wrong_type_is_an_error_only_for_a_pod_that_is_sized() {
    let options = PatchOptions::default();
    let memo = PatchMemo::new(options.clone(), MEMO);
    let mut pod = web_pod();
    pod["spec"]["containers"][0]["resources"] = json!(3);
    let (patch, _, outcome) =
        memo_review(&pod, &web_index(vec![web_vpa(json!([]))]), &options, &memo);
    assert_eq!(patch, None);
    assert!(
        matches!(&outcome, PodOutcome::Error(e) if e.starts_with("cannot decode pod: invalid type")),
        "{outcome:?}"
    );
    assert_eq!(memo_metric(&memo, "size_bytes"), 0, "nothing memoised");
    // No VPA covers it: nothing reads the field.
    let (patch, _, outcome) = memo_review(&pod, &web_index(Vec::new()), &options, &memo);
    assert_eq!(
        (patch, outcome),
        (None, PodOutcome::NoMatch { reason: None })
    );
}

#[test]
fn a_changed_vpa_or_limit_range_is_never_answered_from_the_memo() {
    let options = PatchOptions::default();
    let memo = PatchMemo::new(options.clone(), MEMO);
    let index = |cpu: &str, lr_max: Option<&str>| {
        let mut v = web_vpa(json!([]));
        let rec = v.status.as_mut().unwrap().recommendation.as_mut().unwrap();
        let recs = rec.container_recommendations.as_mut().unwrap();
        recs[0].target.insert("cpu".into(), Quantity(cpu.into()));
        let limit_ranges = lr_max.map(|max| {
            serde_json::from_value(json!({
                "metadata": {"name": "lr", "namespace": "default"},
                "spec": {"limits": [{"type": "Container", "max": {"cpu": max}}]}
            }))
            .unwrap()
        });
        web_index_with(vec![v], limit_ranges.into_iter().collect())
    };
    let cpu_request = |index: &Index, memo: &PatchMemo| {
        let (patch, _, _) = memo_review(&web_pod(), index, &options, memo);
        let patch: Patch = serde_json::from_slice(&patch.unwrap()).unwrap();
        apply(&web_pod(), &patch)["spec"]["containers"][0]["resources"]["requests"]["cpu"].clone()
    };
    // Each index is dropped before the next is built: a freed VPA's address is not reused while the
    // memo names it.
    let mut seen = Vec::new();
    for (cpu, lr_max) in [
        ("200m", None),
        ("300m", None),
        ("300m", Some("250m")),
        ("300m", Some("280m")),
    ] {
        let index = index(cpu, lr_max);
        let request = cpu_request(&index, &memo);
        assert_eq!(
            request,
            cpu_request(&index, &PatchMemo::new(options.clone(), MEMO))
        );
        assert!(!seen.contains(&request), "{request} twice");
        seen.push(request);
    }
    assert_eq!(memo_metric(&memo, "hits_total"), 0);
}

#[test]
fn the_memo_stays_within_its_bound() {
    let memo = PatchMemo::new(PatchOptions::default(), MEMO);
    let vpas: Vec<_> = (0..20_000)
        .map(|_| std::sync::Arc::new(web_vpa(json!([]))))
        .collect();
    for (i, vpa) in vpas.iter().enumerate() {
        let answer = Answer {
            patch: crate::review::EncodedPatch::of_json(&[b'x'; 1125]),
            pod_level_only: false,
        };
        memo.put(vpa, &[], format!("{i:0>600}").into_bytes(), answer);
        assert!(memo_metric(&memo, "size_bytes") <= MEMO);
    }
    // The last ones are still there.
    let last = vpas.len() - 1;
    assert!(
        memo.get(&vpas[last], &[], format!("{last:0>600}").as_bytes())
            .is_some()
    );
    assert!(memo.get(&vpas[last], &[], b"other pod").is_none());
}

mod memo_matches_sizing {
    use super::*;
    use proptest::prelude::*;

    fn arb_resources() -> impl Strategy<Value = Value> {
        let q = prop::sample::select(vec!["50m", "100m", "1", "64Mi", "128Mi"]);
        (
            prop::option::of(q.clone()),
            prop::option::of(q.clone()),
            prop::option::of(q),
        )
            .prop_map(|(req_cpu, lim_cpu, req_mem)| {
                let mut requests = serde_json::Map::new();
                let mut limits = serde_json::Map::new();
                if let Some(c) = req_cpu {
                    requests.insert("cpu".into(), json!(c));
                }
                if let Some(m) = req_mem {
                    requests.insert("memory".into(), json!(m));
                }
                if let Some(c) = lim_cpu {
                    limits.insert("cpu".into(), json!(c));
                }
                json!({"requests": requests, "limits": limits})
            })
    }

    fn arb_container() -> impl Strategy<Value = Value> {
        (
            prop::sample::select(vec!["app", "proxy", "other"]),
            prop::option::of(arb_resources()),
            any::<bool>(),
        )
            .prop_map(|(name, resources, always)| {
                let mut c = json!({"name": name});
                if let Some(r) = resources {
                    c["resources"] = r;
                }
                if always {
                    c["restartPolicy"] = json!("Always");
                }
                c
            })
    }

    /// A pod of the `web` ReplicaSet varied in everything sizing reads.
    fn arb_pod() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec(arb_container(), 1..3),
            prop::collection::vec(arb_container(), 0..2),
            prop::sample::select(vec![
                None,
                Some(json!({})),
                Some(json!({"team": "a"})),
                Some(json!({ UPDATES_ANNOTATION: "x" })),
                Some(json!({ UPSTREAM_UPDATES_ANNOTATION: "x" })),
            ]),
            prop::option::of(arb_resources()),
            prop::option::of(arb_resources()),
            prop::sample::select(vec!["web-abc-", "web-abc-z"]),
        )
            .prop_map(|(containers, init, annotations, pod_level, status, name)| {
                let mut p = web_pod();
                p["metadata"]["generateName"] = json!(name);
                if let Some(a) = annotations {
                    p["metadata"]["annotations"] = a;
                }
                p["spec"] = json!({"containers": containers, "initContainers": init});
                if let Some(r) = pod_level {
                    p["spec"]["resources"] = r;
                }
                if let Some(r) = status {
                    p["status"] = json!({"containerStatuses": [{"name": "app", "resources": r,
                        "image": "i", "imageID": "", "ready": true, "restartCount": 0}]});
                }
                p
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Whatever pod was reviewed before, a pod's answer with the memo is its answer without one.
        #[test]
        fn a_pod_gets_its_own_answer(
            before in arb_pod(),
            other in arb_pod(),
            part in 0usize..8,
            native_sidecars in any::<bool>(),
            memo_sidecars in any::<bool>(),
        ) {
            // The pod differs from the one before in one part (or none, or all): the near misses the
            // memo must tell apart.
            let mut pod = before.clone();
            match part {
                0 => pod["spec"]["containers"][0] = other["spec"]["containers"][0].clone(),
                1 => pod["spec"]["initContainers"] = other["spec"]["initContainers"].clone(),
                2 => pod["metadata"]["annotations"] = other["metadata"]["annotations"].clone(),
                3 => pod["spec"]["resources"] = other["spec"]["resources"].clone(),
                4 => pod["status"] = other["status"].clone(),
                5 => pod["metadata"]["generateName"] = json!("web-abc-new-"),
                6 => pod["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "t", "mountPath": "/t"}]),
                _ => pod = other.clone(),
            }
            let index = web_index(vec![web_vpa(json!([{"containerName": "other", "mode": "Off"}]))]);
            let options = PatchOptions { native_sidecars, ..Default::default() };
            let memo = PatchMemo::new(PatchOptions { native_sidecars: memo_sidecars, ..Default::default() }, MEMO);
            memo_review(&before, &index, &options, &memo);
            let memoised = memo_review(&pod, &index, &options, &memo);
            let fresh = memo_review(&pod, &index, &options, &PatchMemo::new(options.clone(), MEMO));
            prop_assert_eq!(memoised, fresh);
        }
    }
}

#[test]
fn the_cluster_caches_vpas_are_answered_from_the_memo_until_they_change() {
    use crate::vpa_cache::VpaCacheWriter;
    use kube::runtime::watcher;
    use std::sync::Arc;
    let mut writer = VpaCacheWriter::default();
    let cache = writer.as_reader();
    let mut vpa = web_vpa(json!([]));
    vpa.metadata.uid = Some("v-1".into());
    vpa.metadata.resource_version = Some("10".into());
    writer.apply_watcher_event(&watcher::Event::Apply(vpa.clone()));
    let memo = PatchMemo::new(PatchOptions::default(), MEMO);
    let answer = Answer {
        patch: crate::review::EncodedPatch::of_json(b"[]"),
        pod_level_only: false,
    };
    // Each review gets the VPA from the cache (decoded anew when its decoded slot was taken by another
    // VPA): the version, not the object, is what counts.
    let first = cache.get("default", "web-vpa").unwrap();
    let second = Arc::new((*cache.get("default", "web-vpa").unwrap()).clone());
    memo.put(&first, &[], b"pod".to_vec(), answer.clone());
    assert_eq!(memo.get(&second, &[], b"pod"), Some(answer));
    // The recommender writes a new status: a new resourceVersion, sized anew.
    vpa.metadata.resource_version = Some("11".into());
    writer.apply_watcher_event(&watcher::Event::Apply(vpa));
    let third = cache.get("default", "web-vpa").unwrap();
    assert_eq!(memo.get(&third, &[], b"pod"), None);
}
