//! Helpers shared by the conformance tests: loading vectors, applying patches, comparing resources.
#![allow(dead_code)]

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;
use tailor_core::quantity::same_value;

/// Reads a vector file from `tests/data`.
pub fn load(rel: &str) -> Vec<Value> {
    let path = format!("{}/../tests/data/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ids listed in the Admission section of DEVIATIONS.md (first column of table rows).
pub fn deviation_ids() -> BTreeSet<String> {
    let path = format!("{}/../DEVIATIONS.md", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut ids = BTreeSet::new();
    let mut in_section = false;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_section = title.trim().starts_with("Admission");
            continue;
        }
        if !in_section || !line.starts_with('|') {
            continue;
        }
        let first = line
            .trim_matches('|')
            .split('|')
            .next()
            .unwrap_or("")
            .trim();
        let id = first.trim_matches('`');
        if !id.is_empty() && !id.starts_with('-') && id != "Vector id" && id != "id" {
            ids.insert(id.to_owned());
        }
    }
    ids
}

/// Applies a JSON patch given as a JSON array to `doc`.
pub fn apply(doc: &Value, patches: &Value) -> Result<Value, String> {
    let patch: json_patch::Patch =
        serde_json::from_value(patches.clone()).map_err(|e| e.to_string())?;
    let mut out = doc.clone();
    json_patch::patch(&mut out, &patch.0).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Compares two resource maps (cpu/memory/… → quantity strings) semantically; `null` = absent = `{}`.
pub fn same_resources(a: Option<&Value>, b: Option<&Value>) -> Result<(), String> {
    let empty = serde_json::Map::new();
    let a = a.and_then(Value::as_object).unwrap_or(&empty);
    let b = b.and_then(Value::as_object).unwrap_or(&empty);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        match (
            a.get(k).and_then(Value::as_str),
            b.get(k).and_then(Value::as_str),
        ) {
            (Some(x), Some(y)) => {
                let eq = same_value(&Quantity(x.into()), &Quantity(y.into()))
                    .map_err(|e| e.to_string())?;
                if !eq {
                    return Err(format!("{k}: {x} != {y}"));
                }
            }
            (x, y) => return Err(format!("{k}: {x:?} != {y:?}")),
        }
    }
    Ok(())
}

/// Compares requests and limits of every container of two pods.
pub fn same_container_resources(expected: &Value, actual: &Value) -> Result<(), String> {
    for list in ["containers", "initContainers"] {
        let e = expected
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array);
        let a = actual
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array);
        let (e, a) = (
            e.cloned().unwrap_or_default(),
            a.cloned().unwrap_or_default(),
        );
        if e.len() != a.len() {
            return Err(format!("{list}: {} vs {} containers", e.len(), a.len()));
        }
        for (i, (ec, ac)) in e.iter().zip(a.iter()).enumerate() {
            for field in ["requests", "limits"] {
                let ptr = format!("/resources/{field}");
                same_resources(ec.pointer(&ptr), ac.pointer(&ptr))
                    .map_err(|m| format!("{list}[{i}].resources.{field}: expected vs ours: {m}"))?;
            }
        }
    }
    Ok(())
}

/// The value of annotation `key`.
pub fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}
