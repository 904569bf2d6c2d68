//! HPA coherence (docs/decisions/hpa-coherence.md): a HorizontalPodAutoscaler scaling a workload on CPU or memory *utilisation*
//! (a percentage of the request) fights a VPA that changes that request. When one targets a VPA's workload
//! through a `Resource` or `ContainerResource` metric with a `Utilization` target, Tailor leaves that
//! resource to it: the recommender publishes no target or bounds for it (`uncappedTarget` still shows what
//! Tailor would have set), so the webhook, the updater and `tailor patch` / `tailor plan`, which all size
//! from the published recommendation, leave those requests as they are, and the VPA says so in its
//! `ResourcesLeftToHPA` condition. HPAs on other metrics (pods, object, external, or absolute values) do not
//! depend on the request and do not stop Tailor. [`left_to_hpa`] decides; [`leave_to_hpa`] applies. Pure.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tailor_engine::estimate::ContainerRecommendation;

use crate::node_fit::Resource;

/// At most this many metrics of one HPA are read.
pub const MAX_METRICS: usize = 64;

/// `scaleTargetRef`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// `apiVersion` (group/version).
    #[serde(default)]
    pub api_version: Option<String>,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// A metric target: only its type matters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricTarget {
    /// `Utilization`, `AverageValue` or `Value`.
    #[serde(rename = "type", default)]
    pub type_: String,
}

/// A `Resource` or `ContainerResource` metric source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceMetric {
    /// `cpu` or `memory`.
    #[serde(default)]
    pub name: String,
    /// For `ContainerResource`: the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Target.
    #[serde(default)]
    pub target: MetricTarget,
}

/// One metric of an HPA.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// `Resource`, `ContainerResource`, `Pods`, `Object`, `External`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// For `Resource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceMetric>,
    /// For `ContainerResource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_resource: Option<ResourceMetric>,
}

/// `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HpaSpec {
    /// The scaled workload.
    #[serde(default)]
    pub scale_target_ref: ScaleTargetRef,
    /// Metrics (absent: the API server defaults to 80% CPU utilisation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<Metric>>,
}

/// An `autoscaling/v2` HorizontalPodAutoscaler, as far as HPA coherence reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimHpa {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: HpaSpec,
}

tailor_core::trimmed_resource!(SlimHpa => k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler);

/// Keeps of an HPA only what coherence reads (name, namespace, resourceVersion and the spec).
pub fn strip(mut h: SlimHpa) -> SlimHpa {
    h.metadata = ObjectMeta {
        name: h.metadata.name,
        namespace: h.metadata.namespace,
        resource_version: h.metadata.resource_version,
        ..ObjectMeta::default()
    };
    if let Some(m) = h.spec.metrics.as_mut() {
        m.truncate(MAX_METRICS);
    }
    h
}

/// What HPAs take over of one VPA's workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftToHpa {
    /// The HPAs, by name (sorted).
    pub hpas: BTreeSet<String>,
    /// Resources left to them in every container.
    pub resources: BTreeSet<Resource>,
    /// Resources left to them in one container (`ContainerResource` metrics).
    pub containers: BTreeSet<(String, Resource)>,
}

impl LeftToHpa {
    /// Whether the HPAs take `resource` of `container`.
    pub fn takes(&self, container: &str, resource: Resource) -> bool {
        self.resources.contains(&resource)
            || self
                .containers
                .iter()
                .any(|(c, r)| c == container && *r == resource)
    }

    /// The `ResourcesLeftToHPA` condition's message.
    pub fn message(&self) -> String {
        let names: Vec<&str> = self.hpas.iter().map(String::as_str).collect();
        let mut what: Vec<String> = self
            .resources
            .iter()
            .map(|r| r.name().to_string())
            .collect();
        what.extend(
            self.containers
                .iter()
                .filter(|(_, r)| !self.resources.contains(r))
                .map(|(c, r)| format!("{} of container {c}", r.name())),
        );
        let plural = if names.len() == 1 { "" } else { "s" };
        format!(
            "HorizontalPodAutoscaler{plural} {} scale{} on {} utilization: Tailor leaves {} requests as they are and sizes the rest",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
            what.join(", "),
            what.join(", ")
        )
    }
}

fn group(api_version: Option<&str>) -> Option<&str> {
    api_version.map(|v| v.rsplit_once('/').map_or("", |(g, _)| g))
}

fn resource(name: &str) -> Option<Resource> {
    match name {
        "cpu" => Some(Resource::Cpu),
        "memory" => Some(Resource::Memory),
        _ => None,
    }
}

