//! Conformance with upstream's admission unit vectors (`tests/data/admission/unit-cases.json`).
//!
//! Each vector kind is run against the matching piece of Tailor's API. Kinds that test upstream-only
//! machinery are skipped (listed in DEVIATIONS.md with the reason), as are the vector ids listed there.
//! Quantities are compared by value; upstream annotation keys map to Tailor's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::conformance_support::{apply, deviation_ids, load, same_resources};
use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};
use tailor_admission::pod;
use tailor_core::limit_range_merge;
use tailor_core::quantity::same_value;
use tailor_core::sizing::{self, AssemblyOptions, Field, PatchOptions, Processed};
use tailor_core::validation::{FeatureGates, ValidationOptions, validate};
use tailor_crds::{
    PodResourcePolicy, RecommendedContainerResources, RecommendedPodResources,
    VerticalPodAutoscaler,
};
use tailor_kube::index::{self, ControllerRef, Index, IndexObjects, ScaleInfo, ScaleLookup};

/// Kinds that exercise upstream-only machinery, with the reason (also in DEVIATIONS.md).
const SKIPPED_KINDS: &[(&str, &str)] = &[
    (
        "webhook_registration",
        "Tailor never self-registers; the Helm chart owns the webhook configuration",
    ),
    (
        "webhook_labels",
        "flag parsing for self-registration, which Tailor does not do",
    ),
    (
        "server",
        "upstream HTTP server internals; Tailor's server is tested by part B's server tests",
    ),
    (
        "pod_handler",
        "upstream's pluggable calculator stubs; Tailor has one fixed pipeline (review_pod)",
    ),
    (
        "scale_cpu",
        "an upstream-internal helper; its rule is covered by pod_limitrange and capping vectors",
    ),
];

type Check = Result<(), String>;

fn q(s: &str) -> Quantity {
    Quantity(s.to_owned())
}

/// Fills fields k8s-openapi requires but the vectors omit (container names, status bookkeeping).
fn fix_pod(mut v: Value) -> Value {
    if v.is_null() {
        v = json!({});
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("containers").or_insert_with(|| json!([]));
        for list in ["containers", "initContainers"] {
            for c in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(o) = c.as_object_mut() {
                    o.entry("name").or_insert_with(|| json!(""));
                }
            }
        }
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        for list in ["containerStatuses", "initContainerStatuses"] {
            for c in status
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(o) = c.as_object_mut() {
                    o.entry("name").or_insert_with(|| json!(""));
                    o.entry("image").or_insert_with(|| json!(""));
                    o.entry("imageID").or_insert_with(|| json!(""));
                    o.entry("ready").or_insert_with(|| json!(false));
                    o.entry("restartCount").or_insert_with(|| json!(0));
                }
            }
        }
    }
    v
}

fn pod_of(v: &Value) -> Result<Pod, String> {
    serde_json::from_value(fix_pod(v.clone())).map_err(|e| format!("pod: {e}"))
}

fn vpa_of(v: &Value) -> Result<VerticalPodAutoscaler, String> {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.entry("metadata").or_insert_with(|| json!({}));
        o.entry("spec").or_insert_with(|| json!({}));
        o.entry("apiVersion")
            .or_insert_with(|| json!("autoscaling.tailor.dev/v1"));
        o.entry("kind")
            .or_insert_with(|| json!("VerticalPodAutoscaler"));
    }
    serde_json::from_value(v).map_err(|e| format!("vpa: {e}"))
}

/// A LimitRange item, or `None` for null / an item without min, max or default.
fn item_of(v: Option<&Value>) -> Result<Option<LimitRangeItem>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.entry("type").or_insert_with(|| json!("Container"));
    }
    let item: LimitRangeItem =
        serde_json::from_value(v).map_err(|e| format!("limit range item: {e}"))?;
    let set = |m: &Option<BTreeMap<String, Quantity>>| m.as_ref().is_some_and(|m| !m.is_empty());
    Ok((set(&item.min) || set(&item.max) || set(&item.default)).then_some(item))
}

fn opt_q(v: &Value) -> Option<Quantity> {
    v.as_str().map(q)
}

fn eq_q(a: Option<&Quantity>, b: Option<&Quantity>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same_value(a, b).unwrap_or(false),
        (None, None) => true,
        _ => false,
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// Only cpu and memory of a resource map.
fn cpu_mem(v: Option<&Value>) -> Value {
    let mut out = serde_json::Map::new();
    for k in ["cpu", "memory"] {
        if let Some(x) = v.and_then(|v| v.get(k)) {
            out.insert(k.into(), x.clone());
        }
    }
    Value::Object(out)
}

fn compare_recommendations(expected: &Value, actual: &Value) -> Check {
    let e = expected["containerRecommendations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let a = actual["containerRecommendations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if e.len() != a.len() {
        return Err(format!("recommendations: expected {e:?}, got {a:?}"));
    }
    for er in &e {
        let name = &er["containerName"];
        let ar = a
            .iter()
            .find(|r| &r["containerName"] == name)
            .ok_or_else(|| format!("no recommendation for {name}"))?;
        for field in ["target", "lowerBound", "upperBound", "uncappedTarget"] {
            same_resources(er.get(field), ar.get(field))
                .map_err(|m| format!("{name}.{field}: {m}"))?;
        }
    }
    Ok(())
}

fn annotation_sets(v: &Value) -> BTreeMap<String, BTreeSet<String>> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, list)| {
            let set = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            (k.clone(), set)
        })
        .collect()
}

fn our_annotation_sets(p: &Processed) -> BTreeMap<String, BTreeSet<String>> {
    p.annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
        .collect()
}

// ---------------------------------------------------------------------------------------------------

fn limit_proportion(input: &Value, expected: &Value) -> Check {
    let (limit, note) = sizing::proportional_limit(
        input["resource"].as_str().unwrap_or_default(),
        opt_q(&input["originalLimit"]).as_ref(),
        opt_q(&input["originalRequest"]).as_ref(),
        opt_q(&input["recommendedRequest"]).as_ref(),
        opt_q(&input["defaultLimit"]).as_ref(),
    )
    .map_err(|e| e.to_string())?;
    if !eq_q(limit.as_ref(), opt_q(&expected["limit"]).as_ref()) {
        return Err(format!("limit {limit:?}, expected {}", expected["limit"]));
    }
    if expected["annotation"].as_bool() != Some(note.is_some()) {
        return Err(format!(
            "annotation {note:?}, expected {}",
            expected["annotation"]
        ));
    }
    Ok(())
}

