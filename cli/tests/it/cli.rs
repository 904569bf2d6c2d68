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

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/traces/demo.json");

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
    // A value that cannot be real is refused, naming the file, line and field.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let e = text(&out.stderr);
    assert!(
        e.contains("usage.csv:1202: field cpu_cores: NaN cores is not a finite number"),
        "{e}"
    );
    // With --skip-bad-samples the row is dropped and counted, in JSON and in the table's notes.
    let path = p.to_str().expect("utf-8");
    let out = tailor(&["recommend", "-i", path, "-o", "json", "--skip-bad-samples"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["id"], "prod/api");
    assert_eq!(v[0]["recommendations"][0]["containerName"], "api");
    assert_eq!(v[0]["skipped"], serde_json::json!({"cpu": 1, "memory": 1}));
    assert_eq!(v[0]["discarded"]["cpu"], 0);
    let out = tailor(&["recommend", "-i", path, "--skip-bad-samples"]);
    let t = text(&out.stdout);
    assert!(
        t.contains("2 bad sample(s) skipped (1 cpu, 1 memory)"),
        "{t}"
    );
}

fn refused(args: &[&str], needle: &str) {
    let out = tailor(args);
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
    assert!(e.contains(needle), "{args:?}: {e}");
    assert!(out.stdout.is_empty(), "{args:?} printed an answer anyway");
}

#[test]
fn impossible_flags_are_refused() {
    for p in ["2", "NaN", "-5", "0"] {
        let flag = format!("--target-cpu-percentile={p}");
        refused(
            &["recommend", "-i", DEMO, &flag],
            "--target-cpu-percentile must be in (0, 1]",
        );
    }
    refused(
        &[
            "recommend",
            "-i",
            DEMO,
            "--recommendation-upper-bound-memory-percentile",
            "1.5",
        ],
        "--recommendation-upper-bound-memory-percentile must be in (0, 1]",
    );
    refused(
        &[
            "recommend",
            "-i",
            DEMO,
            "--recommendation-margin-fraction=-1",
        ],
        "--recommendation-margin-fraction must be a finite number >= 0",
    );
    refused(
        &[
            "recommend",
            "--prometheus",
            "http://127.0.0.1:1",
            "--step",
            "0s",
        ],
        "must be greater than zero",
    );
    refused(
        &[
            "recommend",
            "--prometheus",
            "http://127.0.0.1:1",
            "--history",
            "0s",
        ],
        "must be greater than zero",
    );
    refused(
        &["recommend", "-i", DEMO, "-o", "csv", "--explain"],
        "--explain is not available with -o csv",
    );
    refused(
        &["recommend", "-i", DEMO, "-o", "vpa", "--explain"],
        "--explain is not available with -o vpa",
    );
}

#[test]
fn impossible_usage_values_are_refused_with_file_and_line() {
    let head =
        "timestamp,namespace,pod,container,cpu_cores,memory_bytes\n1717200000,ns,p-0,c,0.5,1000\n";
    for (row, needle) in [
        (
            "1717200060,ns,p-0,c,inf,1000",
            "inf.csv:3: field cpu_cores: inf cores is not a finite number",
        ),
        (
            "1717200060,ns,p-0,c,1e300,1000",
            "inf.csv:3: field cpu_cores: 1e300 cores is beyond any container",
        ),
        (
            "1717200060,ns,p-0,c,-0.5,1000",
            "inf.csv:3: field cpu_cores: -0.5 cores is negative",
        ),
        (
            "1717200060,ns,p-0,c,0.5,-1",
            "inf.csv:3: field memory_bytes: -1 bytes is negative",
        ),
    ] {
        let p = temp("inf.csv", format!("{head}{row}\n").as_bytes());
        refused(&["recommend", "-i", p.to_str().expect("utf-8")], needle);
    }
    let json = b"[{\"id\": \"a\", \"containers\": [\n  {\"name\": \"c\",\n   \"cpu_samples\": [[1, 0.5],\n     [2, -0.25]]}]}]\n";
    let p = temp("neg.json", json);
    let path = p.to_str().expect("utf-8");
    refused(&["recommend", "-i", path], "neg.json:4:");
    refused(&["recommend", "-i", path], "-0.25 cores is negative");
    let out = tailor(&["recommend", "-i", path, "-o", "json", "--skip-bad-samples"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["skipped"]["cpu"], 1);
}

#[test]
fn json_output_is_the_documented_shape() {
    let out = tailor(&["recommend", "-i", DEMO, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for o in v.as_array().expect("array") {
        let mut keys: Vec<&str> = o
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["discarded", "id", "recommendations", "upstream"],
            "{o}"
        );
        assert_eq!(o["upstream"], "vertical-pod-autoscaler/v1.2.2");
        assert!(o["discarded"]["oom"].is_u64(), "{o}");
    }
}

#[test]
fn explain_shows_final_values_with_units() {
    let out = tailor(&[
        "recommend",
        "-i",
        DEMO,
        "--explain",
        "--pod-recommendation-min-cpu-millicores",
        "900",
        "--container-recommendation-max-allowed-memory",
        "100Mi",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains(", raised to the minimum; final "), "{t}");
    assert!(t.contains("capped to maxAllowed 104857600 bytes"), "{t}");
    let out = tailor(&["recommend", "-i", DEMO, "-o", "yaml", "--explain"]);
    assert!(text(&out.stdout).contains("explain:"));
}

#[test]
fn help_groups_flags_by_what_they_do() {
    let out = tailor(&["recommend", "--help"]);
    let h = text(&out.stdout);
    let at = |needle: &str| {
        h.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing:\n{h}"))
    };
    let io = at("Input and output:");
    let prom = at("History from Prometheus:");
    let model = at("Model and estimation (upstream's flags):");
    for flag in ["--output", "--explain", "--skip-bad-samples"] {
        assert!(
            (io..prom).contains(&at(flag)),
            "{flag} not under Input and output:\n{h}"
        );
    }
    assert!((prom..model).contains(&at("--prometheus-sigv4")), "{h}");
    assert!(at("--target-cpu-percentile") > model, "{h}");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let mut big = String::from("timestamp,namespace,pod,container,cpu_cores,memory_bytes\n");
    for w in 0..3000 {
        big.push_str(&format!(
            "1717200000,ns,w{w}-0,c,0.5,1000\n1717200060,ns,w{w}-0,c,0.5,1000\n"
        ));
    }
    let p = temp("many.csv", big.as_bytes());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["recommend", "-i", p.to_str().expect("utf-8"), "-o", "csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tailor");
    // Read one line, then close the pipe, as `head -1` does.
    let mut first = [0u8; 16];
    let mut stdout = child.stdout.take().expect("stdout");
    std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn convert_keeps_off_quoted_and_refuses_bad_input_with_2() {
    let p = temp(
        "vpa-off.yaml",
        b"apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata:\n  name: w\nspec:\n  targetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: w\n  updatePolicy:\n    updateMode: Off\n",
    );
    let out = tailor(&["convert", p.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("updateMode: \"Off\""),
        "{}",
        text(&out.stdout)
    );
    refused(
        &["convert", "/nonexistent/vpa.yaml"],
        "/nonexistent/vpa.yaml",
    );
    let p = temp("vpa-on.yaml", b"apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata:\n  name: w\nspec:\n  updatePolicy:\n    updateMode: On\n");
    refused(
        &["convert", p.to_str().expect("utf-8")],
        "updateMode is the boolean true",
    );
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
