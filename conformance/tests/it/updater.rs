//! Conformance with upstream's updater unit vectors (`tests/data/updater/*.json`): each vector is evaluated
//! by `tailor_conformance::updater` (what `tailor plan --case` prints), through the functions the updater
//! binary runs, and compared with the vector's expectation. Ids listed in the "Updater" section of
//! DEVIATIONS.md would be skipped (none is).
//!
//! A vector fails when it carries a field the evaluation would not read (unknown, or a value of a test
//! double it cannot reproduce): the tests below mutate public vectors of every kind to show it, and show
//! that the admission-status input of loop vectors goes through the binary's own gate.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tailor_conformance::updater::{evaluate_case, matches};

fn deviation_ids() -> BTreeSet<String> {
    let path = format!("{}/../DEVIATIONS.md", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut ids = BTreeSet::new();
    let mut in_section = false;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_section = title.trim().starts_with("Updater");
            continue;
        }
        if in_section && line.starts_with('|') {
            let id = line
                .trim_matches('|')
                .split('|')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('`');
            if !id.is_empty() && !id.starts_with('-') && id != "Vector id" {
                ids.insert(id.to_owned());
            }
        }
    }
    ids
}

#[tokio::test]
async fn updater_vectors() {
    let dir = format!("{}/tests/data/updater", env!("CARGO_MANIFEST_DIR"));
    let skip = deviation_ids();
    let (mut total, mut passed, mut failures) = (0, 0, Vec::new());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for case in doc["cases"].as_array().into_iter().flatten() {
            let id = case["id"].as_str().unwrap_or_default();
            if skip.contains(id) {
                continue;
            }
            total += 1;
            let kind = case["kind"].as_str().unwrap_or_default();
            match evaluate_case(case).await {
                Ok(out) => match matches(kind, &case["expected"], &out) {
                    Ok(()) => passed += 1,
                    Err(e) => failures.push(format!("{id}: {e}")),
                },
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} updater vectors (skipped by DEVIATIONS.md: {})",
        skip.len()
    ));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 200, "only {total} vectors found in {dir}");
}

fn public_cases() -> Vec<Value> {
    let path = format!(
        "{}/tests/data/updater/unit-cases.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

/// The first public case of `kind` for which `pointer` (into its input) is an object.
fn case_with(kind: &str, pointer: &str) -> Value {
    public_cases()
        .into_iter()
        .find(|c| c["kind"] == kind && c["input"].pointer(pointer).is_some_and(Value::is_object))
        .unwrap_or_else(|| panic!("no {kind} case with an object at {pointer}"))
}

/// Evaluates `case` after `mutate` and returns the error it must give.
async fn refused(mut case: Value, mutate: impl FnOnce(&mut Value)) -> String {
    let id = case["id"].as_str().unwrap().to_owned();
    mutate(&mut case["input"]);
    match evaluate_case(&case).await {
        Ok(out) => panic!("{id}: evaluated despite the mutation: {out}"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.starts_with(&format!("{id}: ")), "error names no id: {e}");
            e
        }
    }
}

/// Every kind, an unknown field at the top of its input and one inside a nested object (a Kubernetes
/// object where the kind has one): the case fails naming the field, instead of passing with it ignored.
#[tokio::test]
async fn an_unknown_input_field_fails_every_kind() {
    let nested = [
        ("priority", "/pod/spec", "input.pod.spec.bogus"),
        ("priority_calculator", "/config", "input.config"),
        (
            "priority_calculator",
            "/priorityProcessor/fake",
            "input.priorityProcessor.fake",
        ),
        ("pod_priority_less", "/prio", "input.prio"),
        ("lower_resource", "/lastAttempt", "input.lastAttempt.bogus"),
        (
            "eviction_admission",
            "/pod/metadata",
            "input.pod.metadata.bogus",
        ),
        (
            "eviction_admission_loop_init",
            "/loopInits/0/0",
            "input.loopInits[0][0]",
        ),
        (
            "eviction_admission_loop_init",
            "/loopInits/0/0/vpa/spec",
            "input.loopInits[0][0].vpa.spec.bogus",
        ),
        ("eviction_restriction", "/steps/0", "input.steps[0]"),
        (
            "eviction_restriction",
            "/controllers/0/spec",
            "input.controllers[0].spec",
        ),
        ("inplace_restriction", "/config", "input.config"),
        (
            "inplace_restriction",
            "/vpaForCreatorMaps/spec",
            "input.vpaForCreatorMaps.spec.bogus",
        ),
        ("resize_status", "/pod/status", "input.pod.status.bogus"),
        (
            "non_disruptive_resize",
            "/pod/spec/containers/0",
            "input.pod.spec.containers[0].bogus",
        ),
        (
            "inplace_patch",
            "/recommendedContainerResources/0",
            "input.recommendedContainerResources[0]",
        ),
        ("boost_expiry", "/vpa/spec", "input.vpa.spec.bogus"),
        (
            "boost_in_progress",
            "/pod/metadata",
            "input.pod.metadata.bogus",
        ),
        ("updater_loop", "/config", "input.config"),
        ("updater_loop", "/mocks", "input.mocks"),
        ("updater_loop", "/cycles/0/mocks", "input.cycles[0].mocks"),
        (
            "updater_loop",
            "/pods/0/metadata",
            "input.pods[0].metadata.bogus",
        ),
        ("infeasible_error", "/error", "input.error"),
        ("infeasible_attempts", "/ops/0", "input.ops[0]"),
        (
            "deprecation_warning",
            "/updatePolicy",
            "input.updatePolicy.bogus",
        ),
        ("status_lease", "/lease/spec", "input.lease.spec.bogus"),
        ("metrics", "/call", "input.call"),
        (
            "metrics",
            "/iterations/0/additions/0",
            "input.iterations[0].additions[0]",
        ),
    ];
    for (kind, pointer, path) in nested {
        let e = refused(case_with(kind, pointer), |input| {
            input.pointer_mut(pointer).unwrap()["bogus"] = json!(1);
        })
        .await;
        assert!(
            e.contains(path) && e.contains("bogus"),
            "{kind} {pointer}: {e}"
        );
    }
    let kinds: BTreeSet<String> = public_cases()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_owned())
        .collect();
    for (kind, _, _) in nested {
        assert!(kinds.contains(kind), "{kind}");
    }
    assert_eq!(kinds.len(), 21, "{kinds:?}");
    for kind in &kinds {
        let e = refused(case_with(kind, ""), |input| input["bogus"] = json!(true)).await;
        assert!(e.contains("unknown field `bogus`"), "{kind}: {e}");
    }
}

