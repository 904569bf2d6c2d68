//! The library side of `tailor patch` (docs/design/principles.md §4).
//!
//! - [`preview_patch`]: a pod, a VPA and optional LimitRanges (YAML or JSON text) → the JSON Patch the webhook
//!   would return and the patched pod.
//! - [`run_cases`]: admission cases (docs/design/trace-format.md §2, one object or an array) → one
//!   `{"id","patches","allowed"}` per case, matching the pod to the VPA the way the webhook does with the
//!   case's `topController` and `selector` standing in for the API server.
//!
//! Inputs are file contents; errors name the file and the field.

use json_patch::Patch;
use k8s_openapi::api::core::v1::{LimitRange, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tailor_crds::VerticalPodAutoscaler;

use crate::pod::patch_pod;
use tailor_core::sizing::PatchOptions;
use tailor_kube::index::{self, Index};
use tailor_kube::manifests::{self, Object};

/// One input file: its name (for messages) and its contents.
#[derive(Clone, Copy, Debug)]
pub struct InputFile<'a> {
    /// Path or name shown in errors.
    pub name: &'a str,
    /// The text.
    pub content: &'a str,
}

/// Bad input for `tailor patch` (exit code 2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PreviewError {
    /// The file is not valid JSON/YAML or does not decode into the expected object.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// What went wrong (with line/column or field where known).
        message: String,
    },
    /// A manifest file cannot be read (the message names the file and the document).
    #[error("{0}")]
    Read(String),
    /// A field has a value that cannot be used.
    #[error("{file}: {field}: {message}")]
    Field {
        /// The file.
        file: String,
        /// The field path, e.g. `[3].pod`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn looks_like_json(text: &str) -> bool {
    matches!(
        text.trim_start().as_bytes().first(),
        Some(b'{') | Some(b'[')
    )
}

/// Parses a whole admission case file (JSON or YAML) into a JSON value.
fn parse_value(file: &InputFile<'_>) -> Result<Value, PreviewError> {
    let err = |message: String| PreviewError::Parse {
        file: file.name.to_owned(),
        message,
    };
    if looks_like_json(file.content) {
        serde_json::from_str(file.content).map_err(|e| err(e.to_string()))
    } else {
        serde_saphyr::from_str(file.content).map_err(|e| err(e.to_string()))
    }
}

/// Every object of a manifest file, whole, as the shared reader gives them ([`tailor_kube::manifests`]:
/// YAML or JSON, `List`s and arrays flattened). `tailor patch` reads a pod, a VPA and LimitRanges: small
/// files whose objects it prints.
fn parse_documents(file: &InputFile<'_>) -> Result<Vec<Value>, PreviewError> {
    let mut out = Vec::new();
    manifests::read_text(file.name, file.content, |_, object: Object| {
        out.push(object.value)
    })
    .map_err(|e| PreviewError::Read(e.to_string()))?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(file: &str, field: &str, value: Value) -> Result<T, PreviewError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path.is_empty() || path == "." {
            field.to_owned()
        } else {
            format!("{field}.{path}")
        };
        PreviewError::Field {
            file: file.to_owned(),
            field,
            message: e.into_inner().to_string(),
        }
    })
}

fn set_default(value: &mut Value, pointer: &[&str], default: &str) {
    let mut cur = value;
    for (i, key) in pointer.iter().enumerate() {
        let Some(obj) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == pointer.len() {
            let slot = obj.entry((*key).to_owned()).or_insert(Value::Null);
            if slot.as_str().is_none_or(str::is_empty) {
                *slot = Value::String(default.to_owned());
            }
            return;
        }
        cur = obj.entry((*key).to_owned()).or_insert_with(|| json!({}));
    }
}

fn pod_namespace(pod: &Value) -> String {
    pod.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned()
}

