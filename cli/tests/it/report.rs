//! `tailor report`: the demo trace rendered into one self-contained HTML file (no script, no URL but the SVG
//! namespace, every workload with its anchor) whose targets are `tailor recommend`'s, container by
//! container; hostile names that stay text; bad prices and a missing file exiting 2.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::{ROOT, tailor};

const DEMO: &str = "examples/traces/demo.json";
const SVG_NAMESPACE: &str = "http://www.w3.org/2000/svg";

fn ok(out: &Output) -> Vec<u8> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.clone()
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_slice(&ok(&tailor(args))).expect("JSON on stdout")
}

fn render(input: &Path, html: &Path) -> String {
    let out = tailor(&[
        "report",
        "--input",
        input.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wrote "), "{stderr}");
    std::fs::read_to_string(html).expect("the report was written")
}

/// Every `http://` or `https://` URL in `html`, up to the next quote, space or angle bracket.
fn urls(html: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for scheme in ["http://", "https://"] {
        for (at, _) in html.match_indices(scheme) {
            let rest = &html[at..];
            let end = rest
                .find(['"', '\'', ' ', '<', '>', ')'])
                .unwrap_or(rest.len());
            found.push(&rest[..end]);
        }
    }
    found
}

/// A number from the JSON: millicores or bytes, whether written as a number or a string.
fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}")),
        other => panic!("not a number: {other}"),
    }
}

#[test]
fn demo_report_is_self_contained_and_shows_recommends_targets() {
    let dir = tempfile::tempdir().unwrap();
    let html_path = dir.path().join("demo.html");
    let html = render(&Path::new(ROOT).join(DEMO), &html_path);
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100]);
    assert!(!html.to_ascii_lowercase().contains("<script"));
    let foreign: Vec<&str> = urls(&html)
        .into_iter()
        .filter(|u| *u != SVG_NAMESPACE)
        .collect();
    assert!(foreign.is_empty(), "URLs in the report: {foreign:?}");
    assert!(html.contains("<svg"), "the usage charts are inline SVG");

    let recommended = json_of(&["recommend", "--input", DEMO, "-o", "json"]);
    let fleet = json_of(&["report", "--input", DEMO, "-o", "json"]);
    let traces = recommended
        .as_array()
        .expect("the demo holds several traces");
    let workloads: BTreeMap<String, &Value> = (fleet["workloads"].as_array().unwrap().iter())
        .map(|w| {
            let key = format!(
                "{}/{}",
                w["namespace"].as_str().unwrap(),
                w["vpa"].as_str().unwrap()
            );
            (key, w)
        })
        .collect();
    assert_eq!(workloads.len(), traces.len(), "one workload per trace");
    let mut compared = 0;
    for t in traces {
        let id = t["id"].as_str().unwrap();
        let (ns, vpa) = id.split_once('/').unwrap();
        assert!(
            html.contains(&format!("id=\"w-{ns}-{vpa}\"")),
            "no section for {id}"
        );
        assert!(
            html.contains(&format!("href=\"#w-{ns}-{vpa}\"")),
            "no link to {id}"
        );
        assert!(html.contains(&format!("{ns}/{vpa}")), "{id} not named");
        let w = workloads
            .get(id)
            .unwrap_or_else(|| panic!("{id} not in the fleet"));
        let containers = w["containers"].as_array().unwrap();
        for r in t["recommendations"].as_array().unwrap() {
            let name = r["containerName"].as_str().unwrap();
            let c = (containers.iter())
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{id}: no container {name}"));
            for (theirs, ours) in [("cpu", "cpuMillicores"), ("memory", "memoryBytes")] {
                for bound in ["target", "lowerBound", "upperBound", "uncappedTarget"] {
                    assert_eq!(
                        number(&r[bound][theirs]),
                        number(&c[bound][ours]),
                        "{id} {name} {bound} {theirs}"
                    );
                }
            }
            assert!(
                c["cpuUsage"]["buckets"]
                    .as_array()
                    .is_some_and(|b| !b.is_empty())
            );
            compared += 1;
        }
    }
    assert!(compared >= 3, "compared {compared} containers");
    // The demo's worker was OOM-killed 18 hours before the trace's `now`.
    let worker = workloads["shop/worker"];
    assert_eq!(worker["oomsLastDay"], 1);
    assert_eq!(worker["flags"], json!(["Oom"]));
    assert_eq!(workloads["shop/web"]["pods"], 2);
    assert_eq!(
        workloads["shop/web"]["containers"][0]["requests"]["cpuMillicores"],
        500
    );
}

