use serde_json::{Value, json};

use super::*;
use crate::sizing::*;
use k8s_openapi::api::core::v1::Pod;
use tailor_crds::VerticalPodAutoscaler;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};

/// A VPA recommending `target` for `app` (and 50m/64Mi for `side`), annotated with `policy` when given.
fn vpa(policy: Option<&str>, target: Value, resource_policy: Value) -> VerticalPodAutoscaler {
    let annotations = policy.map_or(json!({}), |p| json!({LIMIT_POLICY_ANNOTATION: p}));
    VpaFixture::new("ns", "v")
        .annotations(annotations)
        .target("Deployment", "d")
        .resource_policy(resource_policy)
        .recommendation_target("app", target)
        .recommendation("side", "50m", "64Mi")
        .build()
}

/// `app` asks 100m/100Mi with `limits`; `side` asks 10m/10Mi with 20m/20Mi.
fn pod(limits: Value) -> Pod {
    PodFixture::new("ns", "p")
        .container("app", json!({"cpu": "100m", "memory": "100Mi"}), limits)
        .container(
            "side",
            json!({"cpu": "10m", "memory": "10Mi"}),
            json!({"cpu": "20m", "memory": "20Mi"}),
        )
        .build()
}

fn limit_range(items: Value) -> LimitRange {
    serde_json::from_value(json!({
        "metadata": {"name": "lr", "namespace": "ns"}, "spec": {"limits": items}
    }))
    .expect("limit range")
}

fn default_target() -> Value {
    json!({"cpu": "250m", "memory": "300Mi"})
}

fn two_to_one() -> Value {
    json!({"cpu": "200m", "memory": "200Mi"})
}

/// The webhook's sizing of `pod` (container `app` first).
fn sized(
    vpa: &VerticalPodAutoscaler,
    pod: &Pod,
    limit_ranges: &[LimitRange],
    quota_limits: &[&'static str],
) -> Vec<ContainerResources> {
    let slots = slots(pod, &PatchOptions::default());
    resources_for_slots(
        pod,
        &slots,
        vpa,
        limit_ranges,
        quota_limits,
        &PatchOptions::default(),
    )
    .expect("sized")
}

fn limits(r: &ContainerResources) -> Vec<(String, String)> {
    r.limits
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn without_a_policy_limits_keep_their_ratio_as_upstream() {
    let p = pod(two_to_one());
    let plain = sized(&vpa(None, default_target(), json!({})), &p, &[], &[]);
    assert_eq!(
        limits(&plain[0]),
        pairs(&[("cpu", "500m"), ("memory", "600Mi")])
    );
    assert!(plain[0].removed_limits.is_empty());
    // An explicit keep-ratio, and an annotation that does not parse, size exactly the same.
    for text in ["cpu=keep-ratio,memory=keep-ratio", "memory=lots", ""] {
        let v = vpa(Some(text), default_target(), json!({}));
        assert_eq!(sized(&v, &p, &[], &[]), plain, "{text}");
    }
}

#[test]
fn request_plus_a_fixed_amount_and_unset_cpu() {
    let v = vpa(
        Some("memory=request+256Mi,cpu=unset"),
        default_target(),
        json!({}),
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(limits(&r[0]), pairs(&[("memory", "556Mi")]));
    assert_eq!(r[0].removed_limits, [CPU]);
    assert_eq!(r[0].requests["cpu"].0, "250m");
    // The other container follows the same entries (no container named).
    assert_eq!(limits(&r[1]), pairs(&[("memory", "320Mi")]));
    assert_eq!(r[1].removed_limits, [CPU]);
    // A container without a CPU limit has none to remove.
    let r = sized(&v, &pod(json!({"memory": "200Mi"})), &[], &[]);
    assert!(r[0].removed_limits.is_empty());
    assert_eq!(limits(&r[0]), pairs(&[("memory", "556Mi")]));
}

#[test]
fn ratios_round_down_in_the_resources_unit() {
    let v = vpa(
        Some("cpu=ratio:2.125,memory=ratio:1.5"),
        json!({"cpu": "250m", "memory": "300Mi"}),
        json!({}),
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(
        limits(&r[0]),
        pairs(&[("cpu", "531m"), ("memory", "450Mi")])
    );
    let v = vpa(
        Some("memory=ratio:1.001"),
        json!({"memory": "1001"}),
        json!({}),
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(r[0].limits["memory"].0, "1002");
}

#[test]
fn an_entry_naming_the_container_wins_over_the_one_for_all() {
    let v = vpa(
        Some("app/memory=ratio:1.5, */memory=request+64Mi, side/unset-cpu"),
        default_target(),
        json!({}),
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(
        limits(&r[0]),
        pairs(&[("cpu", "500m"), ("memory", "450Mi")])
    );
    assert!(r[0].removed_limits.is_empty());
    assert_eq!(limits(&r[1]), pairs(&[("memory", "128Mi")]));
    assert_eq!(r[1].removed_limits, [CPU]);
}

#[test]
fn a_container_limit_range_max_and_ratio_cap_the_policys_limit() {
    let v = vpa(Some("memory=request+256Mi"), default_target(), json!({}));
    let lr = limit_range(json!([{"type": "Container", "max": {"memory": "500Mi"}}]));
    let r = sized(&v, &pod(json!({"memory": "100Mi"})), &[lr], &[]);
    assert_eq!(limits(&r[0]), pairs(&[("memory", "500Mi")]));
    assert!(
        r[0].annotations
            .contains(&"memory limit capped to fit Max in container LimitRange".to_owned()),
        "{:?}",
        r[0].annotations
    );
    // maxLimitRequestRatio is honoured for the policy's limits whatever the PatchOptions say.
    let lr = limit_range(json!([{"type": "Container", "maxLimitRequestRatio": {"memory": "1.5"}}]));
    let r = sized(&v, &pod(json!({"memory": "100Mi"})), &[lr], &[]);
    assert_eq!(limits(&r[0]), pairs(&[("memory", "450Mi")]));
    assert!(
        r[0].annotations
            .contains(&"memory limit capped to maxLimitRequestRatio".to_owned())
    );
}

#[test]
fn a_limit_is_never_below_its_request() {
    // No limit and no default: upstream's processing leaves the request above the LimitRange max (the
    // LimitRanger then judges the pod); the policy's limit is capped to the max, then raised to the request.
    let v = vpa(Some("memory=request+256Mi"), default_target(), json!({}));
    let lr = limit_range(json!([{"type": "Container", "max": {"memory": "200Mi"}}]));
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "app"}]}
    }))
    .expect("pod");
    let r = sized(&v, &p, &[lr], &[]);
    assert_eq!(r[0].requests["memory"].0, "300Mi");
    assert_eq!(limits(&r[0]), pairs(&[("memory", "300Mi")]));
    assert!(
        r[0].annotations
            .contains(&"memory limit raised to the request".to_owned())
    );
    for text in ["request+0", "ratio:1", "request+1m", "ratio:1.001"] {
        for target in ["1", "7", "1023", "300Mi", "1.5Gi"] {
            let v = vpa(
                Some(&format!("memory={text},cpu={text}")),
                json!({"cpu": target, "memory": target}),
                json!({}),
            );
            let r = sized(&v, &pod(two_to_one()), &[], &[]);
            for resource in CPU_AND_MEMORY {
                let request = Amount::parse(&r[0].requests[resource]).expect("request");
                let limit = Amount::parse(&r[0].limits[resource]).expect("limit");
                assert_ne!(
                    limit.cmp_value(&request),
                    Ordering::Less,
                    "{text} {target} {resource}"
                );
            }
        }
    }
}

