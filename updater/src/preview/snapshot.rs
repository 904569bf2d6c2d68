//! A cluster snapshot as `kubectl get -o yaml` (or `-o json`) prints it, read through the shared manifest
//! reader ([`tailor_kube::manifests`]: YAML or JSON, `List`s included, streamed) keeping what one updater
//! iteration reads: the pod → VPA index's objects (VPAs, LimitRanges, the well-known workloads slim, custom
//! controllers in place of `/scale`), pods compact as the updater caches them, controllers' replica counts,
//! ResourceQuotas, PodDisruptionBudgets, Leases, Namespaces and upstream `autoscaling.k8s.io` VPAs (trimmed:
//! the updater stands down on the workloads they cover, [`crate::decisions::upstream`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use tailor_kube::manifests::index_objects::{IndexObject, ManifestIndex, Workload};
use tailor_kube::manifests::{self, Keep, ManifestError, Object, Walk};

use crate::views::pods::CachedPod;
use tailor_kube::upstream_vpa::{UpstreamVpa, UpstreamVpaObject};

/// (kind, namespace, name) of a controller.
pub type ControllerKey = (String, String, String);

/// The objects of a snapshot.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// What the pod → VPA index reads: Tailor VPAs, LimitRanges, the well-known workloads (slim, in the
    /// compact caches the binary uses) and custom controllers with a selector (in place of `/scale`).
    pub index: ManifestIndex,
    /// Pods, compact as the updater caches them.
    pub pods: Vec<Arc<CachedPod>>,
    /// Configured replicas of ReplicaSets, StatefulSets and ReplicationControllers (`spec.replicas`) and
    /// of DaemonSets (`status.numberReady`).
    pub replicas: HashMap<ControllerKey, Option<i32>>,
    /// `spec.replicas` of custom controllers, in place of `/scale`'s, for the disruption budget.
    pub scale_replicas: HashMap<ControllerKey, i32>,
    /// ResourceQuotas (quota fit).
    pub resource_quotas: Vec<ResourceQuota>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Leases (the webhook's status Lease among them).
    pub leases: Vec<Lease>,
    /// Namespaces (their labels, for the webhook's namespace selector).
    pub namespaces: Vec<Namespace>,
    /// Upstream VPAs, trimmed (those without a `targetRef` are left out).
    pub upstream_vpas: Vec<UpstreamVpa>,
    /// The scope of Tailor's pod webhook, from a MutatingWebhookConfiguration in the snapshot that registers
    /// one ([`crate::decisions::scope::POD_WEBHOOK_NAME`]).
    pub webhook_scope: Option<crate::decisions::scope::WebhookScope>,
    /// Documents of other kinds, ignored (`apiVersion/kind`, for the user).
    pub ignored: Vec<String>,
}

/// What a plan keeps of one snapshot object.
enum Kept {
    Index(Box<IndexObject>),
    Pod(Arc<CachedPod>),
    Pdb(Box<PodDisruptionBudget>),
    Quota(Box<ResourceQuota>),
    Lease(Box<Lease>),
    Namespace(Box<Namespace>),
    Upstream(Option<UpstreamVpa>),
    Webhook(Option<Box<crate::decisions::scope::WebhookScope>>),
    Ignored(String),
}

impl Keep for Kept {
    fn keep(o: Object) -> Result<Self, String> {
        Ok(match (o.group(), o.kind.as_str()) {
            (_, "") => return Err("no kind".into()),
            ("", "Pod") => Kept::Pod(Arc::new(CachedPod::new(&o.decode::<Pod>()?))),
            ("policy", "PodDisruptionBudget") => Kept::Pdb(Box::new(o.decode()?)),
            ("", "ResourceQuota") => Kept::Quota(Box::new(o.decode()?)),
            ("coordination.k8s.io", "Lease") => Kept::Lease(Box::new(o.decode()?)),
            ("", "Namespace") => Kept::Namespace(Box::new(o.decode()?)),
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
                let config: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
                    o.decode()?;
                Kept::Webhook(
                    (config.webhooks.iter().flatten())
                        .find(|w| w.name == crate::decisions::scope::POD_WEBHOOK_NAME)
                        .map(|w| Box::new(crate::decisions::scope::WebhookScope::of_webhook(w))),
                )
            }
            (tailor_crds::UPSTREAM_GROUP, "VerticalPodAutoscaler") => {
                Kept::Upstream(UpstreamVpa::of(o.decode::<UpstreamVpaObject>()?))
            }
            _ => match IndexObject::of(&o) {
                Some(object) => Kept::Index(Box::new(object?)),
                None => Kept::Ignored(format!("{}/{}", o.api_version, o.kind)),
            },
        })
    }
}

