//! `tailor plan` and `tailor-updater` on the same snapshot (docs/decisions/plan-parity.md): the snapshot is
//! loaded into the stand-in, the real updater runs against it, and `tailor plan` reads the same objects from a
//! file; the pods the binary evicts are exactly those the plan says it would evict. The snapshot holds what the
//! two were once found disagreeing on, or the updater looping on: a VPA in a namespace the webhook does not serve
//! (CoreDNS in `kube-system`, a namespace its `namespaceSelector` leaves out), a pod its `objectSelector`
//! leaves out, two VPAs on one Deployment,
//! and pods a custom kind (an Argo Rollout with `/scale`) creates itself.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use tailor_testkit::fixtures::VpaFixture;
use tailor_tests::process::{Process, binary, free_port, start_updater, write_kubeconfig};
use tailor_tests::small_workload::{Owner, running_pod};
use tailor_tests::standin::ApiServer;

use crate::binaries::VPA_API;

/// The Rollout CRD with its scale subresource (the stand-in serves `/scale` from it).
const ROLLOUT_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Rollout, plural: rollouts, singular: rollout}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
      subresources:
        status: {}
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas,
                labelSelectorPath: .status.selector}
"#;

/// A running pod `name` of `owner` (`apiVersion, kind, name`) with requests far below the VPAs' range.
fn pod(ns: &str, name: &str, app: &str, owner: (&str, &str, &str), extra_label: &str) -> String {
    let (api_version, kind, owner_name) = owner;
    let owner = Owner {
        api_version,
        kind,
        name: owner_name,
        uid: &format!("owner-{owner_name}"),
    };
    let labels = format!("app: {app}{extra_label}");
    running_pod(ns, name, &format!("pod-{ns}-{name}"), &labels, &owner)
}

/// A Deployment and its ReplicaSet `app-1` in `ns`, with two pods (`extra_label` on the second).
fn deployment(ns: &str, app: &str, extra_label: &str) -> String {
    let mut out = format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: {ns}, uid: owner-{app}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: {app}-1
  namespace: {ns}
  uid: owner-{app}-1
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: {app}, uid: owner-{app}, controller: true}}]
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
"#
    );
    let rs = format!("{app}-1");
    out.push_str(&pod(
        ns,
        &format!("{app}-1-a"),
        app,
        ("apps/v1", "ReplicaSet", &rs),
        "",
    ));
    out.push_str(&pod(
        ns,
        &format!("{app}-1-b"),
        app,
        ("apps/v1", "ReplicaSet", &rs),
        extra_label,
    ));
    out
}

/// A VPA `name` in `ns` over `kind`/`target` in `mode`, created at `created`, whose range (cpu 400m–600m,
/// memory 400Mi–600Mi) the pods' requests are below.
fn vpa(
    ns: &str,
    name: &str,
    (api_version, kind, target): (&str, &str, &str),
    mode: &str,
    created: &str,
) -> String {
    VpaFixture::new(ns, name)
        .uid(&format!("vpa-{ns}-{name}"))
        .created(created)
        .target_ref(api_version, kind, target)
        .mode(mode)
        .recommendation_bounds(
            "app",
            ("400m", "400Mi"),
            ("500m", "512Mi"),
            ("600m", "600Mi"),
        )
        .manifest()
}

/// The snapshot: the cases above, in `kube-system`, `shop` (labelled for the webhook) and `lab` (not
/// labelled: the webhook's namespace selector leaves it out).
fn snapshot() -> String {
    let deploy = |name: &str| ("apps/v1", "Deployment", name.to_owned());
    let mut s = String::from(
        r#"
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {tailor.dev/enabled: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: lab}
"#,
    );
    // exp in lab: the webhook never sees its pods.
    s.push_str(&deployment("lab", "exp", ""));
    let (a, k, n) = deploy("exp");
    s.push_str(&vpa(
        "lab",
        "exp",
        (a, k, &n),
        "Recreate",
        "2026-01-01T00:00:00Z",
    ));
    // CoreDNS in kube-system, which the webhook never serves.
    s.push_str(&deployment("kube-system", "coredns", ""));
    let (a, k, n) = deploy("coredns");
    s.push_str(&vpa(
        "kube-system",
        "coredns",
        (a, k, &n),
        "Recreate",
        "2026-01-01T00:00:00Z",
    ));
    // web: its second pod carries the label the webhook's objectSelector excludes.
    s.push_str(&deployment("shop", "web", ", tailor.dev/skip: \"true\""));
    let (a, k, n) = deploy("web");
    s.push_str(&vpa(
        "shop",
        "web",
        (a, k, &n),
        "Recreate",
        "2026-01-01T00:00:00Z",
    ));
    // api: an Initial VPA and a newer Recreate one on the same Deployment.
    s.push_str(&deployment("shop", "api", ""));
    let (a, k, n) = deploy("api");
    s.push_str(&vpa(
        "shop",
        "api-initial",
        (a, k, &n),
        "Initial",
        "2026-01-01T00:00:00Z",
    ));
    s.push_str(&vpa(
        "shop",
        "api-recreate",
        (a, k, &n),
        "Recreate",
        "2026-01-02T00:00:00Z",
    ));
    // canary: an Argo Rollout that creates its pods itself (as an OpenKruise CloneSet does).
    s.push_str(
        r#"
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: canary, namespace: shop, uid: owner-canary}
spec:
  replicas: 2
  selector: {matchLabels: {app: canary}}
status: {replicas: 2, selector: app=canary}
"#,
    );
    for p in ["canary-a", "canary-b"] {
        s.push_str(&pod(
            "shop",
            p,
            "canary",
            ("argoproj.io/v1alpha1", "Rollout", "canary"),
            "",
        ));
    }
    s.push_str(&vpa(
        "shop",
        "canary",
        ("argoproj.io/v1alpha1", "Rollout", "canary"),
        "Recreate",
        "2026-01-01T00:00:00Z",
    ));
    s
}

