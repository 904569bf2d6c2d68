//! Conformance of the shared policy semantics against upstream's vectors (tests/data/, transcribed from
//! upstream's unit tests): policy lookup, the min/max part of capping, validation and its options.
//! Each test prints `conformance: N/M` and fails on any vector that does not match.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_core::capping::{apply_vpa_policy, cap_to_limits, cap_to_policy};
use tailor_core::policy::{
    container_policy, controlled_resources, controlled_values, memory_aggregation_interval_count,
    memory_aggregation_interval_seconds, needs_recommendation, scaling_mode,
};
use tailor_core::quantity;
use tailor_core::validation::{FeatureGates, ValidationOptions, validate};
use tailor_crds::{
    ContainerResourcePolicy, ControlledValues, PodResourcePolicy, RecommendedPodResources,
    ResourceList, VerticalPodAutoscaler, VerticalPodAutoscalerSpec,
};

fn load(rel: &str) -> Vec<Value> {
    let path = format!("{}/../tests/data/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The case fields of each vector file (their layout).
const CASE_FIELDS: &[(&str, &[&str])] = &[
    (
        "admission/unit-cases.json",
        &["id", "kind", "input", "expected", "source", "notes"],
    ),
    (
        "recommender/unit-vectors.json",
        &[
            "id",
            "kind",
            "input",
            "expected",
            "expected_derived",
            "source",
            "note",
            "tolerance",
        ],
    ),
];

/// The input fields each (file, kind) runner here reads; any other field fails the case.
const INPUT_FIELDS: &[(&str, &str, &[&str])] = &[
    (
        "admission/unit-cases.json",
        "container_policy_lookup",
        &["containerName", "containerPolicies", "function"],
    ),
    (
        "admission/unit-cases.json",
        "apply_vpa_policy",
        &["globalMaxAllowed", "recommendation", "resourcePolicy"],
    ),
    (
        "admission/unit-cases.json",
        "capping",
        &["containerLimitRange", "pod", "podLimitRange", "vpa"],
    ),
    (
        "admission/unit-cases.json",
        "vpa_validation",
        &["options", "spec"],
    ),
    (
        "admission/unit-cases.json",
        "validation_option",
        &["featureGate", "oldObject", "option"],
    ),
    (
        "recommender/unit-vectors.json",
        "container_policy",
        &[
            "container_policies",
            "container_policy",
            "containers",
            "default_memory_aggregation_interval_count",
            "default_memory_aggregation_interval_s",
            "feature_gate_PerVPAConfig",
        ],
    ),
    (
        "recommender/unit-vectors.json",
        "capping",
        &["global_max_allowed", "recommendation", "resource_policy"],
    ),
];

/// A case field outside the file's layout, or an input field the runner does not read (it would be
/// ignored).
fn unread_field(file: &str, v: &Value) -> Option<String> {
    let kind = v["kind"].as_str().unwrap_or_default();
    let case_fields = CASE_FIELDS
        .iter()
        .find(|(f, _)| *f == file)
        .map(|(_, c)| *c);
    let input_fields = INPUT_FIELDS
        .iter()
        .find(|(f, k, _)| *f == file && *k == kind)
        .map(|(_, _, i)| *i);
    let (Some(case_fields), Some(input_fields)) = (case_fields, input_fields) else {
        return Some(format!("no field list for {kind} of {file}"));
    };
    if let Some(k) = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !case_fields.contains(&k.as_str()))
    {
        return Some(format!("{k}: unknown case field"));
    }
    v["input"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !input_fields.contains(&k.as_str()))
        .map(|k| format!("input.{k}: not read by the {kind} runner"))
}

/// Runs `check` on every vector of the given kinds; `None` from `check` means "not applicable here". A
/// vector with a field the runner does not read fails.
fn run(file: &str, kinds: &[&str], check: impl Fn(&Value) -> Option<Result<(), String>>) {
    let vectors = load(file);
    let (mut passed, mut total) = (0, 0);
    let mut failures = Vec::new();
    for v in vectors
        .iter()
        .filter(|v| kinds.contains(&v["kind"].as_str().unwrap_or_default()))
    {
        let Some(result) = check(v) else { continue };
        let result = match unread_field(file, v) {
            Some(why) => Err(why),
            None => result,
        };
        total += 1;
        match result {
            Ok(()) => passed += 1,
            Err(why) => failures.push(format!("{}: {why}", v["id"])),
        }
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} ({file}: {})",
        kinds.join(", ")
    ));
    assert!(total > 0, "no vectors of {kinds:?} in {file}");
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("decode {v}: {e}"))
}

