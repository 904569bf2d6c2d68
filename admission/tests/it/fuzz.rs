//! Fuzzing by property (docs/decisions/webhook-hardening.md): the quantity parser, and whole reviews through
//! the production reviewer (decoder, budgets, matching, pod patch, VPA validation, encoder). `hack/test.sh`
//! runs a short pass; set `TAILOR_FUZZ_CASES` for a long one (`hack/fuzz.sh`). The pod patch's own property test
//! (`proptest_pod.rs`) takes the same setting.

use std::sync::Arc;

use base64::Engine as _;
use proptest::prelude::*;
use serde_json::{Value, json};
use tailor_admission::{manifests, review, webhook::Webhook};
use tailor_core::quantity::Amount;
use tailor_core::sizing::PatchOptions;
use tailor_core::validation::FeatureGates;
use tailor_crds::schema::MAX_QUANTITY_LEN;

/// Cases per property: `TAILOR_FUZZ_CASES`, else `default` (the short pass of the test suite).
pub fn cases(default: u32) -> u32 {
    std::env::var("TAILOR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Text close to a quantity: signs, digits, points, exponents and suffixes in any order, sometimes long.
fn quantity_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        8 => "[0-9]{1,4}",
        2 => Just(".".to_owned()),
        1 => Just("-".to_owned()),
        1 => Just("+".to_owned()),
        2 => prop::sample::select(vec!["m", "u", "n", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e", "E", "e-", "e+"])
            .prop_map(str::to_owned),
        1 => (1usize..300).prop_map(|n| "0".repeat(n)),
        1 => any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|p| p.concat())
}

fn webhook() -> Webhook {
    const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  resourcePolicy:
    containerPolicies: [{containerName: "*", minAllowed: {cpu: 50m}, maxAllowed: {memory: 2Gi}}]
status:
  recommendation:
    containerRecommendations:
      - {containerName: app, target: {cpu: 250m, memory: 256Mi}}
      - {containerName: side, target: {cpu: "-1", memory: "0"}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: d-1}
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: app, image: nginx}]}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-5d9c
  namespace: shop
  uid: rs-1
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: d-1, controller: true}]
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: app, image: nginx}]}}
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("all.yaml"), MANIFESTS).unwrap();
    let loaded = manifests::load_dir(dir.path()).unwrap();
    Webhook::new(
        loaded.objects.into_index(),
        FeatureGates::default(),
        PatchOptions::default(),
    )
}

fn resources() -> impl Strategy<Value = Value> {
    let q = prop_oneof![
        4 => quantity_text().prop_map(Value::String),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(Value::Null),
    ];
    prop::collection::btree_map(
        prop::sample::select(vec!["cpu", "memory", "nvidia.com/gpu"]).prop_map(str::to_owned),
        q,
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn container() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["app", "side", "other"]),
        resources(),
        resources(),
    )
        .prop_map(|(name, requests, limits)| {
            json!({"name": name, "image": "x", "resources": {"requests": requests, "limits": limits}})
        })
}

/// A pod review for the `shop/web` workload, with random containers and a random mutation somewhere.
fn pod_review() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(container(), 0..4),
        prop::option::of((prop::collection::vec(0usize..8, 1..5), any::<i32>())),
    )
        .prop_map(|(containers, mutation)| {
            let mut review = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "shop", "operation": "CREATE", "userInfo": {},
                    "object": {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"generateName": "web-5d9c-", "namespace": "shop", "labels": {"app": "web"},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9c",
                                "uid": "rs-1", "controller": true}]},
                        "spec": {"containers": containers}
                    }
                }
            });
            if let Some((path, value)) = mutation {
                mutate(&mut review, &path, Value::from(value));
            }
            review
        })
}

/// Replaces the node reached by following `path` (indices into object keys or array items, modulo their count).
fn mutate(v: &mut Value, path: &[usize], replacement: Value) {
    let Some((&first, rest)) = path.split_first() else {
        *v = replacement;
        return;
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            let key = map
                .keys()
                .nth(first % map.len())
                .cloned()
                .unwrap_or_default();
            if let Some(child) = map.get_mut(&key) {
                mutate(child, rest, replacement);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let n = items.len();
            mutate(&mut items[first % n], rest, replacement);
        }
        _ => *v = replacement,
    }
}

/// No quantity the patch wrote (one that differs from the pod as sent) is negative.
fn no_negative_written(before: &Value, after: &Value) -> Result<(), TestCaseError> {
    let containers = |v: &Value| {
        v["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (old, new) = (containers(before), containers(after));
    for (i, c) in new.iter().enumerate() {
        for kind in ["requests", "limits"] {
            for (name, q) in c["resources"][kind].as_object().into_iter().flatten() {
                let unchanged = old.get(i).is_some_and(|o| &o["resources"][kind][name] == q);
                if let (false, Some(text)) = (unchanged, q.as_str()) {
                    prop_assert!(!text.starts_with('-'), "wrote {name} {kind} {text}");
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2048), ..ProptestConfig::default() })]

    /// Never panics; refuses text over the cap; what parses prints in a form that parses to the same value.
    #[test]
    fn quantity_parser_is_total_and_round_trips(text in quantity_text()) {
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.clone());
        match Amount::parse(&q) {
            Ok(amount) => {
                prop_assert!(text.len() <= MAX_QUANTITY_LEN);
                let printed = amount.to_quantity();
                // Go's canonical form can be longer than the text (`1…0.0001` → `1…000100000n`): an absurd
                // value near the cap may print past it.
                if printed.0.len() > MAX_QUANTITY_LEN {
                    return Ok(());
                }
                let again = Amount::parse(&printed).map_err(|e| TestCaseError::fail(e.to_string()))?;
                // Go keeps nano precision, rounding up: the printed value is the parsed one rounded up to 1n.
                let nano = Amount::parse(&k8s_openapi::apimachinery::pkg::api::resource::Quantity("1n".into())).unwrap();
                prop_assert_ne!(again.cmp_value(&amount), std::cmp::Ordering::Less, "{} -> {}", text, printed.0);
                prop_assert_eq!(again.cmp_value(&amount.add(&nano)), std::cmp::Ordering::Less, "{} -> {}", text, printed.0);
            }
            Err(e) => prop_assert!(e.value.len() <= 64 + 32, "error text of {} bytes", e.value.len()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    /// Any pod review through the production reviewer gives a well-formed answer with the request's uid, and a
    /// patch, when there is one, applies to the pod and writes no negative quantity.
    #[test]
    fn pod_reviews_through_the_webhook(review_json in pod_review()) {
        thread_local! {
            static WEBHOOK: Arc<Webhook> = Arc::new(webhook());
        }
        let body = serde_json::to_vec(&review_json).unwrap();
        let handled = WEBHOOK.with(|w| review::handle(&body, w.as_ref()));
        let answer: Value = serde_json::from_slice(&handled.body).unwrap();
        prop_assert_eq!(&answer["apiVersion"], "admission.k8s.io/v1");
        prop_assert_eq!(&answer["kind"], "AdmissionReview");
        prop_assert!(answer["response"]["allowed"].is_boolean());
        prop_assert!(handled.body.len() < 16 * 1024, "answer of {} bytes", handled.body.len());
        if let Some(patch) = answer["response"]["patch"].as_str() {
            let patch = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
            let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
            let before = &review_json["request"]["object"];
            let mut pod = before.clone();
            json_patch::patch(&mut pod, &patch.0)
                .map_err(|e| TestCaseError::fail(format!("patch does not apply: {e}")))?;
            no_negative_written(before, &pod)?;
        }
    }
}