#[test]
fn unset_keeps_a_limit_the_namespace_requires() {
    let v = vpa(Some("unset-cpu,memory=unset"), default_target(), json!({}));
    let p = pod(two_to_one());
    // A container LimitRange max (or maxLimitRequestRatio) needs a limit: keep-ratio, noted.
    let lr = limit_range(json!([{"type": "Container", "max": {"cpu": "2"}}]));
    let r = sized(&v, &p, &[lr], &[]);
    assert_eq!(limits(&r[0]), pairs(&[("cpu", "500m")]));
    assert_eq!(r[0].removed_limits, [MEMORY]);
    assert!(r[0].annotations.iter().any(|n| n
        == "cpu limit kept in proportion, not unset: the container LimitRange requires one (max or maxLimitRequestRatio)"));
    let lr = limit_range(json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "1.5"}}]));
    let r = sized(&v, &p, &[lr], &[]);
    // Kept, and capped to the ratio it must respect.
    assert_eq!(limits(&r[0]), pairs(&[("cpu", "375m")]));
    // A ResourceQuota tracking limits.memory.
    let r = sized(&v, &p, &[], &[MEMORY]);
    assert_eq!(limits(&r[0]), pairs(&[("memory", "600Mi")]));
    assert_eq!(r[0].removed_limits, [CPU]);
    assert!(
        r[0].annotations
            .iter()
            .any(|n| n.contains("a ResourceQuota tracks limits.memory"))
    );
    // A LimitRange of another namespace does not count.
    let mut other = limit_range(json!([{"type": "Container", "max": {"cpu": "2"}}]));
    other.metadata.namespace = Some("elsewhere".into());
    let r = sized(&v, &p, &[other], &[]);
    assert_eq!(r[0].removed_limits, [CPU, MEMORY]);
}

