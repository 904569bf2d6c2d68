//! Workload objects reduced to what target matching reads ([`crate::target`]): name, namespace, uid, the
//! controller owner and the pod selector (for CronJobs, the labels of the job template's pod template).
//! A watch deserialises straight into a [`SlimWorkload`], so pod templates, status and managed fields are
//! never built, and [`SlimWorkload::of`] slims a full object (manifests, tests); the caches then keep it
//! in the compact form of `tailor_kube::workload_cache`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::target::{Workload, controller_owner, cron_job_template_labels, equality_selector};

/// A well-known workload kind: the part of its `spec` that slimming keeps.
pub trait WorkloadKind:
    Workload + k8s_openapi::Resource<Scope = k8s_openapi::NamespaceResourceScope>
{
    /// The kept part of `spec`, as it appears on the wire.
    type SlimSpec: SlimSpec;
    /// The kept part of this object's `spec`.
    fn slim_spec(&self) -> Option<Self::SlimSpec>;
}

/// The kept part of a workload's `spec`.
pub trait SlimSpec: Clone + Debug + PartialEq + DeserializeOwned + Send + Sync + 'static {
    /// The selector as the object states it: `spec.selector` (a ReplicationController's map as
    /// `matchLabels`; a CronJob's job-template pod labels, `None` when there are none).
    fn kept_selector(spec: Option<&Self>) -> Option<LabelSelector>;

    /// The pod selector matching uses, from [`SlimSpec::kept_selector`]'s answer.
    fn selector_from_kept(kept: Option<LabelSelector>) -> Option<LabelSelector> {
        kept
    }

    /// The pod selector, as [`Workload::pod_selector`] of the full object gives it.
    fn pod_selector(spec: Option<&Self>) -> Option<LabelSelector> {
        Self::selector_from_kept(Self::kept_selector(spec))
    }
}

/// `spec.selector` as a label selector (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct SelectorSpec {
    /// `spec.selector`.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

impl SlimSpec for SelectorSpec {
    fn kept_selector(spec: Option<&Self>) -> Option<LabelSelector> {
        spec?.selector.clone()
    }
}

/// `spec.selector` as a plain label map (ReplicationController).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MapSelectorSpec {
    /// `spec.selector`.
    #[serde(default)]
    pub selector: Option<BTreeMap<String, String>>,
}

impl SlimSpec for MapSelectorSpec {
    fn kept_selector(spec: Option<&Self>) -> Option<LabelSelector> {
        spec?.selector.as_ref().map(|m| equality_selector(Some(m)))
    }
}

/// A CronJob's `spec.jobTemplate.spec.template.metadata.labels`, kept flat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CronJobSpec {
    /// The labels of the job template's pod template.
    pub template_labels: Option<BTreeMap<String, String>>,
}

impl<'de> Deserialize<'de> for CronJobSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            job_template: Option<Nested<Nested<Labels>>>,
        }
        /// `{spec: …}` of a JobTemplateSpec and `{template: …}` of a JobSpec, read alike.
        #[derive(Deserialize)]
        struct Nested<T> {
            #[serde(alias = "template")]
            spec: Option<T>,
        }
        #[derive(Deserialize)]
        struct Labels {
            metadata: Option<LabelsOnly>,
        }
        #[derive(Deserialize)]
        struct LabelsOnly {
            #[serde(default)]
            labels: Option<BTreeMap<String, String>>,
        }
        let spec = Spec::deserialize(d)?;
        Ok(CronJobSpec {
            template_labels: spec
                .job_template
                .and_then(|t| t.spec)
                .and_then(|s| s.spec)
                .and_then(|t| t.metadata)
                .and_then(|m| m.labels),
        })
    }
}

impl SlimSpec for CronJobSpec {
    fn kept_selector(spec: Option<&Self>) -> Option<LabelSelector> {
        spec?
            .template_labels
            .as_ref()
            .map(|m| equality_selector(Some(m)))
    }

    /// No template labels: the empty selector (every pod of the namespace), as upstream.
    fn selector_from_kept(kept: Option<LabelSelector>) -> Option<LabelSelector> {
        Some(kept.unwrap_or_else(|| equality_selector(None)))
    }
}

macro_rules! selector_kinds {
    ($($kind:ty => $spec:ident),+) => {$(
        impl WorkloadKind for $kind {
            type SlimSpec = $spec;
            fn slim_spec(&self) -> Option<$spec> {
                self.spec.as_ref().map(|s| $spec { selector: s.selector.clone().into() })
            }
        }
    )+};
}

selector_kinds!(
    Deployment => SelectorSpec,
    ReplicaSet => SelectorSpec,
    StatefulSet => SelectorSpec,
    DaemonSet => SelectorSpec,
    ReplicationController => MapSelectorSpec
);

impl WorkloadKind for Job {
    type SlimSpec = SelectorSpec;
    fn slim_spec(&self) -> Option<SelectorSpec> {
        self.spec.as_ref().map(|s| SelectorSpec {
            selector: s.selector.clone(),
        })
    }
}

