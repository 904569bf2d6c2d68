//! Quantity strings from traces and flags → integer millicores / bytes, through `tailor_core::quantity`
//! (exact, Go's rounding up).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_core::quantity::{Amount, to_i64};

/// Error for a quantity string that cannot be parsed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

fn parse(s: &str) -> Result<Amount, QuantityError> {
    Amount::parse(&Quantity(s.trim().to_string())).map_err(|_| QuantityError(s.to_string()))
}

/// Parses a quantity and returns its value × 1000, rounded up (Go's `MilliValue`).
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    cpu_millis(s).map(i128::from)
}

/// Millicores of a CPU quantity (rounded up).
pub fn cpu_millis(s: &str) -> Result<i64, QuantityError> {
    to_i64(&parse(s)?.millis()).ok_or_else(|| QuantityError(s.to_string()))
}

/// Bytes of a memory quantity (rounded up, Go's `Value`).
pub fn memory_bytes(s: &str) -> Result<i64, QuantityError> {
    to_i64(&parse(s)?.units()).ok_or_else(|| QuantityError(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(cpu_millis("250m").unwrap(), 250);
        assert_eq!(cpu_millis("1").unwrap(), 1000);
        assert_eq!(cpu_millis("1.5").unwrap(), 1500);
        assert_eq!(memory_bytes("1Gi").unwrap(), 1 << 30);
        assert_eq!(memory_bytes("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(memory_bytes("500M").unwrap(), 500_000_000);
        assert_eq!(memory_bytes("800.61Mi").unwrap(), 839_500_432);
        assert_eq!(memory_bytes("1e3").unwrap(), 1000);
        assert!(cpu_millis("abc").is_err());
        assert!(cpu_millis("").is_err());
    }
}
