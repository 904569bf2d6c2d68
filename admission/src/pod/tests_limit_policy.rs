//! The limit policy (docs/limit-policy.md) in the webhook's patch: `request+`, `ratio:` and `unset` through
//! the same assembly as keep-ratio, `remove` operations for unset limits, the boost, quotas, and an
//! annotation that does not parse.

use std::cmp::Ordering;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use serde_json::{Value, json};
use tailor_core::quota::Quota;
use tailor_core::sizing::{LIMIT_POLICY_ANNOTATION, PatchOptions, UPDATES_ANNOTATION};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::{Index, IndexObjects};
use tailor_testkit::fixtures::{PodFixture, VpaFixture};

use super::*;

fn vpa(policy: Option<&str>, extra_spec: Value) -> VerticalPodAutoscaler {
    let v = VpaFixture::new("default", "web-vpa")
        .uid("vpa-uid")
        .created("2024-06-01T00:00:00Z")
        .target("Deployment", "web")
        .recommendation("app", "200m", "256Mi")
        .spec_fields(extra_spec);
    match policy {
        Some(p) => v.annotation(LIMIT_POLICY_ANNOTATION, p),
        None => v,
    }
    .build()
}

/// `app` asks 100m/128Mi with limits 400m/256Mi (ratios 4 and 2).
fn pod_json() -> Value {
    PodFixture::generated("default", "web-abc-")
        .label("app", "web")
        .owner("ReplicaSet", "web-abc")
        .owner_uid("1")
        .container(
            "app",
            json!({"cpu": "100m", "memory": "128Mi"}),
            json!({"cpu": "400m", "memory": "256Mi"}),
        )
        .json()
}

/// The patched pod.
fn patched(p: &Value, result: &PodPatch) -> Value {
    let mut doc = p.clone();
    json_patch::patch(&mut doc, &result.patch.0).unwrap();
    doc
}

fn patch_with(vpa: &VerticalPodAutoscaler, quotas: &[Quota], options: &PatchOptions) -> PodPatch {
    let p: Pod = serde_json::from_value(pod_json()).unwrap();
    patch_pod_within(&p, vpa, &[], quotas, options).unwrap()
}

fn updates(doc: &Value) -> &str {
    doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn request_plus_and_unset_patch_the_limits_and_say_so() {
    let v = vpa(Some("memory=request+256Mi,cpu=unset"), json!({}));
    let result = patch_with(&v, &[], &PatchOptions::default());
    assert_eq!(result.limit_policy, None);
    let doc = patched(&pod_json(), &result);
    let r = &doc["spec"]["containers"][0]["resources"];
    assert_eq!(r["requests"], json!({"cpu": "200m", "memory": "256Mi"}));
    assert_eq!(r["limits"], json!({"memory": "512Mi"}), "no CPU limit left");
    assert!(
        result
            .patch
            .0
            .iter()
            .any(|op| matches!(op, PatchOperation::Remove(r)
            if r.path == "/spec/containers/0/resources/limits/cpu")),
        "{:?}",
        result.patch
    );
    assert_eq!(
        updates(&doc),
        "Pod resources updated by web-vpa: container 0: cpu request, memory request, memory limit, \
         cpu limit removed"
    );
}

#[test]
fn without_the_annotation_the_patch_is_upstreams() {
    let plain = patch_with(&vpa(None, json!({})), &[], &PatchOptions::default());
    let doc = patched(&pod_json(), &plain);
    let r = &doc["spec"]["containers"][0]["resources"];
    assert_eq!(r["limits"], json!({"cpu": "800m", "memory": "512Mi"}));
    // An annotation that does not parse sizes exactly the same, and says why.
    let bad = patch_with(
        &vpa(Some("memory=request+a-lot"), json!({})),
        &[],
        &PatchOptions::default(),
    );
    assert_eq!(bad.patch, plain.patch);
    let error = bad.limit_policy.expect("an error").to_string();
    assert!(
        error.contains("entry 1 \"memory=request+a-lot\"") && error.contains("invalid quantity"),
        "{error}"
    );
}

#[test]
fn a_quota_tracking_limits_keeps_the_limit_unset_would_remove() {
    let rq: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "compute", "namespace": "default"},
        "spec": {"hard": {"limits.cpu": "100"}},
        "status": {"hard": {"limits.cpu": "100"}, "used": {"limits.cpu": "0"}}
    }))
    .unwrap();
    let quota = Quota::of(&rq).unwrap();
    let v = vpa(Some("cpu=unset"), json!({}));
    let result = patch_with(&v, &[quota], &PatchOptions::default());
    let doc = patched(&pod_json(), &result);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "800m"
    );
    assert!(
        updates(&doc)
            .contains("cpu limit kept in proportion, not unset: a ResourceQuota tracks limits.cpu"),
        "{}",
        updates(&doc)
    );
}

#[test]
fn a_boosted_cpu_request_follows_the_policy() {
    let boost = json!({"startupBoost": {"cpu": {"type": "Factor", "factor": 2}}});
    let options = PatchOptions {
        cpu_startup_boost: true,
        ..Default::default()
    };
    let cpu_limit = |policy: &str| {
        let result = patch_with(&vpa(Some(policy), boost.clone()), &[], &options);
        let doc = patched(&pod_json(), &result);
        let r = doc["spec"]["containers"][0]["resources"].clone();
        assert_eq!(r["requests"]["cpu"], "400m", "boosted twice the target");
        r["limits"].get("cpu").cloned()
    };
    assert_eq!(cpu_limit("cpu=request+100m"), Some(json!("500m")));
    assert_eq!(cpu_limit("cpu=ratio:1.5"), Some(json!("600m")));
    assert_eq!(cpu_limit("cpu=keep-ratio"), Some(json!("1600m")));
    assert_eq!(
        cpu_limit("cpu=unset"),
        None,
        "a removed limit is not added back"
    );
}