impl WorkloadKind for CronJob {
    type SlimSpec = CronJobSpec;
    fn slim_spec(&self) -> Option<CronJobSpec> {
        self.spec.as_ref().map(|_| CronJobSpec {
            template_labels: cron_job_template_labels(self).cloned(),
        })
    }
}

/// A workload object of kind `K` reduced to identity, controller owner and pod selection.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(bound(deserialize = ""))]
pub struct SlimWorkload<K: WorkloadKind> {
    /// Name, namespace, uid and the controller owner (the only ownerReference matching reads).
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The kept part of `spec`.
    #[serde(default = "Option::default")]
    pub spec: Option<K::SlimSpec>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K: WorkloadKind> Clone for SlimWorkload<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: WorkloadKind> SlimWorkload<K> {
    /// The slim form of a full object.
    pub fn of(object: &K) -> Self {
        let meta = object.meta();
        Self {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                owner_references: only_controller(meta.owner_references.as_ref()),
                ..ObjectMeta::default()
            },
            spec: object.slim_spec(),
            kind: PhantomData,
        }
    }
}

impl SlimWorkload<CronJob> {
    /// The labels of the job template's pod template (`None` when the template has none).
    pub fn template_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.spec.as_ref()?.template_labels.as_ref()
    }
}

fn only_controller(owners: Option<&Vec<OwnerReference>>) -> Option<Vec<OwnerReference>> {
    controller_owner(owners).map(|o| vec![o.clone()])
}

/// Reads `metadata` keeping name, namespace, uid, resourceVersion (the watch resumes from it: without it
/// every watch event would end the watch with a relist) and the controller owner; other fields are
/// skipped unread.
fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        uid: Option<String>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        owner_references: Option<Vec<OwnerReference>>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        owner_references: only_controller(m.owner_references.as_ref()),
        ..ObjectMeta::default()
    })
}

crate::trimmed_resource!([K: WorkloadKind] SlimWorkload<K> => K);

impl<K: WorkloadKind> Workload for SlimWorkload<K> {
    fn pod_selector(&self) -> Option<LabelSelector> {
        K::SlimSpec::pod_selector(self.spec.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::workload_info;
    use serde_json::json;

    /// The wire path and [`SlimWorkload::of`] agree with the full object's [`workload_info`].
    fn same<K: WorkloadKind + DeserializeOwned + serde::Serialize + PartialEq + Debug>(
        v: serde_json::Value,
    ) {
        let full: K = serde_json::from_value(v.clone()).unwrap();
        let wire: SlimWorkload<K> = serde_json::from_value(v).unwrap();
        let of = SlimWorkload::of(&full);
        assert_eq!(wire, of, "{}", K::KIND);
        assert_eq!(workload_info(&wire), workload_info(&full), "{}", K::KIND);
        assert!(wire.metadata.managed_fields.is_none() && wire.metadata.labels.is_none());
    }

    #[test]
    fn every_kind_keeps_what_matching_reads() {
        let meta = json!({"name": "w", "namespace": "ns", "uid": "u", "labels": {"x": "y"},
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "1"},
                {"apiVersion": "x/v1", "kind": "Etcd", "name": "e", "uid": "2", "controller": true}]});
        let sel = json!({"matchLabels": {"app": "w"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]});
        let template = json!({"metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        same::<Deployment>(
            json!({"metadata": meta, "spec": {"selector": sel, "template": template}}),
        );
        same::<ReplicaSet>(
            json!({"metadata": meta, "spec": {"selector": sel, "template": template}}),
        );
        same::<StatefulSet>(
            json!({"metadata": meta, "spec": {"selector": sel, "template": template}}),
        );
        same::<DaemonSet>(
            json!({"metadata": meta, "spec": {"selector": sel, "template": template}}),
        );
        same::<Job>(json!({"metadata": meta, "spec": {"selector": sel, "template": template}}));
        same::<Job>(json!({"metadata": meta, "spec": {"template": template}}));
        same::<ReplicationController>(
            json!({"metadata": meta, "spec": {"selector": {"app": "w"}, "template": template}}),
        );
        same::<ReplicationController>(json!({"metadata": meta}));
        same::<CronJob>(json!({"metadata": meta, "spec": {"schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": template}}}}));
        same::<CronJob>(json!({"metadata": meta, "spec": {"schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": {}}}}}));
        same::<CronJob>(json!({"metadata": meta}));
    }

    #[test]
    fn cron_job_template_labels_survive() {
        let cj: SlimWorkload<CronJob> = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"job": "c"}}}}}}
        }))
        .unwrap();
        assert_eq!(
            cj.template_labels(),
            Some(&BTreeMap::from([("job".to_owned(), "c".to_owned())]))
        );
        let owners = cj.metadata.owner_references.as_ref();
        assert!(owners.is_none());
    }
}