/// Vectors omit `metadata`, which every real object has.
fn object<T: serde::de::DeserializeOwned>(v: &Value) -> Result<Option<T>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let mut v = v.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.entry("metadata").or_insert_with(|| json!({}));
    }
    parse(&v).map(Some)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Quantities compared by value (cpu in millicores, everything else in units).
fn same_resources(ours: Option<&ResourceList>, expected: &Value) -> Result<(), String> {
    let expected: Option<ResourceList> = parse(expected)?;
    let amounts = |list: Option<&ResourceList>| -> Result<BTreeMap<String, i64>, String> {
        list.into_iter()
            .flatten()
            .map(|(r, q)| {
                Ok((
                    r.clone(),
                    quantity::amount(r, q).map_err(|e| e.to_string())?,
                ))
            })
            .collect()
    };
    let (a, b) = (amounts(ours)?, amounts(expected.as_ref())?);
    check(a == b, || format!("resources {a:?} != expected {b:?}"))
}

fn same_recommendation(
    ours: Option<&RecommendedPodResources>,
    expected: &Value,
) -> Result<(), String> {
    if expected.is_null() {
        return check(ours.is_none(), || {
            format!("expected no recommendation, got {ours:?}")
        });
    }
    let ours = ours.ok_or("expected a recommendation, got none")?;
    let expected_list = expected["containerRecommendations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ours_list = ours.container_recommendations.clone().unwrap_or_default();
    check(ours_list.len() == expected_list.len(), || {
        format!(
            "{} containers, expected {}",
            ours_list.len(),
            expected_list.len()
        )
    })?;
    for (o, e) in ours_list.iter().zip(&expected_list) {
        check(
            o.container_name.as_deref() == e["containerName"].as_str(),
            || format!("container {:?} != {}", o.container_name, e["containerName"]),
        )?;
        same_resources(Some(&o.target), &e["target"])?;
        same_resources(o.lower_bound.as_ref(), &e["lowerBound"])?;
        same_resources(o.upper_bound.as_ref(), &e["upperBound"])?;
        same_resources(o.uncapped_target.as_ref(), &e["uncappedTarget"])?;
    }
    Ok(())
}

#[test]
fn admission_policy_vectors() {
    run(
        "admission/unit-cases.json",
        &["container_policy_lookup", "apply_vpa_policy", "capping"],
        |v| match v["kind"].as_str()? {
            "container_policy_lookup" => Some(policy_lookup(v)),
            "apply_vpa_policy" => Some(apply_policy(v)),
            "capping" => policy_capping(v),
            _ => None,
        },
    );
}

fn policy_lookup(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let policy = PodResourcePolicy {
        container_policies: parse(&input["containerPolicies"])?,
    };
    let name = input["containerName"].as_str().unwrap_or_default();
    let found = container_policy(Some(&policy), name);
    if input["function"] == "controlledValues" {
        let ours = controlled_values(found).to_string();
        return check(v["expected"]["controlledValues"] == ours.as_str(), || {
            format!("got {ours}")
        });
    }
    let expected: Option<ContainerResourcePolicy> = parse(&v["expected"]["policy"])?;
    check(found == expected.as_ref(), || format!("got {found:?}"))
}

fn apply_policy(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let rec: Option<RecommendedPodResources> = parse(&input["recommendation"])?;
    let policy: Option<PodResourcePolicy> = parse(&input["resourcePolicy"])?;
    let global: Option<ResourceList> = parse(&input["globalMaxAllowed"])?;
    let before = policy.clone();
    let out = apply_vpa_policy(rec.as_ref(), policy.as_ref(), global.as_ref())
        .map_err(|e| e.to_string())?;
    check(before == policy, || "input policy was modified".into())?;
    same_recommendation(out.as_ref(), &v["expected"]["recommendation"])
}

/// The policy part of upstream's recommendation processor: vectors without LimitRange bounds.
/// Vectors exercising LimitRanges belong to the admission crate's processor.
fn policy_capping(v: &Value) -> Option<Result<(), String>> {
    let input = &v["input"];
    let empty = |lr: &Value| lr.is_null() || lr.as_object().is_some_and(|o| o.is_empty());
    if !empty(&input["containerLimitRange"]) || !empty(&input["podLimitRange"]) {
        return None;
    }
    Some(policy_capping_case(v))
}

fn policy_capping_case(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let expected = &v["expected"];
    let pod: Option<Pod> = parse(&input["pod"])?;
    let vpa: Option<VerticalPodAutoscaler> = object(&input["vpa"])?;
    let (Some(pod), Some(vpa)) = (pod, vpa) else {
        return check(expected["error"] == true, || {
            "nil pod or VPA must be an error".into()
        });
    };
    let Some(recommendation) = vpa.status.as_ref().and_then(|s| s.recommendation.as_ref()) else {
        return check(expected["recommendation"].is_null(), || {
            "expected a recommendation".into()
        });
    };
    let policy = vpa.spec.resource_policy.as_ref();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut annotations: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rec in recommendation.container_recommendations.iter().flatten() {
        let name = rec.container_name.clone().unwrap_or_default();
        let Some(container) = containers.iter().find(|c| c.name == name) else {
            continue;
        };
        // Current limits come from the container status when it reports resources, else from the spec.
        let limits = statuses
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.resources.as_ref())
            .map(|r| r.limits.clone())
            .unwrap_or_else(|| {
                container
                    .resources
                    .as_ref()
                    .map(|r| r.limits.clone())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let cp = container_policy(policy, &name);
        let (min, max) = (
            cp.and_then(|p| p.min_allowed.as_ref()),
            cp.and_then(|p| p.max_allowed.as_ref()),
        );
        let requests_only = controlled_values(cp) == ControlledValues::RequestsOnly;
        let mut capped = rec.clone();
        let mut notes = cap_to_policy(&mut capped.target, min, max).map_err(|e| e.to_string())?;
        if requests_only {
            notes.extend(cap_to_limits(&mut capped.target, &limits).map_err(|e| e.to_string())?);
        }
        for bound in [&mut capped.lower_bound, &mut capped.upper_bound]
            .into_iter()
            .flatten()
        {
            cap_to_policy(bound, min, max).map_err(|e| e.to_string())?;
            if requests_only {
                cap_to_limits(bound, &limits).map_err(|e| e.to_string())?;
            }
        }
        if !notes.is_empty() {
            annotations.insert(name, notes);
        }
        out.push(capped);
    }
    let ours = RecommendedPodResources {
        container_recommendations: Some(out),
    };
    same_recommendation(Some(&ours), &expected["recommendation"])?;
    let as_set = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    if let Some(map) = expected["annotations"].as_object() {
        let theirs: BTreeMap<String, BTreeSet<String>> =
            map.iter().map(|(k, v)| (k.clone(), as_set(v))).collect();
        let ours: BTreeMap<String, BTreeSet<String>> = annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
            .collect();
        check(ours == theirs, || {
            format!("annotations {ours:?} != {theirs:?}")
        })?;
    }
    if let Some(map) = expected["annotations_contain"].as_object() {
        for (container, wanted) in map {
            let have: BTreeSet<String> = annotations
                .get(container)
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            check(as_set(wanted).is_subset(&have), || {
                format!("{container}: {have:?} lacks {wanted}")
            })?;
        }
    }
    for container in expected["annotations_absent_for"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = container.as_str().unwrap_or_default();
        check(!annotations.contains_key(name), || {
            format!("{name} has annotations {annotations:?}")
        })?;
    }
    Ok(())
}

#[test]
fn admission_validation_vectors() {
    run(
        "admission/unit-cases.json",
        &["vpa_validation", "validation_option"],
        |v| {
            Some(match v["kind"].as_str()? {
                "vpa_validation" => validation_case(v),
                _ => option_case(v),
            })
        },
    );
}

fn validation_case(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let expected = &v["expected"];
    let spec: VerticalPodAutoscalerSpec = parse(&input["spec"])?;
    let o = &input["options"];
    const OPTIONS: [&str; 5] = [
        "AllowCPUStartupBoost",
        "AllowPerVPAConfig",
        "AllowInPlace",
        "ExistingControlledResources",
        "IsVPACreate",
    ];
    if let Some(k) = o
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !OPTIONS.contains(&k.as_str()))
    {
        return Err(format!("input.options.{k}: not a validation option"));
    }
    let options = ValidationOptions {
        allow_cpu_startup_boost: o["AllowCPUStartupBoost"] == true,
        allow_per_vpa_config: o["AllowPerVPAConfig"] == true,
        allow_in_place: o["AllowInPlace"] == true,
        existing_controlled_resources: parse(&o["ExistingControlledResources"])?,
        is_vpa_create: o["IsVPACreate"] == true,
    };
    let result = validate(&spec, &options);
    let messages: Vec<String> = result.errors.iter().map(|e| e.to_string()).collect();
    check(
        expected["error_count"] == json!(result.errors.len()),
        || {
            format!(
                "{} errors {messages:?}, expected {}",
                result.errors.len(),
                expected["error_count"]
            )
        },
    )?;
    if let Some(first) = expected["error"].as_str() {
        check(messages.first().map(String::as_str) == Some(first), || {
            format!("got {messages:?}")
        })?;
    }
    if let Some(allowed) = expected["error_fields_subset_of"].as_array() {
        for e in &result.errors {
            check(allowed.iter().any(|f| f == e.field.as_str()), || {
                format!("unexpected field {}", e.field)
            })?;
        }
    }
    if let Some(warnings) = expected["warnings"].as_array() {
        let wanted: Vec<&str> = warnings.iter().filter_map(Value::as_str).collect();
        check(result.warnings == wanted, || {
            format!("warnings {:?}", result.warnings)
        })?;
    }
    Ok(())
}

fn option_case(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let gate = input["featureGate"] == true;
    let old: Option<VerticalPodAutoscaler> = object(&input["oldObject"])?;
    let option = input["option"].as_str().unwrap_or_default();
    let gates = FeatureGates {
        cpu_startup_boost: gate && option == "AllowCPUStartupBoost",
        per_vpa_config: gate && option == "AllowPerVPAConfig",
        in_place: gate && option == "AllowInPlace",
    };
    let options = ValidationOptions::new(gates, old.as_ref().map(|o| &o.spec));
    let value = match option {
        "AllowCPUStartupBoost" => options.allow_cpu_startup_boost,
        "AllowPerVPAConfig" => options.allow_per_vpa_config,
        "AllowInPlace" => options.allow_in_place,
        other => return Err(format!("unknown option {other}")),
    };
    check(v["expected"]["value"] == value, || format!("got {value}"))
}

/// Recommender vectors use snake_case keys; the API uses camelCase.
fn camel_keys(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let mut out = String::new();
                    let mut upper = false;
                    for c in k.chars() {
                        if c == '_' {
                            upper = true;
                        } else if upper {
                            out.extend(c.to_uppercase());
                            upper = false;
                        } else {
                            out.push(c);
                        }
                    }
                    (out, camel_keys(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(camel_keys).collect()),
        other => other.clone(),
    }
}

/// Recommender vectors give cpu in millicores and memory in bytes as integers.
fn integer_resources(v: &Value) -> Result<Option<ResourceList>, String> {
    let Some(map) = v.as_object() else {
        return Ok(None);
    };
    map.iter()
        .map(|(r, n)| {
            let n = n
                .as_i64()
                .ok_or_else(|| format!("{r}: {n} is not an integer"))?;
            Ok((r.clone(), quantity::from_amount(r, n)))
        })
        .collect::<Result<ResourceList, String>>()
        .map(Some)
}

fn integer_amounts(list: Option<&ResourceList>) -> Value {
    let map: serde_json::Map<String, Value> = list
        .into_iter()
        .flatten()
        .map(|(r, q)| (r.clone(), json!(quantity::amount(r, q).ok())))
        .collect();
    if map.is_empty() {
        Value::Null
    } else {
        Value::Object(map)
    }
}

#[test]
fn recommender_policy_vectors() {
    run(
        "recommender/unit-vectors.json",
        &["container_policy", "capping"],
        |v| {
            Some(match v["kind"].as_str()? {
                "container_policy" => recommender_policy_case(v),
                _ => recommender_capping_case(v),
            })
        },
    );
}

fn recommender_policy_case(v: &Value) -> Result<(), String> {
    let input = camel_keys(&v["input"]);
    let expected = &v["expected"];
    if let Some(containers) = input["containers"].as_array() {
        let policy = PodResourcePolicy {
            container_policies: parse(&input["containerPolicies"])?,
        };
        for c in containers {
            let name = c.as_str().unwrap_or_default();
            let p = container_policy(Some(&policy), name);
            check(
                expected["scaling_mode"][name] == scaling_mode(p).as_str(),
                || format!("{name}: mode"),
            )?;
            check(
                expected["needs_recommendation"][name] == needs_recommendation(p),
                || format!("{name}: needs recommendation"),
            )?;
        }
        return Ok(());
    }
    let policy: Option<ContainerResourcePolicy> = parse(&input["containerPolicy"])?;
    let p = policy.as_ref();
    let gate = input["featureGatePerVPAConfig"] == true;
    if let Some(mode) = expected.get("scaling_mode") {
        return check(mode == scaling_mode(p).as_str(), || {
            format!("mode {}", scaling_mode(p))
        });
    }
    if let Some(resources) = expected.get("controlled_resources") {
        let ours = controlled_resources(p);
        return check(*resources == json!(ours), || format!("controlled {ours:?}"));
    }
    if let Some(seconds) = expected.get("memory_aggregation_interval_s") {
        let default = input["defaultMemoryAggregationIntervalS"]
            .as_i64()
            .unwrap_or_default();
        let ours = memory_aggregation_interval_seconds(p, gate, default);
        return check(*seconds == ours, || format!("interval {ours}"));
    }
    if let Some(count) = expected.get("memory_aggregation_interval_count") {
        let default = input["defaultMemoryAggregationIntervalCount"]
            .as_i64()
            .unwrap_or_default();
        let ours = memory_aggregation_interval_count(p, gate, default);
        return check(*count == ours, || format!("count {ours}"));
    }
    Err(format!("unrecognised expectation {expected}"))
}

fn recommender_capping_case(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let expected = &v["expected"];
    let to_rec = |list: &Value| -> Result<Option<RecommendedPodResources>, String> {
        let Some(items) = list.as_array() else {
            return Ok(None);
        };
        let mut recs = Vec::new();
        for item in items {
            recs.push(tailor_crds::RecommendedContainerResources {
                container_name: item["container"].as_str().map(str::to_owned),
                target: integer_resources(&item["target"])?.unwrap_or_default(),
                lower_bound: integer_resources(&item["lower_bound"])?,
                upper_bound: integer_resources(&item["upper_bound"])?,
                uncapped_target: integer_resources(&item["uncapped_target"])?,
            });
        }
        Ok(Some(RecommendedPodResources {
            container_recommendations: Some(recs),
        }))
    };
    let rec = to_rec(&input["recommendation"])?;
    let mut policy: Option<PodResourcePolicy> = None;
    if let Some(list) = input["resource_policy"]["container_policies"].as_array() {
        let mut policies = Vec::new();
        for p in list {
            policies.push(ContainerResourcePolicy {
                container_name: p["container_name"].as_str().map(str::to_owned),
                min_allowed: integer_resources(&p["min_allowed"])?,
                max_allowed: integer_resources(&p["max_allowed"])?,
                ..ContainerResourcePolicy::default()
            });
        }
        policy = Some(PodResourcePolicy {
            container_policies: Some(policies),
        });
    }
    let global = integer_resources(&input["global_max_allowed"])?;
    let out = apply_vpa_policy(rec.as_ref(), policy.as_ref(), global.as_ref())
        .map_err(|e| e.to_string())?;
    let ours: Value = match &out {
        None => Value::Null,
        Some(r) => Value::Array(
            r.container_recommendations
                .iter()
                .flatten()
                .map(|c| {
                    let mut obj = json!({
                        "container": c.container_name,
                        "target": integer_amounts(Some(&c.target)),
                        "lower_bound": integer_amounts(c.lower_bound.as_ref()),
                        "upper_bound": integer_amounts(c.upper_bound.as_ref()),
                    });
                    if c.uncapped_target.is_some() {
                        obj["uncapped_target"] = integer_amounts(c.uncapped_target.as_ref());
                    }
                    obj
                })
                .collect(),
        ),
    };
    check(ours == expected["recommendation"], || format!("got {ours}"))?;
    if let Some(wanted) = expected["annotations"].as_object() {
        for c in rec
            .iter()
            .flat_map(|r| r.container_recommendations.iter().flatten())
        {
            let name = c.container_name.clone().unwrap_or_default();
            let cp = container_policy(policy.as_ref(), &name);
            let mut target: ResourceList = c.target.clone();
            let notes = cap_to_policy(
                &mut target,
                cp.and_then(|p| p.min_allowed.as_ref()),
                cp.and_then(|p| p.max_allowed.as_ref()),
            )
            .map_err(|e| e.to_string())?;
            let theirs: BTreeSet<&str> = wanted[&name]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let ours: BTreeSet<&str> = notes.iter().map(String::as_str).collect();
            check(ours == theirs, || {
                format!("annotations {ours:?} != {theirs:?}")
            })?;
        }
    }
    Ok(())
}

#[test]
fn quantities_in_vectors_parse() {
    // Every quantity the policy vectors use must parse through the exact quantity parser.
    for q in ["31Mi", "50000Mi", "187500u", "1Gi", "500M", "2.5", "100m"] {
        assert!(quantity::Amount::parse(&Quantity(q.into())).is_ok(), "{q}");
    }
}

/// Each runner here: a case or input field it does not read fails the case instead of being ignored.
#[test]
fn an_unread_field_fails_the_case() {
    for (file, kind, _) in INPUT_FIELDS {
        let mut v = load(file)
            .into_iter()
            .find(|v| v["kind"] == *kind)
            .unwrap_or_else(|| panic!("no {kind} in {file}"));
        assert_eq!(unread_field(file, &v), None, "{}", v["id"]);
        v["input"]["bogus"] = json!(1);
        assert_eq!(
            unread_field(file, &v).as_deref(),
            Some(format!("input.bogus: not read by the {kind} runner").as_str())
        );
        v["input"].as_object_mut().unwrap().remove("bogus");
        v["expectedd"] = json!({});
        assert_eq!(
            unread_field(file, &v).as_deref(),
            Some("expectedd: unknown case field")
        );
    }
    let mut v = load("admission/unit-cases.json")
        .into_iter()
        .find(|v| v["kind"] == "vpa_validation")
        .unwrap();
    v["input"]["options"]["AllowEverything"] = json!(true);
    let e = validation_case(&v).unwrap_err();
    assert!(e.contains("input.options.AllowEverything"), "{e}");
}
