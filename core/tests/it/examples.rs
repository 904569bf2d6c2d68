//! Every manifest under examples/ is checked against the generated CRD schema (openAPIV3Schema as JSON
//! Schema) and against the webhook's validation rules; upstream examples are converted first; the
//! deliberately broken example must be rejected for each of its faults.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tailor_core::convert::convert_documents;
use tailor_core::validation::{FeatureGates, ValidationOptions, validate};
use tailor_crds::{GROUP, VerticalPodAutoscaler, crd};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Conversion passes non-upstream documents through unchanged and rewrites upstream VPAs.
    convert_documents(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .documents
}

/// The JSON Schema validator for a Tailor kind, from the generated CRD.
fn validator(kind: &str) -> jsonschema::Validator {
    let def = crd::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = def.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("openAPIV3Schema");
    let schema = serde_json::to_value(schema).expect("schema as JSON");
    jsonschema::validator_for(&schema).expect("CRD schema compiles as JSON Schema")
}

fn is_tailor(doc: &Value) -> bool {
    doc["apiVersion"].as_str() == Some(&format!("{GROUP}/v1"))
}

fn schema_errors(doc: &Value) -> Vec<String> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    validator(kind)
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn every_example_is_accepted() {
    let mut files = Vec::new();
    yaml_files(&examples_dir(), &mut files);
    let mut checked = 0;
    for file in files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "broken"))
    {
        for doc in documents(file).iter().filter(|d| is_tailor(d)) {
            let errors = schema_errors(doc);
            assert!(
                errors.is_empty(),
                "{}: schema errors {errors:?}",
                file.display()
            );
            if doc["kind"] == "VerticalPodAutoscaler" {
                let vpa: VerticalPodAutoscaler = serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                let gates = FeatureGates {
                    cpu_startup_boost: true,
                    per_vpa_config: true,
                    in_place: true,
                };
                let result = validate(&vpa.spec, &ValidationOptions::new(gates, None));
                assert!(result.is_valid(), "{}: {:?}", file.display(), result.errors);
            }
            checked += 1;
        }
    }
    println!("examples: {checked} Tailor objects accepted");
    assert!(
        checked >= 8,
        "expected the mode, policy and upstream examples, found {checked}"
    );
}

#[test]
fn broken_example_is_rejected_for_each_fault() {
    let file = examples_dir().join("broken/vpa-invalid.yaml");
    let docs = documents(&file);
    let errors = schema_errors(&docs[0]).join("\n");
    for fault in [
        "/spec/updatePolicy/updateMode",
        "/spec/resourcePolicy/containerPolicies/0/mode",
        "/spec/resourcePolicy/containerPolicies/0/maxAllowed/memory",
        "targetRef",
    ] {
        assert!(
            errors.contains(fault),
            "no schema error for {fault}:\n{errors}"
        );
    }
    // The typed API decodes it (unknown enum values are kept) so the webhook can name every fault too.
    let vpa: VerticalPodAutoscaler = serde_json::from_value(docs[0].clone()).expect("decodes");
    let result = validate(
        &vpa.spec,
        &ValidationOptions::new(FeatureGates::default(), None),
    );
    let messages: Vec<String> = result.errors.iter().map(|e| e.to_string()).collect();
    assert!(
        messages.iter().any(
            |m| m.starts_with("spec.updatePolicy.updateMode: Unsupported value: \"Sometimes\"")
        ),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.starts_with(
            "spec.resourcePolicy.containerPolicies[0].mode: Unsupported value: \"Maybe\""
        )),
        "{messages:?}"
    );
}

#[test]
fn upstream_example_converts_to_a_valid_tailor_vpa() {
    let docs = documents(&examples_dir().join("upstream/vpa.yaml"));
    assert_eq!(docs.len(), 1);
    assert!(is_tailor(&docs[0]), "{}", docs[0]["apiVersion"]);
    assert!(schema_errors(&docs[0]).is_empty());
}

/// A checkpoint whose CPU histogram has `weights` and `total`.
fn checkpoint_with(weights: Value, total: f64) -> Value {
    serde_json::json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "VerticalPodAutoscalerCheckpoint",
        "metadata": {"name": "web-app", "namespace": "default"},
        "spec": {"vpaObjectName": "web", "containerName": "app"},
        "status": {"version": "v3",
            "cpuHistogram": {"bucketWeights": weights, "totalWeight": total,
                "referenceTimestamp": "2026-11-01T00:00:00Z"}}
    })
}

#[test]
fn the_checkpoint_schema_refuses_weights_the_recommender_cannot_read() {
    // What the recommender (and upstream's) writes: weights scaled to at most 10000.
    let good = checkpoint_with(serde_json::json!({"0": 10000, "16": 3}), 2.5);
    assert_eq!(schema_errors(&good), Vec::<String>::new());
    for (weights, total) in [
        (serde_json::json!({"16": -1}), 1.0),
        (serde_json::json!({"16": 10001}), 1.0),
        (serde_json::json!({"16": 0.5}), 1.0),
        (serde_json::json!({"16": "x"}), 1.0),
        (serde_json::json!({"16": 1}), -1.0),
    ] {
        let bad = checkpoint_with(weights.clone(), total);
        assert!(
            !schema_errors(&bad).is_empty(),
            "{weights} / {total} accepted"
        );
    }
}