/// Decodes the pod, VPA and LimitRanges with the defaults of docs/design/trace-format.md §2.1.
fn decode_objects(
    file: &str,
    prefix: &str,
    mut pod: Value,
    mut vpa: Value,
    limit_ranges: Vec<Value>,
) -> Result<(Pod, VerticalPodAutoscaler, Vec<LimitRange>), PreviewError> {
    let namespace = pod_namespace(&pod);
    set_default(&mut pod, &["metadata", "namespace"], &namespace);
    set_default(&mut vpa, &["metadata", "namespace"], &namespace);
    set_default(&mut vpa, &["metadata", "name"], "vpa");
    let pod: Pod = decode(file, &format!("{prefix}pod"), pod)?;
    let vpa: VerticalPodAutoscaler = decode(file, &format!("{prefix}vpa"), vpa)?;
    let mut lrs = Vec::new();
    for (i, mut lr) in limit_ranges.into_iter().enumerate() {
        set_default(&mut lr, &["metadata", "namespace"], &namespace);
        lrs.push(decode(file, &format!("{prefix}limitRange[{i}]"), lr)?);
    }
    Ok((pod, vpa, lrs))
}

fn apply(pod: &Pod, patch: &Patch, file: &str) -> Result<Value, PreviewError> {
    let mut doc = serde_json::to_value(pod).map_err(|e| PreviewError::Parse {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    json_patch::patch(&mut doc, &patch.0).map_err(|e| PreviewError::Field {
        file: file.to_owned(),
        field: "pod".into(),
        message: format!("patch does not apply: {e}"),
    })?;
    Ok(doc)
}

/// The pod in a file: a `Pod` document, or else the pod template of the first workload (`spec.template`,
/// or a CronJob's `spec.jobTemplate.spec.template`), with the workload's namespace.
fn pick_pod(file: &InputFile<'_>) -> Result<Value, PreviewError> {
    let docs = parse_documents(file)?;
    if let Some(pod) = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("Pod"))
    {
        return Ok(pod.clone());
    }
    if docs.len() == 1 && docs[0].get("kind").is_none() {
        return Ok(docs[0].clone());
    }
    for doc in &docs {
        let template = doc
            .pointer("/spec/template")
            .or_else(|| doc.pointer("/spec/jobTemplate/spec/template"));
        if let Some(template) = template {
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod"});
            pod["metadata"] = template
                .get("metadata")
                .cloned()
                .unwrap_or_else(|| json!({}));
            pod["spec"] = template.get("spec").cloned().unwrap_or_else(|| json!({}));
            if let Some(ns) = doc.pointer("/metadata/namespace") {
                pod["metadata"]["namespace"] = ns.clone();
            }
            return Ok(pod);
        }
    }
    Err(PreviewError::Parse {
        file: file.name.to_owned(),
        message: "no Pod or workload with a pod template in this file".into(),
    })
}

/// The VPA in a file: the first `VerticalPodAutoscaler` document (or the only document).
fn pick_vpa(file: &InputFile<'_>) -> Result<Value, PreviewError> {
    let docs = parse_documents(file)?;
    if let Some(vpa) = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("VerticalPodAutoscaler"))
    {
        return Ok(vpa.clone());
    }
    match docs.as_slice() {
        [only] => Ok(only.clone()),
        _ => Err(PreviewError::Parse {
            file: file.name.to_owned(),
            message: "no VerticalPodAutoscaler in this file".into(),
        }),
    }
}

/// The recommender's sizing-within-the-cluster decisions in the VPA's status (docs/decisions/node-fit.md,
/// docs/decisions/hpa-coherence.md), which the webhook
/// follows like any recommendation: a resource left to an HPA (its requests are not patched), a target
/// capped so the pod fits a node. One note each; plus the rules the spec breaks and a limit-policy
/// annotation that does not parse.
pub fn sizing_notes(vpa: &VerticalPodAutoscaler) -> Vec<String> {
    use tailor_crds::condition::{CAPPED_TO_NODE_SIZE, RESOURCES_LEFT_TO_HPA};
    vpa.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| {
            (c.type_ == RESOURCES_LEFT_TO_HPA || c.type_ == CAPPED_TO_NODE_SIZE)
                && c.status == "True"
        })
        .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or_default()))
        .chain(invalid_spec_note(vpa))
        .chain(limit_policy_note(vpa))
        .collect()
}

