//! Label sets and equality/set-based label selectors (the subset VPA selectors use).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A pod's labels, sorted.
pub type Labels = BTreeMap<String, String>;

/// A compact, sorted label set (what the model stores per distinct set).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSet(Box<[(Box<str>, Box<str>)]>);

impl LabelSet {
    /// From a label map.
    pub fn new(labels: &Labels) -> Self {
        LabelSet(
            labels
                .iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
        )
    }

    /// Value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// The canonical `k1=v1,k2=v2` string (as [`label_set_key`] gives for the same labels).
    pub fn key(&self) -> String {
        let mut s = String::new();
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }

    /// Whether `selector` selects this set.
    pub fn selected_by(&self, selector: &Selector) -> bool {
        selector.matches_with(|k| self.get(k))
    }
}

/// Canonical string of a label set: `k1=v1,k2=v2` sorted by key.
pub fn label_set_key(labels: &Labels) -> String {
    let mut s = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// One selector requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key in (values)` (also `key=value`).
    In(String, Vec<String>),
    /// `key notin (values)` (also `key!=value`).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A label selector. `Nothing` matches no pod; an empty `Requirements` list matches every pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Matches nothing (unresolvable target).
    Nothing,
    /// All requirements must hold.
    Requirements(Vec<Requirement>),
}

/// A selector string that cannot be parsed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid label selector {0:?}")]
pub struct SelectorError(pub String);

impl Selector {
    /// Matches every pod.
    pub fn everything() -> Self {
        Selector::Requirements(Vec::new())
    }

    /// Parses `a=b,c!=d,e in (f,g),!h` ([`tailor_core::label_selector::parse`]).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let selector = tailor_core::label_selector::parse(s).map_err(|e| SelectorError(e.text))?;
        Self::from_label_selector(&selector)
    }

    /// From a Kubernetes `LabelSelector` (`matchLabels` + `matchExpressions`); `In` / `NotIn` without values
    /// match nothing / everything, an unknown operator is an error.
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Requirement::In(k.clone(), vec![v.clone()]));
        }
        for e in sel.match_expressions.iter().flatten() {
            let key = e.key.clone();
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => reqs.push(Requirement::In(key, values)),
                "NotIn" => reqs.push(Requirement::NotIn(key, values)),
                "Exists" => reqs.push(Requirement::Exists(key)),
                "DoesNotExist" => reqs.push(Requirement::DoesNotExist(key)),
                _ => {
                    let json = serde_json::to_value(sel).map(|v| v.to_string());
                    return Err(SelectorError(json.unwrap_or_default()));
                }
            }
        }
        Ok(Selector::Requirements(reqs))
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether a label set, given as a lookup function, satisfies the selector.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Requirements(reqs) => reqs.iter().all(|r| match r {
                Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
                Requirement::Exists(k) => get(k).is_some(),
                Requirement::DoesNotExist(k) => get(k).is_none(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches() {
        let s = Selector::parse("label-1 = value-1").unwrap();
        assert!(s.matches(&labels(&[("label-1", "value-1")])));
        assert!(!s.matches(&labels(&[])));
        let s = Selector::parse("name=vpa-pod,type=stateful").unwrap();
        assert!(s.matches(&labels(&[("name", "vpa-pod"), ("type", "stateful")])));
        assert!(!s.matches(&labels(&[("name", "vpa-pod")])));
        assert!(Selector::parse("").unwrap().matches(&labels(&[])));
        let s = Selector::parse("env in (a, b),!x").unwrap();
        assert!(s.matches(&labels(&[("env", "b")])));
        assert!(!Selector::Nothing.matches(&labels(&[])));
        assert_eq!(label_set_key(&labels(&[("b", "2"), ("a", "1")])), "a=1,b=2");
    }
}
