//! Which fields of a JSON input a typed decode keeps: a serde type silently ignores fields it does not know,
//! so a reader that must honour every input (conformance vectors, `tailor plan --case`) decodes, encodes
//! back and compares.

use serde_json::Value;

/// The paths (below `path`, as `path.key` and `path[n]`) of `input` that `parsed` (the input decoded into
/// its type and encoded back) no longer holds. Empty objects, arrays and nulls count as held: a type may
/// leave them out without losing anything.
pub fn dropped_fields(input: &Value, parsed: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    dropped(input, parsed, path, &mut out);
    out
}

fn dropped(input: &Value, parsed: &Value, path: &str, out: &mut Vec<String>) {
    match (input, parsed) {
        (Value::Object(i), Value::Object(p)) => {
            for (k, v) in i {
                let here = format!("{path}.{k}");
                match p.get(k) {
                    Some(pv) => dropped(v, pv, &here, out),
                    None if is_empty(v) => {}
                    None => out.push(here),
                }
            }
        }
        (Value::Array(i), Value::Array(p)) => {
            for (n, v) in i.iter().enumerate() {
                match p.get(n) {
                    Some(pv) => dropped(v, pv, &format!("{path}[{n}]"), out),
                    None if is_empty(v) => {}
                    None => out.push(format!("{path}[{n}]")),
                }
            }
        }
        (i, Value::Null) if !is_empty(i) => out.push(path.to_owned()),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_every_field_the_type_lost_and_nothing_it_kept() {
        let input = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1}, {"g": 2}], "h": {}, "i": null, "j": 5});
        let parsed = json!({"a": 1, "b": {"c": 2}, "e": [{"f": 1}], "j": null});
        assert_eq!(
            dropped_fields(&input, &parsed, "in"),
            ["in.b.d", "in.e[1]", "in.j"]
        );
        assert!(dropped_fields(&input, &input, "in").is_empty());
    }
}
