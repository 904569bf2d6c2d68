//! A namespace's fleet policy: whether its workloads get VPAs, in which mode, with which defaults — read
//! from its label and annotations, or the reason it is refused.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use tailor_crds::{ControlledValues, ResourceList, UpdateMode};

use super::plan::Namespace;
use super::{
    CONTROLLED_VALUES_KEY, MAX_ALLOWED_KEY, MAX_VALUE_LEN, MIN_ALLOWED_KEY, MIN_REPLICAS_KEY,
    PROFILE_KEY, VPA_KEY,
};
use crate::quantity::Amount;
use crate::target::selector_matches;
use crate::text::cut;

/// The modes a namespace label or a workload annotation may name.
pub const MODES: &[&str] = &["Off", "Initial", "Recreate", "InPlaceOrRecreate", "InPlace"];
/// The resources `min-allowed` and `max-allowed` may name.
const RESOURCES: &[&str] = &["cpu", "memory"];
/// Largest `min-replicas` accepted.
const MAX_MIN_REPLICAS: i32 = 1_000_000;

/// What the operator decided for the whole cluster.
#[derive(Clone, Debug, Default)]
pub struct FleetSettings {
    /// Namespaces chosen without their own label (`None`: only labelled namespaces).
    pub namespace_selector: Option<LabelSelector>,
    /// The mode of namespaces the selector chooses.
    pub default_mode: Option<UpdateMode>,
    /// Namespaces never onboarded (Tailor's own and `kube-system`, unless the operator named them).
    pub protected: BTreeSet<String>,
    /// The profile names a namespace may choose.
    pub profiles: Vec<String>,
}

/// How a namespace was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// Its own `tailor.dev/vpa` label.
    Label,
    /// The operator's namespace selector, with the default mode.
    Selector,
}

/// A chosen namespace's policy: the created VPAs' mode and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespacePolicy {
    /// The namespace.
    pub namespace: String,
    /// The created VPAs' `updateMode` (a workload annotation may override it).
    pub mode: UpdateMode,
    /// How the namespace was chosen.
    pub source: PolicySource,
    /// The created VPAs' profile.
    pub profile: Option<String>,
    /// `minAllowed` for every container.
    pub min_allowed: ResourceList,
    /// `maxAllowed` for every container.
    pub max_allowed: ResourceList,
    /// `controlledValues` for every container.
    pub controlled_values: Option<ControlledValues>,
    /// `updatePolicy.minReplicas`.
    pub min_replicas: Option<i32>,
}

impl NamespacePolicy {
    /// Where the policy came from, as the created VPAs' policy annotation says it.
    pub fn describe(&self) -> String {
        match self.source {
            PolicySource::Label => {
                format!("namespace {} label {VPA_KEY}={}", self.namespace, self.mode)
            }
            PolicySource::Selector => format!(
                "namespace {} chosen by the fleet namespace selector (mode {})",
                self.namespace, self.mode
            ),
        }
    }
}

/// Why a namespace's policy is refused: nothing is created from it, and what it created before stays as
/// it is.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// The label names no mode.
    #[error("label {VPA_KEY}={value:?} is not a mode (one of {})", MODES.join(", "))]
    UnknownMode {
        /// The label's value (at most 64 bytes of it).
        value: String,
    },
    /// The namespace is Tailor's own or `kube-system`, and the operator did not name it.
    #[error(
        "namespace {namespace} is protected (Tailor's own namespace and kube-system are onboarded only when \
         the operator names them in the fleet's allowed namespaces)"
    )]
    Protected {
        /// The namespace.
        namespace: String,
    },
    /// An annotation cannot be read.
    #[error("annotation {key}: {message}")]
    Annotation {
        /// The annotation.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// A mode named by a label or annotation value.
pub fn parse_mode(value: &str) -> Option<UpdateMode> {
    let v = value.trim();
    MODES.contains(&v).then(|| UpdateMode::from(v))
}

/// `namespace`'s policy: `Ok(None)` when it is not chosen.
pub fn read(
    namespace: &Namespace,
    settings: &FleetSettings,
) -> Result<Option<NamespacePolicy>, PolicyError> {
    let (mode, source) = match namespace.labels.get(VPA_KEY) {
        Some(_) if settings.protected.contains(&namespace.name) => {
            return Err(PolicyError::Protected {
                namespace: namespace.name.clone(),
            });
        }
        Some(value) => {
            let mode = parse_mode(value).ok_or_else(|| PolicyError::UnknownMode {
                value: cut(value, 64),
            })?;
            (mode, PolicySource::Label)
        }
        None => match (&settings.namespace_selector, &settings.default_mode) {
            (Some(selector), Some(mode))
                if selector_matches(selector, &namespace.labels).unwrap_or(false) =>
            {
                // The selector never reaches a protected namespace: choosing one takes its own label.
                if settings.protected.contains(&namespace.name) {
                    return Ok(None);
                }
                (mode.clone(), PolicySource::Selector)
            }
            _ => return Ok(None),
        },
    };
    let a = &namespace.annotations;
    let min_allowed = resources(a, MIN_ALLOWED_KEY)?;
    let max_allowed = resources(a, MAX_ALLOWED_KEY)?;
    check_order(&min_allowed, &max_allowed)?;
    Ok(Some(NamespacePolicy {
        namespace: namespace.name.clone(),
        mode,
        source,
        profile: profile(a, settings)?,
        min_allowed,
        max_allowed,
        controlled_values: controlled_values(a)?,
        min_replicas: min_replicas(a)?,
    }))
}

/// An annotation's value, trimmed; refused past [`MAX_VALUE_LEN`].
fn value<'a>(
    annotations: &'a BTreeMap<String, String>,
    key: &'static str,
) -> Result<Option<&'a str>, PolicyError> {
    match annotations.get(key) {
        None => Ok(None),
        Some(v) if v.len() > MAX_VALUE_LEN => Err(PolicyError::Annotation {
            key,
            message: format!("longer than {MAX_VALUE_LEN} bytes"),
        }),
        Some(v) => Ok(Some(v.trim())),
    }
}