#[test]
fn hostile_names_stay_text() {
    let dir = tempfile::tempdir().unwrap();
    let id = "<script>alert(1)</script>/web\"' onmouseover='x";
    let container = "<script>\"'&";
    let samples: Vec<Value> = (0..200)
        .map(|i| json!([1_717_200_000 + i * 60, 0.25 + f64::from(i % 7) / 100.0]))
        .collect();
    let memory: Vec<Value> = (0..200)
        .map(|i| json!([1_717_200_000 + i * 60, 300e6]))
        .collect();
    let trace = json!({
        "id": id,
        "now": 1_717_212_000,
        "updateMode": "<b>Off</b>",
        "annotations": {"tailor.dev/profile": "<img src=x>"},
        "containers": [{"name": container, "pod": "p\"<i>", "cpu_request_cores": 0.5,
                        "cpu_samples": samples, "memory_samples": memory}]
    });
    let input = dir.path().join("hostile.json");
    std::fs::write(&input, trace.to_string()).unwrap();
    let html = render(&input, &dir.path().join("hostile.html"));
    // Attributes are double-quoted, so a double quote is what must not get through.
    for raw in [id, container, "<script", "<b>Off", "<img src", "web\""] {
        assert!(!html.contains(raw), "{raw:?} unescaped in the report");
    }
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the id is shown, escaped"
    );
    assert!(
        html.contains("&lt;script&gt;&quot;'&amp;"),
        "the container name is shown, escaped"
    );

    let fleet = json_of(&["report", "--input", input.to_str().unwrap(), "-o", "json"]);
    let w = &fleet["workloads"][0];
    // Split at the first `/`, the one in `</script>`.
    assert_eq!(w["namespace"], "<script>alert(1)<");
    assert_eq!(w["vpa"], "script>/web\"' onmouseover='x");
    assert_eq!(w["mode"], "<b>Off</b>");
    assert_eq!(w["containers"][0]["name"], container);
    assert!(
        w["containers"][0]["target"]["cpuMillicores"]
            .as_i64()
            .is_some()
    );
}

#[test]
fn bad_prices_and_a_missing_file_exit_2() {
    for args in [
        ["--price-vcpu-hour", "-1"],
        ["--price-gib-hour", "NaN"],
        ["--price-vcpu-hour", "inf"],
        ["--price-gib-hour", "cheap"],
    ] {
        let out = tailor(&["report", "--input", DEMO, args[0], args[1]]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
    let out = tailor(&["report", "--input", "no/such/trace.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/trace.json"));
}

#[test]
fn summary_line_without_html_or_json() {
    let out = String::from_utf8(ok(&tailor(&[
        "report",
        "--input",
        DEMO,
        "--price-currency",
        "EUR",
    ])))
    .unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("2 workloads, 3 pods: requested "), "{out}");
    assert!(out.contains(" EUR a month"), "{out}");
    assert!(out.contains("1 with an OOM kill in the last day"), "{out}");
}

#[test]
fn repeated_ids_get_their_own_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let trace = |cpu: f64| {
        json!({"id": "a/web", "containers": [{"name": "app",
            "cpu_samples": [[1_717_200_000, cpu], [1_717_200_060, cpu]]}]})
    };
    let input = dir.path().join("twice.json");
    std::fs::write(&input, json!([trace(0.5), trace(1.5)]).to_string()).unwrap();
    let fleet = json_of(&["report", "--input", input.to_str().unwrap(), "-o", "json"]);
    let names: Vec<&str> = (fleet["workloads"].as_array().unwrap().iter())
        .map(|w| w["vpa"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "web (2)"]);
}