fn recommendation_provider(input: &Value, expected: &Value) -> Check {
    if !input["limitRangeError"].is_null() {
        // DEVIATIONS.md: Tailor reads LimitRanges from an in-memory index; no lister call can fail.
        return Err(
            "input.limitRangeError: a failing LimitRange lister is not reachable in Tailor".into(),
        );
    }
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let item = item_of(input.get("containerLimitRange"))?;
    let options = PatchOptions::default();
    let slots = sizing::slots(&pod, &options);
    let processed = sizing::process_recommendation(&vpa, &slots, item.as_ref(), None)
        .map_err(|e| e.to_string())?;
    let resources = sizing::container_resources(
        &vpa,
        &slots,
        processed.as_ref(),
        item.as_ref(),
        AssemblyOptions::default(),
        &options,
    )
    .map_err(|e| e.to_string())?;
    let expected_containers = expected["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if expected_containers.len() != resources.len() {
        return Err(format!(
            "{} containers, expected {}",
            resources.len(),
            expected_containers.len()
        ));
    }
    let mut ours: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((slot, ec), r) in slots.iter().zip(&expected_containers).zip(&resources) {
        same_resources(
            Some(&cpu_mem(ec.get("requests"))),
            Some(&cpu_mem(Some(&to_value(&r.requests)))),
        )
        .map_err(|m| format!("requests: {m}"))?;
        same_resources(
            Some(&cpu_mem(ec.get("limits"))),
            Some(&cpu_mem(Some(&to_value(&r.limits)))),
        )
        .map_err(|m| format!("limits: {m}"))?;
        if !r.annotations.is_empty() {
            ours.insert(
                slot.container.name.clone(),
                r.annotations.iter().cloned().collect(),
            );
        }
    }
    let theirs = annotation_sets(&expected["annotations"]);
    if ours != theirs {
        return Err(format!("annotations {ours:?}, expected {theirs:?}"));
    }
    Ok(())
}

fn container_resources(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let mut vpa = vpa_of(&json!({}))?;
    vpa.spec.resource_policy =
        serde_json::from_value::<Option<PodResourcePolicy>>(input["resourcePolicy"].clone())
            .map_err(|e| e.to_string())?;
    let recommendation: RecommendedPodResources =
        serde_json::from_value(input["recommendation"].clone()).map_err(|e| e.to_string())?;
    let item = item_of(input.get("containerLimitRange"))?;
    let options = PatchOptions::default();
    let slots = sizing::slots(&pod, &options);
    let processed = Processed {
        recommendation,
        annotations: BTreeMap::new(),
    };
    let assembly = AssemblyOptions {
        add_all: input["addAll"].as_bool().unwrap_or(false),
    };
    let resources = sizing::container_resources(
        &vpa,
        &slots,
        Some(&processed),
        item.as_ref(),
        assembly,
        &options,
    )
    .map_err(|e| e.to_string())?;
    for (i, ec) in expected["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let r = resources.get(i).ok_or("missing container")?;
        same_resources(
            Some(&cpu_mem(ec.get("requests"))),
            Some(&cpu_mem(Some(&to_value(&r.requests)))),
        )
        .map_err(|m| format!("requests: {m}"))?;
        same_resources(
            Some(&cpu_mem(ec.get("limits"))),
            Some(&cpu_mem(Some(&to_value(&r.limits)))),
        )
        .map_err(|m| format!("limits: {m}"))?;
    }
    Ok(())
}

fn capping(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let container_item = item_of(input.get("containerLimitRange"))?;
    let pod_item = item_of(input.get("podLimitRange"))?;
    let options = PatchOptions::default();
    let slots = sizing::slots(&pod, &options);
    let processed =
        sizing::process_recommendation(&vpa, &slots, container_item.as_ref(), pod_item.as_ref());
    let processed = match (processed, expected["error"].as_bool()) {
        (Err(_), Some(true)) => return Ok(()),
        (Err(e), _) => return Err(e.to_string()),
        (Ok(_), Some(true)) => return Err("expected an error".into()),
        (Ok(p), _) => p,
    };
    match (&processed, expected["recommendation"].is_null()) {
        (None, true) => return Ok(()),
        (None, false) => return Err("no recommendation".into()),
        (Some(p), false) => {
            compare_recommendations(&expected["recommendation"], &to_value(&p.recommendation))?
        }
        (Some(p), true) => {
            if p.recommendation
                .container_recommendations
                .as_ref()
                .is_some_and(|r| !r.is_empty())
            {
                return Err("expected no recommendation".into());
            }
        }
    }
    let ours = processed
        .as_ref()
        .map(our_annotation_sets)
        .unwrap_or_default();
    if let Some(exact) = expected.get("annotations").filter(|v| !v.is_null()) {
        let theirs = annotation_sets(exact);
        if ours != theirs {
            return Err(format!("annotations {ours:?}, expected {theirs:?}"));
        }
    }
    for name in expected["annotations_absent_for"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = name.as_str().unwrap_or_default();
        if ours.get(name).is_some_and(|s| !s.is_empty()) {
            return Err(format!(
                "unexpected annotations for {name}: {:?}",
                ours.get(name)
            ));
        }
    }
    for (name, list) in annotation_sets(&expected["annotations_contain"]) {
        let have = ours.get(&name).cloned().unwrap_or_default();
        if !list.is_subset(&have) {
            return Err(format!("annotations for {name}: {have:?} lack {list:?}"));
        }
    }
    Ok(())
}

fn pod_limitrange(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let mut recs: Vec<RecommendedContainerResources> =
        serde_json::from_value(input["recommendations"].clone()).map_err(|e| e.to_string())?;
    let mut item_v = input["limitRange"].clone();
    if let Some(o) = item_v.as_object_mut() {
        o.entry("type").or_insert_with(|| json!("Pod"));
    }
    let item: LimitRangeItem = serde_json::from_value(item_v).map_err(|e| e.to_string())?;
    let field = Field::from_name(input["field"].as_str().unwrap_or_default()).ok_or("field")?;
    let slots = sizing::slots(&pod, &PatchOptions::default());
    sizing::apply_pod_limit_range(
        &mut recs,
        &slots,
        &item,
        input["resource"].as_str().unwrap_or_default(),
        field,
    )
    .map_err(|e| e.to_string())?;
    compare_recommendations(
        &json!({"containerRecommendations": expected["recommendations"]}),
        &json!({"containerRecommendations": to_value(&recs)}),
    )
}

fn apply_vpa_policy(input: &Value, expected: &Value) -> Check {
    let rec: Option<RecommendedPodResources> =
        serde_json::from_value(input["recommendation"].clone()).map_err(|e| e.to_string())?;
    let policy: Option<PodResourcePolicy> =
        serde_json::from_value(input["resourcePolicy"].clone()).map_err(|e| e.to_string())?;
    let global: Option<BTreeMap<String, Quantity>> =
        serde_json::from_value(input["globalMaxAllowed"].clone()).map_err(|e| e.to_string())?;
    let out =
        tailor_core::capping::apply_vpa_policy(rec.as_ref(), policy.as_ref(), global.as_ref())
            .map_err(|e| e.to_string())?;
    match (out, expected["recommendation"].is_null()) {
        (None, true) => Ok(()),
        (Some(r), false) => compare_recommendations(&expected["recommendation"], &to_value(&r)),
        (out, _) => Err(format!("got {out:?}")),
    }
}