/// A field the case envelope does not have fails the case too.
#[tokio::test]
async fn an_unknown_case_field_fails() {
    let mut case = case_with("priority", "");
    case["expectedd"] = json!({});
    let e = evaluate_case(&case).await.unwrap_err().to_string();
    assert!(e.contains("unknown field \"expectedd\""), "{e}");
}

/// Values the evaluation cannot reproduce are refused, kind by kind, rather than replaced by the one it
/// can.
#[tokio::test]
async fn a_value_the_evaluation_cannot_honour_fails() {
    type Mutation = fn(&mut Value);
    let cases: [(&str, &str, Mutation, &str); 22] = [
        (
            "priority_calculator",
            "",
            |i| i["admission"] = json!("scalingDirection"),
            "input.admission: unknown variant `scalingDirection`",
        ),
        (
            "priority_calculator",
            "",
            |i| i["recommendationProcessor"] = json!("capping"),
            "input.recommendationProcessor",
        ),
        (
            "priority_calculator",
            "/priorityProcessor/fake",
            |i| i["priorityProcessor"]["fake"]["ghost"] = json!({}),
            "\"ghost\" names no pod",
        ),
        (
            "priority_calculator",
            "",
            |i| i["config"]["podLifetimeUpdateThreshold"] = json!("twelve hours"),
            "input.config.podLifetimeUpdateThreshold",
        ),
        (
            "priority_calculator",
            "",
            |i| i["now"] = json!("yesterday"),
            "input.now",
        ),
        (
            "pod_priority_less",
            "",
            |i| i["prio"]["scaleUp"] = json!("yes"),
            "input.prio.scaleUp",
        ),
        (
            "lower_resource",
            "",
            |i| i["function"] = json!("resources.Other"),
            "unknown variant `resources.Other`",
        ),
        (
            "eviction_admission",
            "",
            |i| i["evictionRequirements"] = json!([{"resources": ["cpu"], "changeRequirement": "TargetHigherThanRequests", "x": 1}]),
            "input.evictionRequirements[0].x",
        ),
        (
            "eviction_admission_loop_init",
            "",
            |i| i["loopInits"][0][0]["pods"] = json!(["ghost"]),
            "\"ghost\" names no pod",
        ),
        (
            "eviction_restriction",
            "",
            |i| i["patchCalculators"] = json!("realCalculators"),
            "input.patchCalculators",
        ),
        (
            "eviction_restriction",
            "",
            |i| i["steps"][0]["op"] = json!("evictLater"),
            "input.steps[0].op",
        ),
        (
            "inplace_restriction",
            "",
            |i| i["controllers"][0]["status"] = json!({"numberReady": 3}),
            "input.controllers[0].status.numberReady: not read for kind ReplicationController",
        ),
        (
            "updater_loop",
            "",
            |i| i["config"]["evictionRateLimit"] = json!("10/s"),
            "input.config.evictionRateLimit",
        ),
        (
            "updater_loop",
            "",
            |i| i["config"]["controllerFetcher"] = json!("real"),
            "input.config.controllerFetcher",
        ),
        (
            "updater_loop",
            "",
            |i| i["config"]["evictionAdmission"] = json!("scalingDirection"),
            "input.config.evictionAdmission",
        ),
        (
            "updater_loop",
            "",
            |i| {
                i["config"]["useAdmissionControllerStatus"] = json!(true);
                i["config"]
                    .as_object_mut()
                    .unwrap()
                    .remove("admissionControllerStatusValid");
            },
            "input.config.admissionControllerStatusValid: required",
        ),
        (
            "updater_loop",
            "/mocks",
            |i| i["mocks"]["canInPlaceUpdate"] = json!("InPlaceMaybe"),
            "input.mocks.canInPlaceUpdate",
        ),
        (
            "updater_loop",
            "",
            |i| i["selectors"] = json!({"": "app in (a"}),
            "input.selectors.",
        ),
        (
            "infeasible_error",
            "/error",
            |i| i["error"]["type"] = json!("TimeoutError"),
            "input.error",
        ),
        (
            "status_lease_fetch",
            "",
            |i| i["getResponses"] = json!(["timeout"]),
            "input.getResponses[0]",
        ),
        (
            "status_lease_fetch",
            "",
            |i| i["getResponses"] = json!(["ECONNRESET"]),
            "input.getResponses: the status GET was attempted more than the 1",
        ),
        (
            "metrics",
            "/call",
            |i| i["call"]["reason"] = json!("because"),
            "input.call: unknown field `reason`",
        ),
    ];
    for (kind, pointer, mutate, wanted) in cases {
        let e = refused(case_with(kind, pointer), mutate).await;
        assert!(e.contains(wanted), "{kind}: {e}\n  wanted {wanted}");
    }
    let e = refused(case_with("metrics", "/iterations/0"), |i| {
        i["gauge"] = json!("vpa_updater_in_place_updatable_pods_total");
        i["iterations"] = json!([{"additions": [{"vpaSize": 1, "mode": "Auto", "value": 1}]}]);
    })
    .await;
    assert!(e.contains("is not labelled by mode"), "{e}");
}

