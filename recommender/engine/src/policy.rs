//! The recommender's integer side of a VPA `resourcePolicy`.
//!
//! The API types (`tailor_crds::{PodResourcePolicy, ContainerResourcePolicy}`), the container-policy lookup,
//! the scaling mode, the controlled resources and the global-maximum merge rule all come from
//! `tailor_crds`. What stays here is hot-path only: a container policy's `minAllowed` / `maxAllowed`
//! compiled once per pass into integer millicores / bytes ([`IntegerBounds`]) and the capping
//! post-processor over [`Resources`].

use tailor_core::capping::effective_max_allowed;
use tailor_core::policy::controlled_resources;
use tailor_core::quantity::from_amount;
use tailor_crds::{ContainerResourcePolicy, PodResourcePolicy, ResourceList};

use crate::quantity::{QuantityError, cpu_millis, memory_bytes};
use crate::units::{Resource, ResourceAmount};

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

    /// The set amounts as a `ResourceList` of canonical quantities (exact: they parse back to the same
    /// integers).
    pub fn to_resource_list(&self) -> ResourceList {
        [Resource::Cpu, Resource::Memory]
            .into_iter()
            .filter_map(|r| {
                self.get(r)
                    .map(|v| (r.name().to_string(), from_amount(r.name(), v)))
            })
            .collect()
    }
}

/// A policy quantity map that does not parse.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
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

/// Which of cpu and memory a container policy controls (`controlledResources`, default both; other names
/// are ignored).
pub fn controlled(policy: Option<&ContainerResourcePolicy>) -> (bool, bool) {
    let list = controlled_resources(policy);
    (
        list.iter().any(|r| r == "cpu"),
        list.iter().any(|r| r == "memory"),
    )
}

/// Parses the cpu and memory entries of a policy quantity map; other resources are ignored.
fn parse_list(
    policy: Option<&ContainerResourcePolicy>,
    field: &'static str,
    list: Option<&ResourceList>,
) -> Result<Resources, PolicyError> {
    let mut out = Resources::default();
    for (k, q) in list.into_iter().flatten() {
        let parsed = match k.as_str() {
            "cpu" => cpu_millis(&q.0).map(|x| out.cpu = Some(x)),
            "memory" => memory_bytes(&q.0).map(|x| out.memory = Some(x)),
            _ => Ok(()),
        };
        parsed.map_err(|source| PolicyError {
            container: policy
                .and_then(|p| p.container_name.clone())
                .unwrap_or_default(),
            field,
            resource: k.clone(),
            source,
        })?;
    }
    Ok(out)
}

/// Validates every `minAllowed` / `maxAllowed` quantity so later capping cannot fail.
pub fn validate(policy: &PodResourcePolicy) -> Result<(), PolicyError> {
    for p in policy.container_policies.iter().flatten() {
        parse_list(Some(p), "minAllowed", p.min_allowed.as_ref())?;
        parse_list(Some(p), "maxAllowed", p.max_allowed.as_ref())?;
    }
    Ok(())
}

/// Which caps a capping pass applied, per resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapsHit {
    /// `(field, resource, "minAllowed"|"maxAllowed", cap value)`.
    pub hits: Vec<(&'static str, Resource, &'static str, ResourceAmount)>,
}

/// A container policy's bounds in integer millicores / bytes, with the global maximum merged in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntegerBounds {
    /// `minAllowed`.
    pub min: Resources,
    /// `maxAllowed`, resources it does not name filled from the global maximum
    /// ([`effective_max_allowed`]).
    pub max: Resources,
}

impl IntegerBounds {
    /// Compiles `policy`'s bounds; `global_max` is [`Resources::to_resource_list`] of
    /// `--container-recommendation-max-allowed-*`.
    pub fn compile(
        policy: Option<&ContainerResourcePolicy>,
        global_max: &ResourceList,
    ) -> Result<Self, PolicyError> {
        let min = parse_list(
            policy,
            "minAllowed",
            policy.and_then(|p| p.min_allowed.as_ref()),
        )?;
        let max = effective_max_allowed(policy, Some(global_max));
        let max = parse_list(policy, "maxAllowed", max.as_ref())?;
        Ok(IntegerBounds { min, max })
    }

    /// Caps target, lower and upper bound to the bounds. Zero caps are ignored; uncappedTarget is not
    /// among the fields and is left alone.
    pub fn apply(&self, fields: [(&'static str, &mut Resources); 3]) -> CapsHit {
        let mut hits = CapsHit::default();
        for (field, res) in fields {
            for r in [Resource::Cpu, Resource::Memory] {
                let Some(v) = res.get_mut(r) else { continue };
                if let Some(lo) = self.min.get(r).filter(|x| *x != 0)
                    && *v < lo
                {
                    *v = lo;
                    hits.hits.push((field, r, "minAllowed", lo));
                }
                if let Some(hi) = self.max.get(r).filter(|x| *x != 0)
                    && *v > hi
                {
                    *v = hi;
                    hits.hits.push((field, r, "maxAllowed", hi));
                }
            }
        }
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn list(entries: &[(&str, &str)]) -> ResourceList {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    #[test]
    fn resource_list_round_trips_exactly() {
        for v in [0, 1, 999, 1001, 1500, 123_456_789, i64::MAX / 7, i64::MAX] {
            let r = Resources {
                cpu: Some(v),
                memory: Some(v),
            };
            let b = IntegerBounds::compile(None, &r.to_resource_list()).unwrap();
            assert_eq!(b.max, r, "{v}");
        }
    }

    #[test]
    fn per_container_max_wins_and_global_fills() {
        let p = ContainerResourcePolicy {
            container_name: Some("app".into()),
            min_allowed: Some(list(&[("cpu", "100m")])),
            max_allowed: Some(list(&[("cpu", "2"), ("memory", "0")])),
            ..Default::default()
        };
        let global = Resources {
            cpu: Some(500),
            memory: Some(1 << 30),
        };
        let b = IntegerBounds::compile(Some(&p), &global.to_resource_list()).unwrap();
        assert_eq!(b.min.cpu, Some(100));
        assert_eq!(b.max.cpu, Some(2000));
        // A zero own bound wins over the global one and is then ignored by capping.
        assert_eq!(b.max.memory, Some(0));
        let mut t = Resources {
            cpu: Some(50),
            memory: Some(5 << 30),
        };
        let (mut l, mut u) = (Resources::default(), Resources::default());
        let hits = b.apply([
            ("target", &mut t),
            ("lowerBound", &mut l),
            ("upperBound", &mut u),
        ]);
        assert_eq!(t.cpu, Some(100));
        assert_eq!(t.memory, Some(5 << 30));
        assert_eq!(
            hits.hits,
            vec![("target", Resource::Cpu, "minAllowed", 100)]
        );
    }

    #[test]
    fn bad_quantity_names_container_field_and_resource() {
        let p = PodResourcePolicy {
            container_policies: Some(vec![ContainerResourcePolicy {
                container_name: Some("app".into()),
                max_allowed: Some(list(&[("memory", "lots")])),
                ..Default::default()
            }]),
        };
        let err = validate(&p).unwrap_err().to_string();
        assert_eq!(
            err,
            "container policy \"app\": maxAllowed.memory: invalid quantity \"lots\""
        );
    }

    #[test]
    fn controlled_defaults_to_both() {
        assert_eq!(controlled(None), (true, true));
        let p = ContainerResourcePolicy {
            controlled_resources: Some(vec!["memory".into(), "gpu".into()]),
            ..Default::default()
        };
        assert_eq!(controlled(Some(&p)), (false, true));
    }
}
