//! `tailor backtest`: output shape, byte-for-byte determinism, strategy listing, plots and bad input.

use std::process::{Command, Output};

fn tailor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(args)
        .output()
        .unwrap()
}

const CSV: &str = "timestamp,namespace,pod,container,cpu_cores,memory_bytes\n";

/// Two days of one container at one-minute resolution, as CSV.
fn csv() -> String {
    let mut s = String::from(CSV);
    for k in 0..2 * 1440 {
        let t = 1_700_000_000 + 60 * k;
        let cpu = 0.2 + 0.1 * ((k % 60) as f64 / 60.0);
        let mem = 200_000_000 + 1000 * (k % 97);
        s.push_str(&format!("{t},ns,web-abcde,app,{cpu},{mem}\n"));
    }
    s
}

#[test]
fn json_shape_and_determinism() {
    let dir = std::env::temp_dir().join(format!("tailor-backtest-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("usage.csv");
    std::fs::write(&input, csv()).unwrap();
    let path = input.to_str().unwrap();
    let args = [
        "backtest",
        "--input",
        path,
        "-o",
        "json",
        "--strategy",
        "upstream,krr-simple",
    ];
    let a = tailor(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = tailor(&args);
    assert_eq!(a.stdout, b.stdout, "same input, same bytes");
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let s = v["strategies"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0]["name"].as_str(), s[1]["name"].as_str()),
        (Some("upstream"), Some("krr-simple"))
    );
    for key in [
        "cpu_waste_core_hours",
        "memory_waste_gib_hours",
        "cpu_risk_minutes",
        "memory_risk_minutes",
        "oom_risk_samples",
        "changes",
    ] {
        assert!(s[0]["total"][key].is_number(), "{key}");
    }
    assert_eq!(s[0]["containers"][0]["name"], "ns/web/app");
    // One day scored after the 1 d warm-up: 1440 one-minute samples, 1440 minutes of pod time.
    let days = s[1]["total"]["pod_days"].as_f64().unwrap();
    assert!((days - 1.0).abs() < 1e-9, "{days}");
    let plots = dir.join("plots");
    let p = tailor(&[
        "backtest",
        "--input",
        path,
        "--strategy",
        "cautious",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let svg = std::fs::read_to_string(plots.join("ns_web_app.cautious.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("above request"));
}

#[test]
fn lists_strategies_and_rejects_unknown() {
    let o = tailor(&["backtest", "--list-strategies"]);
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "upstream\nkrr-simple\ncautious\nsaver\ndiurnal\nauto\n"
    );
    let o = tailor(&["backtest", "--suite", "--strategy", "fastest"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown strategy \"fastest\""));
    let o = tailor(&["backtest", "--suite", "--every", "0s"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `--prometheus` reads the same history `recommend` does (the stub's workload `a/w`) and backtests it.
#[test]
fn prometheus_source() {
    use tailor_tests::prom_stub::{END, Reply, healthy, stub};
    let s = stub(|r, _| Reply::Full(200, healthy(r)));
    let url = format!("http://127.0.0.1:{}", s.port);
    let end = END.to_string();
    let o = tailor(&[
        "backtest",
        "--prometheus",
        &url,
        "--history",
        "3h",
        "--end",
        &end,
        "--prometheus-max-points-per-query",
        "60",
        "--every",
        "30m",
        "--warmup",
        "1h",
        "--strategy",
        "upstream",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["strategies"][0]["containers"][0];
    assert!(c["name"].as_str().unwrap().starts_with("a/w/"), "{v}");
    assert!(c["pod_days"].as_f64().unwrap() > 0.0, "{v}");
}

/// Another draw of the suite is another trace set (same shape), and `--suite-draw` needs `--suite`.
#[test]
fn suite_draws_differ_and_need_the_suite() {
    let run = |draw: &str| {
        let o = tailor(&[
            "backtest",
            "--suite",
            "--strategy",
            "upstream",
            "--suite-draw",
            draw,
            "-o",
            "json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["strategies"][0]["total"]["cost_core_hours"]
            .as_f64()
            .unwrap()
    };
    let (published, other) = (run("0"), run("1"));
    assert!(published > 0.0 && other > 0.0);
    assert_ne!(published, other);
    let o = tailor(&["backtest", "--input", "x.csv", "--suite-draw", "1"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `--frontier` sweeps each strategy's knob (the strategy's own setting marked), prints cost against risk and
/// draws DIR/frontier.svg; `-o markdown` prints one row per shape of the suite.
#[test]
fn frontier_and_markdown() {
    let dir = std::env::temp_dir().join(format!("tailor-frontier-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("usage.csv");
    std::fs::write(&input, csv()).unwrap();
    let path = input.to_str().unwrap();
    let o = tailor(&[
        "backtest",
        "--input",
        path,
        "--frontier",
        "--strategy",
        "upstream,auto",
        "-o",
        "json",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    let of = |s: &str| points.iter().filter(|p| p["strategy"] == s).count();
    assert!(of("upstream") >= 5 && of("auto") >= 5, "{v}");
    let own: Vec<_> = points.iter().filter(|p| p["default"] == true).collect();
    assert_eq!(own.len(), 2, "{v}");
    assert_eq!(own[0]["value"], 0.9);
    let svg = std::fs::read_to_string(dir.join("frontier.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("risk minutes"));
    let m = tailor(&[
        "backtest",
        "--suite",
        "--suite-draw",
        "4",
        "--strategy",
        "upstream,auto",
        "-o",
        "markdown",
    ]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let text = String::from_utf8_lossy(&m.stdout);
    for shape in ["| web-diurnal |", "| random-bursts |", "| **total** |"] {
        assert!(text.contains(shape), "{text}");
    }
}

/// The money figure is the requested core-hours and GiB-hours at the prices given (or the dashboard's
/// defaults), in every output, labelled with the currency; the other scores do not depend on the prices.
#[test]
fn requested_cost_is_the_requests_at_the_prices() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("usage.csv");
    std::fs::write(&input, csv()).unwrap();
    let path = input.to_str().unwrap();
    let base = ["backtest", "--input", path, "--strategy", "upstream,saver"];
    let run = |extra: &[&str]| {
        let o = tailor(&[&base[..], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let json = |extra: &[&str]| -> serde_json::Value {
        serde_json::from_str(&run(&[extra, &["-o", "json"]].concat())).unwrap()
    };
    let priced = [
        "--price-vcpu-hour",
        "0.05",
        "--price-gib-hour",
        "0.004",
        "--price-currency",
        "EUR",
    ];
    let (own, default) = (json(&priced), json(&[]));
    assert_eq!(own["prices"]["currency"], "EUR");
    assert_eq!(default["prices"]["vcpu_hour"], 0.021811);
    assert_eq!(default["prices"]["gib_hour"], 0.002923);
    for (v, vcpu, gib) in [(&own, 0.05, 0.004), (&default, 0.021811, 0.002923)] {
        for s in v["strategies"].as_array().unwrap() {
            let scores = s["containers"].as_array().unwrap().iter();
            for score in scores.chain([&s["total"]]) {
                let cpu = score["cpu_request_core_hours"].as_f64().unwrap();
                let memory = score["memory_request_gib_hours"].as_f64().unwrap();
                let cost = score["requested_cost"].as_f64().unwrap();
                assert!((cost - (cpu * vcpu + memory * gib)).abs() < 1e-9, "{score}");
                // A day of requests above a few hundred millicores and MB: more than the waste.
                assert!(cpu >= score["cpu_waste_core_hours"].as_f64().unwrap() && cpu > 1.0);
                assert!(memory >= score["memory_waste_gib_hours"].as_f64().unwrap());
                assert!(memory > 0.1, "{score}");
            }
        }
    }
    let scores_without_money = |v: &serde_json::Value| {
        let mut v = v["strategies"].clone();
        for s in v.as_array_mut().unwrap() {
            s["total"].as_object_mut().unwrap().remove("requested_cost");
            for c in s["containers"].as_array_mut().unwrap() {
                c.as_object_mut().unwrap().remove("requested_cost");
            }
        }
        v
    };
    assert_eq!(scores_without_money(&own), scores_without_money(&default));
    let total = own["strategies"][0]["total"]["requested_cost"]
        .as_f64()
        .unwrap();
    let table = run(&priced);
    assert!(table.contains("REQ-EUR"), "{table}");
    assert!(table.contains(&format!("{total:.2}")), "{table}");
    let markdown = run(&[&priced[..], &["-o", "markdown"]].concat());
    assert!(markdown.contains("| requested (EUR) |"), "{markdown}");
    assert!(markdown.contains(&format!(" | {total:.2} |")), "{markdown}");
}

#[test]
fn a_bad_price_is_an_error_naming_its_flag() {
    for (flag, value) in [
        ("--price-vcpu-hour", "-1"),
        ("--price-gib-hour", "NaN"),
        ("--price-vcpu-hour", "inf"),
    ] {
        let o = tailor(&["backtest", "--suite", flag, value]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(&format!("{flag}: ")), "{stderr}");
    }
}

/// The Job shapes of draw 7 under both Job handlings with upstream's strategy.
const JOB_SHAPES: [&str; 10] = [
    "backtest",
    "--suite",
    "--suite-shapes",
    "jobs",
    "--suite-draw",
    "7",
    "--strategy",
    "upstream",
    "--jobs",
    "upstream,tailor",
];

/// `--jobs upstream,tailor` replays the Job shapes under both handlings, named `upstream` and
/// `upstream+jobs`, with the run counts in JSON and a runs table in Markdown; `--suite-shapes` needs
/// `--suite`.
#[test]
fn job_shapes_under_both_handlings() {
    let args = |format: &'static str| {
        let mut a = JOB_SHAPES.to_vec();
        a.extend(["-o", format]);
        a
    };
    let o = tailor(&args("json"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = v["strategies"].as_array().unwrap();
    let names: Vec<_> = s.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["upstream", "upstream+jobs"]);
    let runs = |i: usize| s[i]["total"]["runs"].as_u64().unwrap();
    assert!(runs(0) > 100 && runs(0) == runs(1), "{v}");
    for strategy in s {
        let total = &strategy["total"];
        assert_eq!(total["oom_kills"], total["oom_risk_samples"], "{total}");
    }
    let containers: Vec<_> = s[0]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["cron-short#7/job", "cron-spiky#7/job"]);
    let m = tailor(&args("markdown"));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let text = String::from_utf8_lossy(&m.stdout);
    assert!(
        text.contains("| strategy | runs | OOM kills | failed runs |"),
        "{text}"
    );
    assert!(text.contains("| upstream+jobs |"), "{text}");
    let o = tailor(&["backtest", "--input", "x.csv", "--suite-shapes", "jobs"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `--job-target-memory-percentile` applies to the Tailor handling only: the `upstream` result is the same
/// as without it, and the Job VPA's memory comes from the higher percentile (more memory wasted, no more kills).
#[test]
fn the_job_memory_percentile_moves_only_the_tailor_handling() {
    let run = |extra: &[&str]| {
        let mut args = JOB_SHAPES.to_vec();
        args.extend(["-o", "json"]);
        args.extend_from_slice(extra);
        let o = tailor(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["strategies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["total"].clone())
            .collect::<Vec<_>>()
    };
    let plain = run(&[]);
    let p99 = run(&["--job-target-memory-percentile", "0.99"]);
    assert_eq!(plain[0], p99[0], "upstream's handling is untouched");
    let number =
        |t: &serde_json::Value, k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    assert!(
        number(&p99[1], "memory_waste_gib_hours") > number(&plain[1], "memory_waste_gib_hours")
    );
    assert!(number(&p99[1], "oom_kills") <= number(&plain[1], "oom_kills"));
    let o = tailor(&[
        "backtest",
        "--suite",
        "--job-target-memory-percentile",
        "1.5",
    ]);
    assert_eq!(o.status.code(), Some(2), "a percentile above 1 is refused");
}