/// Maps upstream annotation keys in a JSON pointer to Tailor's.
fn tailor_path(path: &str) -> String {
    path.replace(
        "/metadata/annotations/vpaUpdates",
        "/metadata/annotations/tailor.dev~1updates",
    )
    .replace(
        "/metadata/annotations/vpaObservedContainers",
        "/metadata/annotations/tailor.dev~1observed-containers",
    )
    .replace(
        "/metadata/annotations/vpaCpuStartupBoost~1",
        "/metadata/annotations/cpu-startup-boost.tailor.dev~1",
    )
}

fn patch(input: &Value, expected: &Value) -> Check {
    // Upstream's fake recommendation provider returns these annotations; Tailor's sizing makes its own.
    if input["recommendation_annotations"]
        .as_object()
        .is_some_and(|a| !a.is_empty())
    {
        return Err(
            "input.recommendation_annotations: provider annotations are not modelled".into(),
        );
    }
    let pod = pod_of(&input["pod"])?;
    let vpa = vpa_of(&input["vpa"])?;
    let options = PatchOptions {
        cpu_startup_boost: input["feature_gates"]["CPUStartupBoost"]
            .as_bool()
            .unwrap_or(false),
        max_allowed_cpu_boost: opt_q(&input["max_allowed_cpu_boost"]),
        ..Default::default()
    };
    let slots = sizing::slots(&pod, &options);
    let resources: Vec<sizing::ContainerResources> = input["recommended_container_resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            Ok(sizing::ContainerResources {
                requests: serde_json::from_value(r.get("requests").cloned().unwrap_or(json!({})))
                    .map_err(|e| e.to_string())?,
                limits: serde_json::from_value(r.get("limits").cloned().unwrap_or(json!({})))
                    .map_err(|e| e.to_string())?,
                ..Default::default()
            })
        })
        .collect::<Result<_, String>>()?;
    let pod_level = sizing::pod_level_resources(&pod);
    let result = pod::resource_patches(&vpa, &slots, &resources, &pod_level, &options);
    let (ops, updates) = match (result, expected["error"].as_str()) {
        (Err(e), Some(msg)) => {
            return if e.to_string() == msg {
                Ok(())
            } else {
                Err(format!("error {e}, expected {msg}"))
            };
        }
        (Err(e), None) => return Err(e.to_string()),
        (Ok(_), Some(msg)) => return Err(format!("expected error {msg}")),
        (Ok(r), None) => r,
    };
    let mut expected_ops: Vec<Value> = expected["patches"].as_array().cloned().unwrap_or_default();
    expected_ops.extend(
        expected["first_two_any_order"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    if let Some(first) = expected["third_one_of"].as_array().and_then(|a| a.first()) {
        expected_ops.push(first.clone());
    }
    // Our patch applied to the pod (with an annotations map to hold annotation ops).
    let mut doc = fix_pod(input["pod"].clone());
    doc["metadata"]["annotations"] = json!({});
    let ours = apply(&doc, &to_value(&ops)).map_err(|e| format!("our patch: {e}"))?;
    // Every expected resource value and boost annotation must be in our result.
    let mut expected_value_ops = 0;
    for op in &expected_ops {
        let path = op["path"].as_str().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').collect();
        if let ["", "spec", "containers", i, "resources", field, res] = segments.as_slice() {
            expected_value_ops += 1;
            let got = ours.pointer(&format!("/spec/containers/{i}/resources/{field}/{res}"));
            if !eq_q(
                got.and_then(Value::as_str).map(q).as_ref(),
                opt_q(&op["value"]).as_ref(),
            ) {
                return Err(format!("{path}: got {got:?}, expected {}", op["value"]));
            }
        } else if path.contains("vpaCpuStartupBoost") {
            let got = ours
                .pointer(&tailor_path(path))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let got: Value = serde_json::from_str(got).map_err(|e| format!("{path}: {e}"))?;
            let want: Value = serde_json::from_str(op["value"].as_str().unwrap_or_default())
                .map_err(|e| e.to_string())?;
            if got != want {
                return Err(format!("{path}: got {got}, expected {want}"));
            }
        }
    }
    let our_value_ops = ops
        .iter()
        .filter(|op| {
            let p = to_value(op)["path"].as_str().unwrap_or_default().to_owned();
            p.split('/').count() == 7 && p.starts_with("/spec/containers/")
        })
        .count();
    if our_value_ops != expected_value_ops {
        return Err(format!(
            "{our_value_ops} resource values set, expected {expected_value_ops}"
        ));
    }
    let expects_updates = expected_ops.iter().any(|op| {
        op["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/vpaUpdates"))
    });
    if expects_updates == updates.is_empty() {
        return Err(format!(
            "updates {updates:?}, expected some: {expects_updates}"
        ));
    }
    for (i, after) in expected["resources_after_patch"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let c = ours.pointer(&format!("/spec/containers/{i}/resources"));
        for field in ["requests", "limits"] {
            same_resources(after.get(field), c.and_then(|c| c.get(field)))
                .map_err(|m| format!("container {i} {field} after patch: {m}"))?;
        }
    }
    Ok(())
}

fn observed_containers(input: &Value, expected: &Value) -> Check {
    if let Some(annotation) = input.get("annotation") {
        let parsed = sizing::parse_observed_containers(annotation.as_str().unwrap_or_default());
        return match (parsed, expected["error"].as_bool().unwrap_or(false)) {
            (Err(_), true) => Ok(()),
            (Ok(list), false) if to_value(&list) == expected["containers"] => Ok(()),
            (other, _) => Err(format!("got {other:?}")),
        };
    }
    let pod = pod_of(&input["pod"])?;
    let value = pod::observed_containers_value(&pod);
    if let Some(v) = expected["value"].as_str() {
        return if v == value {
            Ok(())
        } else {
            Err(format!("{value:?} != {v:?}"))
        };
    }
    let want = expected["patches"][0]["value"].as_str().unwrap_or_default();
    if want != value {
        return Err(format!("{value:?} != {want:?}"));
    }
    let op = to_value(&sizing::add_annotation_op(
        sizing::OBSERVED_CONTAINERS_ANNOTATION,
        &value,
    ));
    let want_path = tailor_path(expected["patches"][0]["path"].as_str().unwrap_or_default());
    if op["path"] != Value::String(want_path.clone()) {
        return Err(format!("path {} != {want_path}", op["path"]));
    }
    Ok(())
}