/// What the HPAs in `hpas` take of the workload `kind`/`name` (`api_version` as the VPA's `targetRef`
/// gives it) in `namespace`; `None` when no HPA scales it on CPU or memory utilisation.
pub fn left_to_hpa<'a>(
    hpas: impl IntoIterator<Item = &'a SlimHpa>,
    namespace: &str,
    api_version: Option<&str>,
    kind: &str,
    name: &str,
) -> Option<LeftToHpa> {
    let mut out = LeftToHpa::default();
    for h in hpas {
        let t = &h.spec.scale_target_ref;
        let same_group = match (group(api_version), group(t.api_version.as_deref())) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if h.metadata.namespace.as_deref() != Some(namespace)
            || t.kind != kind
            || t.name != name
            || !same_group
        {
            continue;
        }
        let before = (out.resources.len(), out.containers.len());
        match &h.spec.metrics {
            // The API server's default: 80% average CPU utilisation.
            None => {
                out.resources.insert(Resource::Cpu);
            }
            Some(metrics) => {
                for m in metrics.iter().take(MAX_METRICS) {
                    let (source, per_container) = match m.type_.as_str() {
                        "Resource" => (m.resource.as_ref(), false),
                        "ContainerResource" => (m.container_resource.as_ref(), true),
                        _ => continue,
                    };
                    let Some(s) = source.filter(|s| s.target.type_ == "Utilization") else {
                        continue;
                    };
                    let Some(r) = resource(&s.name) else {
                        continue;
                    };
                    match (per_container, &s.container) {
                        (true, Some(c)) => {
                            out.containers.insert((c.clone(), r));
                        }
                        (true, None) => {}
                        (false, _) => {
                            out.resources.insert(r);
                        }
                    }
                }
            }
        }
        if (out.resources.len(), out.containers.len()) != before {
            out.hpas.insert(h.metadata.name.clone().unwrap_or_default());
        }
    }
    (!out.hpas.is_empty()).then_some(out)
}

/// Takes the resources `left` gives to HPAs out of each container's target and bounds (`uncappedTarget`
/// keeps them). Returns whether anything was taken.
pub fn leave_to_hpa(recs: &mut [ContainerRecommendation], left: &LeftToHpa) -> bool {
    let mut taken = false;
    for rec in recs.iter_mut() {
        for r in Resource::ALL {
            if !left.takes(&rec.container_name, r) {
                continue;
            }
            for res in [&mut rec.target, &mut rec.lower_bound, &mut rec.upper_bound] {
                let slot = match r {
                    Resource::Cpu => &mut res.cpu,
                    Resource::Memory => &mut res.memory,
                };
                taken |= slot.take().is_some();
            }
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_engine::policy::Resources;

    fn hpa(name: &str, target: &str, metrics: serde_json::Value) -> SlimHpa {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": 5, "metrics": metrics}
        }))
        .unwrap()
    }

    #[test]
    fn utilisation_of_cpu_or_memory_is_left_to_the_hpa_other_metrics_are_not() {
        let cpu = hpa(
            "web",
            "web",
            serde_json::json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 60}}}]),
        );
        let custom = hpa(
            "queue",
            "worker",
            serde_json::json!([
                {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "5"}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}}]),
        );
        let hpas = [cpu, custom];
        let l = left_to_hpa(&hpas, "ns", Some("apps/v1"), "Deployment", "web").unwrap();
        assert_eq!(l.resources, BTreeSet::from([Resource::Cpu]));
        assert_eq!(
            l.message(),
            "HorizontalPodAutoscaler web scales on cpu utilization: Tailor leaves cpu requests as they are and sizes the rest"
        );
        assert_eq!(left_to_hpa(&hpas, "ns", None, "Deployment", "worker"), None);
        assert_eq!(left_to_hpa(&hpas, "other", None, "Deployment", "web"), None);
        assert_eq!(left_to_hpa(&hpas, "ns", None, "StatefulSet", "web"), None);
        assert_eq!(
            left_to_hpa(&hpas, "ns", Some("example.com/v1"), "Deployment", "web"),
            None
        );

        let mut recs = vec![ContainerRecommendation {
            container_name: "app".into(),
            target: Resources {
                cpu: Some(100),
                memory: Some(1 << 20),
            },
            lower_bound: Resources {
                cpu: Some(50),
                memory: Some(1 << 19),
            },
            upper_bound: Resources {
                cpu: Some(200),
                memory: Some(1 << 21),
            },
            uncapped_target: Resources {
                cpu: Some(100),
                memory: Some(1 << 20),
            },
        }];
        assert!(leave_to_hpa(&mut recs, &l));
        assert_eq!(recs[0].target.cpu, None);
        assert_eq!(recs[0].upper_bound.cpu, None);
        assert_eq!(recs[0].target.memory, Some(1 << 20));
        assert_eq!(recs[0].uncapped_target.cpu, Some(100));
        assert!(!leave_to_hpa(&mut recs, &l));
    }

    #[test]
    fn an_hpa_without_metrics_scales_on_cpu_and_container_metrics_name_their_container() {
        let mut h = hpa("d", "web", serde_json::Value::Null);
        h.spec.metrics = None;
        let c = hpa(
            "c",
            "web",
            serde_json::json!([{"type": "ContainerResource", "containerResource": {"name": "memory",
                "container": "sidecar", "target": {"type": "Utilization", "averageUtilization": 70}}}]),
        );
        let l = left_to_hpa([&h, &c], "ns", Some("apps/v1"), "Deployment", "web").unwrap();
        assert!(l.takes("app", Resource::Cpu));
        assert!(!l.takes("app", Resource::Memory));
        assert!(l.takes("sidecar", Resource::Memory));
        assert_eq!(
            l.message(),
            "HorizontalPodAutoscalers c, d scale on cpu, memory of container sidecar utilization: Tailor leaves cpu, memory of container sidecar requests as they are and sizes the rest"
        );
    }
}
