//! Quota scopes (`spec.scopes`, `spec.scopeSelector`) evaluated against a pod. The rule is conservative: a
//! term it cannot evaluate ([`ScopeTerm::Unknown`]: `CrossNamespacePodAffinity`, `VolumeAttributesClass`,
//! scopes added later, selectors over the bounds) counts as matching, so the quota is fitted although the
//! API server might not charge the pod to it — never the other way round.

use k8s_openapi::api::core::v1::{Pod, ResourceQuotaSpec};

use super::Quota;

/// At most this many scope terms are kept per quota; a quota with more is fitted as if it matched.
pub(crate) const MAX_SCOPE_TERMS: usize = 16;
/// At most this many priority class names are kept per term; a longer list is an [`ScopeTerm::Unknown`].
pub(crate) const MAX_SCOPE_VALUES: usize = 64;

/// One scope condition of a quota; all of a quota's terms must hold for the pod to be charged to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeTerm {
    /// `Terminating` (`true`: the pod sets `activeDeadlineSeconds`) or `NotTerminating` (`false`).
    Terminating(bool),
    /// `BestEffort` (`true`) or `NotBestEffort` (`false`). A pod Tailor sizes has requests, so it is not
    /// best-effort (and the API server refuses cpu/memory keys on a `BestEffort` quota anyway).
    BestEffort(bool),
    /// `PriorityClass` with an operator: `In`/`NotIn` the names, or `Exists`/`DoesNotExist` (`names` empty).
    PriorityClass {
        /// Whether the pod's class must be among `names` (`In`, `Exists`) or not (`NotIn`, `DoesNotExist`).
        within: bool,
        /// The names (`Exists`/`DoesNotExist`: empty, meaning "any class").
        names: Box<[Box<str>]>,
        /// `Exists` or `DoesNotExist`.
        any: bool,
    },
    /// A term the rule cannot evaluate: counts as matching.
    Unknown,
}

/// The terms of a quota spec, bounded by [`MAX_SCOPE_TERMS`] (more: one [`ScopeTerm::Unknown`]).
pub(super) fn terms(spec: Option<&ResourceQuotaSpec>) -> Vec<ScopeTerm> {
    let Some(spec) = spec else {
        return Vec::new();
    };
    let scopes = spec.scopes.iter().flatten().map(|s| named(s, true));
    let selected = spec
        .scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter().flatten())
        .map(|e| selected(&e.scope_name, &e.operator, e.values.as_deref()));
    let all: Vec<ScopeTerm> = scopes.chain(selected).take(MAX_SCOPE_TERMS + 1).collect();
    if all.len() > MAX_SCOPE_TERMS {
        return vec![ScopeTerm::Unknown];
    }
    all
}

/// A scope by name; `holds` false negates it (`DoesNotExist` in a selector).
fn named(scope: &str, holds: bool) -> ScopeTerm {
    match scope {
        "Terminating" => ScopeTerm::Terminating(holds),
        "NotTerminating" => ScopeTerm::Terminating(!holds),
        "BestEffort" => ScopeTerm::BestEffort(holds),
        "NotBestEffort" => ScopeTerm::BestEffort(!holds),
        "PriorityClass" => ScopeTerm::PriorityClass {
            within: holds,
            names: Box::new([]),
            any: true,
        },
        _ => ScopeTerm::Unknown,
    }
}

/// A `scopeSelector` expression.
fn selected(scope: &str, operator: &str, values: Option<&[String]>) -> ScopeTerm {
    let values = values.unwrap_or_default();
    match (scope, operator) {
        (_, "Exists") => named(scope, true),
        (_, "DoesNotExist") => named(scope, false),
        ("PriorityClass", "In" | "NotIn") if values.len() <= MAX_SCOPE_VALUES => {
            ScopeTerm::PriorityClass {
                within: operator == "In",
                names: values.iter().map(|v| v.as_str().into()).collect(),
                any: false,
            }
        }
        _ => ScopeTerm::Unknown,
    }
}

impl ScopeTerm {
    /// Whether the term holds for `pod` (or cannot be evaluated).
    pub fn holds(&self, pod: &Pod) -> bool {
        let spec = pod.spec.as_ref();
        match self {
            ScopeTerm::Terminating(t) => {
                spec.is_some_and(|s| s.active_deadline_seconds.is_some_and(|d| d >= 0)) == *t
            }
            ScopeTerm::BestEffort(b) => !*b,
            ScopeTerm::PriorityClass { within, names, any } => {
                let class = spec.and_then(|s| s.priority_class_name.as_deref());
                let found = match class {
                    Some(c) => *any || names.iter().any(|n| &**n == c),
                    None => false,
                };
                found == *within
            }
            ScopeTerm::Unknown => true,
        }
    }
}

impl Quota {
    /// Whether the API server may charge `pod` to this quota (every scope term holds or is unknown).
    pub fn applies_to(&self, pod: &Pod) -> bool {
        self.scopes.iter().all(|t| t.holds(pod))
    }
}
