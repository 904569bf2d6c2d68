//! The resource types the stand-in serves: a built-in table of the Kubernetes kinds Tailor's binaries touch,
//! plus every kind registered from a `CustomResourceDefinition` (Tailor's own, or a custom kind with `/scale`
//! that a test loads).

use serde_json::{Value, json};

/// Where the `/scale` subresource reads and writes its fields (JSON paths as in a CRD, `.spec.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// Path of the desired replica count.
    pub spec_replicas: String,
    /// Path of the observed replica count.
    pub status_replicas: String,
    /// Path of the pod selector: a string (CRDs) or a `LabelSelector` / label map (built-in kinds).
    pub label_selector: Option<String>,
}

impl ScalePaths {
    fn apps() -> Option<ScalePaths> {
        Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        })
    }
}

/// One served resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group (`""` for the core group).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Verbs on the resource itself.
    pub verbs: Vec<String>,
    /// Short names.
    pub short_names: Vec<String>,
    /// Whether there is a `status` subresource (writes to the object then leave `status` alone).
    pub status: bool,
    /// The `/scale` subresource, if any.
    pub scale: Option<ScalePaths>,
    /// Further subresources served (`eviction`, `resize`).
    pub extra_subresources: Vec<String>,
    /// Property paths of the maps the CRD's schema declares atomic (`x-kubernetes-map-type: atomic`),
    /// which a server-side apply replaces whole; reached through object properties only, not through list
    /// items or `additionalProperties`.
    pub atomic_maps: Vec<Vec<String>>,
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceType {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            verbs: ALL_VERBS.iter().map(|v| v.to_string()).collect(),
            short_names: Vec::new(),
            status: false,
            scale: None,
            extra_subresources: Vec::new(),
            atomic_maps: Vec::new(),
        }
    }

    fn with_status(mut self) -> Self {
        self.status = true;
        self
    }

    fn with_scale(mut self, scale: Option<ScalePaths>) -> Self {
        self.scale = scale;
        self
    }

    fn read_only(mut self) -> Self {
        self.verbs = vec!["get".into(), "list".into()];
        self
    }

    fn with_sub(mut self, sub: &str) -> Self {
        self.extra_subresources.push(sub.into());
        self
    }

    /// The `APIResourceList` entries of this type and its subresources.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
            "shortNames": self.short_names,
        })];
        let sub_verbs = ["get", "patch", "update"];
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural), "singularName": "",
                "namespaced": self.namespaced, "kind": self.kind, "verbs": sub_verbs,
            }));
        }
        if self.scale.is_some() {
            out.push(json!({
                "name": format!("{}/scale", self.plural), "singularName": "",
                "namespaced": self.namespaced, "group": "autoscaling", "version": "v1",
                "kind": "Scale", "verbs": sub_verbs,
            }));
        }
        for sub in &self.extra_subresources {
            let (kind, verbs): (&str, &[&str]) = match sub.as_str() {
                "eviction" => ("Eviction", &["create"]),
                _ => (self.kind.as_str(), &sub_verbs),
            };
            out.push(json!({
                "name": format!("{}/{sub}", self.plural), "singularName": "",
                "namespaced": self.namespaced, "kind": kind, "verbs": verbs,
            }));
        }
        out
    }

    /// The types a `CustomResourceDefinition` object declares (one per served version).
    pub fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
        let spec = crd.get("spec").ok_or("CRD without spec")?;
        let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let group = s(spec.get("group")).ok_or("CRD without spec.group")?;
        let names = spec.get("names").ok_or("CRD without spec.names")?;
        let kind = s(names.get("kind")).ok_or("CRD without spec.names.kind")?;
        let plural = s(names.get("plural")).ok_or("CRD without spec.names.plural")?;
        let singular = s(names.get("singular")).unwrap_or_else(|| kind.to_lowercase());
        let short_names: Vec<String> = names
            .get("shortNames")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let namespaced = s(spec.get("scope")).as_deref() != Some("Cluster");
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or("CRD without spec.versions")?;
        let mut out = Vec::new();
        for v in versions {
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let version = s(v.get("name")).ok_or("CRD version without a name")?;
            let subs = v.get("subresources");
            let scale = subs.and_then(|s| s.get("scale")).map(|sc| ScalePaths {
                spec_replicas: s(sc.get("specReplicasPath")).unwrap_or(".spec.replicas".into()),
                status_replicas: s(sc.get("statusReplicasPath"))
                    .unwrap_or(".status.replicas".into()),
                label_selector: s(sc.get("labelSelectorPath")),
            });
            out.push(ResourceType {
                group: group.clone(),
                version,
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                verbs: ALL_VERBS.iter().map(|v| v.to_string()).collect(),
                short_names: short_names.clone(),
                status: subs.and_then(|s| s.get("status")).is_some(),
                scale,
                extra_subresources: Vec::new(),
                atomic_maps: v
                    .pointer("/schema/openAPIV3Schema")
                    .map(|schema| {
                        let mut out = Vec::new();
                        atomic_maps(schema, &mut Vec::new(), &mut out);
                        out
                    })
                    .unwrap_or_default(),
            });
        }
        Ok(out)
    }
}