/// The webhook's `LimitPolicyInvalid` warning, when the VPA's limit-policy annotation does not parse
/// (docs/limit-policy.md): limits then keep their ratio.
fn limit_policy_note(vpa: &VerticalPodAutoscaler) -> Option<String> {
    tailor_core::sizing::LimitPolicy::of(vpa).err().map(|e| {
        format!(
            "{}: {e}; pods keep their limit/request ratio until it is fixed",
            crate::vpa_events::LIMIT_POLICY_INVALID
        )
    })
}

/// The rules the VPA breaks, by the same function the webhook refuses it with and the recommender reports it
/// with (`ConfigUnsupported`), in the webhook's words: one note naming each field.
fn invalid_spec_note(vpa: &VerticalPodAutoscaler) -> Option<String> {
    let errors = tailor_core::validation::validate_spec(&vpa.spec).errors;
    let name = vpa.metadata.name.as_deref().unwrap_or_default();
    (!errors.is_empty()).then(|| {
        let text = tailor_core::validation::invalid_message("VerticalPodAutoscaler", name, &errors);
        format!("InvalidSpec: {text}")
    })
}

/// `tailor patch --pod --vpa [--limit-range]`: `{"patch": [...], "pod": {...}}` (plus `"skipped"` when the
/// pod was left alone, `"error"` when the recommendation could not be applied, and `"notes"` from
/// [`sizing_notes`]). The pod file may hold a
/// Pod or a workload (its pod template is used); the VPA file may hold other documents too; LimitRange
/// files may hold several LimitRanges (other kinds are ignored).
pub fn preview_patch(
    pod: InputFile<'_>,
    vpa: InputFile<'_>,
    limit_ranges: &[InputFile<'_>],
    options: &PatchOptions,
) -> Result<Value, PreviewError> {
    let mut pod_value = pick_pod(&pod)?;
    let namespace = pod_namespace(&pod_value);
    set_default(&mut pod_value, &["metadata", "namespace"], &namespace);
    let pod_obj: Pod = decode(pod.name, "pod", pod_value)?;
    let mut vpa_value = pick_vpa(&vpa)?;
    set_default(&mut vpa_value, &["metadata", "namespace"], &namespace);
    set_default(&mut vpa_value, &["metadata", "name"], "vpa");
    let vpa_obj: VerticalPodAutoscaler = decode(vpa.name, "vpa", vpa_value)?;
    let mut lrs = Vec::new();
    for file in limit_ranges {
        for (i, mut doc) in parse_documents(file)?.into_iter().enumerate() {
            let kind = doc.get("kind").and_then(Value::as_str);
            if kind.is_some_and(|k| k != "LimitRange") {
                continue;
            }
            set_default(&mut doc, &["metadata", "namespace"], &namespace);
            lrs.push(decode::<LimitRange>(file.name, &format!("[{i}]"), doc)?);
        }
    }
    let mut out = serde_json::Map::new();
    let notes = sizing_notes(&vpa_obj);
    if !notes.is_empty() {
        out.insert("notes".into(), json!(notes));
    }
    match patch_pod(&pod_obj, &vpa_obj, &lrs, options) {
        Ok(result) => {
            let patched = apply(&pod_obj, &result.patch, pod.name)?;
            out.insert(
                "patch".into(),
                serde_json::to_value(&result.patch).unwrap_or_default(),
            );
            out.insert("pod".into(), patched);
            if let Some(reason) = result.skipped {
                out.insert("skipped".into(), Value::String(format!("{reason:?}")));
            }
        }
        Err(e) => {
            out.insert("patch".into(), json!([]));
            out.insert(
                "pod".into(),
                serde_json::to_value(&pod_obj).unwrap_or_default(),
            );
            out.insert("error".into(), Value::String(e.to_string()));
        }
    }
    Ok(Value::Object(out))
}

/// Runs one admission case (already parsed); `index` is its position for messages (`None` for a single
/// case).
pub fn run_case(
    file: &str,
    position: Option<usize>,
    case: &Value,
    options: &PatchOptions,
) -> Result<Value, PreviewError> {
    let prefix = position.map(|i| format!("[{i}].")).unwrap_or_default();
    let field_err = |field: &str, message: &str| PreviewError::Field {
        file: file.to_owned(),
        field: format!("{prefix}{field}"),
        message: message.to_owned(),
    };
    let obj = case
        .as_object()
        .ok_or_else(|| field_err("", "an admission case must be an object"))?;
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    let pod = obj
        .get("pod")
        .cloned()
        .ok_or_else(|| field_err("pod", "missing"))?;
    let vpa = obj
        .get("vpa")
        .cloned()
        .ok_or_else(|| field_err("vpa", "missing"))?;
    let lrs = match obj.get("limitRange") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => vec![other.clone()],
    };
    let (pod, vpa, lrs) = decode_objects(file, &prefix, pod, vpa, lrs)?;
    let selector: Option<LabelSelector> = match obj.get("selector") {
        None | Some(Value::Null) => None,
        Some(v) => Some(decode(file, &format!("{prefix}selector"), v.clone())?),
    };
    let top: Option<(String, String)> = match obj.get("topController") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let kind = v.get("kind").and_then(Value::as_str);
            let name = v.get("name").and_then(Value::as_str);
            match (kind, name) {
                (Some(k), Some(n)) => Some((k.to_owned(), n.to_owned())),
                _ => return Err(field_err("topController", "needs kind and name")),
            }
        }
    };

    let patches = match case_patch(&pod, &vpa, &lrs, top, selector.as_ref(), options) {
        Ok(patch) => serde_json::to_value(&patch).unwrap_or_else(|_| json!([])),
        Err(_) => json!([]),
    };
    Ok(json!({"id": id, "patches": patches, "allowed": true}))
}

