//! The kind e2e cluster's chart values (hack/kind-values.yaml), checked without a cluster: the webhook's
//! `--feature-gates` there must accept every Tailor object of the top-level examples, which the e2e test
//! `crds_accept_the_examples` sends to the cluster (a gated field without its gate is rejected there).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;

use serde_json::Value;
use tailor_core::validation::{FeatureGates, ValidationOptions, validate};
use tailor_crds::VerticalPodAutoscaler;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kind_values() -> Value {
    let path = root().join("hack/kind-values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The webhook's gates as the kind values pass them (`admission.extraArgs.feature-gates`).
fn webhook_gates(values: &Value) -> FeatureGates {
    let text = values
        .pointer("/admission/extraArgs/feature-gates")
        .and_then(Value::as_str)
        .expect("hack/kind-values.yaml sets admission.extraArgs.feature-gates");
    FeatureGates::parse(text).unwrap_or_else(|e| panic!("hack/kind-values.yaml: {e}"))
}

/// The Tailor VPAs of examples/*.yaml (not of subdirectories), as the e2e test reads them.
fn top_level_example_vpas() -> Vec<(PathBuf, VerticalPodAutoscaler)> {
    let dir = root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in text.split("\n---").filter(|d| !d.trim().is_empty()) {
            let value: Value =
                serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let tailor = value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("autoscaling.tailor.dev/"));
            if tailor && value["kind"] == "VerticalPodAutoscaler" {
                let vpa: VerticalPodAutoscaler = serde_json::from_value(value)
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                out.push((file.clone(), vpa));
            }
        }
    }
    out
}

fn rejected(vpas: &[(PathBuf, VerticalPodAutoscaler)], gates: FeatureGates) -> Vec<String> {
    vpas.iter()
        .filter_map(|(file, vpa)| {
            let result = validate(&vpa.spec, &ValidationOptions::new(gates, None));
            (!result.is_valid()).then(|| format!("{}: {:?}", file.display(), result.errors))
        })
        .collect()
}

#[test]
fn the_kind_webhook_gates_accept_the_top_level_examples() {
    let gates = webhook_gates(&kind_values());
    let vpas = top_level_example_vpas();
    assert!(!vpas.is_empty(), "no Tailor VPA in examples/*.yaml");
    let errors = rejected(&vpas, gates);
    assert!(
        errors.is_empty(),
        "the kind cluster's webhook (hack/kind-values.yaml) would reject:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_examples_need_gates_so_the_check_above_means_something() {
    let vpas = top_level_example_vpas();
    assert!(
        !rejected(&vpas, FeatureGates::default()).is_empty(),
        "no top-level example uses a gated field any more: the gates in hack/kind-values.yaml may go"
    );
}

#[test]
fn the_kind_script_installs_these_values() {
    let script = std::fs::read_to_string(root().join("hack/kind-e2e.sh")).unwrap();
    assert!(
        script.contains("hack/kind-values.yaml"),
        "hack/kind-e2e.sh does not install hack/kind-values.yaml"
    );
}
