//! `tailor recommend --snapshot`: the README's example (a node-selector cap, a CPU left to an HPA), the
//! switches that turn each rule off, traces without a VPA, and snapshots that cannot be read.

use serde_json::Value;

use crate::{stdout, tailor};

const DEMO: &str = "examples/traces/demo.json";
const SNAPSHOT: &str = "examples/cluster/snapshot.yaml";

/// `tailor recommend --input DEMO --snapshot SNAPSHOT -o json EXTRA…`, parsed.
fn sized(extra: &[&str]) -> Value {
    let mut args = vec![
        "recommend",
        "--input",
        DEMO,
        "--snapshot",
        SNAPSHOT,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&stdout(&tailor(&args))).unwrap()
}

/// `tailor recommend --input DEMO -o json`, parsed: the recommendations without a snapshot.
fn unsized_demo() -> Value {
    serde_json::from_str(&stdout(&tailor(&[
        "recommend",
        "--input",
        DEMO,
        "-o",
        "json",
    ])))
    .unwrap()
}

/// The item `id` of a JSON array of recommendations.
fn item<'a>(all: &'a Value, id: &str) -> &'a Value {
    all.as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {all}"))
}

/// (container, CPU target, CPU uncapped target) of an item.
fn cpu(item: &Value) -> Vec<(String, Option<i64>, Option<i64>)> {
    (item["recommendations"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["containerName"].as_str().unwrap().to_owned(),
                r["target"]["cpu"].as_i64(),
                r["uncappedTarget"]["cpu"].as_i64(),
            )
        })
        .collect()
}

#[test]
fn the_example_caps_web_to_its_node_and_leaves_workers_cpu_to_the_hpa() {
    let all = sized(&[]);
    let web = item(&all, "shop/web");
    let rows = cpu(web);
    let total: i64 = rows.iter().filter_map(|(_, t, _)| *t).sum();
    // The only node web's pods may use (`pool: small`) has 600m allocatable.
    assert!(
        total <= 600,
        "web's CPU targets fit the small node: {rows:?}"
    );
    for (name, target, uncapped) in &rows {
        assert!(
            target < uncapped,
            "{name}: every container is scaled down: {rows:?}"
        );
    }
    let condition = &web["conditions"][0];
    assert_eq!(condition["type"], "CappedToNodeSize");
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "LargestNode");
    assert!(
        condition["message"].as_str().unwrap().contains("small-1"),
        "{condition}"
    );

    let worker = item(&all, "shop/worker");
    let rows = cpu(worker);
    assert!(
        rows.iter().all(|(_, t, u)| t.is_none() && u.is_some()),
        "worker's CPU is left to the HPA, its uncapped target kept: {rows:?}"
    );
    assert!(
        worker["recommendations"][0]["target"]["memory"].as_i64() > Some(0),
        "memory is still sized: {worker}"
    );
    assert_eq!(worker["conditions"][0]["type"], "ResourcesLeftToHPA");
    assert_eq!(worker["conditions"][0]["reason"], "HorizontalPodAutoscaler");
}

#[test]
fn each_rule_has_the_daemons_switch() {
    let all = sized(&["--node-fit=false", "--hpa-coherence=false"]);
    let plain = unsized_demo();
    assert_eq!(
        all, plain,
        "with both rules off the snapshot changes nothing"
    );
    let only_hpa = sized(&["--node-fit=false"]);
    assert!(item(&only_hpa, "shop/web").get("conditions").is_none());
    assert!(item(&only_hpa, "shop/worker").get("conditions").is_some());
}

#[test]
fn the_table_prints_the_conditions_as_notes() {
    let out = stdout(&tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--snapshot",
        SNAPSHOT,
    ]));
    assert!(
        out.contains("CappedToNodeSize=True: target capped to fit node small-1"),
        "{out}"
    );
    assert!(out.contains("ResourcesLeftToHPA=True"), "{out}");
}

#[test]
fn a_trace_without_a_vpa_in_the_snapshot_is_printed_unsized_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let only_nodes = dir.path().join("nodes.yaml");
    let text = std::fs::read_to_string(format!("{}/{SNAPSHOT}", crate::ROOT)).unwrap();
    let nodes: Vec<&str> = text
        .split("\n---\n")
        .filter(|d| d.contains("kind: Node\n"))
        .collect();
    std::fs::write(&only_nodes, nodes.join("\n---\n")).unwrap();
    let out = tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--snapshot",
        only_nodes.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let plain = unsized_demo();
    assert_eq!(printed, plain);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--snapshot has no Tailor VPA \"shop/web\""),
        "{stderr}"
    );
}

#[test]
fn an_unreadable_snapshot_is_an_error_naming_the_file_and_nothing_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: [1, 2]}}\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.yaml");
    for path in [&bad, &missing] {
        let out = tailor(&[
            "recommend",
            "--input",
            DEMO,
            "--snapshot",
            path.to_str().unwrap(),
        ]);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty(), "nothing printed for {path:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(path.file_name().unwrap().to_str().unwrap()),
            "{stderr}"
        );
    }
}

#[test]
fn instance_types_need_a_snapshot() {
    let out = tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--node-fit-instance-types",
        "types.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
