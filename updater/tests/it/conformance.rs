//! Conformance with upstream's updater unit vectors (`tests/data/updater/*.json`): each vector is evaluated
//! by `tailor_updater::preview::case` (what `tailor plan --case` prints), through the functions the updater
//! binary runs, and compared with the vector's expectation. Ids listed in the "Updater" section of
//! DEVIATIONS.md would be skipped (none is).

use std::collections::BTreeSet;

use serde_json::Value;
use tailor_updater::preview::case::{evaluate, matches};

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
            match evaluate(kind, &case["input"]).await {
                Ok(out) => match matches(kind, &case["expected"], &out) {
                    Ok(()) => passed += 1,
                    Err(e) => failures.push(format!("{id}: {e}")),
                },
                Err(e) => failures.push(format!("{id}: {e}")),
            }
        }
    }
    println!(
        "conformance: {passed}/{total} updater vectors (skipped by DEVIATIONS.md: {})",
        skip.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 200, "only {total} vectors found in {dir}");
}