fn annotation_value(input: &Value, expected: &Value) -> Check {
    if let Some(resources) = input.get("containerResources") {
        let r: k8s_openapi::api::core::v1::ResourceRequirements =
            serde_json::from_value(resources.clone()).map_err(|e| e.to_string())?;
        let got: Value = serde_json::from_str(&sizing::boost_annotation_value(Some(&r)))
            .map_err(|e| e.to_string())?;
        let want: Value = serde_json::from_str(expected["value"].as_str().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        return if got == want {
            Ok(())
        } else {
            Err(format!("{got} != {want}"))
        };
    }
    let annotations: BTreeMap<String, String> = input["podAnnotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let key = k.replace(
                "vpaCpuStartupBoost/",
                sizing::STARTUP_BOOST_ANNOTATION_PREFIX,
            );
            (key, v.as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let parsed = sizing::parse_boost_annotation(
        Some(&annotations),
        input["container"].as_str().unwrap_or_default(),
    );
    match (parsed, expected["error"].as_bool().unwrap_or(false)) {
        (Err(_), true) => Ok(()),
        (Ok(None), false) if expected["original"].is_null() => Ok(()),
        (Ok(Some(r)), false) => {
            let r = to_value(&r);
            for field in ["requests", "limits"] {
                same_resources(expected["original"].get(field), r.get(field))?;
            }
            Ok(())
        }
        (other, _) => Err(format!("got {other:?}")),
    }
}

fn patch_util(input: &Value, expected: &Value) -> Check {
    let op = match input["function"].as_str() {
        Some("resource_value") => pod::resource_value_op(
            &format!(
                "/spec/containers/{}",
                input["containerIndex"].as_u64().unwrap_or_default()
            ),
            input["field"].as_str().unwrap_or_default(),
            input["resource"].as_str().unwrap_or_default(),
            &q(input["quantity"].as_str().unwrap_or_default()),
        ),
        Some("add_annotation") => sizing::add_annotation_op(
            input["name"].as_str().unwrap_or_default(),
            input["value"].as_str().unwrap_or_default(),
        ),
        Some("remove_annotation") => {
            sizing::remove_annotation_op(input["name"].as_str().unwrap_or_default())
        }
        other => return Err(format!("unknown function {other:?}")),
    };
    let got = to_value(&op);
    let want = &expected["patch"];
    let same = got["op"] == want["op"]
        && got["path"] == want["path"]
        && got.get("value").unwrap_or(&Value::Null) == want.get("value").unwrap_or(&Value::Null);
    if same {
        Ok(())
    } else {
        Err(format!("{got} != {want}"))
    }
}

fn vpa_validation(input: &Value, expected: &Value) -> Check {
    let spec = vpa_of(&json!({"spec": input["spec"]}))?.spec;
    let o = &input["options"];
    let options = ValidationOptions {
        allow_cpu_startup_boost: o["AllowCPUStartupBoost"].as_bool().unwrap_or(false),
        allow_per_vpa_config: o["AllowPerVPAConfig"].as_bool().unwrap_or(false),
        allow_in_place: o["AllowInPlace"].as_bool().unwrap_or(false),
        existing_controlled_resources: o["ExistingControlledResources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        is_vpa_create: o["IsVPACreate"].as_bool().unwrap_or(false),
    };
    let v = validate(&spec, &options);
    match expected.get("error") {
        Some(Value::String(msg)) => {
            let first = v
                .errors
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            if &first != msg {
                return Err(format!("first error {first:?}, expected {msg:?}"));
            }
        }
        Some(Value::Null) if !v.errors.is_empty() => {
            return Err(format!(
                "errors {:?}",
                v.errors.iter().map(ToString::to_string).collect::<Vec<_>>()
            ));
        }
        _ => {}
    }
    let fields: Vec<&str> = v.errors.iter().map(|e| e.field.as_str()).collect();
    if let Some(derived) = expected["error_fields_derived"].as_array() {
        let want: Vec<&str> = derived.iter().filter_map(Value::as_str).collect();
        if fields != want {
            return Err(format!("error fields {fields:?}, expected {want:?}"));
        }
    }
    if let Some(allowed) = expected["error_fields_subset_of"].as_array() {
        let allowed: BTreeSet<&str> = allowed.iter().filter_map(Value::as_str).collect();
        if let Some(f) = fields.iter().find(|f| !allowed.contains(*f)) {
            return Err(format!("unexpected error field {f}"));
        }
    }
    if let Some(n) = expected["error_count"].as_u64()
        && v.errors.len() as u64 != n
    {
        return Err(format!("{} errors, expected {n}", v.errors.len()));
    }
    if let Some(w) = expected["warnings"].as_array() {
        let want: Vec<&str> = w.iter().filter_map(Value::as_str).collect();
        if v.warnings != want {
            return Err(format!("warnings {:?}, expected {want:?}", v.warnings));
        }
    }
    Ok(())
}

fn validation_option(input: &Value, expected: &Value) -> Check {
    let on = input["featureGate"].as_bool().unwrap_or(false);
    let option = input["option"].as_str().unwrap_or_default();
    let gates = FeatureGates {
        cpu_startup_boost: on && option == "AllowCPUStartupBoost",
        per_vpa_config: on && option == "AllowPerVPAConfig",
        in_place: on && option == "AllowInPlace",
    };
    let old = if input["oldObject"].is_null() {
        None
    } else {
        Some(vpa_of(&input["oldObject"])?)
    };
    let options = ValidationOptions::new(gates, old.as_ref().map(|o| &o.spec));
    let got = match option {
        "AllowCPUStartupBoost" => options.allow_cpu_startup_boost,
        "AllowPerVPAConfig" => options.allow_per_vpa_config,
        "AllowInPlace" => options.allow_in_place,
        other => return Err(format!("unknown option {other}")),
    };
    if Some(got) == expected["value"].as_bool() {
        Ok(())
    } else {
        Err(format!("got {got}"))
    }
}

/// `"app = test"` (labels.Parse equality syntax) → a selector.
fn selector_of(s: &str) -> LabelSelector {
    let labels = s
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().trim_end_matches('=').to_owned(),
                v.trim().trim_start_matches('=').to_owned(),
            )
        })
        .collect();
    LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    }
}

fn stateful_set(
    name: &str,
    namespace: &str,
    selector: Option<&str>,
) -> Result<k8s_openapi::api::apps::v1::StatefulSet, String> {
    let sel = selector.map(selector_of).unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": to_value(&sel), "template": {}, "serviceName": ""}
    }))
    .map_err(|e| e.to_string())
}

