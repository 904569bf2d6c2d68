//! Label selectors in their text form (`a=b,c!=d,e in (f,g),h,!i`), as the API server prints them in
//! `status.selector` of a `/scale` subresource and as PromQL-facing flags take them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Longest selector text accepted (the API server's own selectors are far shorter: label keys ≤ 317 bytes,
/// values ≤ 63).
pub const MAX_SELECTOR_TEXT: usize = 16 * 1024;

/// A selector text that cannot be parsed; holds at most 64 bytes of the text (and its length).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid label selector {text:?}: {reason}")]
pub struct SelectorTextError {
    /// The start of the text.
    pub text: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Parses a selector text into a [`LabelSelector`] whose `matchExpressions` keep the text's order: `k=v` and
/// `k==v` become `In [v]`, `k!=v` `NotIn [v]`, `k in (…)` / `k notin (…)` the set operators, `k` `Exists`
/// and `!k` `DoesNotExist`. The empty text selects everything.
pub fn parse(text: &str) -> Result<LabelSelector, SelectorTextError> {
    let err = |reason| SelectorTextError {
        text: crate::text::cut(text, 64),
        reason,
    };
    if text.len() > MAX_SELECTOR_TEXT {
        return Err(err("too long"));
    }
    let mut expressions = Vec::new();
    let requirement =
        |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
            key: key.trim().to_owned(),
            operator: operator.to_owned(),
            values,
        };
    for part in split_top_level(text) {
        let p = part.trim();
        if p.is_empty() {
            continue;
        }
        let expression = if let Some(k) = p.strip_prefix('!') {
            requirement(k, "DoesNotExist", None)
        } else if let Some((k, v)) = p.split_once("!=") {
            requirement(k, "NotIn", Some(vec![v.trim().to_owned()]))
        } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
            requirement(k, "In", Some(vec![v.trim().to_owned()]))
        } else if let Some((k, set)) = split_word(p, " notin ") {
            requirement(
                k,
                "NotIn",
                Some(parse_set(set).ok_or_else(|| err("bad set"))?),
            )
        } else if let Some((k, set)) = split_word(p, " in ") {
            requirement(k, "In", Some(parse_set(set).ok_or_else(|| err("bad set"))?))
        } else if p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            requirement(p, "Exists", None)
        } else {
            return Err(err("unknown requirement"));
        };
        expressions.push(expression);
    }
    Ok(LabelSelector {
        match_labels: None,
        match_expressions: Some(expressions),
    })
}

/// Splits at commas outside parentheses.
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
    out
}

fn split_word<'a>(p: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    p.find(word)
        .map(|i| (p[..i].trim(), p[i + word.len()..].trim()))
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|x| x.trim().to_owned())
            .filter(|x| !x.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(text: &str) -> Vec<(String, String, Vec<String>)> {
        parse(text)
            .expect("parses")
            .match_expressions
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.key, r.operator, r.values.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn every_operator_in_the_texts_order() {
        let got = ops("app = web,tier!=db, env in (a, b),zone notin (x),canary,!legacy,k==v");
        let want = [
            ("app", "In", vec!["web"]),
            ("tier", "NotIn", vec!["db"]),
            ("env", "In", vec!["a", "b"]),
            ("zone", "NotIn", vec!["x"]),
            ("canary", "Exists", vec![]),
            ("legacy", "DoesNotExist", vec![]),
            ("k", "In", vec!["v"]),
        ];
        assert_eq!(got.len(), want.len());
        for (g, (k, op, vs)) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1.as_str()), (k, op));
            assert_eq!(g.2, vs);
        }
        assert!(ops("").is_empty());
    }

    #[test]
    fn bad_text_is_refused_with_a_short_excerpt() {
        assert_eq!(parse("env in a,b").unwrap_err().reason, "bad set");
        assert_eq!(parse("a b").unwrap_err().reason, "unknown requirement");
        let long = "x".repeat(MAX_SELECTOR_TEXT + 1);
        let e = parse(&long).unwrap_err();
        assert_eq!(e.reason, "too long");
        assert!(
            e.text.starts_with(&"x".repeat(64))
                && e.text.ends_with(&format!("…[{} bytes]", long.len()))
        );
    }
}
