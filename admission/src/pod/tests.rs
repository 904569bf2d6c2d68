use super::*;
use tailor_kube::index::{Index, IndexObjects};

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn vpa(v: Value) -> VerticalPodAutoscaler {
    serde_json::from_value(v).unwrap()
}

fn web_vpa(policies: Value) -> VerticalPodAutoscaler {
    vpa(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web-vpa", "namespace": "default", "creationTimestamp": "2024-06-01T00:00:00Z"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "resourcePolicy": {"containerPolicies": policies}},
        "status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "200m", "memory": "256Mi"}},
            {"containerName": "proxy", "target": {"cpu": "50m", "memory": "64Mi"}}
        ]}}
    }))
}

fn web_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-abc-", "namespace": "default", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                                 "uid": "1", "controller": true}]},
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "400m"}}}],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
        }
    })
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
fn pod_request(object: Value, version: &str) -> Vec<u8> {
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
    );
    assert_eq!(
        outcome,
        PodOutcome::Patched {
            vpa: "default/web-vpa".into()
        }
    );
    assert!(resp.allowed);
    let patch: Patch = serde_json::from_slice(resp.patch.as_deref().unwrap()).unwrap();
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
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert!(matches!(outcome, PodOutcome::Error(_)));
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(json!({"spec": 3}), "v1")),
        &index,
        &PatchOptions::default(),
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
    );
    assert!(resp.allowed && resp.patch.is_none());
    assert!(matches!(outcome, PodOutcome::Error(_)), "{outcome:?}");
    // No VPA: allowed, no annotations.
    let index = web_index(vec![]);
    let (resp, outcome) = review_pod(
        &decoded(&pod_request(web_pod(), "v1")),
        &index,
        &PatchOptions::default(),
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
    );
    assert!(resp.patch.is_some(), "{outcome:?}");
}

#[test]
fn the_webhook_never_writes_below_the_pod_floor() {
    // Issue 30: a memory target of "1" gave a 1-byte request and (proportionally) a 2-byte limit.
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-abc-", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"memory": "200Mi"}}}]}
    });
    let v = vpa(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web-vpa", "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "200m", "memory": "1"}}]}}
    }));
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
    // Issue 30: the webhook sizes from the oldest VPA, as upstream; it now says so in the updater's words
    // (which updates none of them).
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
    );
    assert_eq!(
        outcome,
        PodOutcome::Patched {
            vpa: "default/web-vpa".into()
        }
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
    );
    let PodOutcome::QuotaFitted { vpa, fit, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(vpa, "default/web-vpa");
    assert_eq!(fit.outcome, tailor_core::quota::QuotaOutcome::Scaled);
    let patch: Patch = serde_json::from_slice(resp.patch.as_deref().unwrap()).unwrap();
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
    );
    assert!(
        matches!(&outcome, PodOutcome::QuotaFitted { fit, .. }
            if fit.outcome == tailor_core::quota::QuotaOutcome::LeftAlone),
        "{outcome:?}"
    );
    let patch: Patch = serde_json::from_slice(resp.patch.as_deref().unwrap()).unwrap();
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
    );
    assert!(matches!(outcome, PodOutcome::Patched { .. }), "{outcome:?}");
}
