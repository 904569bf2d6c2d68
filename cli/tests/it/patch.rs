//! `tailor patch`: the webhook's patch computation from the command line — the differential admission cases
//! through `--case` give exactly the library's answers (which `tailor-admission`'s conformance tests check
//! against upstream), a pod + VPA (+ LimitRange) preview patches the pod as the webhook would, and bad input
//! exits 2 naming the file.

use std::process::Output;

use serde_json::Value;
use tailor_admission::preview::{InputFile, run_cases};
use tailor_core::sizing::PatchOptions;

use crate::{ROOT, tailor};

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn differential_cases_through_the_cli_match_the_library() {
    let file = "tests/data/upstream-diff/admission-cases.json";
    let cli = json(&tailor(&["patch", "--case", file]));
    let text = std::fs::read_to_string(format!("{ROOT}/{file}")).expect("cases present");
    let library = run_cases(
        InputFile {
            name: file,
            content: &text,
        },
        &PatchOptions::default(),
    )
    .expect("cases decode");
    let cases = cli.as_array().expect("an array of answers");
    let expected: Vec<Value> = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(cases.len(), expected.len(), "one answer per case");
    for (answer, case) in cases.iter().zip(&expected) {
        assert_eq!(answer["id"], case["id"]);
        assert!(
            answer.get("patches").is_some() && answer.get("allowed").is_some(),
            "{answer}"
        );
    }
    assert_eq!(cli, library);
    println!(
        "tailor patch --case: {} cases, identical to the library",
        cases.len()
    );
}

fn resources(v: &Value) -> &Value {
    &v["pod"]["spec"]["containers"][0]["resources"]
}

#[test]
fn pod_and_vpa_preview_patches_requests_and_proportional_limits() {
    let out = json(&tailor(&[
        "patch",
        "--pod",
        "examples/patch/pod.yaml",
        "--vpa",
        "examples/patch/vpa.yaml",
    ]));
    let r = resources(&out);
    assert_eq!(r["requests"]["cpu"], "250m");
    assert_eq!(r["requests"]["memory"], "256Mi");
    // Limits keep the pod's 2:1 limit/request ratio.
    assert_eq!(r["limits"]["cpu"], "500m");
    assert_eq!(r["limits"]["memory"], "512Mi");
    assert_eq!(
        out["pod"]["metadata"]["annotations"]["tailor.dev/observed-containers"],
        "web"
    );
    assert!(out["patch"].as_array().is_some_and(|p| !p.is_empty()));
}

#[test]
fn a_resource_left_to_an_hpa_is_not_patched_and_the_preview_says_why() {
    let out = json(&tailor(&[
        "patch",
        "--pod",
        "examples/patch/pod.yaml",
        "--vpa",
        "examples/patch/vpa-hpa.yaml",
    ]));
    let r = resources(&out);
    assert_eq!(r["requests"]["cpu"], "100m", "CPU is the HPA's");
    assert_eq!(r["limits"]["cpu"], "200m");
    assert_eq!(r["requests"]["memory"], "256Mi");
    assert_eq!(r["limits"]["memory"], "512Mi");
    let notes = out["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].as_str().is_some_and(
            |n| n.starts_with("ResourcesLeftToHPA: HorizontalPodAutoscaler web scales on cpu")
        ),
        "{notes:?}"
    );
}

#[test]
fn limit_range_max_caps_the_request_that_keeps_the_ratio() {
    let out = json(&tailor(&[
        "patch",
        "--pod",
        "examples/patch/pod.yaml",
        "--vpa",
        "examples/patch/vpa.yaml",
        "--limit-range",
        "examples/patch/limitrange.yaml",
    ]));
    let r = resources(&out);
    assert_eq!(r["limits"]["cpu"], "400m");
    assert_eq!(r["requests"]["cpu"], "200m");
}