fn vpa_matching(input: &Value, expected: &Value) -> Check {
    if let Some(selector) = input["selector"].as_str() {
        let labels: BTreeMap<String, String> =
            serde_json::from_value(input["podLabels"].clone()).map_err(|e| e.to_string())?;
        let matches = input["podNamespace"] == input["vpaNamespace"]
            && index::selector_matches(&selector_of(selector), &labels)
                .map_err(|e| e.to_string())?;
        return if Some(matches) == expected["matches"].as_bool() {
            Ok(())
        } else {
            Err(format!("got {matches}"))
        };
    }
    let pod = pod_of(&input["pod"])?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let fetcher = input["controllerFetcher"].as_str().unwrap_or("identity");
    if !fetcher.starts_with("identity") && !fetcher.starts_with("always returns no controller") {
        return Err(format!(
            "input.controllerFetcher: {fetcher:?} is not modelled (identity, or always no controller)"
        ));
    }
    let mut objects = IndexObjects::default();
    let (vpas, selector): (Vec<Value>, Option<String>) = if let Some(list) =
        input["vpasWithSelectors"].as_array()
    {
        // Each VPA's target selector; the one of the VPA targeting the pod's controller is the target's.
        let owner =
            tailor_core::target::controller_owner(pod.metadata.owner_references.as_ref()).cloned();
        let sel = list
            .iter()
            .find(|v| {
                owner.as_ref().is_some_and(|o| {
                    v["spec"]["targetRef"]["kind"] == Value::String(o.kind.clone())
                        && v["spec"]["targetRef"]["name"] == Value::String(o.name.clone())
                })
            })
            .and_then(|v| v["selector"].as_str().map(str::to_owned));
        (list.clone(), sel)
    } else {
        (
            input["vpas"].as_array().cloned().unwrap_or_default(),
            input["targetSelector"].as_str().map(str::to_owned),
        )
    };
    for v in &vpas {
        objects.vpas.push(vpa_of(v)?);
    }
    // The "identity" controller fetcher: the pod's controller is the topmost, and it exists.
    if !fetcher.starts_with("always returns no controller")
        && let Some(owner) =
            tailor_core::target::controller_owner(pod.metadata.owner_references.as_ref())
        && owner.kind == "StatefulSet"
    {
        objects.stateful_sets.push(
            stateful_set(
                &owner.name,
                &namespace,
                Some(selector.as_deref().unwrap_or("")),
            )
            .map_err(|e| e.to_string())?,
        );
    }
    let index = Index::from_objects(objects);
    let got = index
        .matching_vpa(&pod, &namespace)
        .ok()
        .flatten()
        .and_then(|v| v.metadata.name.clone());
    let want = expected["matchedVpa"].as_str().map(str::to_owned);
    if got == want {
        Ok(())
    } else {
        Err(format!("matched {got:?}, expected {want:?}"))
    }
}

fn parent_controller(input: &Value, expected: &Value) -> Check {
    // The index's own lookup is the identity fetcher (the pod's controller owner; a Node is no controller).
    let fetcher = input["controllerFetcher"].as_str().unwrap_or("identity");
    if !fetcher.starts_with("identity") {
        return Err(format!(
            "input.controllerFetcher: {fetcher:?} is not modelled (only the identity fetcher)"
        ));
    }
    let pod = pod_of(&input["pod"])?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let got = Index::pod_controller(&pod, &ns);
    let got = got.map(|c| json!({"apiVersion": c.api_version, "kind": c.kind, "name": c.name, "namespace": c.namespace}));
    let want = &expected["controller"];
    if got.as_ref().unwrap_or(&Value::Null) == want {
        Ok(())
    } else {
        Err(format!("got {got:?}"))
    }
}

/// The vectors' discovery (`input.discovery`): in `group/version`, the kinds described as having `/scale`
/// answer with one (no owners); the ones whose `/scale` returns NotFound, and every other kind, do not.
struct TestScale {
    api_version: String,
    scalable: BTreeSet<String>,
}

impl TestScale {
    fn of(discovery: &Value) -> Result<Self, String> {
        if discovery.is_null() {
            return Ok(TestScale {
                api_version: String::new(),
                scalable: BTreeSet::new(),
            });
        }
        let fields = discovery
            .as_object()
            .ok_or("input.discovery: not an object")?;
        if let Some(k) = fields
            .keys()
            .find(|k| !["group", "version", "kinds"].contains(&k.as_str()))
        {
            return Err(format!("input.discovery.{k}: unknown field"));
        }
        let mut scalable = BTreeSet::new();
        for (kind, what) in discovery["kinds"].as_object().into_iter().flatten() {
            match what.as_str().unwrap_or_default() {
                w if w.starts_with("has /scale") => {
                    scalable.insert(kind.clone());
                }
                w if w.starts_with("/scale returns NotFound") => {}
                w => {
                    return Err(format!(
                        "input.discovery.kinds.{kind}: {w:?} is not modelled (\"has /scale\" or \"/scale returns NotFound\")"
                    ));
                }
            }
        }
        Ok(TestScale {
            api_version: format!(
                "{}/{}",
                discovery["group"].as_str().unwrap_or_default(),
                discovery["version"].as_str().unwrap_or_default()
            ),
            scalable,
        })
    }
}

impl ScaleLookup for TestScale {
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        _namespace: &str,
        _name: &str,
    ) -> Option<ScaleInfo> {
        (api_version == self.api_version && self.scalable.contains(kind)).then(ScaleInfo::default)
    }
}

fn controller_chain(input: &Value, expected: &Value) -> Check {
    TestScale::of(&input["discovery"])?;
    let Some(start) = input["start"].as_object() else {
        return if expected["topmost"].is_null() {
            Ok(())
        } else {
            Err("no start".into())
        };
    };
    let ns = start
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut objects = IndexObjects::default();
    for o in input["objects"].as_array().into_iter().flatten() {
        let mut meta = json!({"name": o["name"], "namespace": ns});
        if let Some(owner) = o.get("owner") {
            meta["ownerReferences"] = json!([{
                "apiVersion": owner.get("apiVersion").cloned().unwrap_or(json!("apps/v1")),
                "kind": owner["kind"], "name": owner["name"], "uid": "", "controller": true
            }]);
        }
        let spec_sel = json!({"selector": {}, "template": {}});
        let err = |e: serde_json::Error| e.to_string();
        match o["kind"].as_str().unwrap_or_default() {
            "Deployment" => objects
                .deployments
                .push(serde_json::from_value(json!({"metadata": meta, "spec": spec_sel})).map_err(err)?),
            "ReplicaSet" => objects
                .replica_sets
                .push(serde_json::from_value(json!({"metadata": meta, "spec": spec_sel})).map_err(err)?),
            "StatefulSet" => objects.stateful_sets.push(
                serde_json::from_value(json!({"metadata": meta, "spec": {"selector": {}, "template": {}, "serviceName": ""}}))
                    .map_err(err)?,
            ),
            "DaemonSet" => objects
                .daemon_sets
                .push(serde_json::from_value(json!({"metadata": meta, "spec": spec_sel})).map_err(err)?),
            "Job" => objects
                .jobs
                .push(serde_json::from_value(json!({"metadata": meta, "spec": {"template": {}}})).map_err(err)?),
            "CronJob" => objects.cron_jobs.push(
                serde_json::from_value(json!({"metadata": meta, "spec": {"schedule": "", "jobTemplate": {}}})).map_err(err)?,
            ),
            "ReplicationController" => objects
                .replication_controllers
                .push(serde_json::from_value(json!({"metadata": meta, "spec": {}})).map_err(err)?),
            other => return Err(format!("unknown object kind {other}")),
        }
    }
    let index = Index::from_objects(objects)
        .with_scale_lookup(Arc::new(TestScale::of(&input["discovery"])?));
    let start = ControllerRef {
        api_version: start
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        kind: start
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        name: start
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        namespace: ns,
    };
    match (index.topmost_controller(&start), expected["error"].as_str()) {
        (Err(e), Some(msg)) if e.to_string() == msg => Ok(()),
        (Err(e), _) => Err(format!("error {e}, expected {}", expected["error"])),
        (Ok(_), Some(msg)) => Err(format!("expected error {msg}")),
        (Ok(top), None) => {
            let want = &expected["topmost"];
            match top {
                None if want.is_null() => Ok(()),
                Some(t)
                    if want["kind"] == Value::String(t.kind.clone())
                        && want["name"] == Value::String(t.name.clone())
                        && want["namespace"] == Value::String(t.namespace.clone()) =>
                {
                    Ok(())
                }
                other => Err(format!("topmost {other:?}, expected {want}")),
            }
        }
    }
}