/// Collects into `out` the property paths under `path` whose schema is an atomic map.
fn atomic_maps(schema: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
        out.push(path.clone());
        return;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            path.push(name.clone());
            atomic_maps(child, path, out);
            path.pop();
        }
    }
}

/// Every served type.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}

impl Registry {
    /// The built-in kinds: core, apps, batch, autoscaling, coordination, events, policy, admissionregistration,
    /// apiextensions and the metrics API.
    pub fn builtin() -> Registry {
        let t = ResourceType::builtin;
        let types = vec![
            t("", "v1", "Pod", "pods", true)
                .with_status()
                .with_sub("eviction")
                .with_sub("resize"),
            t("", "v1", "Event", "events", true),
            t("", "v1", "LimitRange", "limitranges", true),
            t("", "v1", "ResourceQuota", "resourcequotas", true).with_status(),
            t("", "v1", "Namespace", "namespaces", false).with_status(),
            t("", "v1", "Node", "nodes", false).with_status(),
            t("", "v1", "Secret", "secrets", true),
            t("", "v1", "ConfigMap", "configmaps", true),
            t("", "v1", "Service", "services", true).with_status(),
            t("", "v1", "ServiceAccount", "serviceaccounts", true),
            t(
                "",
                "v1",
                "ReplicationController",
                "replicationcontrollers",
                true,
            )
            .with_status()
            .with_scale(ScalePaths::apps()),
            t("apps", "v1", "Deployment", "deployments", true)
                .with_status()
                .with_scale(ScalePaths::apps()),
            t("apps", "v1", "ReplicaSet", "replicasets", true)
                .with_status()
                .with_scale(ScalePaths::apps()),
            t("apps", "v1", "StatefulSet", "statefulsets", true)
                .with_status()
                .with_scale(ScalePaths::apps()),
            t("apps", "v1", "DaemonSet", "daemonsets", true).with_status(),
            t("batch", "v1", "Job", "jobs", true).with_status(),
            t("batch", "v1", "CronJob", "cronjobs", true).with_status(),
            t("coordination.k8s.io", "v1", "Lease", "leases", true),
            // Read by the recommender's HPA coherence (docs/decisions/hpa-coherence.md).
            t(
                "autoscaling",
                "v2",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
                true,
            )
            .with_status(),
            t("events.k8s.io", "v1", "Event", "events", true),
            t(
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                true,
            )
            .with_status(),
            t(
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
                false,
            ),
            t(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                false,
            ),
            t(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
            )
            .with_status(),
            t("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", true).read_only(),
            t("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", false).read_only(),
        ];
        Registry { types }
    }

    /// Adds (or replaces) a type.
    pub fn add(&mut self, t: ResourceType) {
        self.types
            .retain(|o| !(o.group == t.group && o.version == t.version && o.plural == t.plural));
        self.types.push(t);
    }

    /// Every type.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// The type served at `group/version/plural`.
    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The type of objects with `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// Groups (core excluded) with their versions, in registration order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.iter().filter(|t| !t.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, vs)) if !vs.contains(&t.version) => vs.push(t.version.clone()),
                Some(_) => {}
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// The types of one group version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_crd_declares_its_bucket_weights_atomic() {
        let crd = tailor_crds::crd::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "VerticalPodAutoscalerCheckpoint")
            .map(|c| serde_json::to_value(&c).unwrap())
            .unwrap();
        let types = ResourceType::from_crd(&crd).unwrap();
        let maps = &types[0].atomic_maps;
        for h in ["cpuHistogram", "memoryHistogram"] {
            let path = ["status", h, "bucketWeights"].map(String::from).to_vec();
            assert!(maps.contains(&path), "{maps:?}");
        }
    }
}