/// Matches like the webhook (the case's `topController` and `selector` stand in for the API server) and
/// computes the patch; an empty patch when the VPA does not govern the pod.
fn case_patch(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
    lrs: &[LimitRange],
    top: Option<(String, String)>,
    selector: Option<&LabelSelector>,
    options: &PatchOptions,
) -> Result<Patch, String> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    if !index::is_active(vpa) {
        return Ok(Patch(Vec::new()));
    }
    let Some(controller) = Index::pod_controller(pod, &namespace) else {
        return Ok(Patch(Vec::new()));
    };
    let (kind, name) = top.unwrap_or((controller.kind, controller.name));
    let targets = vpa.metadata.namespace.as_deref() == Some(namespace.as_str())
        && vpa
            .spec
            .target_ref
            .as_ref()
            .is_some_and(|t| t.kind == kind && t.name == name);
    if !targets {
        return Ok(Patch(Vec::new()));
    }
    if let Some(selector) = selector {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if !index::selector_matches(selector, &labels).map_err(|e| e.to_string())? {
            return Ok(Patch(Vec::new()));
        }
    }
    patch_pod(pod, vpa, lrs, options)
        .map(|p| p.patch)
        .map_err(|e| e.to_string())
}

/// `tailor patch --case FILE`: a single case gives one result object, an array gives an array.
pub fn run_cases(file: InputFile<'_>, options: &PatchOptions) -> Result<Value, PreviewError> {
    match parse_value(&file)? {
        Value::Array(cases) => cases
            .iter()
            .enumerate()
            .map(|(i, case)| run_case(file.name, Some(i), case, options))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        case => run_case(file.name, None, &case, options),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT_AND_VPA: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          resources:
            requests: {cpu: 100m, memory: 64Mi}
            limits: {cpu: 200m, memory: 128Mi}
---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: demo}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
status:
  recommendation:
    containerRecommendations:
      - containerName: web
        target: {cpu: 250m, memory: 100Mi}
"#;

    const LIMIT_RANGE: &str = r#"
apiVersion: v1
kind: LimitRange
metadata: {name: lr}
spec:
  limits:
    - type: Container
      max: {cpu: 300m}
"#;

    fn file<'a>(name: &'a str, content: &'a str) -> InputFile<'a> {
        InputFile { name, content }
    }

    #[test]
    fn workload_and_vpa_from_one_yaml_file() {
        let f = file("web.yaml", DEPLOYMENT_AND_VPA);
        let lr = file("lr.yaml", LIMIT_RANGE);
        let out = preview_patch(f, f, &[lr], &PatchOptions::default()).unwrap();
        let c = &out["pod"]["spec"]["containers"][0]["resources"];
        // 250m capped so that the limit stays within the LimitRange max: 100m·300m/200m = 150m.
        assert_eq!(c["requests"]["cpu"], "150m");
        assert_eq!(c["limits"]["cpu"], "300m");
        assert_eq!(c["requests"]["memory"], "100Mi");
        assert_eq!(c["limits"]["memory"], "200Mi");
        assert!(out["patch"].as_array().is_some_and(|p| !p.is_empty()));
    }

    #[test]
    fn a_yaml_stream_of_json_documents_loads() {
        let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "demo"},
 "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]}}"#;
        let vpa = r#"{"apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
 "metadata": {"name": "web", "namespace": "demo"}, "spec": {"targetRef": {"kind": "Deployment", "name": "web"}},
 "status": {"recommendation": {"containerRecommendations": [{"containerName": "web", "target": {"cpu": "250m"}}]}}}"#;
        let text = format!("{pod}\n---\n{vpa}\n");
        let f = file("both.yaml", &text);
        let out = preview_patch(f, f, &[], &PatchOptions::default()).unwrap();
        let c = &out["pod"]["spec"]["containers"][0]["resources"];
        assert_eq!(c["requests"]["cpu"], "250m");
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let bad_pod = file(
            "pod.json",
            r#"{"kind": "Pod", "spec": {"containers": [{"name": 3}]}}"#,
        );
        let vpa = file("web.yaml", DEPLOYMENT_AND_VPA);
        let err = preview_patch(bad_pod, vpa, &[], &PatchOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("pod.json: pod.spec.containers[0].name: "),
            "{text}"
        );
        assert!(text.contains("invalid type"), "{text}");
        let err = run_cases(
            file("cases.json", r#"[{"id": "a", "vpa": {}}]"#),
            &PatchOptions::default(),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "cases.json: [0].pod: missing");
        let err = run_cases(file("cases.json", "{"), &PatchOptions::default()).unwrap_err();
        assert!(err.to_string().starts_with("cases.json: "), "{err}");
    }

    #[test]
    fn single_case_and_array() {
        let case = json!({
            "id": "one",
            "pod": {"metadata": {"labels": {"app": "web"}, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": true}]},
                "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "100m"}}}]}},
            "vpa": {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                "spec": {"targetRef": {"kind": "Deployment", "name": "web"}},
                "status": {"recommendation": {"containerRecommendations": [
                    {"containerName": "web", "target": {"cpu": "300m"}}]}}},
            "topController": {"kind": "Deployment", "name": "web"},
            "selector": {"matchLabels": {"app": "web"}}
        });
        let text = case.to_string();
        let single = run_cases(file("c.json", &text), &PatchOptions::default()).unwrap();
        assert_eq!(single["id"], "one");
        assert_eq!(single["allowed"], true);
        let patches = single["patches"].as_array().unwrap();
        assert!(
            patches
                .iter()
                .any(|p| p["path"] == "/spec/containers/0/resources/requests/cpu"
                    && p["value"] == "300m")
        );
        let array = run_cases(
            file("c.json", &format!("[{text}]")),
            &PatchOptions::default(),
        )
        .unwrap();
        assert_eq!(array[0], single);
        // Another top controller: no match, no patch.
        let mut other = case.clone();
        other["topController"]["name"] = json!("api");
        let out = run_cases(file("c.json", &other.to_string()), &PatchOptions::default()).unwrap();
        assert_eq!(out["patches"], json!([]));
    }
}
