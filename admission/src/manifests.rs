//! Standalone mode (`--vpa-dir`): Tailor VPAs, LimitRanges and workload objects read from manifest files
//! instead of reflectors.
//!
//! Objects of custom kinds with a `spec.selector` (Argo Rollouts and the like) stand in for the `/scale`
//! subresource the server would read.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file under the directory (recursively, in name order) is read as a
//! multi-document YAML stream; `List` objects are flattened. Objects of other kinds (pods, services, upstream
//! `autoscaling.k8s.io` VPAs, …) are skipped and counted.

use std::path::{Path, PathBuf};

use serde_json::Value;

use tailor_kube::scale::{custom_controller, static_key};

use tailor_kube::index::IndexObjects;

/// Errors reading manifests; each names the file and document.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not valid YAML.
    #[error("{path}: invalid YAML: {message}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// An object of a known kind does not have the expected shape.
    #[error("{path}: document {document}: {kind} {name:?}: {message}")]
    Object {
        /// The file.
        path: PathBuf,
        /// 1-based document number.
        document: usize,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Decoder message.
        message: String,
    },
}

/// What was loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The objects for the index.
    pub objects: IndexObjects,
    /// Files read.
    pub files: usize,
    /// Objects of kinds the index does not use.
    pub skipped: usize,
}

impl Loaded {
    /// Objects kept, all kinds together.
    pub fn count(&self) -> usize {
        let o = &self.objects;
        o.vpas.len()
            + o.deployments.len()
            + o.replica_sets.len()
            + o.stateful_sets.len()
            + o.daemon_sets.len()
            + o.jobs.len()
            + o.cron_jobs.len()
            + o.replication_controllers.len()
            + o.limit_ranges.len()
            + o.scale.objects.len()
    }
}

fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let io = |source| ManifestError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue; // also skips a Secret/ConfigMap volume's ..data and timestamped directories
        }
        if path.is_dir() {
            manifest_files(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// Loads every manifest under `dir` (or the single file `dir`).
pub fn load_dir(dir: &Path) -> Result<Loaded, ManifestError> {
    let mut files = Vec::new();
    if dir.is_file() {
        files.push(dir.to_owned());
    } else {
        manifest_files(dir, &mut files)?;
    }
    let mut loaded = Loaded::default();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Io {
            path: path.clone(),
            source,
        })?;
        load_str(&text, &path, &mut loaded)?;
        loaded.files += 1;
    }
    Ok(loaded)
}

/// Adds the objects of one multi-document YAML (or JSON) text; `path` is only used in errors.
pub fn load_str(text: &str, path: &Path, loaded: &mut Loaded) -> Result<(), ManifestError> {
    // Manifest dumps of a whole cluster exceed the parser's default budget (1,024 documents, 250k nodes);
    // the files are the operator's own, so allow large ones while keeping alias-bomb protection.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 1_000_000;
    budget.max_nodes = 50_000_000;
    budget.max_events = 200_000_000;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
            ManifestError::Yaml {
                path: path.to_owned(),
                message: e.to_string(),
            }
        })?;
    for (i, doc) in docs.into_iter().enumerate() {
        add(doc, path, i + 1, loaded)?;
    }
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(
    doc: Value,
    path: &Path,
    document: usize,
    kind: &str,
) -> Result<T, ManifestError> {
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    serde_json::from_value(doc).map_err(|e| ManifestError::Object {
        path: path.to_owned(),
        document,
        kind: kind.to_owned(),
        name,
        message: e.to_string(),
    })
}