/// The key of a slim workload of `kind`.
fn key(
    kind: &str,
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ControllerKey {
    (
        kind.to_owned(),
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

impl Snapshot {
    fn add(&mut self, kept: Kept) {
        match kept {
            Kept::Index(object) => {
                self.count_replicas(&object);
                self.index.add(*object);
            }
            Kept::Pod(pod) => self.pods.push(pod),
            Kept::Pdb(pdb) => self.pdbs.push(*pdb),
            Kept::Quota(quota) => self.resource_quotas.push(*quota),
            Kept::Lease(lease) => self.leases.push(*lease),
            Kept::Namespace(ns) => self.namespaces.push(*ns),
            Kept::Upstream(vpa) => self.upstream_vpas.extend(vpa),
            Kept::Webhook(scope) => {
                if let Some(scope) = scope {
                    self.webhook_scope = Some(*scope);
                }
            }
            Kept::Ignored(what) => self.ignored.push(what),
        }
    }

    /// The replica counts the disruption budget reads (the binary reads them from its caches and `/scale`).
    fn count_replicas(&mut self, object: &IndexObject) {
        match object {
            IndexObject::Workload(w, replicas) => {
                let (k, n) = match w {
                    Workload::ReplicaSet(o) => (key("ReplicaSet", &o.metadata), replicas.spec),
                    Workload::StatefulSet(o) => (key("StatefulSet", &o.metadata), replicas.spec),
                    Workload::ReplicationController(o) => {
                        (key("ReplicationController", &o.metadata), replicas.spec)
                    }
                    Workload::DaemonSet(o) => (key("DaemonSet", &o.metadata), replicas.ready),
                    _ => return,
                };
                self.replicas.insert(k, n);
            }
            IndexObject::Custom {
                key,
                replicas: Some(n),
                ..
            } => {
                self.scale_replicas.insert(key.clone(), *n);
            }
            _ => {}
        }
    }

    /// Adds the objects of one file's text (`path` names it in errors).
    pub fn add_file(&mut self, path: &str, text: &str) -> Result<(), ManifestError> {
        manifests::read_text(path, text, |_, kept| self.add(kept))
    }

    /// Reads a snapshot from files and directories (as [`tailor_kube::manifests`] reads them; the files
    /// directly in a directory, not its subdirectories). A later
    /// workload of the same kind, namespace and name replaces an earlier one.
    pub fn load(paths: &[PathBuf]) -> Result<Self, ManifestError> {
        let mut snapshot = Snapshot::default();
        for file in manifests::manifest_files(paths, Walk::Flat)? {
            manifests::read_file(&file, |_, kept| snapshot.add(kept))?;
        }
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_controllers_with_a_selector_resolve_like_scale() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: web, namespace: shop}\n\
                    spec: {replicas: 4, selector: {matchLabels: {app: web}}}\n---\n\
                    apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {selector: {app: web}}\n";
        let mut snapshot = Snapshot::default();
        snapshot.add_file("s.yaml", text).expect("snapshot");
        let info = snapshot.index.scale().objects.get(&(
            "Rollout".to_owned(),
            "shop".to_owned(),
            "web".to_owned(),
        ));
        let info = info.expect("the Rollout stands in for its /scale");
        assert!(info.selector.is_some() && info.owner.is_none());
        assert_eq!(snapshot.ignored, ["v1/Service"]);
        assert_eq!(snapshot.scale_replicas.values().collect::<Vec<_>>(), [&4]);
    }

    #[test]
    fn a_yaml_stream_of_json_documents_loads() {
        let text = "{\"apiVersion\": \"apps/v1\", \"kind\": \"ReplicaSet\",\n \"metadata\": {\"name\": \"web-1\", \"namespace\": \"shop\"},\n \"spec\": {\"replicas\": 3, \"selector\": {\"matchLabels\": {\"app\": \"web\"}}}}\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"shop\"}}\n";
        let mut snapshot = Snapshot::default();
        snapshot
            .add_file("s.yaml", text)
            .expect("a YAML stream of JSON documents");
        assert_eq!(snapshot.namespaces.len(), 1);
        assert_eq!(
            snapshot
                .replicas
                .get(&key_of("ReplicaSet", "shop", "web-1")),
            Some(&Some(3))
        );
    }

    #[test]
    fn upstream_vpas_are_kept_trimmed() {
        let text = "apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\n\
                    metadata: {name: web, namespace: shop}\n\
                    spec: {targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}}\n---\n\
                    apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscalerCheckpoint\n\
                    metadata: {name: web-app, namespace: shop}\n";
        let mut snapshot = Snapshot::default();
        snapshot.add_file("s.yaml", text).expect("snapshot");
        assert_eq!(snapshot.upstream_vpas.len(), 1);
        assert_eq!(snapshot.upstream_vpas[0].mode, "Auto");
        assert_eq!(
            snapshot.ignored,
            ["autoscaling.k8s.io/v1/VerticalPodAutoscalerCheckpoint"]
        );
    }

    fn key_of(kind: &str, namespace: &str, name: &str) -> ControllerKey {
        (kind.to_owned(), namespace.to_owned(), name.to_owned())
    }
}
