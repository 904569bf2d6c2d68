//! Conformance: every case of `tests/data/upstream-diff/recommender-cases.json` (computed by upstream VPA
//! v1.2.2 code) through the real CLI path: `tailor recommend --input FILE --output json`.

use std::process::Command;

use serde_json::Value;
use tailor_engine::replay::Trace;

/// Case ids deliberately skipped; each is a row in DEVIATIONS.md. Empty: none.
const EXCLUDED: [&str; 0] = [];

/// The fields of a case that `tailor recommend` would not read: everything but `expected` (ignored, as
/// docs/design/trace-format.md says) must survive a parse as a trace, or the case would pass with an input ignored.
fn unread_fields(case: &Value) -> Vec<String> {
    let mut input = case.clone();
    if let Some(o) = input.as_object_mut() {
        o.remove("expected");
    }
    let trace: Trace = match serde_json::from_value(input.clone()) {
        Ok(t) => t,
        Err(e) => return vec![format!("not a trace: {e}")],
    };
    let back = serde_json::to_value(&trace).expect("a trace serialises");
    tailor_core::json_fields::dropped_fields(&input, &back, "case")
}

/// A field `tailor recommend` does not read fails the case check.
#[test]
fn a_field_the_cli_would_not_read_is_found() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/upstream-diff/recommender-cases.json"
    );
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("cases present")).expect("json");
    let mut case = cases[0].clone();
    assert_eq!(unread_fields(&case), Vec::<String>::new());
    case["bogus"] = Value::from(1);
    case["containers"][0]["cpu_samplez"] = Value::from(vec![1]);
    assert_eq!(
        unread_fields(&case),
        vec![
            "case.bogus".to_owned(),
            "case.containers[0].cpu_samplez".to_owned()
        ]
    );
}

#[test]
fn upstream_diff_conformance() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/upstream-diff/recommender-cases.json"
    );
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("cases present")).expect("json");
    let out = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["recommend", "--input", path, "--output", "json"])
        .output()
        .expect("run tailor");
    let got: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(got.len(), cases.len(), "one output per case");
    // A case expecting an error makes the whole run exit 2 (bad input); otherwise 0.
    let any_error = cases.iter().any(|c| c["expected"].get("error").is_some());
    assert_eq!(out.status.code(), Some(if any_error { 2 } else { 0 }));

    let (mut passed, mut total) = (0, 0);
    let mut failures = Vec::new();
    for (case, o) in cases.iter().zip(&got) {
        let id = case["id"].as_str().unwrap_or_default();
        if EXCLUDED.contains(&id) {
            continue;
        }
        total += 1;
        let unread = unread_fields(case);
        if !unread.is_empty() {
            failures.push(format!("{id}: fields not read: {}", unread.join(", ")));
            continue;
        }
        let e = &case["expected"];
        let ok = if e.get("error").is_some() {
            o.get("error").is_some() && o["recommendations"] == Value::Array(vec![])
        } else {
            o["id"] == case["id"]
                && o["recommendations"] == e["recommendations"]
                && o["discarded"] == e["discarded"]
        };
        if ok {
            passed += 1;
        } else {
            failures.push(format!("{id}:\n  expected {e}\n  got      {o}"));
        }
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} (upstream v1.2.2 differential cases)"
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