fn profile(
    annotations: &BTreeMap<String, String>,
    settings: &FleetSettings,
) -> Result<Option<String>, PolicyError> {
    let Some(name) = value(annotations, PROFILE_KEY)? else {
        return Ok(None);
    };
    if settings.profiles.iter().any(|p| p == name) {
        return Ok(Some(name.to_owned()));
    }
    Err(PolicyError::Annotation {
        key: PROFILE_KEY,
        message: format!(
            "unknown profile {:?} (one of {})",
            cut(name, 64),
            settings.profiles.join(", ")
        ),
    })
}

/// `cpu=50m,memory=64Mi` as a resource list: each quantity valid and not negative, each resource once.
fn resources(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<ResourceList, PolicyError> {
    let err = |message: String| PolicyError::Annotation { key, message };
    let mut list = ResourceList::new();
    let Some(text) = value(annotations, key)? else {
        return Ok(list);
    };
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (resource, quantity) = part
            .split_once('=')
            .ok_or_else(|| err(format!("{:?} is not resource=quantity", cut(part, 64))))?;
        let (resource, quantity) = (resource.trim(), quantity.trim());
        if !RESOURCES.contains(&resource) {
            return Err(err(format!(
                "unknown resource {:?} (one of {})",
                cut(resource, 64),
                RESOURCES.join(", ")
            )));
        }
        let q = Quantity(quantity.to_owned());
        match Amount::parse(&q) {
            Ok(a) if a.is_negative() => {
                return Err(err(format!("{resource}: {quantity} is negative")));
            }
            Ok(_) => {}
            Err(e) => return Err(err(format!("{resource}: {e}"))),
        }
        if list.insert(resource.to_owned(), q).is_some() {
            return Err(err(format!("{resource} named twice")));
        }
    }
    Ok(list)
}

/// Refuses a minimum above the maximum of the same resource.
fn check_order(min: &ResourceList, max: &ResourceList) -> Result<(), PolicyError> {
    for (resource, low) in min {
        let Some(high) = max.get(resource) else {
            continue;
        };
        let (Ok(l), Ok(h)) = (Amount::parse(low), Amount::parse(high)) else {
            continue;
        };
        if l.cmp_value(&h).is_gt() {
            return Err(PolicyError::Annotation {
                key: MIN_ALLOWED_KEY,
                message: format!(
                    "{resource}: {} is above {MAX_ALLOWED_KEY}'s {}",
                    low.0, high.0
                ),
            });
        }
    }
    Ok(())
}

