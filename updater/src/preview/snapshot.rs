//! A cluster snapshot as `kubectl get -o yaml` prints it: files of YAML or JSON documents, `List` objects
//! included, holding pods, Tailor VPAs, workloads, PodDisruptionBudgets, LimitRanges, ResourceQuotas and Leases.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::StaticScaleLookup;
use tailor_kube::scale::{custom_controller, static_key};

/// Most files read from a snapshot directory.
pub const MAX_FILES: usize = 10_000;
/// Largest snapshot file read.
pub const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// Bad snapshot input (the CLI exits 2).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A file or directory cannot be read.
    #[error("{path}: {message}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// A document does not parse or does not decode into its kind.
    #[error("{path}: document {index}: {message}")]
    Document {
        /// The file.
        path: String,
        /// Index of the document in the file (0-based; items of a List count).
        index: usize,
        /// What went wrong.
        message: String,
    },
}

/// The objects of a snapshot.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Tailor VPAs.
    pub vpas: Vec<VerticalPodAutoscaler>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// ReplicaSets.
    pub replica_sets: Vec<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Vec<StatefulSet>,
    /// DaemonSets.
    pub daemon_sets: Vec<DaemonSet>,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// CronJobs.
    pub cron_jobs: Vec<CronJob>,
    /// ReplicationControllers.
    pub replication_controllers: Vec<ReplicationController>,
    /// LimitRanges.
    pub limit_ranges: Vec<LimitRange>,
    /// ResourceQuotas (quota fit).
    pub resource_quotas: Vec<k8s_openapi::api::core::v1::ResourceQuota>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Leases (the webhook's status Lease among them).
    pub leases: Vec<Lease>,
    /// Namespaces (their labels, for the webhook's namespace selector).
    pub namespaces: Vec<Namespace>,
    /// Objects of custom kinds with a `spec.selector` (Argo Rollouts and the like), in place of `/scale`.
    pub scale: StaticScaleLookup,
    /// `spec.replicas` of those custom controllers ((kind, namespace, name) → replicas), in place of
    /// `/scale`'s, for the disruption budget.
    pub scale_replicas: std::collections::HashMap<(String, String, String), i32>,
    /// Documents of other kinds, ignored (kind names, for the user).
    pub ignored: Vec<String>,
}

fn looks_like_json(text: &str) -> bool {
    matches!(
        text.trim_start().as_bytes().first(),
        Some(b'{') | Some(b'[')
    )
}

/// The documents of one file: a JSON value or array, or a YAML stream; `List` objects are flattened.
pub fn documents(path: &str, text: &str) -> Result<Vec<Value>, SnapshotError> {
    let parse_err = |message: String| SnapshotError::Document {
        path: path.to_owned(),
        index: 0,
        message,
    };
    let docs: Vec<Value> = if looks_like_json(text) {
        match serde_json::from_str(text).map_err(|e| parse_err(e.to_string()))? {
            Value::Array(items) => items,
            other => vec![other],
        }
    } else {
        serde_saphyr::from_multiple(text).map_err(|e| parse_err(e.to_string()))?
    };
    let mut out = Vec::new();
    for doc in docs {
        if doc.is_null() {
            continue;
        }
        let is_list = doc
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k == "List" || k.ends_with("List"))
            && doc.get("items").is_some_and(Value::is_array);
        if is_list {
            if let Some(Value::Array(items)) = doc.get("items") {
                out.extend(items.iter().cloned());
            }
        } else {
            out.push(doc);
        }
    }
    Ok(out)
}

fn decode<T: DeserializeOwned>(path: &str, index: usize, doc: Value) -> Result<T, SnapshotError> {
    serde_path_to_error::deserialize(doc).map_err(|e| SnapshotError::Document {
        path: path.to_owned(),
        index,
        message: e.to_string(),
    })
}

