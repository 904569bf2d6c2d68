use super::*;
use crate::sizing::{ContainerResources, PatchOptions, slots};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_testkit::fixtures::PodFixture;

fn one_container(cpu: &str, limit: Option<&str>) -> Pod {
    let limits = limit.map_or(Value::Null, |l| json!({"cpu": l}));
    PodFixture::new("ns", "p")
        .container("app", json!({"cpu": cpu, "memory": "100Mi"}), limits)
        .build()
}

fn quota(name: &str, hard: Value, used: Value) -> Quota {
    quota_with(name, json!({"hard": hard}), used)
}

fn quota_with(name: &str, spec: Value, used: Value) -> Quota {
    let rq: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"hard": spec["hard"], "used": used}
    }))
    .unwrap();
    Quota::of(&rq).unwrap()
}

fn raise(cpu: &str, limit: Option<&str>) -> Vec<ContainerResources> {
    let mut r = ContainerResources::default();
    r.requests.insert("cpu".into(), Quantity(cpu.into()));
    if let Some(l) = limit {
        r.limits.insert("cpu".into(), Quantity(l.into()));
    }
    vec![r]
}

fn run(pod: &Pod, res: &mut [ContainerResources], quotas: &[Quota], charged: Charged) -> QuotaFit {
    let slots = slots(pod, &PatchOptions::default());
    fit_to_quotas(pod, &slots, res, quotas, charged).unwrap()
}

fn cpu(res: &[ContainerResources]) -> Option<&str> {
    res[0].requests.get("cpu").map(|q| q.0.as_str())
}

#[test]
fn without_quotas_or_tracked_keys_nothing_changes() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    assert_eq!(run(&p, &mut res, &[], Charged::New), QuotaFit::default());
    assert_eq!(cpu(&res), Some("2"));
    let pods_only: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10"}}}),
    )
    .unwrap();
    assert!(Quota::of(&pods_only).is_none());
    // A quota on memory only leaves a cpu raise alone.
    let mem = quota(
        "m",
        json!({"requests.memory": "1Gi"}),
        json!({"requests.memory": "0"}),
    );
    assert_eq!(
        run(&p, &mut res, &[mem], Charged::New).outcome,
        QuotaOutcome::Fits
    );
    assert_eq!(cpu(&res), Some("2"));
}

#[test]
fn a_raise_is_cut_to_the_headroom() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    let q = quota(
        "compute",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "500m"}),
    );
    let fit = run(&p, &mut res, &[q], Charged::New);
    assert_eq!(fit.outcome, QuotaOutcome::Scaled);
    assert_eq!(cpu(&res), Some("500m"));
    assert_eq!(
        fit.notes(),
        ["cpu raise cut to 21% to fit ResourceQuota compute (requests.cpu headroom 500m)"]
    );
}

#[test]
fn the_bare_key_means_requests_and_limits_keep_their_proportion() {
    let p = one_container("100m", Some("200m"));
    let mut res = raise("1", Some("2"));
    let q = quota(
        "q",
        json!({"cpu": "10", "limits.cpu": "1"}),
        json!({"cpu": "0", "limits.cpu": "200m"}),
    );
    let fit = run(&p, &mut res, &[q], Charged::New);
    assert_eq!(fit.outcome, QuotaOutcome::Scaled);
    assert_eq!(fit.bindings[0].key, "limits.cpu");
    let limit = res[0].limits.get("cpu").map(|q| q.0.clone()).unwrap();
    assert_eq!(limit, "800m");
    assert_eq!(cpu(&res), Some("400m"));
}

#[test]
fn no_headroom_drops_the_raise_and_lowered_resources_stay() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    res[0]
        .requests
        .insert("memory".into(), Quantity("50Mi".into()));
    let q = quota(
        "full",
        json!({"requests.cpu": "1", "requests.memory": "1Gi"}),
        json!({"requests.cpu": "900m", "requests.memory": "512Mi"}),
    );
    let fit = run(&p, &mut res, &[q], Charged::New);
    assert_eq!(fit.outcome, QuotaOutcome::Dropped);
    assert_eq!(cpu(&res), None, "the cpu raise is taken out of the patch");
    assert_eq!(res[0].requests.get("memory").unwrap().0, "50Mi");
    assert_eq!(
        fit.notes(),
        ["cpu raise dropped to fit ResourceQuota full (requests.cpu headroom 100m)"]
    );
}

#[test]
fn a_pod_over_the_quota_as_it_is_is_left_alone() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    // used > hard: negative headroom.
    let q = quota(
        "over",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "1200m"}),
    );
    let fit = run(&p, &mut res, &[q], Charged::New);
    assert_eq!(fit.outcome, QuotaOutcome::LeftAlone);
    assert!(res[0].requests.is_empty() && res[0].limits.is_empty());
    assert!(fit.notes()[0].contains("ResourceQuota over (requests.cpu headroom -200m)"));
    // A quota the controller has not counted yet: the API server refuses, Tailor changes nothing.
    let mut res = raise("2", None);
    let rq: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "new"}, "spec": {"hard": {"cpu": "4"}}}),
    )
    .unwrap();
    let fresh = Quota::of(&rq).unwrap();
    assert_eq!(
        run(&p, &mut res, &[fresh], Charged::New).outcome,
        QuotaOutcome::LeftAlone
    );
}

#[test]
fn the_tightest_of_several_quotas_wins() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    let loose = quota(
        "loose",
        json!({"requests.cpu": "10"}),
        json!({"requests.cpu": "0"}),
    );
    let tight = quota(
        "tight",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "700m"}),
    );
    let fit = run(&p, &mut res, &[loose, tight], Charged::New);
    assert_eq!(&*fit.bindings[0].quota, "tight");
    assert_eq!(cpu(&res), Some("300m"));
}