fn container_policy_lookup(input: &Value, expected: &Value) -> Check {
    let policy: Option<PodResourcePolicy> =
        serde_json::from_value(json!({"containerPolicies": input["containerPolicies"]}))
            .map_err(|e| e.to_string())?;
    let name = input["containerName"].as_str().unwrap_or_default();
    let found = tailor_core::policy::container_policy(policy.as_ref(), name);
    if input["function"].as_str() == Some("controlledValues") {
        let got = tailor_core::policy::controlled_values(found).to_string();
        return if expected["controlledValues"].as_str() == Some(got.as_str()) {
            Ok(())
        } else {
            Err(got)
        };
    }
    let got = found.map(to_value).unwrap_or(Value::Null);
    if got == expected["policy"] {
        Ok(())
    } else {
        Err(format!("{got} != {}", expected["policy"]))
    }
}

fn limitrange_merge(input: &Value, expected: &Value) -> Check {
    let lrs: Vec<LimitRange> =
        serde_json::from_value(input["limitRanges"].clone()).map_err(|e| e.to_string())?;
    let ns = input["namespace"].as_str().unwrap_or("default");
    let kind = input["type"].as_str().unwrap_or("Container");
    let item = match &input["calculator"] {
        Value::Null => limit_range_merge::merged_item(
            lrs.iter()
                .filter(|lr| lr.metadata.namespace.as_deref() == Some(ns)),
            kind,
        ),
        // Upstream's no-op calculator: never an item.
        c if c == "noop" => None,
        other => return Err(format!("input.calculator: {other} is not modelled")),
    };
    let want = &expected["item"];
    match item {
        None if want.is_null() => Ok(()),
        Some(item) if !want.is_null() => {
            let got = to_value(&item);
            for f in ["min", "max", "default"] {
                same_resources(want.get(f), got.get(f)).map_err(|m| format!("{f}: {m}"))?;
            }
            Ok(())
        }
        other => Err(format!("got {other:?}")),
    }
}

fn container_resources_source(input: &Value, expected: &Value) -> Check {
    let pod = pod_of(&input["pod"])?;
    let init = input["function"].as_str() == Some("initContainers");
    let name = input["name"].as_str().unwrap_or_default();
    // Upstream looks a container up by name; the webhook asks `current_resources` about each container it
    // sizes. A name in neither the spec nor the status is a question the webhook never asks (upstream:
    // nil); a name only in the status is answered from the status, as for a container of that name.
    let in_spec = pod.spec.as_ref().and_then(|s| {
        let list = if init {
            s.init_containers.as_deref().unwrap_or_default()
        } else {
            &s.containers
        };
        list.iter().find(|c| c.name == name).cloned()
    });
    let in_status = pod.status.as_ref().is_some_and(|s| {
        let list = if init {
            &s.init_container_statuses
        } else {
            &s.container_statuses
        };
        list.iter().flatten().any(|c| c.name == name)
    });
    let container = match in_spec {
        Some(c) => Some(c),
        None if in_status => Some(k8s_openapi::api::core::v1::Container {
            name: name.to_owned(),
            ..Default::default()
        }),
        None => None,
    };
    let got = container
        .as_ref()
        .map(|c| sizing::current_resources(&pod, c, init));
    let (requests, limits) = match &got {
        Some(r) => (to_value(&r.requests), to_value(&r.limits)),
        None => (Value::Null, Value::Null),
    };
    for (field, have) in [("requests", &requests), ("limits", &limits)] {
        let want = &expected[field];
        if want.is_null() != have.is_null() {
            return Err(format!("{field}: {have} vs {want}"));
        }
        same_resources(Some(want), Some(have)).map_err(|m| format!("{field}: {m}"))?;
    }
    Ok(())
}

/// LimitRange objects after the API server's defaulting: `default` = `max`, `defaultRequest` = `default`.
fn defaulted_limit_range(item: &Value) -> Result<LimitRange, String> {
    let mut item = item.clone();
    if item["type"] == json!("Container") {
        if item.get("default").is_none()
            && let Some(max) = item.get("max").cloned()
        {
            item["default"] = max;
        }
        if item.get("defaultRequest").is_none()
            && let Some(d) = item.get("default").cloned()
        {
            item["defaultRequest"] = d;
        }
    }
    serde_json::from_value(
        json!({"metadata": {"name": "lr", "namespace": "default"}, "spec": {"limits": [item]}}),
    )
    .map_err(|e| e.to_string())
}

/// The pod as the webhook receives it: requests defaulted from limits, then LimitRanger defaults.
fn admitted_pod(template: &Value, lr: Option<&LimitRange>) -> Result<Value, String> {
    let mut containers = template["containers"].clone();
    let item = lr
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.limits.first())
        .filter(|i| i.type_ == "Container");
    for c in containers.as_array_mut().into_iter().flatten() {
        let res = c
            .as_object_mut()
            .ok_or("container")?
            .entry("resources")
            .or_insert_with(|| json!({}));
        if let Some(limits) = res
            .get("limits")
            .cloned()
            .and_then(|l| l.as_object().cloned())
        {
            let requests = res
                .as_object_mut()
                .ok_or("resources")?
                .entry("requests")
                .or_insert_with(|| json!({}));
            for (k, v) in limits {
                requests
                    .as_object_mut()
                    .ok_or("requests")?
                    .entry(k)
                    .or_insert(v);
            }
        }
        if let Some(item) = item {
            for (field, defaults) in [
                ("limits", &item.default),
                ("requests", &item.default_request),
            ] {
                for (k, v) in defaults.iter().flatten() {
                    let map = res
                        .as_object_mut()
                        .ok_or("resources")?
                        .entry(field)
                        .or_insert_with(|| json!({}));
                    map.as_object_mut()
                        .ok_or("map")?
                        .entry(k.clone())
                        .or_insert(json!(v.0));
                }
            }
        }
    }
    Ok(json!({
        "metadata": {"name": "hamster-pod", "namespace": "default", "labels": template["labels"]},
        "spec": {"containers": containers}
    }))
}

fn ratio(limits: &Value, requests: &Value, r: &str) -> Option<f64> {
    let l = tailor_core::quantity::Amount::parse(&q(limits.get(r)?.as_str()?))
        .ok()?
        .millis();
    let rq = tailor_core::quantity::Amount::parse(&q(requests.get(r)?.as_str()?))
        .ok()?
        .millis();
    let (l, rq): (f64, f64) = (l.to_string().parse().ok()?, rq.to_string().parse().ok()?);
    Some(l / rq)
}