#[test]
fn a_pod_limit_range_bounding_limits_keeps_the_ratio() {
    let v = vpa(
        Some("memory=request+256Mi,cpu=unset"),
        default_target(),
        json!({}),
    );
    let lr = limit_range(json!([{"type": "Pod", "max": {"memory": "4Gi"}}]));
    let r = sized(&v, &pod(two_to_one()), &[lr], &[]);
    assert_eq!(
        limits(&r[0]),
        pairs(&[("memory", "600Mi")]),
        "memory keeps its ratio"
    );
    assert_eq!(
        r[0].removed_limits,
        [CPU],
        "cpu is not bounded by the Pod item"
    );
    assert!(
        r[0].annotations.iter().any(|n| n
            == "memory limit kept in proportion: a Pod LimitRange bounds the pod's memory limits")
    );
}

#[test]
fn requests_only_leaves_limits_alone() {
    let policy =
        json!({"containerPolicies": [{"containerName": "*", "controlledValues": "RequestsOnly"}]});
    let v = vpa(
        Some("memory=request+256Mi,cpu=unset"),
        default_target(),
        policy,
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert!(r[0].limits.is_empty() && r[0].removed_limits.is_empty());
}

#[test]
fn a_resource_without_a_recommendation_keeps_its_limit() {
    let v = vpa(
        Some("cpu=unset,memory=request+1Mi"),
        json!({"memory": "300Mi"}),
        json!({}),
    );
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert!(r[0].removed_limits.is_empty());
    assert_eq!(limits(&r[0]), pairs(&[("memory", "301Mi")]));
    assert!(
        r[0].annotations
            .iter()
            .any(|n| n.starts_with("cpu: limit NOT set"))
    );
}

#[test]
fn a_huge_sum_is_capped_at_the_largest_64_bit_amount() {
    let v = vpa(Some("memory=request+8Ei"), default_target(), json!({}));
    let r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(
        Amount::parse(&r[0].limits["memory"])
            .expect("limit")
            .units(),
        quantity::int64_max()
    );
    assert!(
        r[0].annotations
            .contains(&"memory limit capped to int64".to_owned())
    );
}

/// The updater's sizing of a running pod.
fn resized(vpa: &VerticalPodAutoscaler, pod: &Pod) -> Vec<ContainerResources> {
    let options = PatchOptions::default();
    let slots = slots(pod, &options);
    let processed = process_recommendation(vpa, &slots, None, None)
        .expect("processed")
        .expect("some");
    let from = Assembly {
        recommendation: Some(&processed.recommendation),
        limits: LimitContext {
            namespace: "ns",
            in_place: true,
            ..LimitContext::default()
        },
        ..Assembly::default()
    };
    container_resources_from(vpa, &slots, &from, &options).expect("sized")
}

#[test]
fn in_place_a_limit_is_kept_instead_of_removed() {
    let v = vpa(
        Some("memory=request+256Mi,cpu=unset"),
        default_target(),
        json!({}),
    );
    let r = resized(&v, &pod(two_to_one()));
    assert!(r[0].removed_limits.is_empty());
    assert_eq!(
        limits(&r[0]),
        pairs(&[("cpu", "500m"), ("memory", "556Mi")])
    );
    assert!(r[0].annotations.iter().any(|n| n
        == "cpu limit kept in proportion, not unset: the API server refuses removing a limit in place"));
    // A pod without a CPU limit stays without one.
    let r = resized(&v, &pod(json!({"memory": "200Mi"})));
    assert_eq!(limits(&r[0]), pairs(&[("memory", "556Mi")]));
    assert!(r[0].removed_limits.is_empty());
}

#[test]
fn leaving_a_pod_level_resource_alone_drops_its_removal_too() {
    let v = vpa(Some("cpu=unset"), default_target(), json!({}));
    let mut r = sized(&v, &pod(two_to_one()), &[], &[]);
    assert_eq!(leave_alone(&[CPU], &mut r), [CPU]);
    assert!(r.iter().all(|c| c.removed_limits.is_empty()));
}

#[test]
fn a_boosted_request_gets_its_limit_by_the_same_rule() {
    let q = |s: &str| Quantity(s.to_owned());
    let boosted = q("1");
    let (limit, request) = (Some(q("200m")), Some(q("100m")));
    let by = |text: &str| {
        let p = LimitPolicy::parse(text).expect("policy");
        boosted_limit(
            p.rule("app", CPU),
            limit.as_ref(),
            request.as_ref(),
            &boosted,
        )
        .expect("limit")
        .map(|q| q.0)
    };
    assert_eq!(by(""), Some("2".into()), "keep-ratio: 2:1");
    assert_eq!(
        by("cpu=unset"),
        Some("2".into()),
        "the caller skips a removed limit"
    );
    assert_eq!(by("cpu=request+500m"), Some("1500m".into()));
    assert_eq!(by("cpu=ratio:1.5"), Some("1500m".into()));
    let zero = boosted_limit(&LimitRule::Ratio(2000), None, None, &q("0")).expect("ok");
    assert_eq!(zero, None);
}
