//! Label and field selectors as the API server reads them from `?labelSelector=` and `?fieldSelector=`.
//!
//! Field selectors are evaluated generically on the JSON object (`status.phase`, `metadata.name`, `reason`,
//! …): a missing field reads as the empty string, as the API server's field sets do for the fields it
//! supports.

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    /// `key=value` / `key==value`.
    Eq(String, String),
    /// `key!=value` (also true when the label is absent).
    Ne(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("expected (values) in {s:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the selector syntax of `kubectl -l` and client-go.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                LabelReq::In(k.trim().into(), set_values(v)?)
            } else if part
                .chars()
                .all(|c| c.is_alphanumeric() || "-_./".contains(c))
            {
                LabelReq::Exists(part.to_string())
            } else {
                return Err(format!("unparsable label requirement {part:?}"));
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `object`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::Ne(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
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
        for part in split_top_level(s) {
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