#[test]
fn a_running_pod_counts_its_own_amount_as_headroom() {
    let p = one_container("100m", None);
    let mut res = raise("2", None);
    // used includes the pod's own 100m: 200m more fit, so 300m in all.
    let q = quota(
        "q",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "800m"}),
    );
    run(&p, &mut res, &[q], Charged::Running);
    assert_eq!(cpu(&res), Some("300m"));
}

#[test]
fn init_containers_count_as_peaks_and_sidecars_as_sums() {
    let p = PodFixture::new("ns", "p")
        .init_container(json!({"name": "side", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "100m"}}}))
        .init_container(json!({"name": "setup", "resources": {"requests": {"cpu": "600m"}}}))
        .container("app", json!({"cpu": "100m"}), Value::Null)
        .build();
    // Before: max(100m + 100m, 600m + 100m) = 700m; headroom 1: the app may reach 900m.
    let mut res = raise("2", None);
    let q = quota(
        "q",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "0"}),
    );
    run(&p, &mut res, std::slice::from_ref(&q), Charged::New);
    assert_eq!(cpu(&res), Some("900m"));
    // A sized sidecar is cut by the same share as the app.
    let options = PatchOptions {
        native_sidecars: true,
        ..PatchOptions::default()
    };
    let s = slots(&p, &options);
    let mut res = raise("1", None);
    res.extend(raise("1", None));
    let fit = fit_to_quotas(&p, &s, &mut res, &[q], Charged::New).unwrap();
    assert_eq!(fit.outcome, QuotaOutcome::Scaled);
    // Both raised by the same share: the sum (app + sidecar) would allow 500m each, the init peak
    // (600m + sidecar) only a 400m sidecar.
    assert_eq!(cpu(&res), Some("400m"));
    assert_eq!(res[1].requests.get("cpu").unwrap().0, "400m");
}

#[test]
fn scopes_that_exclude_the_pod_are_skipped_and_unknown_ones_count() {
    let p = one_container("100m", None);
    let terminating = quota_with(
        "t",
        json!({"hard": {"requests.cpu": "0"}, "scopes": ["Terminating"]}),
        json!({"requests.cpu": "0"}),
    );
    let other_class = quota_with(
        "pc",
        json!({"hard": {"requests.cpu": "0"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
        json!({"requests.cpu": "0"}),
    );
    let mut res = raise("2", None);
    assert_eq!(
        run(&p, &mut res, &[terminating, other_class], Charged::New).outcome,
        QuotaOutcome::Fits
    );
    let unknown = quota_with(
        "x",
        json!({"hard": {"requests.cpu": "200m"}, "scopes": ["CrossNamespacePodAffinity"]}),
        json!({"requests.cpu": "0"}),
    );
    let not_terminating = quota_with(
        "nt",
        json!({"hard": {"requests.cpu": "10"}, "scopes": ["NotTerminating", "NotBestEffort"]}),
        json!({"requests.cpu": "0"}),
    );
    let fit = run(&p, &mut res, &[unknown, not_terminating], Charged::New);
    assert_eq!(&*fit.bindings[0].quota, "x");
    assert_eq!(cpu(&res), Some("200m"));
}

#[test]
fn pod_level_resources_are_left_to_their_rule() {
    let mut p = one_container("100m", None);
    if let Some(spec) = p.spec.as_mut() {
        spec.resources = serde_json::from_value(json!({"requests": {"cpu": "1"}})).unwrap();
    }
    let mut res = raise("2", None);
    let q = quota(
        "q",
        json!({"requests.cpu": "1"}),
        json!({"requests.cpu": "1"}),
    );
    assert_eq!(
        run(&p, &mut res, &[q], Charged::New).outcome,
        QuotaOutcome::Fits
    );
}

#[test]
fn memory_is_cut_to_whole_bytes() {
    let p = one_container("100m", None);
    let mut r = ContainerResources::default();
    r.requests.insert("memory".into(), Quantity("1Gi".into()));
    let mut res = vec![r];
    let q = quota(
        "m",
        json!({"requests.memory": "500Mi"}),
        json!({"requests.memory": "0"}),
    );
    let fit = run(&p, &mut res, &[q], Charged::New);
    assert_eq!(fit.outcome, QuotaOutcome::Scaled);
    let got = Amount::parse(res[0].requests.get("memory").unwrap()).unwrap();
    let bytes = got.units_i128().unwrap();
    assert!(
        bytes <= 500 * 1024 * 1024 && bytes > 499 * 1024 * 1024,
        "{bytes}"
    );
    assert_eq!(got.millis_i128(), Some(bytes * 1000));
}

#[test]
fn the_limits_a_quota_requires_are_those_it_tracks_for_the_pod() {
    let p = one_container("100m", None);
    let requests_only = quota(
        "r",
        json!({"requests.cpu": "1", "memory": "1Gi"}),
        json!({}),
    );
    assert!(limits_tracked(std::slice::from_ref(&requests_only), &p).is_empty());
    let limits = quota(
        "l",
        json!({"limits.memory": "1Gi", "limits.cpu": "2"}),
        json!({}),
    );
    assert_eq!(
        limits_tracked(&[requests_only, limits.clone()], &p),
        ["cpu", "memory"]
    );
    // A quota whose scope excludes the pod requires nothing of it.
    let terminating = quota_with(
        "t",
        json!({"hard": {"limits.cpu": "1"}, "scopes": ["Terminating"]}),
        json!({}),
    );
    assert!(limits_tracked(&[terminating], &p).is_empty());
    assert_eq!(limits_tracked(&[limits.clone(), limits], &p).len(), 2);
}