/// The updater flags both runs use: the chart's webhook scope, and budgets that let every eligible pod go
/// in one iteration (so the binary's evictions over several iterations are the plan's of one).
const FLAGS: &[&str] = &[
    "--webhook-excluded-namespaces=tailor,kube-system",
    r#"--webhook-object-selector={"matchExpressions":[{"key":"tailor.dev/skip","operator":"DoesNotExist"}]}"#,
    r#"--webhook-namespace-selector={"matchLabels":{"tailor.dev/enabled":"true"}}"#,
    "--min-replicas=1",
    "--eviction-tolerance=1.0",
];

/// What `tailor plan` says of `file` with the parity test's flags.
fn plan(file: &std::path::Path) -> (Vec<(String, String)>, Value) {
    plan_with(file, FLAGS)
}

/// What `tailor plan` says of `file` with `flags`: pod → action, and the whole plan.
fn plan_with(file: &std::path::Path, flags: &[&str]) -> (Vec<(String, String)>, Value) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let out = std::process::Command::new(binary("tailor"))
        .arg("plan")
        .arg(file)
        .args(["--now", &now, "--output", "json"])
        .args(flags)
        .output()
        .expect("tailor plan runs");
    assert!(
        out.status.success(),
        "tailor plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let pods = plan["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["pod"].as_str().unwrap()
                ),
                p["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (pods, plan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailor_plan_and_the_updater_evict_the_same_pods_of_one_snapshot() {
    let text = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.yaml");
    std::fs::write(&file, &text).unwrap();

    let (planned, plan_json) = plan(&file);
    let plan_evicts: BTreeSet<String> = planned
        .iter()
        .filter(|(_, a)| a == "evict")
        .map(|(p, _)| p.clone())
        .collect();
    let expected: BTreeSet<String> = ["shop/web-1-a", "shop/canary-a", "shop/canary-b"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(plan_evicts, expected, "{plan_json:#}");
    let skipped = plan_json["skippedVpas"].to_string();
    assert!(
        skipped.contains("the webhook does not serve namespace kube-system"),
        "{skipped}"
    );
    assert!(
        skipped.contains("shop/api-initial") && skipped.contains("shop/api-recreate"),
        "{skipped}"
    );
    assert!(skipped.contains("conflicting VPAs"), "{skipped}");
    assert!(
        skipped.contains("namespaceSelector does not select namespace lab"),
        "{skipped}"
    );
    let web_b = plan_json["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == "web-1-b")
        .expect("web-1-b in the plan");
    assert!(
        web_b["reason"].as_str().unwrap().contains("objectSelector"),
        "{web_b}"
    );

    let server = ApiServer::start().await.unwrap();
    server.load_yaml(ROLLOUT_CRD).unwrap();
    server.load_yaml(&text).unwrap();
    let mut flags = vec!["--use-admission-controller-status=false"];
    flags.extend_from_slice(FLAGS);
    let mut up = start_updater(&server, dir.path(), "updater", &flags);
    let evicted = |s: &ApiServer| -> BTreeSet<String> {
        s.requests()
            .into_iter()
            .filter(|r| r.user == "updater" && r.resource() == "pods/eviction" && r.status == 201)
            .map(|r| r.object())
            .collect()
    };
    // Several iterations: the Rollout's selector arrives from `/scale` in the background.
    let iterations = |p: &tailor_tests::process::Process| {
        p.json_logs()
            .iter()
            .filter(|l| l["message"] == "iteration done")
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while iterations(&up) < 4 {
        assert!(!up.exited(), "{}", up.log_lines().join("\n"));
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            up.log_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        evicted(&server),
        plan_evicts,
        "the binary evicted other pods than tailor plan planned; its lookups: {:?}\n{}",
        server
            .requests()
            .iter()
            .filter(|r| r.user == "updater" && r.method == "GET" && !r.path.contains("watch"))
            .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
            .collect::<Vec<_>>(),
        up.log_lines().join("\n")
    );
    // The binary says why on the VPAs it leaves alone, as the plan does.
    let events = server.list("events.k8s.io/v1", "Event", None);
    let reasons_on = |vpa: &str| -> BTreeSet<String> {
        events
            .iter()
            .filter(|e| {
                e["regarding"]["name"] == vpa && e["regarding"]["kind"] == "VerticalPodAutoscaler"
            })
            .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    for vpa in ["api-initial", "api-recreate"] {
        assert!(
            reasons_on(vpa).contains("ConflictingVPAs"),
            "{vpa}: {events:#?}"
        );
    }
    assert!(
        reasons_on("coredns").contains("OutsideWebhookScope"),
        "{events:#?}"
    );
    assert!(
        reasons_on("web").contains("OutsideWebhookScope"),
        "{events:#?}"
    );
    // And in the VPAs' status: the UpdatesBlocked condition, with the event's reason.
    let blocked = |ns: &str, name: &str| -> Option<String> {
        let v = server.get(VPA_API, "VerticalPodAutoscaler", ns, name)?;
        v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "UpdatesBlocked" && c["status"] == "True")
            .and_then(|c| c["reason"].as_str().map(str::to_owned))
    };
    for (ns, name, reason) in [
        ("shop", "api-initial", "ConflictingVPAs"),
        ("shop", "api-recreate", "ConflictingVPAs"),
        ("kube-system", "coredns", "OutsideWebhookScope"),
        ("shop", "web", "OutsideWebhookScope"),
        ("lab", "exp", "OutsideWebhookScope"),
    ] {
        assert_eq!(blocked(ns, name).as_deref(), Some(reason), "{ns}/{name}");
    }
    assert_eq!(blocked("shop", "canary"), None);
    // The recommendation in the status is untouched.
    let api = server
        .get(VPA_API, "VerticalPodAutoscaler", "shop", "api-recreate")
        .unwrap();
    assert_eq!(
        api["status"]["recommendation"]["containerRecommendations"][0]["target"]["cpu"],
        "500m"
    );
    // No /scale read for owners no VPA names (the web, api and coredns ReplicaSets are cached kinds).
    let scale_reads: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.user == "updater" && r.resource().ends_with("/scale"))
        .map(|r| format!("{} {}", r.resource(), r.object()))
        .collect();
    assert!(
        scale_reads
            .iter()
            .all(|r| r == "rollouts/scale shop/canary"),
        "{scale_reads:?}"
    );
    up.kill();
}

/// The example snapshot of the README (`examples/plan/snapshot.yaml`) without its PodDisruptionBudget (the
/// stand-in does not enforce budgets) and the webhook's Lease (the binary then runs without the status
/// check, the plan assumes the webhook alive), with the default budgets: the binary's first iteration evicts
/// exactly what `tailor plan` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailor_plan_and_the_updaters_first_iteration_agree_on_the_example_snapshot() {
    let root = tailor_tests::process::workspace_root();
    let example = std::fs::read_to_string(root.join("examples/plan/snapshot.yaml")).unwrap();
    let kept: Vec<&str> = example
        .split("\n---\n")
        .filter(|doc| !doc.contains("kind: PodDisruptionBudget") && !doc.contains("kind: Lease"))
        .collect();
    assert!(kept.len() > 20, "the example snapshot's documents");
    let text = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---\n{}",
        kept.join("\n---\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.yaml");
    std::fs::write(&file, &text).unwrap();
    // The stand-in reports Kubernetes 1.33 (a memory limit cut under NotRequired is refused there).
    let (planned, plan_json) = plan_with(&file, &["--kubernetes-version", "1.33"]);
    let plan_evicts: BTreeSet<String> = planned
        .iter()
        .filter(|(_, a)| a == "evict")
        .map(|(p, _)| p.clone())
        .collect();
    assert!(!plan_evicts.is_empty(), "{plan_json:#}");

    let server = ApiServer::start().await.unwrap();
    server.load_yaml(&text).unwrap();
    // One iteration 5 s after start, the next 5 s later: the evictions before the first "iteration done"
    // line are the first iteration's.
    let args: Vec<String> = vec![
        "--kubeconfig".into(),
        write_kubeconfig(&server, dir.path(), "updater")
            .display()
            .to_string(),
        "--address".into(),
        format!("127.0.0.1:{}", free_port()),
        "--updater-interval".into(),
        "5s".into(),
        "--log-format".into(),
        "json".into(),
        "--use-admission-controller-status=false".into(),
    ];
    let mut up = Process::spawn("updater", &binary("tailor-updater"), &args);
    up.wait_for_log(Duration::from_secs(30), |l| {
        l["message"] == "iteration done"
    })
    .await;
    let evicted: BTreeSet<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.user == "updater" && r.resource() == "pods/eviction" && r.status == 201)
        .map(|r| r.object())
        .collect();
    assert_eq!(
        evicted,
        plan_evicts,
        "the binary's first iteration and tailor plan disagree: its writes {:?}\n{}",
        server
            .requests()
            .iter()
            .filter(|r| r.user == "updater" && r.is_write())
            .map(|r| format!("{} {} -> {}", r.verb(), r.path, r.status))
            .collect::<Vec<_>>(),
        up.log_lines().join("\n")
    );
    up.kill();
}
