//! One object of a manifest as a JSON value, built from any self-describing deserializer (YAML or JSON)
//! within a budget of bytes and nodes, so that one oversized object in a file cannot take the process's
//! memory: the reader holds one object at a time and this bounds it.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Most bytes of keys and strings in one object (the API server refuses objects far smaller).
pub const MAX_OBJECT_BYTES: usize = 16 * 1024 * 1024;
/// Most values (maps, sequences, scalars) in one object.
pub const MAX_OBJECT_NODES: usize = 2_000_000;

/// Marks the error a budget overrun raises, so the reader can tell it from a syntax error.
pub(crate) const OVER_BUDGET: &str = "object larger than the reader's limit";

/// What is left of one object's budget.
#[derive(Debug)]
pub(crate) struct Budget {
    bytes: usize,
    nodes: usize,
}

impl Budget {
    /// The budget of one object.
    pub(crate) fn object() -> Self {
        Budget {
            bytes: MAX_OBJECT_BYTES,
            nodes: MAX_OBJECT_NODES,
        }
    }

    fn charge<E: de::Error>(&mut self, bytes: usize) -> Result<(), E> {
        match (self.bytes.checked_sub(bytes), self.nodes.checked_sub(1)) {
            (Some(b), Some(n)) => {
                self.bytes = b;
                self.nodes = n;
                Ok(())
            }
            _ => Err(E::custom(format_args!(
                "{OVER_BUDGET} ({MAX_OBJECT_BYTES} bytes of text, {MAX_OBJECT_NODES} values)"
            ))),
        }
    }
}

/// Deserializes one value within `budget`.
pub(crate) struct Bounded<'b> {
    /// The budget it draws on.
    pub(crate) budget: &'b mut Budget,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.budget.charge(0)?;
        <Number as de::Deserialize>::deserialize(de::value::I128Deserializer::<E>::new(v))
            .map(Value::Number)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.budget.charge(0)?;
        <Number as de::Deserialize>::deserialize(de::value::U128Deserializer::<E>::new(v))
            .map(Value::Number)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Bounded {
            budget: self.budget,
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.budget.charge(key.len())?;
            let value = map.next_value_seed(Bounded {
                budget: self.budget,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_value_serde_json_builds() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        let mut budget = Budget::object();
        let mut de = serde_json::Deserializer::from_str(text);
        let value = Bounded {
            budget: &mut budget,
        }
        .deserialize(&mut de)
        .unwrap();
        assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn an_object_over_budget_is_refused() {
        let text = format!(r#"{{"a": "{}"}}"#, "x".repeat(MAX_OBJECT_BYTES));
        let mut budget = Budget::object();
        let mut de = serde_json::Deserializer::from_str(&text);
        let err = Bounded {
            budget: &mut budget,
        }
        .deserialize(&mut de)
        .unwrap_err();
        assert!(err.to_string().contains(OVER_BUDGET), "{err}");
    }
}
