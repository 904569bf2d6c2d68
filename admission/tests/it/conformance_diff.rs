//! Conformance with upstream's webhook on the differential admission cases
//! (`tests/data/upstream-diff/admission-cases.json`), through the `tailor patch --case` path.
//!
//! Compared as docs/design/principles.md §3 says: both patches are applied to the input pod, then every container's
//! requests and limits must be semantically equal, and the observed-containers annotation must have the
//! same value (upstream `vpaObservedContainers` ↔ `tailor.dev/observed-containers`). Ids listed in the
//! Admission section of DEVIATIONS.md are skipped (their patch must still apply).

use crate::conformance_support::{
    annotation, apply, deviation_ids, load, same_container_resources,
};
use k8s_openapi::api::core::v1::{LimitRange, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tailor_admission::preview::{InputFile, run_case, run_cases};
use tailor_core::sizing::{OBSERVED_CONTAINERS_ANNOTATION, PatchOptions};
use tailor_crds::VerticalPodAutoscaler;

const UPSTREAM_OBSERVED: &str = "vpaObservedContainers";

fn check(case: &Value, ours: &Value) -> Result<(), String> {
    let expected = &case["expected"];
    let pod = &case["pod"];
    if ours["allowed"] != Value::Bool(true) {
        return Err("not allowed".into());
    }
    let expected_pod =
        apply(pod, &expected["patches"]).map_err(|e| format!("expected patch: {e}"))?;
    let our_pod =
        apply(pod, &ours["patches"]).map_err(|e| format!("our patch does not apply: {e}"))?;
    same_container_resources(&expected_pod, &our_pod)?;
    let theirs = annotation(&expected_pod, UPSTREAM_OBSERVED);
    let mine = annotation(&our_pod, OBSERVED_CONTAINERS_ANNOTATION);
    if theirs != mine {
        return Err(format!(
            "observed containers: upstream {theirs:?}, ours {mine:?}"
        ));
    }
    Ok(())
}

/// The fields of a case (docs/design/trace-format.md §2): inputs, then what only the comparison reads.
const CASE_FIELDS: [&str; 9] = [
    "id",
    "pod",
    "vpa",
    "limitRange",
    "selector",
    "topController",
    "expected",
    "expected_upstream_1_2_2",
    "note",
];

/// `topController`: `kind` and `name` are matched against the VPA's `targetRef` (as upstream, which does
/// not compare the API version).
const TOP_CONTROLLER_FIELDS: [&str; 3] = ["apiVersion", "kind", "name"];

/// The paths of `v` that its type `T` (what the webhook decodes) would drop.
fn lost<T: Serialize + DeserializeOwned>(v: &Value, path: &str, out: &mut Vec<String>) {
    match serde_json::from_value::<T>(v.clone()) {
        Ok(parsed) => out.extend(tailor_core::json_fields::dropped_fields(
            v,
            &serde_json::to_value(&parsed).unwrap(),
            path,
        )),
        Err(e) => out.push(format!("{path}: {e}")),
    }
}

/// The fields of a case `tailor patch --case` would not read: unknown case or `topController` fields,
/// and fields of the pod, VPA, LimitRanges or selector their Kubernetes types do not hold.
fn unread_fields(case: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in case.as_object().into_iter().flatten() {
        if !CASE_FIELDS.contains(&k.as_str()) {
            out.push(k.clone());
            continue;
        }
        match k.as_str() {
            "pod" => lost::<Pod>(v, k, &mut out),
            "vpa" => {
                let mut v = v.clone();
                v["apiVersion"] = json!("autoscaling.tailor.dev/v1");
                v["kind"] = json!("VerticalPodAutoscaler");
                lost::<VerticalPodAutoscaler>(&v, k, &mut out)
            }
            "limitRange" => match v {
                Value::Array(items) => {
                    for (n, item) in items.iter().enumerate() {
                        lost::<LimitRange>(item, &format!("{k}[{n}]"), &mut out)
                    }
                }
                Value::Null => {}
                item => lost::<LimitRange>(item, k, &mut out),
            },
            "selector" if !v.is_null() => lost::<LabelSelector>(v, k, &mut out),
            "topController" => {
                for f in v.as_object().into_iter().flatten().map(|(f, _)| f) {
                    if !TOP_CONTROLLER_FIELDS.contains(&f.as_str()) {
                        out.push(format!("{k}.{f}"));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A field the case runner would not read fails the case.
#[test]
fn a_field_the_runner_would_not_read_is_found() {
    let mut case = load("upstream-diff/admission-cases.json")
        .into_iter()
        .find(|c| c.get("limitRange").is_some())
        .unwrap();
    assert_eq!(unread_fields(&case), Vec::<String>::new());
    case["limitRanges"] = json!([]);
    case["topController"]["uid"] = json!("x");
    case["pod"]["spec"]["containers"][0]["resourcez"] = json!({"requests": {"cpu": "1"}});
    assert_eq!(
        unread_fields(&case),
        [
            "limitRanges",
            "pod.spec.containers[0].resourcez",
            "topController.uid"
        ]
    );
}

#[test]
fn upstream_diff_admission_cases() {
    let cases = load("upstream-diff/admission-cases.json");
    let deviations = deviation_ids();
    let options = PatchOptions::default();
    let (mut passed, mut total) = (0usize, 0usize);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let id = case["id"].as_str().unwrap_or("?").to_owned();
        let ours = run_case("admission-cases.json", Some(i), case, &options)
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(ours["id"], case["id"], "{id}: id echoed");
        if deviations.contains(&id) {
            // Deviation: we still admit and our patch applies to the pod.
            assert_eq!(ours["allowed"], Value::Bool(true), "{id}");
            apply(&case["pod"], &ours["patches"]).unwrap_or_else(|e| panic!("{id}: {e}"));
            println!("skipped (DEVIATIONS.md): {id}");
            continue;
        }
        total += 1;
        let unread = unread_fields(case);
        if !unread.is_empty() {
            failures.push(format!("{id}: fields not read: {}", unread.join(", ")));
            continue;
        }
        match check(case, &ours) {
            Ok(()) => passed += 1,
            Err(msg) => failures.push(format!("{id}: {msg}\n  ours: {}", ours["patches"])),
        }
    }
    // The whole file through `tailor patch --case` gives the same answers, in order.
    let path = format!(
        "{}/../tests/data/upstream-diff/admission-cases.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let all = run_cases(
        InputFile {
            name: "admission-cases.json",
            content: &text,
        },
        &options,
    )
    .unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), cases.len());
    for (i, (out, case)) in all.iter().zip(&cases).enumerate() {
        assert_eq!(
            out,
            &run_case("admission-cases.json", Some(i), case, &options).unwrap()
        );
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["allowed", "id", "patches"]);
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} (admission differential cases)"
    ));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