#[test]
fn bad_input_exits_2_and_names_the_file() {
    let missing = tailor(&[
        "patch",
        "--pod",
        "examples/patch/absent.yaml",
        "--vpa",
        "examples/patch/vpa.yaml",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("absent.yaml"));

    let dir = std::env::temp_dir().join(format!("tailor-patch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let broken = dir.join("broken.yaml");
    std::fs::write(&broken, "apiVersion: v1\nkind: Pod\nspec: [unclosed\n").expect("write");
    let out = tailor(&[
        "patch",
        "--pod",
        broken.to_str().expect("utf-8 path"),
        "--vpa",
        "examples/patch/vpa.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.yaml"));
    let _ = std::fs::remove_dir_all(&dir);

    let neither = tailor(&["patch"]);
    assert_eq!(
        neither.status.code(),
        Some(2),
        "clap usage errors exit 2 too"
    );
}

#[test]
fn a_vpa_that_does_not_select_the_pod_is_refused_unless_forced() {
    let vpa = std::fs::read_to_string(format!("{ROOT}/examples/patch/vpa.yaml")).expect("example");
    let dir = std::env::temp_dir().join(format!("tailor-patch-select-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, text, why) in [
        (
            "other-ns.yaml",
            vpa.replace("namespace: demo", "namespace: prod"),
            "the pod is in namespace \"demo\", the VPA in \"prod\"",
        ),
        (
            "other-workload.yaml",
            vpa.replace("    name: web\n", "    name: api\n"),
            "the pod belongs to Deployment/web, the VPA targets Deployment/api",
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        let path = p.to_str().expect("utf-8");
        let args = ["patch", "--pod", "examples/patch/pod.yaml", "--vpa", path];
        let out = tailor(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains("does not select") && err.contains(why),
            "{name}: {err}"
        );
        assert!(err.contains("--force"), "{err}");
        let forced = json(&tailor(&[&args[..], &["--force"]].concat()));
        assert_eq!(resources(&forced)["requests"]["cpu"], "250m");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_limit_policy_sets_and_removes_limits_and_a_bad_one_is_a_note() {
    // docs/limit-policy.md: memory limit = request + 256Mi, no CPU limit.
    let args = [
        "patch",
        "--pod",
        "examples/patch/pod.yaml",
        "--vpa",
        "examples/patch/vpa-limit-policy.yaml",
    ];
    let out = json(&tailor(&args));
    let r = resources(&out);
    assert_eq!(r["requests"]["cpu"], "250m");
    assert_eq!(r["requests"]["memory"], "256Mi");
    assert_eq!(r["limits"], serde_json::json!({"memory": "512Mi"}));
    let removed = out["patch"]
        .as_array()
        .expect("patch")
        .iter()
        .filter(|op| op["op"] == "remove")
        .map(|op| op["path"].as_str().unwrap_or_default())
        .collect::<Vec<_>>();
    assert_eq!(removed, ["/spec/containers/0/resources/limits/cpu"]);
    let updates = out["pod"]["metadata"]["annotations"]["tailor.dev/updates"]
        .as_str()
        .expect("updates annotation");
    assert!(
        updates.ends_with("memory limit, cpu limit removed"),
        "{updates}"
    );
    assert!(out.get("notes").is_none(), "{out}");

    // An annotation that does not parse: the example's proportional limits, and a note saying why.
    let text = std::fs::read_to_string(format!("{ROOT}/examples/patch/vpa-limit-policy.yaml"))
        .expect("example");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("patch-limit-policy");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("vpa.yaml");
    std::fs::write(&bad, text.replace("cpu=unset", "cpu=none")).expect("write");
    let out = json(&tailor(&[
        "patch",
        "--pod",
        "examples/patch/pod.yaml",
        "--vpa",
        bad.to_str().expect("utf-8 path"),
    ]));
    let r = resources(&out);
    assert_eq!(r["limits"]["cpu"], "500m");
    assert_eq!(r["limits"]["memory"], "512Mi");
    let notes = out["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n.as_str().is_some_and(|n| n.starts_with(
            "LimitPolicyInvalid: annotation tailor.dev/limit-policy, entry 2 \"cpu=none\": policy \"none\""
        ))),
        "{notes:?}"
    );
}