impl Snapshot {
    /// Adds the documents of one file.
    pub fn add_file(&mut self, path: &str, text: &str) -> Result<(), SnapshotError> {
        for (index, doc) in documents(path, text)?.into_iter().enumerate() {
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let api = doc
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match kind.as_str() {
                "VerticalPodAutoscaler" if api.starts_with(tailor_crds::GROUP) => {
                    self.vpas.push(decode(path, index, doc)?)
                }
                "Pod" => self.pods.push(decode(path, index, doc)?),
                "Deployment" => self.deployments.push(decode(path, index, doc)?),
                "ReplicaSet" => self.replica_sets.push(decode(path, index, doc)?),
                "StatefulSet" => self.stateful_sets.push(decode(path, index, doc)?),
                "DaemonSet" => self.daemon_sets.push(decode(path, index, doc)?),
                "Job" => self.jobs.push(decode(path, index, doc)?),
                "CronJob" => self.cron_jobs.push(decode(path, index, doc)?),
                "ReplicationController" => {
                    self.replication_controllers.push(decode(path, index, doc)?)
                }
                "LimitRange" => self.limit_ranges.push(decode(path, index, doc)?),
                "ResourceQuota" => self.resource_quotas.push(decode(path, index, doc)?),
                "PodDisruptionBudget" => self.pdbs.push(decode(path, index, doc)?),
                "Lease" => self.leases.push(decode(path, index, doc)?),
                "Namespace" => self.namespaces.push(decode(path, index, doc)?),
                "" => {
                    return Err(SnapshotError::Document {
                        path: path.to_owned(),
                        index,
                        message: "no kind".into(),
                    });
                }
                other => match custom_controller(&doc) {
                    Some(info) => {
                        let key = static_key(&doc);
                        if let Some(n) = doc
                            .pointer("/spec/replicas")
                            .and_then(Value::as_i64)
                            .and_then(|n| i32::try_from(n).ok())
                        {
                            self.scale_replicas.insert(key.clone(), n);
                        }
                        self.scale.objects.insert(key, info);
                    }
                    None => self.ignored.push(format!("{api}/{other}")),
                },
            }
        }
        Ok(())
    }

    /// Reads a snapshot from files and directories (every `.yaml`, `.yml` and `.json` file directly in a
    /// directory, in name order). A later object of the same kind, namespace and name replaces an earlier one.
    pub fn load(paths: &[PathBuf]) -> Result<Self, SnapshotError> {
        let mut files = Vec::new();
        for p in paths {
            collect(p, &mut files)?;
        }
        let mut snapshot = Snapshot::default();
        for f in files {
            let path = f.display().to_string();
            let read_err = |message: String| SnapshotError::Read {
                path: path.clone(),
                message,
            };
            let len = std::fs::metadata(&f)
                .map_err(|e| read_err(e.to_string()))?
                .len();
            if len > MAX_FILE_BYTES {
                return Err(read_err(format!(
                    "{len} bytes; at most {MAX_FILE_BYTES} are read"
                )));
            }
            let text = std::fs::read_to_string(&f).map_err(|e| read_err(e.to_string()))?;
            snapshot.add_file(&path, &text)?;
        }
        Ok(snapshot)
    }
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), SnapshotError> {
    let read_err = |message: String| SnapshotError::Read {
        path: path.display().to_string(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| read_err(e.to_string()))?;
    if !meta.is_dir() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| read_err(e.to_string()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for e in entries {
        if out.len() >= MAX_FILES {
            return Err(read_err(format!("more than {MAX_FILES} files")));
        }
        let snapshot_file = e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
        if snapshot_file && e.is_file() {
            out.push(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_kube::index::ScaleLookup as _;

    #[test]
    fn custom_controllers_with_a_selector_resolve_like_scale() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: web, namespace: shop}\n\
                    spec: {selector: {matchLabels: {app: web}}}\n---\n\
                    apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {selector: {app: web}}\n";
        let mut snapshot = Snapshot::default();
        snapshot.add_file("s.yaml", text).expect("snapshot");
        let info = snapshot
            .scale
            .lookup("argoproj.io/v1alpha1", "Rollout", "shop", "web")
            .expect("the Rollout stands in for its /scale");
        assert!(info.selector.is_some() && info.owner.is_none());
        assert_eq!(snapshot.ignored, ["v1/Service"]);
    }
}