fn web_index(vpa: VerticalPodAutoscaler) -> Index {
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
        vpas: vec![vpa],
        deployments: vec![deploy],
        replica_sets: vec![rs],
        ..Default::default()
    })
}

fn review(index: &Index, memo: &PatchMemo) -> (Option<Vec<u8>>, PodOutcome) {
    let body = crate::review::tests::as_api_server_sends(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "", "namespace": "default", "operation": "CREATE", "userInfo": {},
            "object": pod_json()
        }
    }));
    let review = crate::review::decode_one_pass(&body).unwrap();
    let (response, outcome) = review_pod(&review, index, &PatchOptions::default(), memo);
    (response.patch.map(|p| p.json().unwrap()), outcome)
}

#[test]
fn the_review_names_the_vpa_whose_annotation_does_not_parse() {
    let memo = PatchMemo::new(
        PatchOptions::default(),
        crate::flags::DEFAULT_PATCH_MEMO_BYTES,
    );
    let index = web_index(vpa(Some("cpu=unset;memory=unset"), json!({})));
    let (patch, outcome) = review(&index, &memo);
    let PodOutcome::Patched {
        vpa: label,
        limit_policy: Some(warning),
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(label.to_string(), "default/web-vpa");
    assert_eq!(
        (
            warning.namespace.as_str(),
            warning.name.as_str(),
            warning.uid.as_str()
        ),
        ("default", "web-vpa", "vpa-uid")
    );
    assert!(
        warning
            .error
            .to_string()
            .contains("policy \"unset;memory=unset\"")
    );
    let patch: Patch = serde_json::from_slice(&patch.unwrap()).unwrap();
    let mut doc = pod_json();
    json_patch::patch(&mut doc, &patch.0).unwrap();
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["limits"],
        json!({"cpu": "800m", "memory": "512Mi"}),
        "keep-ratio"
    );
    // A valid policy: no warning, the policy's limits.
    let index = web_index(vpa(Some("unset-cpu"), json!({})));
    let (_, outcome) = review(&index, &memo);
    assert!(
        matches!(
            outcome,
            PodOutcome::Patched {
                limit_policy: None,
                ..
            }
        ),
        "{outcome:?}"
    );
}

/// Policies from the annotation's grammar, valid and not.
fn arb_policy() -> impl Strategy<Value = String> {
    let scope = prop::sample::select(vec!["", "app/", "*/", "other/", "Bad/"]);
    let resource = prop::sample::select(vec!["cpu", "memory", "gpu"]);
    let rule = prop::sample::select(vec![
        "keep-ratio",
        "unset",
        "unset-cpu",
        "request+0",
        "request+1",
        "request+256Mi",
        "request+50m",
        "request+-1",
        "ratio:1",
        "ratio:1.5",
        "ratio:1000",
        "ratio:0.9",
        "nonsense",
    ]);
    let entry = (scope, resource, rule).prop_map(|(s, r, p)| format!("{s}{r}={p}"));
    prop::collection::vec(
        prop_oneof![entry, Just("unset-cpu".to_owned()), ".{0,12}"],
        0..4,
    )
    .prop_map(|entries| entries.join(","))
}

/// Container resources a valid pod may ask for (limits at least the requests).
fn arb_resources() -> impl Strategy<Value = Value> {
    let amount = prop::sample::select(vec![1u32, 10, 100, 250, 1000]);
    (amount.clone(), amount, 1u32..5, any::<bool>(), any::<bool>()).prop_map(
        |(cpu, mem, factor, cpu_limit, mem_limit)| {
            let mut limits = serde_json::Map::new();
            if cpu_limit {
                limits.insert("cpu".into(), json!(format!("{}m", cpu * factor)));
            }
            if mem_limit {
                limits.insert("memory".into(), json!(format!("{}Mi", mem * factor)));
            }
            json!({"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}, "limits": limits})
        },
    )
}

fn amount(v: &Value) -> Option<tailor_core::quantity::Amount> {
    tailor_core::quantity::Amount::parse(&Quantity(v.as_str()?.to_owned())).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Whatever the annotation says, the patch applies to the pod, no limit ends below its request, and an
    /// annotation that does not parse changes nothing against the VPA without it.
    #[test]
    fn any_policy_gives_a_valid_pod(policy in arb_policy(), resources in arb_resources()) {
        let mut p = pod_json();
        p["spec"]["containers"][0]["resources"] = resources;
        let pod: Pod = serde_json::from_value(p.clone()).unwrap();
        let v = vpa(Some(&policy), json!({}));
        let result = patch_pod(&pod, &v, &[], &PatchOptions::default()).unwrap();
        let mut doc = p.clone();
        prop_assert!(json_patch::patch(&mut doc, &result.patch.0).is_ok(), "{:?}", result.patch);
        let r = &doc["spec"]["containers"][0]["resources"];
        for resource in ["cpu", "memory"] {
            if let (Some(req), Some(lim)) = (amount(&r["requests"][resource]), amount(&r["limits"][resource])) {
                prop_assert!(lim.cmp_value(&req) != Ordering::Less, "{policy}: {r}");
            }
        }
        if result.limit_policy.is_some() {
            let plain = patch_pod(&pod, &vpa(None, json!({})), &[], &PatchOptions::default()).unwrap();
            prop_assert_eq!(result.patch, plain.patch);
        }
    }
}