fn e2e_admission(input: &Value, expected: &Value) -> Check {
    let lr = match input.get("limitRange").filter(|v| !v.is_null()) {
        Some(item) => Some(defaulted_limit_range(item)?),
        None => None,
    };
    let pod_json = admitted_pod(&input["podTemplate"], lr.as_ref())?;
    let pod = pod_of(&pod_json)?;
    let mut vpa_json = input["vpa"].clone();
    vpa_json["metadata"]["namespace"] = json!("default");
    let vpa = vpa_of(&vpa_json)?;
    let options = PatchOptions {
        cpu_startup_boost: input["featureGates"]["CPUStartupBoost"]
            .as_bool()
            .unwrap_or(false),
        ..Default::default()
    };
    let patched = if index::is_active(&vpa) {
        let lrs: Vec<LimitRange> = lr.into_iter().collect();
        let result = pod::patch_pod(&pod, &vpa, &lrs, &options).map_err(|e| e.to_string())?;
        apply(&pod_json, &to_value(&result.patch))?
    } else {
        pod_json
    };
    let containers = patched["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for want in expected["containers"].as_array().into_iter().flatten() {
        let c = containers
            .iter()
            .find(|c| c["name"] == want["name"])
            .ok_or_else(|| format!("no container {}", want["name"]))?;
        let requests = c
            .pointer("/resources/requests")
            .cloned()
            .unwrap_or(json!({}));
        let limits = c.pointer("/resources/limits").cloned().unwrap_or(json!({}));
        if let Some(r) = want.get("requests").and_then(Value::as_object) {
            for (k, v) in r {
                if !eq_q(
                    requests.get(k).and_then(Value::as_str).map(q).as_ref(),
                    opt_q(v).as_ref(),
                ) {
                    return Err(format!("{} request {k}: {requests}", want["name"]));
                }
            }
        }
        if let Some(l) = want.get("limits").and_then(Value::as_object) {
            for (k, v) in l {
                if !eq_q(
                    limits.get(k).and_then(Value::as_str).map(q).as_ref(),
                    opt_q(v).as_ref(),
                ) {
                    return Err(format!("{} limit {k}: {limits}", want["name"]));
                }
            }
        }
        if want["requestsEmpty"] == json!(true)
            && requests.as_object().is_some_and(|m| !m.is_empty())
        {
            return Err(format!("requests not empty: {requests}"));
        }
        for (key, at_most) in [("limitsAtMost", true), ("limitsAtLeast", false)] {
            for (k, v) in want
                .get(key)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let have = limits
                    .get(k)
                    .and_then(Value::as_str)
                    .ok_or(format!("no limit {k}"))?;
                let ord = tailor_core::quantity::cmp(&q(have), &q(v.as_str().unwrap_or_default()))
                    .map_err(|e| e.to_string())?;
                let ok = if at_most { ord.is_le() } else { ord.is_ge() };
                if !ok {
                    return Err(format!("limit {k} {have} vs {key} {v}"));
                }
            }
        }
        for (k, v) in want
            .get("limitToRequestRatioApprox")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let got = ratio(&limits, &requests, k).ok_or(format!("no ratio for {k}"))?;
            let want_ratio = v.as_f64().unwrap_or_default();
            if (got - want_ratio).abs() > 0.01 * want_ratio {
                return Err(format!("{k} ratio {got}, expected {want_ratio}"));
            }
        }
    }
    Ok(())
}

fn e2e_vpa_admission(input: &Value, expected: &Value) -> Check {
    let gates = FeatureGates {
        cpu_startup_boost: input["featureGates"]["CPUStartupBoost"]
            .as_bool()
            .unwrap_or(false),
        per_vpa_config: input["featureGates"]["PerVPAConfig"]
            .as_bool()
            .unwrap_or(false),
        in_place: input["featureGates"]["InPlace"].as_bool().unwrap_or(false),
    };
    let mut object = input["vpaJSON"].clone();
    object["apiVersion"] = json!("autoscaling.tailor.dev/v1");
    let name = object["metadata"]["name"].clone();
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "1", "kind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "resource": {"group": "autoscaling.tailor.dev", "version": "v1", "resource": "verticalpodautoscalers"},
            "requestKind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "name": name, "namespace": "default", "operation": "CREATE", "userInfo": {}, "object": object
        }
    });
    let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
    let review = tailor_admission::review::decode(&body).map_err(|e| e.to_string())?;
    let (response, _) = tailor_admission::vpa::review_vpa(&review, gates);
    if Some(response.allowed) != expected["accepted"].as_bool() {
        return Err(format!(
            "allowed {}: {}",
            response.allowed, response.result.message
        ));
    }
    if let Some(exact) = expected["errorExact"].as_str() {
        // Upstream's text with Tailor's group; the API server prefixes the webhook name.
        let want = exact.replace("autoscaling.k8s.io", tailor_crds::GROUP);
        let got = format!(
            "admission webhook \"vpa.k8s.io\" denied the request: {}",
            response.result.message
        );
        if got != want {
            return Err(format!("{got:?} != {want:?}"));
        }
    }
    Ok(())
}

/// The input fields each kind's runner reads; any other field fails the case (it would be ignored).
const INPUT_FIELDS: &[(&str, &[&str])] = &[
    (
        "annotation_value",
        &["container", "containerResources", "podAnnotations"],
    ),
    (
        "apply_vpa_policy",
        &["globalMaxAllowed", "recommendation", "resourcePolicy"],
    ),
    (
        "capping",
        &["containerLimitRange", "pod", "podLimitRange", "vpa"],
    ),
    (
        "container_policy_lookup",
        &["containerName", "containerPolicies", "function"],
    ),
    (
        "container_resources",
        &[
            "addAll",
            "containerLimitRange",
            "pod",
            "recommendation",
            "resourcePolicy",
        ],
    ),
    ("container_resources_source", &["function", "name", "pod"]),
    ("controller_chain", &["discovery", "objects", "start"]),
    (
        "e2e_admission",
        &["featureGates", "limitRange", "podTemplate", "vpa"],
    ),
    ("e2e_vpa_admission", &["featureGates", "vpaJSON"]),
    (
        "limit_proportion",
        &[
            "defaultLimit",
            "originalLimit",
            "originalRequest",
            "recommendedRequest",
            "resource",
        ],
    ),
    (
        "limitrange_merge",
        &["calculator", "limitRanges", "namespace", "type"],
    ),
    ("observed_containers", &["annotation", "pod"]),
    ("parent_controller", &["controllerFetcher", "pod"]),
    (
        "patch",
        &[
            "feature_gates",
            "max_allowed_cpu_boost",
            "pod",
            "recommendation_annotations",
            "recommended_container_resources",
            "vpa",
        ],
    ),
    (
        "patch_util",
        &[
            "containerIndex",
            "field",
            "function",
            "name",
            "quantity",
            "resource",
            "value",
        ],
    ),
    (
        "pod_limitrange",
        &["field", "limitRange", "pod", "recommendations", "resource"],
    ),
    (
        "recommendation_provider",
        &["containerLimitRange", "limitRangeError", "pod", "vpa"],
    ),
    ("validation_option", &["featureGate", "oldObject", "option"]),
    (
        "vpa_matching",
        &[
            "controllerFetcher",
            "pod",
            "podLabels",
            "podNamespace",
            "selector",
            "targetSelector",
            "vpaNamespace",
            "vpas",
            "vpasWithSelectors",
        ],
    ),
    ("vpa_validation", &["options", "spec"]),
];