#[test]
fn prometheus_history_gives_the_models_histograms_and_the_pods_at_the_end() {
    use tailor_tests::prom_stub::{END, Reply, healthy, stub};
    let s = stub(|r, _| Reply::Full(200, healthy(r)));
    let url = format!("http://127.0.0.1:{}", s.port);
    let end = END.to_string();
    let source = [
        "--prometheus",
        &url,
        "--history",
        "3h",
        "--end",
        &end,
        "--prometheus-max-points-per-query",
        "60",
    ];
    let run = |first: &[&str]| json_of(&[first, &source[..], &["-o", "json"]].concat());
    let fleet = run(&["report"]);
    let recommended = run(&["recommend"]);
    assert_eq!(fleet["source"]["producer"], format!("tailor report {url}"));
    let w = &fleet["workloads"][0];
    assert_eq!((&w["namespace"], &w["vpa"]), (&json!("a"), &json!("w")));
    assert_eq!(w["pods"], 2, "both pods have samples at the end: {w}");
    assert_eq!(w["oomsLastDay"], 0);
    // Three hours of history: less than a day.
    assert_eq!(w["flags"], json!(["LowConfidence"]));
    let c = &w["containers"][0];
    assert_eq!(c["name"], "c");
    assert_eq!(c["requests"], json!({}), "the history carries no requests");
    for resource in ["cpuUsage", "memoryUsage"] {
        assert!(
            c[resource]["buckets"]
                .as_array()
                .is_some_and(|b| !b.is_empty()),
            "{c}"
        );
    }
    let r = &recommended[0]["recommendations"][0];
    assert_eq!(
        number(&r["target"]["cpu"]),
        number(&c["target"]["cpuMillicores"])
    );
    assert_eq!(
        number(&r["target"]["memory"]),
        number(&c["target"]["memoryBytes"])
    );
}

const PLAN_SNAPSHOT: &str = "examples/plan/snapshot.yaml";
const REPORT_SNAPSHOT: &str = "examples/report/snapshot.yaml";
/// The time examples/report/snapshot.yaml is read at.
const REPORT_NOW: &str = "2026-01-10T12:00:00Z";

/// A quantity of `resource` as millicores (cpu) or bytes (memory).
fn amount(q: &Value, resource: &str) -> i64 {
    let text = match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text);
    let a = tailor_core::quantity::Amount::parse(&q).unwrap();
    i64::try_from(a.amount_i128(resource).unwrap()).unwrap()
}

/// The documents of a YAML snapshot of `kind`.
fn objects(path: &str, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter().filter(|d| d["kind"] == kind).collect()
}

fn by_key(fleet: &Value) -> BTreeMap<String, Value> {
    (fleet["workloads"].as_array().unwrap().iter())
        .map(|w| {
            let key = format!(
                "{}/{}",
                w["namespace"].as_str().unwrap(),
                w["vpa"].as_str().unwrap()
            );
            (key, w.clone())
        })
        .collect()
}

