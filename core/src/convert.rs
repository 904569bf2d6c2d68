//! Upstream `autoscaling.k8s.io` VPA manifests → Tailor manifests, offline.
//!
//! The schemas are field-compatible, so conversion rewrites `apiVersion` and keeps every other field,
//! including ones this version does not know. Server-populated metadata (uid, resourceVersion, managedFields,
//! the last-applied annotation, …) is dropped so the output can be applied as a new object. Documents that
//! are not upstream VPA objects (a Deployment in the same file, say) pass through unchanged; `List` objects
//! are converted item by item.

use serde_json::Value;

use tailor_crds::{GROUP, UPSTREAM_GROUP};

/// Kinds of the upstream group that have a Tailor counterpart.
const CONVERTIBLE_KINDS: [&str; 2] = ["VerticalPodAutoscaler", "VerticalPodAutoscalerCheckpoint"];
/// Upstream versions whose schema matches `v1` closely enough to convert field for field.
const CONVERTIBLE_VERSIONS: [&str; 2] = ["v1", "v1beta2"];
/// Metadata the API server sets; meaningless on a new object of another group.
const SERVER_METADATA: [&str; 7] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
];
/// Annotation holding the old object verbatim (with the old apiVersion).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why a manifest could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not valid YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// A document is an upstream VPA object in a version that cannot be converted.
    #[error(
        "document {document}: {kind} {name:?} uses {api_version}, which has no targetRef; migrate it to autoscaling.k8s.io/v1 first"
    )]
    UnsupportedVersion {
        /// 1-based index of the document in the stream.
        document: usize,
        /// Kind of the object.
        kind: String,
        /// Name of the object.
        name: String,
        /// The apiVersion found.
        api_version: String,
    },
    /// The output could not be rendered.
    #[error("cannot render YAML: {0}")]
    Render(String),
    /// `updateMode` read as a boolean that is no mode (`true`: an unquoted `On` or `Yes`).
    #[error(
        "document {document}: {name:?}: spec.updatePolicy.updateMode is the boolean true (an unquoted On or Yes?); \
         write one of \"Off\", \"Initial\", \"Recreate\", \"InPlaceOrRecreate\", \"Auto\", quoted"
    )]
    UpdateModeBool {
        /// 1-based index of the document in the stream.
        document: usize,
        /// Name of the object.
        name: String,
    },
}

/// What conversion did to a stream of documents.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Converted {
    /// The converted documents, in input order.
    pub documents: Vec<Value>,
    /// How many objects were rewritten into the Tailor group.
    pub converted: usize,
}

/// Converts a multi-document YAML stream and renders the result as YAML (`---` between documents).
pub fn convert_manifests(input: &str) -> Result<String, ConvertError> {
    let converted = convert_documents(input)?;
    let mut out = String::new();
    for doc in &converted.documents {
        out.push_str("---\n");
        out.push_str(
            &serde_saphyr::to_string(doc).map_err(|e| ConvertError::Render(e.to_string()))?,
        );
    }
    Ok(out)
}

/// Converts a multi-document YAML stream into JSON values.
pub fn convert_documents(input: &str) -> Result<Converted, ConvertError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(input).map_err(|e| ConvertError::Yaml(e.to_string()))?;
    let mut result = Converted::default();
    for (i, mut doc) in docs.into_iter().enumerate() {
        result.converted += convert_object(&mut doc, i + 1)?;
        result.documents.push(doc);
    }
    Ok(result)
}

/// Converts one object in place (recursing into `List` items); returns how many objects it rewrote.
pub fn convert_object(doc: &mut Value, document: usize) -> Result<usize, ConvertError> {
    if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
        let mut n = 0;
        for item in items {
            n += convert_object(item, document)?;
        }
        return Ok(n);
    }
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some(version) = api_version
        .strip_prefix(UPSTREAM_GROUP)
        .and_then(|v| v.strip_prefix('/'))
    else {
        return Ok(0);
    };
    if !CONVERTIBLE_KINDS.contains(&kind) {
        return Ok(0);
    }
    if !CONVERTIBLE_VERSIONS.contains(&version) {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        return Err(ConvertError::UnsupportedVersion {
            document,
            kind: kind.to_owned(),
            name,
            api_version: api_version.to_owned(),
        });
    }
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("apiVersion".into(), Value::String(format!("{GROUP}/v1")));
    }
    // YAML 1.1 reads an unquoted `Off` as false: the mode meant is "Off" (written quoted on output).
    if let Some(mode) = doc.pointer_mut("/spec/updatePolicy/updateMode") {
        match mode {
            Value::Bool(false) => *mode = Value::String("Off".into()),
            Value::Bool(true) => {
                let name = doc
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                return Err(ConvertError::UpdateModeBool { document, name });
            }
            _ => {}
        }
    }
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in SERVER_METADATA {
            meta.remove(key);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
---
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata:
  name: web
  uid: 1234
  resourceVersion: "42"
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  futureField:
    keep: me
"#;

    #[test]
    fn unquoted_off_stays_off() {
        let vpa = "apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata:\n  name: w\n\
                   spec:\n  updatePolicy:\n    updateMode: Off\n";
        let out = convert_manifests(vpa).unwrap();
        assert!(out.contains("updateMode: \"Off\""), "{out}");
        let e = convert_manifests(&vpa.replace("Off", "On")).unwrap_err();
        assert!(
            e.to_string().contains("updateMode is the boolean true"),
            "{e}"
        );
    }

    #[test]
    fn rewrites_vpa_and_keeps_the_rest() {
        let out = convert_documents(UPSTREAM).unwrap();
        assert_eq!(out.converted, 1);
        assert_eq!(out.documents[0]["apiVersion"], "apps/v1");
        let vpa = &out.documents[1];
        assert_eq!(vpa["apiVersion"], "autoscaling.tailor.dev/v1");
        assert_eq!(vpa["spec"]["futureField"]["keep"], "me");
        assert_eq!(vpa["spec"]["targetRef"]["name"], "web");
        assert!(vpa["metadata"].get("uid").is_none());
        assert!(vpa["metadata"].get("annotations").is_none());
    }

    #[test]
    fn yaml_round_trip() {
        let yaml = convert_manifests(UPSTREAM).unwrap();
        let again = convert_documents(&yaml).unwrap();
        assert_eq!(again.converted, 0, "already converted");
        assert_eq!(again.documents.len(), 2);
    }

    #[test]
    fn lists_are_converted_item_by_item() {
        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: autoscaling.k8s.io/v1\n  kind: VerticalPodAutoscaler\n  metadata: {name: a}\n- apiVersion: autoscaling.k8s.io/v1\n  kind: VerticalPodAutoscalerCheckpoint\n  metadata: {name: b}\n";
        let out = convert_documents(list).unwrap();
        assert_eq!(out.converted, 2);
    }

    #[test]
    fn v1beta1_is_refused_with_the_document_named() {
        let old = "apiVersion: autoscaling.k8s.io/v1beta1\nkind: VerticalPodAutoscaler\nmetadata: {name: legacy}\n";
        let err = convert_documents(old).unwrap_err().to_string();
        assert!(
            err.contains("document 1") && err.contains("legacy"),
            "{err}"
        );
    }

    #[test]
    fn broken_yaml_is_an_error() {
        assert!(matches!(
            convert_documents("a: [1, 2"),
            Err(ConvertError::Yaml(_))
        ));
    }
}
