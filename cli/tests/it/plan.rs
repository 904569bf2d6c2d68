//! `tailor plan`: one updater iteration previewed on the snapshot in `examples/plan/` (the table is pinned
//! in `examples/plan/expected-table.txt`), the webhook's lease honoured, JSON output, upstream's updater
//! vectors through `--case` (a field the evaluation would not read refused), and bad input exiting 2 with
//! the file named.

use serde_json::Value;

use crate::{ROOT, stdout, tailor};

const NOW: &str = "2026-01-10T12:00:00Z";

#[test]
fn the_example_snapshot_gives_the_expected_table() {
    let got = stdout(&tailor(&["plan", "examples/plan/", "--now", NOW]));
    let want = std::fs::read_to_string(format!("{ROOT}/examples/plan/expected-table.txt")).unwrap();
    assert_eq!(got, want);
    // What the table says, decision by decision.
    for line in [
        "web-7d9f-0  web     Recreate           evict",
        "web-7d9f-2  web     Recreate           skip    tolerance exhausted",
        "api-5c4b-0  api     InPlaceOrRecreate  resize  [0] cpu request 300m, [0] memory request 384Mi, [0] cpu limit 600m, [0] memory limit 768Mi",
        "api-5c4b-2  api     InPlaceOrRecreate  skip    too young",
        "db-0        db      Recreate           skip    PDB",
        "single-1-0  single  Recreate           skip    below minReplicas",
        "VPA shop/worker not considered: mode Initial",
        "2 evict, 1 resize, 8 skip",
    ] {
        assert!(got.contains(line), "missing {line:?} in\n{got}");
    }
}

#[test]
fn sizing_decisions_in_a_vpas_status_are_reported() {
    // The example snapshot plus a VPA whose recommendation the recommender shaped
    // (docs/decisions/node-fit.md, docs/decisions/hpa-coherence.md).
    let base = std::fs::read_to_string(format!("{ROOT}/examples/plan/snapshot.yaml")).unwrap();
    let extra = r#"
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: big, namespace: batch, uid: uid-vpa-big}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: big}
  updatePolicy: {updateMode: Recreate}
status:
  conditions:
  - {type: CappedToNodeSize, status: "True", reason: LargestNode,
     message: "target capped to fit node n1 (allocatable cpu 8, memory 16Gi): app cpu 12 -> 8"}
  - {type: ResourcesLeftToHPA, status: "True", reason: HorizontalPodAutoscaler,
     message: "HorizontalPodAutoscaler big scales on memory utilization: Tailor leaves memory requests as they are and sizes the rest"}
  recommendation:
    containerRecommendations:
    - containerName: app
      target: {cpu: "8"}
"#;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-sizing-notes");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snapshot.yaml");
    std::fs::write(&file, base + extra).unwrap();
    let got = stdout(&tailor(&["plan", file.to_str().unwrap(), "--now", NOW]));
    for line in [
        "note: VPA batch/big: CappedToNodeSize: target capped to fit node n1 (allocatable cpu 8, memory 16Gi): app cpu 12 -> 8",
        "note: VPA batch/big: ResourcesLeftToHPA: HorizontalPodAutoscaler big scales on memory utilization",
    ] {
        assert!(got.contains(line), "missing {line:?} in\n{got}");
    }
}