/// `tailor plan`'s snapshot: one workload per VPA, with the status's four rows per container and the pods
/// `tailor plan` matches to it.
#[test]
fn a_snapshot_gives_one_workload_per_vpa_with_its_status() {
    let fleet = json_of(&["report", "--snapshot", PLAN_SNAPSHOT, "-o", "json"]);
    assert_eq!(
        fleet["source"]["producer"],
        format!("tailor report {PLAN_SNAPSHOT}")
    );
    let workloads = by_key(&fleet);
    let vpas = objects(PLAN_SNAPSHOT, "VerticalPodAutoscaler");
    assert_eq!(workloads.len(), vpas.len(), "{workloads:?}");
    for vpa in &vpas {
        let key = format!(
            "{}/{}",
            vpa["metadata"]["namespace"].as_str().unwrap(),
            vpa["metadata"]["name"].as_str().unwrap()
        );
        let w = &workloads[&key];
        assert_eq!(w["kind"], vpa["spec"]["targetRef"]["kind"], "{key}");
        assert_eq!(w["name"], vpa["spec"]["targetRef"]["name"], "{key}");
        let recs = vpa["status"]["recommendation"]["containerRecommendations"]
            .as_array()
            .unwrap();
        for r in recs {
            let c = (w["containers"].as_array().unwrap().iter())
                .find(|c| c["name"] == r["containerName"])
                .unwrap_or_else(|| panic!("{key}: no container {}", r["containerName"]));
            for (theirs, ours) in [("cpu", "cpuMillicores"), ("memory", "memoryBytes")] {
                for bound in ["target", "lowerBound", "upperBound", "uncappedTarget"] {
                    assert_eq!(
                        amount(&r[bound][theirs], theirs),
                        c[bound][ours].as_i64().unwrap(),
                        "{key} {bound} {theirs}"
                    );
                }
            }
            assert!(c["requests"]["cpuMillicores"].is_i64(), "{key}: {c}");
            assert!(c["limits"]["memoryBytes"].is_i64(), "{key}: {c}");
        }
        assert!(
            !w["flags"]
                .as_array()
                .unwrap()
                .contains(&json!("NoRecommendation"))
        );
    }
    // The pods of every VPA `tailor plan` acts on are those it plans for.
    let plan = json_of(&["plan", PLAN_SNAPSHOT, "-o", "json"]);
    let mut planned: BTreeMap<String, i64> = BTreeMap::new();
    for p in plan["pods"].as_array().unwrap() {
        *planned
            .entry(p["vpa"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(planned.len() >= 3, "{plan}");
    for (key, pods) in planned {
        assert_eq!(workloads[&key]["pods"], pods, "{key}");
    }
}

/// examples/report/snapshot.yaml: the largest limits of the running pods, the OOM kill of the last day, the
/// checkpoints' usage, an upstream VPA, a VPA without a status, one whose workload is gone, a pod without
/// containers.
#[test]
fn a_snapshot_shows_limits_ooms_conditions_and_checkpoint_usage() {
    let args = ["report", "--snapshot", REPORT_SNAPSHOT, "--now", REPORT_NOW];
    let workloads = by_key(&json_of(&[&args[..], &["-o", "json"]].concat()));
    let keys: Vec<&str> = workloads.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["shop/checkout", "shop/fresh", "shop/legacy", "shop/orphan"]
    );
    let checkout = &workloads["shop/checkout"];
    assert_eq!(checkout["pods"], 2);
    assert_eq!(checkout["mode"], "InPlaceOrRecreate");
    assert_eq!(checkout["profile"], "auto");
    // One pod OOM-killed 9 hours before, the other two days before.
    assert_eq!(checkout["oomsLastDay"], 1);
    assert_eq!(checkout["flags"], json!(["Oom", "LowConfidence"]));
    let app = &checkout["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(
        app["requests"],
        json!({"cpuMillicores": 500, "memoryBytes": 512 << 20})
    );
    assert_eq!(
        app["limits"],
        json!({"cpuMillicores": 2000, "memoryBytes": 1 << 30})
    );
    for resource in ["cpuUsage", "memoryUsage"] {
        let d = &app[resource];
        assert!(d["buckets"].as_array().is_some_and(|b| b.len() >= 2), "{d}");
        assert_eq!(d["percentiles"].as_array().unwrap().len(), 4, "{d}");
    }
    // The checkpoint's CPU histogram peaks near 0.45 cores (bucket 24 of upstream's CPU preset).
    let median = app["cpuUsage"]["percentiles"][0][1].as_f64().unwrap();
    assert!((0.4..0.55).contains(&median), "{median}");
    let proxy = &checkout["containers"][1];
    assert_eq!(
        (&proxy["name"], &proxy["limits"]),
        (&json!("proxy"), &json!({}))
    );
    assert!(proxy.get("cpuUsage").is_none(), "no checkpoint: {proxy}");

    let legacy = &workloads["shop/legacy"];
    assert_eq!(
        (&legacy["mode"], &legacy["pods"]),
        (&json!("Auto"), &json!(1))
    );
    assert_eq!(legacy["flags"], json!([]));
    assert!(legacy["explain"].as_str().unwrap().contains("upstream"));
    assert_eq!(legacy["apiGroup"], "autoscaling.k8s.io");
    assert!(
        checkout.get("apiGroup").is_none(),
        "Tailor's group is the default"
    );
    let c = &legacy["containers"][0];
    assert_eq!(
        c["target"],
        json!({"cpuMillicores": 150, "memoryBytes": 300 << 20})
    );
    assert!(c["memoryUsage"]["buckets"].is_array(), "{c}");

    let fresh = &workloads["shop/fresh"];
    assert_eq!(fresh["flags"], json!(["NoPods", "NoRecommendation"]));
    assert_eq!(fresh["containers"], json!([]));
    let orphan = &workloads["shop/orphan"];
    assert_eq!(
        (&orphan["kind"], &orphan["name"]),
        (&json!("Deployment"), &json!("gone"))
    );
    assert_eq!(
        orphan["flags"],
        json!(["UpdatesBlocked", "NoPods", "NoRecommendation"])
    );
    assert_eq!(orphan["conditions"][0]["reason"], "NoTarget");

    // A day after the OOM kill, it is no longer of the last day.
    let later = json_of(&[
        "report",
        "--snapshot",
        REPORT_SNAPSHOT,
        "--now",
        "2026-01-11T04:00:00Z",
        "-o",
        "json",
    ]);
    assert_eq!(by_key(&later)["shop/checkout"]["oomsLastDay"], 0);
}

/// The HTML report of a snapshot names every VPA, escaped; a VPA without a targetRef (which the API server
/// would refuse, but a file may hold) is a workload without pods.
#[test]
fn a_snapshot_report_names_every_vpa_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = "dir/x.yaml";
    std::fs::create_dir_all(dir.path().join("dir")).unwrap();
    std::fs::write(
        dir.path().join(hostile),
        "apiVersion: autoscaling.tailor.dev/v1\nkind: VerticalPodAutoscaler\n\
         metadata: {name: \"<b>web</b>&'\\\"\", namespace: \"<i>ns\"}\n\
         spec: {targetRef: {kind: \"<script>\", name: web}}\n---\n\
         apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\n\
         metadata: {name: untargeted, namespace: shop}\nspec: {}\n",
    )
    .unwrap();
    let fleet = json_of(&[
        "report",
        "--snapshot",
        dir.path().join(hostile).to_str().unwrap(),
        "-o",
        "json",
    ]);
    let untargeted = &by_key(&fleet)["shop/untargeted"];
    assert_eq!(
        (&untargeted["kind"], &untargeted["pods"]),
        (&json!(""), &json!(0))
    );
    assert_eq!(untargeted["flags"], json!(["NoPods", "NoRecommendation"]));
    assert!(
        untargeted["explain"]
            .as_str()
            .unwrap()
            .contains("no targetRef")
    );
    let html_path = dir.path().join("report.html");
    let report = Path::new(ROOT).join(REPORT_SNAPSHOT);
    let out = tailor(&[
        "report",
        "--snapshot",
        report.to_str().unwrap(),
        "--snapshot",
        dir.path().join("dir").to_str().unwrap(),
        "--html",
        html_path.to_str().unwrap(),
    ]);
    ok(&out);
    let html = std::fs::read_to_string(&html_path).unwrap();
    for name in ["checkout", "legacy", "fresh", "orphan", "untargeted"] {
        assert!(html.contains(&format!("shop/{name}")), "{name} not named");
    }
    assert!(
        html.contains("&lt;i&gt;ns/&lt;b&gt;web&lt;/b&gt;&amp;'&quot;"),
        "the hostile VPA is named, escaped"
    );
    // (The page writes the target's name in bold itself: `<b>web</b>` alone is no sign.)
    for raw in ["<b>web</b>&", "<i>ns", "<script>"] {
        assert!(!html.contains(raw), "{raw:?} unescaped in the report");
    }
}

/// The three sources exclude each other, one is required, and `--now` is the snapshot's.
#[test]
fn one_source_at_a_time() {
    for args in [
        &["report", "--snapshot", PLAN_SNAPSHOT, "--input", DEMO][..],
        &[
            "report",
            "--snapshot",
            PLAN_SNAPSHOT,
            "--prometheus",
            "http://127.0.0.1:9",
        ],
        &[
            "report",
            "--input",
            DEMO,
            "--prometheus",
            "http://127.0.0.1:9",
        ],
    ] {
        let out = tailor(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cannot be used with"), "{args:?}: {stderr}");
    }
    let out = tailor(&["report"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--input")
            && stderr.contains("--prometheus")
            && stderr.contains("--snapshot"),
        "{stderr}"
    );
    let out = tailor(&["report", "--input", DEMO, "--now", REPORT_NOW]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    let out = tailor(&["report", "--snapshot", "no/such/snapshot.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/snapshot.yaml"));
}