fn controlled_values(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<ControlledValues>, PolicyError> {
    let Some(v) = value(annotations, CONTROLLED_VALUES_KEY)? else {
        return Ok(None);
    };
    let parsed = ControlledValues::from(v);
    if parsed.is_known() {
        return Ok(Some(parsed));
    }
    Err(PolicyError::Annotation {
        key: CONTROLLED_VALUES_KEY,
        message: format!(
            "{:?} is not one of {}",
            cut(v, 64),
            ControlledValues::KNOWN.join(", ")
        ),
    })
}

fn min_replicas(annotations: &BTreeMap<String, String>) -> Result<Option<i32>, PolicyError> {
    let Some(v) = value(annotations, MIN_REPLICAS_KEY)? else {
        return Ok(None);
    };
    match v.parse::<i32>() {
        Ok(n) if (1..=MAX_MIN_REPLICAS).contains(&n) => Ok(Some(n)),
        _ => Err(PolicyError::Annotation {
            key: MIN_REPLICAS_KEY,
            message: format!(
                "{:?} is not a whole number from 1 to {MAX_MIN_REPLICAS}",
                cut(v, 64)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Namespace {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Namespace {
            name: "team-a".into(),
            labels: map(labels),
            annotations: map(annotations),
        }
    }

    fn settings() -> FleetSettings {
        FleetSettings {
            profiles: vec!["upstream".into(), "cautious".into()],
            protected: ["kube-system".to_string(), "tailor".to_string()].into(),
            ..FleetSettings::default()
        }
    }

    #[test]
    fn a_label_chooses_the_namespace_with_its_mode_and_defaults() {
        let n = ns(
            &[(VPA_KEY, "Recreate")],
            &[
                (PROFILE_KEY, "cautious"),
                (MIN_ALLOWED_KEY, "cpu=50m, memory=64Mi"),
                (MAX_ALLOWED_KEY, "memory=8Gi"),
                (CONTROLLED_VALUES_KEY, "RequestsOnly"),
                (MIN_REPLICAS_KEY, "2"),
            ],
        );
        let p = read(&n, &settings()).expect("valid").expect("chosen");
        assert_eq!(p.mode, UpdateMode::Recreate);
        assert_eq!(p.source, PolicySource::Label);
        assert_eq!(p.profile.as_deref(), Some("cautious"));
        assert_eq!(p.min_allowed["cpu"].0, "50m");
        assert_eq!(p.min_allowed["memory"].0, "64Mi");
        assert_eq!(p.max_allowed["memory"].0, "8Gi");
        assert_eq!(p.controlled_values, Some(ControlledValues::RequestsOnly));
        assert_eq!(p.min_replicas, Some(2));
        assert_eq!(
            p.describe(),
            "namespace team-a label tailor.dev/vpa=Recreate"
        );
    }

    #[test]
    fn without_a_label_only_the_selector_chooses() {
        assert_eq!(read(&ns(&[("env", "dev")], &[]), &settings()), Ok(None));
        let mut s = settings();
        s.namespace_selector = Some(crate::label_selector::parse("env=dev").expect("selector"));
        s.default_mode = Some(UpdateMode::Off);
        let p = read(&ns(&[("env", "dev")], &[]), &s)
            .expect("valid")
            .expect("chosen");
        assert_eq!(
            (p.mode, p.source),
            (UpdateMode::Off, PolicySource::Selector)
        );
        assert_eq!(read(&ns(&[("env", "prod")], &[]), &s), Ok(None));
        // The selector never reaches a protected namespace; its own label is refused.
        let mut system = ns(&[("env", "dev")], &[]);
        system.name = "kube-system".into();
        assert_eq!(read(&system, &s), Ok(None));
        system.labels.insert(VPA_KEY.into(), "Off".into());
        assert!(matches!(
            read(&system, &s),
            Err(PolicyError::Protected { .. })
        ));
    }

    #[test]
    fn bad_values_are_refused_with_the_key_and_the_value() {
        let unknown = read(&ns(&[(VPA_KEY, "Sometimes")], &[]), &settings());
        assert_eq!(
            unknown.expect_err("refused").to_string(),
            "label tailor.dev/vpa=\"Sometimes\" is not a mode (one of Off, Initial, Recreate, \
             InPlaceOrRecreate, InPlace)"
        );
        let cases = [
            (MIN_ALLOWED_KEY, "cpu=lots", "cpu:"),
            (MIN_ALLOWED_KEY, "cpu=-1", "negative"),
            (MIN_ALLOWED_KEY, "gpu=1", "unknown resource"),
            (MIN_ALLOWED_KEY, "cpu", "not resource=quantity"),
            (MIN_ALLOWED_KEY, "cpu=1,cpu=2", "named twice"),
            (PROFILE_KEY, "fastest", "unknown profile"),
            (CONTROLLED_VALUES_KEY, "Limits", "is not one of"),
            (MIN_REPLICAS_KEY, "0", "whole number"),
            (MIN_REPLICAS_KEY, "two", "whole number"),
        ];
        for (key, value, says) in cases {
            let err = read(&ns(&[(VPA_KEY, "Off")], &[(key, value)]), &settings())
                .expect_err(value)
                .to_string();
            assert!(
                err.contains(key) && err.contains(says),
                "{key}={value}: {err}"
            );
        }
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        let err = read(
            &ns(&[(VPA_KEY, "Off")], &[(PROFILE_KEY, &long)]),
            &settings(),
        );
        assert!(err.expect_err("long").to_string().contains("longer than"));
        let crossed = [
            (MIN_ALLOWED_KEY, "memory=2Gi"),
            (MAX_ALLOWED_KEY, "memory=1Gi"),
        ];
        let err = read(&ns(&[(VPA_KEY, "Off")], &crossed), &settings());
        assert!(err.expect_err("crossed").to_string().contains("above"));
    }
}
