//! The `tailor` binary end to end: the bundled demo trace, output formats, and bad input (exit code 2 with the
//! file and line or field named).

use std::io::Write;
use std::process::{Command, Output};

fn tailor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(args)
        .output()
        .expect("run tailor")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp(name: &str, content: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tailor-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::File::create(&p)
        .and_then(|mut f| f.write_all(content))
        .expect("write temp file");
    p
}

const DEMO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/traces/demo.json"
);

#[test]
fn demo_trace_table() {
    let out = tailor(&["recommend", "--input", DEMO]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    for needle in [
        "CONTAINER",
        "shop/web",
        "app",
        "istio-proxy",
        "shop/worker",
        "worker",
        "cpu samples",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
}

#[test]
fn demo_trace_json_and_explain() {
    let out = tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--output",
        "json",
        "--explain",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let arr = v.as_array().expect("array in, array out");
    assert_eq!(arr.len(), 2);
    let web = &arr[0];
    assert_eq!(web["recommendations"].as_array().map(Vec::len), Some(2));
    assert!(
        web["recommendations"][0]["target"]["cpu"]
            .as_i64()
            .is_some_and(|c| c > 0)
    );
    assert!(
        web["explain"][0]["steps"]
            .as_array()
            .is_some_and(|s| s.len() == 6)
    );
    assert_eq!(
        arr[1]["explain"][0]["oom_bumps"].as_array().map(Vec::len),
        Some(1)
    );
    let plain = tailor(&["recommend", "--input", DEMO, "--output", "json"]);
    let p: serde_json::Value = serde_json::from_slice(&plain.stdout).expect("json");
    assert!(p[0].get("explain").is_none(), "explain only on request");
}

#[test]
fn other_output_formats() {
    for (fmt, needle) in [
        ("yaml", "containerName: app"),
        ("csv", "shop/web,app,cpu,"),
        ("vpa", "kind: VerticalPodAutoscaler"),
    ] {
        let out = tailor(&["recommend", "--input", DEMO, "--output", fmt]);
        assert!(out.status.success(), "{fmt}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(needle),
            "{fmt}: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn flags_change_the_answer() {
    let base = tailor(&["recommend", "--input", DEMO, "--output", "json"]);
    let tuned = tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--output",
        "json",
        "--target-cpu-percentile",
        "0.5",
        "--round-cpu-millicores",
        "100",
    ]);
    let (b, t): (serde_json::Value, serde_json::Value) = (
        serde_json::from_slice(&base.stdout).expect("json"),
        serde_json::from_slice(&tuned.stdout).expect("json"),
    );
    let (bc, tc) = (
        b[0]["recommendations"][0]["target"]["cpu"].as_i64(),
        t[0]["recommendations"][0]["target"]["cpu"].as_i64(),
    );
    assert_ne!(bc, tc);
    assert_eq!(tc.map(|c| c % 100), Some(0));
}

#[test]
fn csv_input() {
    let mut csv = String::from("timestamp,namespace,pod,container,cpu_cores,memory_bytes\n");
    for k in 0..600 {
        let t = 1_717_200_000 + 60 * k;
        csv.push_str(&format!(
            "{t},prod,api-5f7c9d8b4-x1y2z,api,0.25,{}\n",
            300 << 20
        ));
        csv.push_str(&format!(
            "{t},prod,api-5f7c9d8b4-q9w8e,api,0.30,{}\n",
            310 << 20
        ));
    }
    csv.push_str("1717236000,prod,api-5f7c9d8b4-q9w8e,api,NaN,-5\n");
    let p = temp("usage.csv", csv.as_bytes());
    let out = tailor(&[
        "recommend",
        "--input",
        p.to_str().expect("utf-8"),
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["id"], "prod/api");
    assert_eq!(v[0]["recommendations"][0]["containerName"], "api");
    // NaN CPU is discarded; a negative memory value converts to 0 bytes (upstream's conversion) and is accepted.
    assert_eq!(v[0]["discarded"]["cpu"], 1);
    assert_eq!(v[0]["discarded"]["memory"], 0);
}

#[test]
fn malformed_json_names_file_and_line() {
    let p = temp("bad.json", b"{\"id\": \"x\",\n \"containers\": [\n  {\"name\": \"a\", \"cpu_samples\": [[1, \"oops\"]]}\n]}\n");
    let out = tailor(&["recommend", "--input", p.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(e.contains("bad.json:3:"), "{e}");
}

#[test]
fn malformed_csv_names_line_and_field() {
    let p = temp("bad.csv", b"timestamp,namespace,pod,container,cpu_cores,memory_bytes\n1,ns,p,c,0.1,100\n2,ns,p,c,0.1,lots\n");
    let out = tailor(&["recommend", "--input", p.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(e.contains("bad.csv:3") && e.contains("memory_bytes"), "{e}");
    let p = temp("noheader.csv", b"1,ns,p,c,0.1,100\n");
    let out = tailor(&["recommend", "--input", p.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("noheader.csv:1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn semantic_errors_exit_2_and_name_the_field() {
    let p = temp(
        "ts.json",
        b"{\"id\":\"x\",\"containers\":[{\"name\":\"a\",\"ooms\":[[]]}]}",
    );
    let out = tailor(&["recommend", "--input", p.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("ooms[0]"),
        "{}",
        text(&out.stderr)
    );
    let p = temp(
        "opt.json",
        b"{\"id\":\"x\",\"options\":{\"target_cpu_percentil\":0.5},\"containers\":[]}",
    );
    let out = tailor(&["recommend", "--input", p.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("target_cpu_percentil"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn missing_file_and_bad_flag_exit_2() {
    let out = tailor(&["recommend", "--input", "/nonexistent/trace.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/trace.json"));
    let out = tailor(&[
        "recommend",
        "--input",
        DEMO,
        "--confidence-interval-cpu",
        "soon",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn out_of_order_and_duplicate_samples_follow_upstream() {
    let p = temp(
        "order.json",
        br#"{"id":"o","containers":[{"name":"a","cpu_samples":[[100,0.1],[100,0.2],[50,0.3],[200,0.1]],
            "memory_samples":[[100,1e8],[100,2e8],[50,3e8]]}]}"#,
    );
    let out = tailor(&[
        "recommend",
        "--input",
        p.to_str().expect("utf-8"),
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // Replay sorts by time: CPU at 50 comes first; the second sample at 100 is a duplicate. Memory samples at
    // equal times are accepted.
    assert_eq!(v["discarded"]["cpu"], 1);
    assert_eq!(v["discarded"]["memory"], 0);
}

#[test]
fn crds_and_convert() {
    let out = tailor(&["crds"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("autoscaling.tailor.dev"));
    let p = temp(
        "upstream.yaml",
        b"apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata:\n  name: web\nspec:\n  targetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: web\n",
    );
    let out = tailor(&["convert", p.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("autoscaling.tailor.dev/v1"),
        "{}",
        text(&out.stdout)
    );
}
