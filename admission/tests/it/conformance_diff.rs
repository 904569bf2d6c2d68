//! Conformance with upstream's webhook on the differential admission cases
//! (`tests/data/upstream-diff/admission-cases.json`), through the `tailor patch --case` path.
//!
//! Compared as DESIGN.md §3 says: both patches are applied to the input pod, then every container's
//! requests and limits must be semantically equal, and the observed-containers annotation must have the
//! same value (upstream `vpaObservedContainers` ↔ `tailor.dev/observed-containers`). Ids listed in the
//! Admission section of DEVIATIONS.md are skipped (their patch must still apply).

use crate::conformance_support::{
    annotation, apply, deviation_ids, load, same_container_resources,
};
use serde_json::Value;
use tailor_admission::pod::{OBSERVED_CONTAINERS_ANNOTATION, PatchOptions};
use tailor_admission::preview::{InputFile, run_case, run_cases};

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
    println!("conformance: {passed}/{total}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
