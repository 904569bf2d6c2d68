//! `tailor fleet`: fleet onboarding previewed on `examples/fleet/snapshot.yaml` — the labelled namespace's
//! four VPAs (owned by their workloads, with the namespace's profile and minAllowed), the workloads left out
//! and why, the refused namespace, the unlabelled one chosen only by the namespace selector; the table's
//! summary; a missing snapshot exiting 2 with the path named.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::{stdout, tailor};

const SNAPSHOT: &str = "examples/fleet/snapshot.yaml";

fn plan(extra: &[&str]) -> Value {
    let mut args = vec!["fleet", "--snapshot", SNAPSHOT, "-o", "json"];
    args.extend(extra);
    serde_json::from_str(&stdout(&tailor(&args))).unwrap()
}

/// The applies as (namespace, VPA name) → the apply.
fn applies(p: &Value) -> BTreeMap<(String, String), Value> {
    (p["apply"].as_array().unwrap().iter())
        .map(|a| {
            let key = (
                a["namespace"].as_str().unwrap().to_owned(),
                a["name"].as_str().unwrap().to_owned(),
            );
            (key, a.clone())
        })
        .collect()
}

#[test]
fn a_labelled_namespace_gets_one_vpa_per_workload_and_the_rest_are_explained() {
    let p = plan(&[]);
    let applies = applies(&p);
    let names: BTreeSet<(&str, &str)> = (applies.keys())
        .map(|(ns, n)| (ns.as_str(), n.as_str()))
        .collect();
    let want = [
        ("shop", "web-deployment"),
        ("shop", "db-statefulset"),
        ("shop", "agent-daemonset"),
        ("shop", "nightly-cronjob"),
    ];
    assert_eq!(names, BTreeSet::from(want));
    for (key, a) in &applies {
        let vpa = &a["vpa"];
        let (kind, workload) = (a["kind"].as_str().unwrap(), a["workload"].as_str().unwrap());
        assert_eq!(key.1, format!("{workload}-{}", kind.to_lowercase()));
        assert_eq!(a["change"], "Create");
        assert_eq!(a["mode"], "Off");
        assert_eq!(a["policy"], "namespace shop label tailor.dev/vpa=Off");
        assert_eq!(vpa["apiVersion"], "autoscaling.tailor.dev/v1");
        assert_eq!(vpa["kind"], "VerticalPodAutoscaler");
        let owners = vpa["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 1, "{key:?}");
        assert_eq!(
            (&owners[0]["kind"], &owners[0]["name"]),
            (&json!(kind), &json!(workload))
        );
        assert!(owners[0]["uid"].as_str().unwrap().starts_with("6f1c2a10-"));
        assert_eq!(vpa["spec"]["targetRef"]["kind"], kind);
        assert_eq!(vpa["spec"]["targetRef"]["name"], workload);
        assert_eq!(vpa["spec"]["updatePolicy"]["updateMode"], "Off");
        let meta = &vpa["metadata"];
        assert_eq!(meta["annotations"]["tailor.dev/profile"], "cautious");
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "tailor");
        let container = &vpa["spec"]["resourcePolicy"]["containerPolicies"][0];
        assert_eq!(container["containerName"], "*");
        assert_eq!(
            container["minAllowed"],
            json!({"cpu": "50m", "memory": "64Mi"})
        );
    }
    let db = &applies[&("shop".to_owned(), "db-statefulset".to_owned())]["vpa"];
    assert_eq!(db["spec"]["targetRef"]["apiVersion"], "apps/v1");
    let nightly = &applies[&("shop".to_owned(), "nightly-cronjob".to_owned())]["vpa"];
    assert_eq!(
        nightly["metadata"]["ownerReferences"][0]["apiVersion"],
        "batch/v1"
    );

    let skipped: BTreeSet<(&str, &str, &str, &str)> = (p["skipped"].as_array().unwrap().iter())
        .map(|s| {
            (
                s["namespace"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["name"].as_str().unwrap(),
                s["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        BTreeSet::from([
            ("shop", "Deployment", "opted-out", "OptedOut"),
            ("shop", "Deployment", "mine", "TargetedByVPA"),
            ("shop", "Deployment", "legacy", "TargetedByUpstreamVPA"),
        ])
    );
    let refused = p["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["namespace"], "bad");
    let message = refused[0]["message"].as_str().unwrap();
    assert!(
        message.contains("tailor.dev/vpa") && message.contains("Sometimes"),
        "{message}"
    );
    // Nothing for the unlabelled namespace, nothing deleted.
    let text = p.to_string();
    assert!(!text.contains("\"dev\"") && !text.contains("tools"), "{p}");
    assert_eq!(p["delete"], json!([]));
    assert_eq!(p["byMode"], json!({"Off": 4}));
}

#[test]
fn the_namespace_selector_chooses_an_unlabelled_namespace_in_the_default_mode() {
    let p = plan(&[
        "--fleet-namespace-selector",
        "env=dev",
        "--fleet-default-mode",
        "Initial",
    ]);
    let by_name = applies(&p);
    let dev: Vec<&Value> = (by_name.iter())
        .filter(|((ns, _), _)| ns == "dev")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(dev.len(), 1, "{p}");
    assert_eq!(dev[0]["name"], "tools-deployment");
    assert_eq!(dev[0]["mode"], "Initial");
    assert_eq!(
        dev[0]["vpa"]["spec"]["updatePolicy"]["updateMode"],
        "Initial"
    );
    assert!(
        dev[0]["policy"]
            .as_str()
            .unwrap()
            .contains("fleet namespace selector"),
        "{}",
        dev[0]["policy"]
    );
    // No annotations on dev: no profile, no resource policy.
    assert!(dev[0]["vpa"]["spec"]["resourcePolicy"].is_null());
    // The labelled namespace keeps its own mode.
    assert_eq!(by_name.len(), 5);
    assert_eq!(p["byMode"], json!({"Initial": 1, "Off": 4}));
    // A protected namespace is never chosen by the selector.
    let p = plan(&[
        "--fleet-namespace-selector",
        "env=dev",
        "--fleet-protected-namespace",
        "dev",
    ]);
    assert_eq!(applies(&p).len(), 4);
}

#[test]
fn the_table_lists_each_part_and_ends_with_the_summary() {
    let got = stdout(&tailor(&["fleet", "--snapshot", SNAPSHOT]));
    for line in [
        "Refused namespaces:",
        "VPAs to create or change:",
        "Create  shop       web-deployment   Deployment/web   Off   namespace shop label tailor.dev/vpa=Off",
        "Skipped workloads:",
        "shop       Deployment/opted-out  OptedOut               annotated tailor.dev/vpa: \"false\"",
    ] {
        assert!(got.contains(line), "missing {line:?} in\n{got}");
    }
    assert!(!got.contains("VPAs to delete:"), "{got}");
    let last = got.lines().last().unwrap();
    assert_eq!(
        last,
        "4 to create, 0 to change, 0 to delete, 3 skipped, 1 namespace refused; fleet VPAs after the plan: Off 4"
    );
}

#[test]
fn help_documents_every_fleet_key() {
    let help = stdout(&tailor(&["fleet", "--help"]));
    for (key, _) in tailor_core::fleet::KEYS {
        assert!(help.contains(key), "missing {key} in\n{help}");
    }
    for key in [
        "--fleet-namespace-selector",
        "--fleet-default-mode",
        "--fleet-protected-namespace",
        "--fleet-allow-namespace",
    ] {
        assert!(help.contains(key), "missing {key} in\n{help}");
    }
}

#[test]
fn a_missing_snapshot_or_a_bad_flag_exits_2_naming_it() {
    let out = tailor(&["fleet", "--snapshot", "examples/fleet/missing.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("examples/fleet/missing.yaml"), "{err}");
    assert!(out.stdout.is_empty());
    for (flag, value) in [
        ("--fleet-default-mode", "Sometimes"),
        ("--fleet-namespace-selector", "env in ("),
        ("--kind", "Job"),
    ] {
        let out = tailor(&["fleet", "--snapshot", SNAPSHOT, flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}