/// Upstream's `RunOnce` does nothing when the admission controller's status is not valid: every public
/// loop vector, with its validator answering `false`, fetches no selector, lists no pod, evicts and
/// resizes nothing. With `useAdmissionControllerStatus: false` the answer is not consulted.
#[tokio::test]
async fn an_invalid_admission_status_stops_the_loop() {
    let loops: Vec<Value> = public_cases()
        .into_iter()
        .filter(|c| c["kind"] == "updater_loop")
        .collect();
    assert!(loops.len() >= 16);
    let mut acted = 0;
    for case in loops {
        let id = case["id"].as_str().unwrap().to_owned();
        let valid = evaluate_case(&case).await.unwrap();
        let cycles = |out: &Value| match out.get("perCycle") {
            Some(list) => list.as_array().unwrap().clone(),
            None => vec![out.clone()],
        };
        if cycles(&valid)
            .iter()
            .any(|c| c["evictCalls"] != 0 || c["inPlaceUpdateCalls"] != 0)
        {
            acted += 1;
        }

        let mut invalid = case.clone();
        invalid["input"]["config"]["useAdmissionControllerStatus"] = json!(true);
        invalid["input"]["config"]["admissionControllerStatusValid"] = json!(false);
        let out = evaluate_case(&invalid).await.unwrap();
        for c in cycles(&out) {
            for (key, want) in [
                ("admissionAlive", json!(false)),
                ("selectorFetched", json!(false)),
                ("podsListed", json!(false)),
                ("evictCalls", json!(0)),
                ("inPlaceUpdateCalls", json!(0)),
                ("canUnboostCalls", json!(0)),
            ] {
                assert_eq!(c[key], want, "{id}: {key} in {c}");
            }
        }

        let mut unused = case.clone();
        unused["input"]["config"]["useAdmissionControllerStatus"] = json!(false);
        unused["input"]["config"]["admissionControllerStatusValid"] = json!(false);
        let out = evaluate_case(&unused).await.unwrap();
        assert_eq!(
            matches("updater_loop", &case["expected"], &out),
            Ok(()),
            "{id}: the status is not consulted without useAdmissionControllerStatus"
        );
    }
    assert!(acted >= 5, "only {acted} loop vectors evict or resize");
}