#[test]
fn json_output_carries_the_resize_patch() {
    let out: Value = serde_json::from_str(&stdout(&tailor(&[
        "plan",
        "examples/plan/snapshot.yaml",
        "--now",
        NOW,
        "-o",
        "json",
    ])))
    .unwrap();
    assert_eq!(out["admissionAlive"], true);
    let api = out["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == "api-5c4b-0")
        .unwrap();
    assert_eq!(api["action"], "resize");
    let patch = api["patch"].as_array().unwrap();
    assert!(patch.contains(&serde_json::json!({"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "300m"})), "{patch:?}");
    assert_eq!(out["skippedVpas"][0]["vpa"], "shop/worker");
}

#[test]
fn flags_change_the_plan() {
    // A tolerance of 1 lets every web pod go at once; a rate limit of one eviction per minute does not.
    let all = stdout(&tailor(&[
        "plan",
        "examples/plan/snapshot.yaml",
        "--now",
        NOW,
        "--eviction-tolerance",
        "1",
    ]));
    assert!(all.contains("4 evict"), "{all}");
    let limited = stdout(&tailor(&[
        "plan",
        "examples/plan/snapshot.yaml",
        "--now",
        NOW,
        "--eviction-tolerance",
        "1",
        "--eviction-rate-limit",
        "0.0167",
        "--eviction-rate-burst",
        "1",
    ]));
    assert!(limited.contains("rate limited"), "{limited}");
    assert!(limited.contains("the iteration stops early"), "{limited}");
}

#[test]
fn a_stale_webhook_lease_stops_everything() {
    let out = stdout(&tailor(&[
        "plan",
        "examples/plan/snapshot.yaml",
        "examples/plan/stale/lease.yaml",
        "--now",
        NOW,
    ]));
    assert!(out.contains("0 evict, 0 resize, 11 skip"), "{out}");
    assert!(out.contains("admission not alive"), "{out}");
}

#[test]
fn updater_vectors_through_case() {
    let out: Value = serde_json::from_str(&stdout(&tailor(&[
        "plan",
        "--case",
        "conformance/tests/data/updater/unit-cases.json",
    ])))
    .unwrap();
    let list = out.as_array().unwrap();
    assert_eq!(list.len(), 219);
    let first = &list[0];
    assert_eq!(first["output"]["resourceDiff"], 4.0, "{first}");
}

#[test]
fn a_vector_with_an_unread_field_exits_2_naming_the_case_and_field() {
    let text = std::fs::read_to_string(format!(
        "{ROOT}/conformance/tests/data/updater/unit-cases.json"
    ))
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut case = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "updater_loop")
        .unwrap()
        .clone();
    case["input"]["config"]["evictionRateLimitt"] = Value::from("unlimited");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("case.json");
    std::fs::write(&file, case.to_string()).unwrap();
    let out = tailor(&["plan", "--case", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let id = case["id"].as_str().unwrap();
    assert!(
        err.contains(id) && err.contains("input.config.evictionRateLimitt: unknown field"),
        "{err}"
    );
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata: [\n").unwrap();
    let out = tailor(&["plan", bad.to_str().unwrap(), "--now", NOW]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.yaml"), "{err}");

    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n",
    )
    .unwrap();
    let out = tailor(&["plan", wrong.to_str().unwrap(), "--now", NOW]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("wrong.yaml: document 1: spec.containers"),
        "{err}"
    );

    let out = tailor(&["plan", "/nonexistent/snapshot.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/snapshot.yaml"));

    let out = tailor(&["plan", "examples/plan/snapshot.yaml", "--now", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    let out = tailor(&[
        "plan",
        "examples/plan/snapshot.yaml",
        "--eviction-tolerance",
        "1.5",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_limit_policy_shapes_the_resize_and_a_bad_one_is_a_note() {
    // The example snapshot with a limit policy on VPA shop/api (docs/limit-policy.md).
    let base = std::fs::read_to_string(format!("{ROOT}/examples/plan/snapshot.yaml")).unwrap();
    let annotated = |policy: &str| {
        let needle = "  name: api\n  namespace: shop\n  uid: uid-vpa-api\n";
        assert!(base.contains(needle));
        base.replace(
            needle,
            &format!("{needle}  annotations: {{tailor.dev/limit-policy: \"{policy}\"}}\n"),
        )
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-limit-policy");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |policy: &str| {
        let file = dir.join("snapshot.yaml");
        std::fs::write(&file, annotated(policy)).unwrap();
        stdout(&tailor(&["plan", file.to_str().unwrap(), "--now", NOW]))
    };
    // Memory: 384Mi + 256Mi. The running pod's CPU limit cannot be removed in place: it keeps its ratio.
    let got = run("memory=request+256Mi,cpu=unset");
    let line = "api-5c4b-0  api     InPlaceOrRecreate  resize  [0] cpu request 300m, [0] memory request 384Mi, [0] cpu limit 600m, [0] memory limit 640Mi";
    assert!(got.contains(line), "missing {line:?} in\n{got}");
    assert!(!got.contains("LimitPolicyInvalid"), "{got}");
    // ratio:1.5 of both.
    let got = run("cpu=ratio:1.5,memory=ratio:1.5");
    assert!(
        got.contains("[0] cpu limit 450m, [0] memory limit 576Mi"),
        "{got}"
    );
    // Not parsable: a warning in the notes, and the limits of the example (keep-ratio).
    let got = run("memory=request+lots");
    assert!(
        got.contains("[0] cpu limit 600m, [0] memory limit 768Mi"),
        "{got}"
    );
    assert!(
        got.contains(
            "event LimitPolicyInvalid on VPA shop/api: annotation tailor.dev/limit-policy, entry 1"
        ),
        "{got}"
    );
}