/// The fields of a case (the vectors' layout).
const CASE_FIELDS: &[&str] = &["id", "kind", "input", "expected", "source", "notes"];

/// Runs one case: a field of the case or of its input that the kind's runner does not read fails it.
/// `None` for a kind without a runner.
fn run_vector(case: &Value) -> Option<Check> {
    let kind = case["kind"].as_str().unwrap_or("?");
    let fields = INPUT_FIELDS.iter().find(|(k, _)| *k == kind)?.1;
    if let Some(k) = case
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !CASE_FIELDS.contains(&k.as_str()))
    {
        return Some(Err(format!("{k}: unknown case field")));
    }
    let Some(input) = case["input"].as_object() else {
        return Some(Err("input: not an object".into()));
    };
    if let Some(k) = input.keys().find(|k| !fields.contains(&k.as_str())) {
        return Some(Err(format!("input.{k}: not read by the {kind} runner")));
    }
    run(kind, &case["input"], &case["expected"])
}

fn run(kind: &str, input: &Value, expected: &Value) -> Option<Check> {
    Some(match kind {
        "limit_proportion" => limit_proportion(input, expected),
        "recommendation_provider" => recommendation_provider(input, expected),
        "container_resources" => container_resources(input, expected),
        "capping" => capping(input, expected),
        "pod_limitrange" => pod_limitrange(input, expected),
        "apply_vpa_policy" => apply_vpa_policy(input, expected),
        "patch" => patch(input, expected),
        "observed_containers" => observed_containers(input, expected),
        "annotation_value" => annotation_value(input, expected),
        "patch_util" => patch_util(input, expected),
        "vpa_validation" => vpa_validation(input, expected),
        "validation_option" => validation_option(input, expected),
        "vpa_matching" => vpa_matching(input, expected),
        "parent_controller" => parent_controller(input, expected),
        "controller_chain" => controller_chain(input, expected),
        "container_policy_lookup" => container_policy_lookup(input, expected),
        "limitrange_merge" => limitrange_merge(input, expected),
        "container_resources_source" => container_resources_source(input, expected),
        "e2e_admission" => e2e_admission(input, expected),
        "e2e_vpa_admission" => e2e_vpa_admission(input, expected),
        _ => return None,
    })
}

#[test]
fn upstream_unit_vectors() {
    let cases = load("admission/unit-cases.json");
    let deviations = deviation_ids();
    let skipped: HashMap<&str, &str> = SKIPPED_KINDS.iter().copied().collect();
    let (mut passed, mut total) = (0usize, 0usize);
    let mut failures = Vec::new();
    let mut unknown = BTreeSet::new();
    for case in &cases {
        let id = case["id"].as_str().unwrap_or("?");
        let kind = case["kind"].as_str().unwrap_or("?");
        if let Some(reason) = skipped.get(kind) {
            assert!(
                deviations.contains(kind),
                "skipped kind {kind} must be listed in DEVIATIONS.md"
            );
            let _ = reason;
            continue;
        }
        if deviations.contains(id) {
            println!("skipped (DEVIATIONS.md): {id}");
            continue;
        }
        let Some(result) = run_vector(case) else {
            unknown.insert(kind.to_owned());
            continue;
        };
        total += 1;
        match result {
            Ok(()) => passed += 1,
            Err(msg) => failures.push(format!("{id} ({kind}): {msg}")),
        }
    }
    tailor_testkit::conformance::report(&format!(
        "conformance: {passed}/{total} (admission unit vectors)"
    ));
    assert!(
        unknown.is_empty(),
        "vector kinds without a runner: {unknown:?}"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The first public case of `kind` whose input has `field`, after `mutate`: it must fail.
fn refused(kind: &str, field: &str, mutate: impl FnOnce(&mut Value)) -> String {
    let mut case = load("admission/unit-cases.json")
        .into_iter()
        .find(|c| c["kind"] == kind && (field.is_empty() || c["input"].get(field).is_some()))
        .unwrap_or_else(|| panic!("no {kind} case with {field}"));
    let id = case["id"].as_str().unwrap().to_owned();
    mutate(&mut case);
    match run_vector(&case) {
        Some(Err(e)) => e,
        other => panic!("{id}: not refused: {other:?}"),
    }
}

/// Every kind with a runner: an input field it does not read, or a case field outside the layout, fails
/// the case instead of being ignored.
#[test]
fn an_unread_field_fails_every_kind() {
    for (kind, _) in INPUT_FIELDS {
        let e = refused(kind, "", |c| c["input"]["bogus"] = json!(1));
        assert_eq!(e, format!("input.bogus: not read by the {kind} runner"));
        let e = refused(kind, "", |c| c["expectedd"] = json!({}));
        assert_eq!(e, "expectedd: unknown case field");
    }
}

/// Inputs naming test doubles or failures the runners do not model fail the case.
#[test]
fn a_value_the_runner_cannot_honour_fails() {
    type Mutation = fn(&mut Value);
    let cases: [(&str, &str, Mutation, &str); 7] = [
        (
            "parent_controller",
            "controllerFetcher",
            |c| c["input"]["controllerFetcher"] = json!("real"),
            "input.controllerFetcher",
        ),
        (
            "vpa_matching",
            "controllerFetcher",
            |c| c["input"]["controllerFetcher"] = json!("real"),
            "input.controllerFetcher",
        ),
        (
            "limitrange_merge",
            "calculator",
            |c| c["input"]["calculator"] = json!("fake"),
            "input.calculator",
        ),
        (
            "patch",
            "recommendation_annotations",
            |c| c["input"]["recommendation_annotations"] = json!({"c": ["a"]}),
            "input.recommendation_annotations",
        ),
        (
            "recommendation_provider",
            "pod",
            |c| c["input"]["limitRangeError"] = json!("boom"),
            "input.limitRangeError",
        ),
        (
            "controller_chain",
            "discovery",
            |c| c["input"]["discovery"]["kinds"]["X"] = json!("sometimes"),
            "input.discovery.kinds.X",
        ),
        (
            "controller_chain",
            "discovery",
            |c| c["input"]["discovery"]["resource"] = json!("x"),
            "input.discovery.resource",
        ),
    ];
    for (kind, field, mutate, wanted) in cases {
        let e = refused(kind, field, mutate);
        assert!(e.contains(wanted), "{kind}: {e}");
    }
}

/// `controller_chain`'s discovery is read: a kind it says has no `/scale` is not a topmost controller.
#[test]
fn controller_chain_reads_its_discovery() {
    let mut case = load("admission/unit-cases.json")
        .into_iter()
        .find(|c| {
            c["kind"] == "controller_chain" && c["expected"]["topmost"]["kind"] == "ScalingResource"
        })
        .unwrap();
    assert_eq!(run_vector(&case), Some(Ok(())));
    case["input"]["discovery"]["kinds"]["ScalingResource"] = json!("/scale returns NotFound");
    assert!(matches!(run_vector(&case), Some(Err(_))));
}