fn add(doc: Value, path: &Path, document: usize, loaded: &mut Loaded) -> Result<(), ManifestError> {
    if doc.is_null() {
        return Ok(()); // empty document (e.g. a trailing `---`)
    }
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let (true, Some(Value::Array(items))) = (kind.ends_with("List"), doc.get("items")) {
        for item in items.clone() {
            add(item, path, document, loaded)?;
        }
        return Ok(());
    }
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let o = &mut loaded.objects;
    match (group, kind.as_str()) {
        (tailor_crds::GROUP, "VerticalPodAutoscaler") => {
            o.vpas.push(decode(doc, path, document, &kind)?)
        }
        ("apps", "Deployment") => o.deployments.push(decode(doc, path, document, &kind)?),
        ("apps", "ReplicaSet") => o.replica_sets.push(decode(doc, path, document, &kind)?),
        ("apps", "StatefulSet") => o.stateful_sets.push(decode(doc, path, document, &kind)?),
        ("apps", "DaemonSet") => o.daemon_sets.push(decode(doc, path, document, &kind)?),
        ("batch", "Job") => o.jobs.push(decode(doc, path, document, &kind)?),
        ("batch", "CronJob") => o.cron_jobs.push(decode(doc, path, document, &kind)?),
        ("", "ReplicationController") => o
            .replication_controllers
            .push(decode(doc, path, document, &kind)?),
        ("", "LimitRange") => o.limit_ranges.push(decode(doc, path, document, &kind)?),
        _ => {
            if let Some(info) =
                custom_controller(&doc).filter(|_| group != tailor_crds::UPSTREAM_GROUP)
            {
                o.scale.objects.insert(static_key(&doc), info);
                return Ok(());
            }
            if group == tailor_crds::UPSTREAM_GROUP {
                tracing::warn!(file = %path.display(), document, %kind,
                    "upstream autoscaling.k8s.io object ignored (convert it with `tailor convert`)");
            }
            loaded.skipped += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: default}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: LimitRange
    metadata: {name: lr, namespace: default}
    spec: {limits: [{type: Container, max: {cpu: "2"}}]}
  - apiVersion: v1
    kind: Service
    metadata: {name: web, namespace: default}
---
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata: {name: upstream, namespace: default}
---
"#;

    #[test]
    fn loads_multi_document_files_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/all.yaml"), MANIFESTS).unwrap();
        std::fs::write(dir.path().join("README.md"), "not a manifest").unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        assert_eq!(loaded.files, 1);
        assert_eq!(loaded.objects.vpas.len(), 1);
        assert_eq!(loaded.objects.deployments.len(), 1);
        assert_eq!(loaded.objects.limit_ranges.len(), 1);
        assert_eq!(loaded.skipped, 2);
        assert_eq!(loaded.count(), 3);
    }

    #[test]
    fn custom_kinds_with_a_selector_stand_in_for_scale() {
        let text = r#"
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: shop
  ownerReferences: [{apiVersion: example.com/v1, kind: WidgetSet, name: ws, uid: "1", controller: true}]
spec: {selector: "app=w,tier in (a,b)"}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g, namespace: shop}
spec: {selector: 42}
"#;
        let mut loaded = Loaded::default();
        load_str(text, Path::new("custom.yaml"), &mut loaded).unwrap();
        let scale = &loaded.objects.scale.objects;
        assert_eq!(scale.len(), 2, "{scale:?}");
        assert_eq!(loaded.skipped, 1);
        let rollout = &scale[&("Rollout".into(), "shop".into(), "web".into())];
        assert_eq!(
            rollout
                .selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some([("app".to_owned(), "web".to_owned())].into())
        );
        assert!(rollout.owner.is_none());
        let widget = &scale[&("Widget".into(), "shop".into(), "w".into())];
        assert_eq!(widget.owner.as_ref().map(|o| o.name.as_str()), Some("ws"));
        let expressions = widget
            .selector
            .as_ref()
            .and_then(|s| s.match_expressions.clone())
            .unwrap_or_default();
        assert_eq!(expressions.len(), 2);
        assert_eq!(expressions[1].operator, "In");
    }

    #[test]
    fn errors_name_the_file_and_document() {
        let dir = tempfile::tempdir().unwrap();
        let bad = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: e}\nspec: {replicas: many}\n";
        std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
        let err = load_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("bad.yaml") && err.contains("document 2") && err.contains("\"e\""),
            "{err}"
        );
        std::fs::write(dir.path().join("bad.yaml"), "a: [").unwrap();
        assert!(
            load_dir(dir.path())
                .unwrap_err()
                .to_string()
                .contains("invalid YAML")
        );
    }
}
