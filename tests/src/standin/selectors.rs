//! Label and field selectors as the API server reads them from `?labelSelector=` and `?fieldSelector=`.
//!
//! Field selectors are evaluated generically on the JSON object (`status.phase`, `metadata.name`, `reason`,
//! …): a missing field reads as the empty string, as the API server's field sets do for the fields it
//! supports.

use std::collections::BTreeMap;

use serde_json::Value;

/// A parsed `labelSelector` (the text form, parsed by [`tailor_core::label_selector::parse`] as the binaries
/// parse `/scale` selectors); the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector);

impl LabelSelector {
    /// Parses the selector syntax of `kubectl -l` and client-go; a set operator without values is refused,
    /// as the API server refuses it.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let selector = tailor_core::label_selector::parse(s).map_err(|e| e.to_string())?;
        for r in selector.match_expressions.iter().flatten() {
            if matches!(r.operator.as_str(), "In" | "NotIn")
                && r.values.as_ref().is_none_or(Vec::is_empty)
            {
                return Err(format!("{}: {} needs values", r.key, r.operator));
            }
        }
        Ok(LabelSelector(selector))
    }

    /// Whether `object`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels: BTreeMap<String, String> = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        // Parsing refused the only selectors that cannot be evaluated.
        tailor_core::target::selector_matches(&self.0, &labels).unwrap_or(false)
    }
}

/// A parsed `fieldSelector` (`=`, `==`, `!=` only, as the API server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The value of a dotted field path as the API server's field sets show it (strings as they are, numbers
/// and booleans printed, anything else or missing as empty).
pub fn field_value(object: &Value, path: &str) -> String {
    let mut v = object;
    for seg in path.split('.') {
        match v.get(seg) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses `a=b,c!=d`.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        // Field selectors have no set syntax: every comma separates requirements.
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("unparsable field requirement {part:?}"));
            };
            reqs.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether `object` satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(object, k) == *v) == *eq)
    }
}

/// The string form of a `LabelSelector` object (`matchLabels` and `matchExpressions`), or of a plain
/// label map (ReplicationController's `spec.selector`), as the `/scale` subresource reports it.
pub fn selector_string(selector: &Value) -> String {
    let mut parts = Vec::new();
    let labels = selector
        .get("matchLabels")
        .or_else(|| (selector.get("matchExpressions").is_none()).then_some(selector));
    if let Some(Value::Object(m)) = labels {
        for (k, v) in m {
            if let Some(v) = v.as_str() {
                parts.push(format!("{k}={v}"));
            }
        }
    }
    if let Some(Value::Array(exprs)) = selector.get("matchExpressions") {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
                Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
                Some("Exists") => parts.push(key.to_string()),
                Some("DoesNotExist") => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let pod = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=fe", true),
            ("app!=web", false),
            ("app in (db, web)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=x", true),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&pod), want, "{s}");
        }
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "a"}, "status": {"phase": "Pending"}});
        assert!(
            !FieldSelector::parse("status.phase!=Pending")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("reason!=Evicted")
                .unwrap()
                .matches(&pod)
        );
    }

    #[test]
    fn scale_selector_strings() {
        assert_eq!(
            selector_string(&json!({"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]})),
            "app=web,t in (a,b)"
        );
        assert_eq!(selector_string(&json!({"app": "rc"})), "app=rc");
    }
}
