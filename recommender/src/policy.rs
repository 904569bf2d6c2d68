//! The parts of a VPA `resourcePolicy` the recommender reads: scaling mode, controlled resources,
//! min/max allowed, and the capping post-processor.
//!
//! TODO(crds): replace with `tailor_crds::{PodResourcePolicy, policy::container_policy, policy::apply_vpa_policy}`
//! once they land; this local copy accepts the same Kubernetes JSON.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::quantity::{QuantityError, cpu_millis, memory_bytes};
use crate::units::{Resource, ResourceAmount};

/// `spec.resourcePolicy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodResourcePolicy {
    /// Per-container policies (`containerName` or `"*"`).
    #[serde(default)]
    pub container_policies: Vec<ContainerResourcePolicy>,
}

/// One `containerPolicies` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResourcePolicy {
    /// Container name or `"*"`.
    #[serde(default)]
    pub container_name: String,
    /// `Auto` (default) or `Off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Lower caps (quantity strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_allowed: Option<BTreeMap<String, String>>,
    /// Upper caps (quantity strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_allowed: Option<BTreeMap<String, String>>,
    /// Resources to recommend; default both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controlled_resources: Option<Vec<String>>,
    /// `RequestsAndLimits` or `RequestsOnly` (not used by the recommender).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controlled_values: Option<String>,
}

/// Amounts per resource; absent = not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resources {
    /// Millicores.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu: Option<ResourceAmount>,
    /// Bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory: Option<ResourceAmount>,
}

impl Resources {
    /// Value of `r`.
    pub fn get(&self, r: Resource) -> Option<ResourceAmount> {
        match r {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
        }
    }

    /// Mutable slot of `r`.
    pub fn get_mut(&mut self, r: Resource) -> &mut Option<ResourceAmount> {
        match r {
            Resource::Cpu => &mut self.cpu,
            Resource::Memory => &mut self.memory,
        }
    }
}

/// A policy quantity map that does not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("container policy {container:?}: {field}.{resource}: {source}")]
pub struct PolicyError {
    /// Container policy name.
    pub container: String,
    /// `minAllowed` / `maxAllowed`.
    pub field: &'static str,
    /// Resource key.
    pub resource: String,
    /// Cause.
    pub source: QuantityError,
}

impl ContainerResourcePolicy {
    /// True if `mode: Off`.
    pub fn is_off(&self) -> bool {
        self.mode.as_deref() == Some("Off")
    }

    /// Controlled resources (default cpu and memory); unknown names are ignored.
    pub fn controlled(&self) -> (bool, bool) {
        match &self.controlled_resources {
            None => (true, true),
            Some(list) => (
                list.iter().any(|r| r == "cpu"),
                list.iter().any(|r| r == "memory"),
            ),
        }
    }

    fn parse_map(
        &self,
        field: &'static str,
        m: &BTreeMap<String, String>,
    ) -> Result<Resources, PolicyError> {
        let mut out = Resources::default();
        for (k, v) in m {
            let parsed = match k.as_str() {
                "cpu" => cpu_millis(v).map(|x| out.cpu = Some(x)),
                "memory" => memory_bytes(v).map(|x| out.memory = Some(x)),
                _ => Ok(()),
            };
            parsed.map_err(|source| PolicyError {
                container: self.container_name.clone(),
                field,
                resource: k.clone(),
                source,
            })?;
        }
        Ok(out)
    }

    /// Parsed `minAllowed`.
    pub fn min_allowed(&self) -> Result<Resources, PolicyError> {
        self.min_allowed
            .as_ref()
            .map_or(Ok(Resources::default()), |m| {
                self.parse_map("minAllowed", m)
            })
    }

    /// Parsed `maxAllowed`, `None` if the map is absent.
    pub fn max_allowed(&self) -> Result<Option<Resources>, PolicyError> {
        self.max_allowed
            .as_ref()
            .map(|m| self.parse_map("maxAllowed", m))
            .transpose()
    }
}

impl PodResourcePolicy {
    /// The policy for `container`: exact name, else `"*"`, else none.
    pub fn container_policy(&self, container: &str) -> Option<&ContainerResourcePolicy> {
        self.container_policies
            .iter()
            .find(|p| p.container_name == container)
            .or_else(|| {
                self.container_policies
                    .iter()
                    .find(|p| p.container_name == "*")
            })
    }

    /// Validates every quantity so later capping cannot fail.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for p in &self.container_policies {
            p.min_allowed()?;
            p.max_allowed()?;
        }
        Ok(())
    }
}

/// Which caps a capping pass applied, per resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapsHit {
    /// `(field, resource, "minAllowed"|"maxAllowed", cap value)`.
    pub hits: Vec<(&'static str, Resource, &'static str, ResourceAmount)>,
}

/// Caps target, lower and upper bound to the container's minAllowed/maxAllowed; the global maximum fills
/// resources missing from (or the whole of an absent) maxAllowed. Zero caps are ignored; uncappedTarget is
/// left alone.
pub fn cap_recommendation(
    policy: Option<&ContainerResourcePolicy>,
    global_max: Resources,
    fields: [(&'static str, &mut Resources); 3],
) -> Result<CapsHit, PolicyError> {
    let min = policy
        .map(|p| p.min_allowed())
        .transpose()?
        .unwrap_or_default();
    let max = match policy.map(|p| p.max_allowed()).transpose()?.flatten() {
        None => global_max,
        Some(mut m) => {
            if m.cpu.is_none() {
                m.cpu = global_max.cpu;
            }
            if m.memory.is_none() {
                m.memory = global_max.memory;
            }
            m
        }
    };
    let mut hits = CapsHit::default();
    for (field, res) in fields {
        for r in [Resource::Cpu, Resource::Memory] {
            let Some(v) = res.get_mut(r) else { continue };
            if let Some(lo) = min.get(r).filter(|x| *x != 0)
                && *v < lo
            {
                *v = lo;
                hits.hits.push((field, r, "minAllowed", lo));
            }
            if let Some(hi) = max.get(r).filter(|x| *x != 0)
                && *v > hi
            {
                *v = hi;
                hits.hits.push((field, r, "maxAllowed", hi));
            }
        }
    }
    Ok(hits)
}
