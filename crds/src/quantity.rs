//! Resource quantities, parsed and compared with `kube_quantity`.
//!
//! Kubernetes semantics kept here: `value` and `milli_value` round **up** to the next integer (so any
//! positive quantity has a non-zero value), CPU is handled in millicores and memory in bytes, and the
//! canonical string forms match what the API server prints (`1500m`, `2`, `262144k`, `1536Mi`).

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

/// A quantity that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub struct QuantityError {
    /// The text as given.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

/// Relative tolerance for recognising whole numbers after the `f64` scaling `kube_quantity` exposes.
const WHOLE_TOLERANCE: f64 = 1e-9;

/// Parses a quantity.
pub fn parse(q: &Quantity) -> Result<ParsedQuantity, QuantityError> {
    ParsedQuantity::try_from(q).map_err(|e| QuantityError {
        value: q.0.clone(),
        reason: e.to_string(),
    })
}

/// The quantity as a float in base units (cores, bytes).
pub fn as_f64(q: &Quantity) -> Result<f64, QuantityError> {
    let parsed = parse(q)?;
    parsed.to_bytes_f64().ok_or_else(|| QuantityError {
        value: q.0.clone(),
        reason: "out of range".into(),
    })
}

fn nearest_integer(x: f64) -> Option<f64> {
    let r = x.round();
    ((x - r).abs() <= WHOLE_TOLERANCE * r.abs().max(1.0)).then_some(r)
}

fn ceil_to_i64(x: f64, q: &Quantity) -> Result<i64, QuantityError> {
    let c = nearest_integer(x).unwrap_or_else(|| x.ceil());
    if !c.is_finite() || c > i64::MAX as f64 || c < i64::MIN as f64 {
        return Err(QuantityError {
            value: q.0.clone(),
            reason: "does not fit in 64 bits".into(),
        });
    }
    Ok(c as i64)
}

/// The value in whole base units, rounded up (Go's `Quantity.Value`).
pub fn value(q: &Quantity) -> Result<i64, QuantityError> {
    ceil_to_i64(as_f64(q)?, q)
}

/// The value in thousandths, rounded up (Go's `Quantity.MilliValue`): CPU millicores.
pub fn milli_value(q: &Quantity) -> Result<i64, QuantityError> {
    ceil_to_i64(as_f64(q)? * 1000.0, q)
}

/// Whether the quantity is a whole number of thousandths (e.g. `100m` yes, `187500u` no).
pub fn is_whole_milli(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(nearest_integer(as_f64(q)? * 1000.0).is_some())
}

/// Whether the quantity is a whole number of base units (e.g. `500M` yes, `100m` no).
pub fn is_whole(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(nearest_integer(as_f64(q)?).is_some())
}

/// Whether the quantity equals zero.
pub fn is_zero(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(as_f64(q)? == 0.0)
}

/// Compares two quantities by value (exact decimal comparison).
pub fn cmp(a: &Quantity, b: &Quantity) -> Result<Ordering, QuantityError> {
    Ok(parse(a)?.cmp(&parse(b)?))
}

/// The amount of a resource in its integer unit: millicores for `cpu`, whole units otherwise.
pub fn amount(resource: &str, q: &Quantity) -> Result<i64, QuantityError> {
    if resource == "cpu" {
        milli_value(q)
    } else {
        value(q)
    }
}

/// The canonical quantity for an integer amount of a resource (see [`amount`]).
pub fn from_amount(resource: &str, amount: i64) -> Quantity {
    if resource == "cpu" {
        from_millis(amount)
    } else {
        from_decimal(amount)
    }
}

/// Canonical decimal-SI form of `millis` thousandths: `1500m`, `2`, `1k`.
pub fn from_millis(millis: i64) -> Quantity {
    if millis % 1000 == 0 {
        from_decimal(millis / 1000)
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Canonical decimal-SI form of an integer: the largest power-of-1000 suffix that keeps it exact
/// (`262144000` → `262144k`, `5527335984` → `5527335984`).
pub fn from_decimal(value: i64) -> Quantity {
    const SUFFIXES: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    if value == 0 {
        return Quantity("0".into());
    }
    let mut mantissa = value;
    let mut exp = 0usize;
    while exp < SUFFIXES.len() && mantissa % 1000 == 0 {
        mantissa /= 1000;
        exp += 1;
    }
    match exp {
        0 => Quantity(mantissa.to_string()),
        e => Quantity(format!("{mantissa}{}", SUFFIXES[e - 1])),
    }
}

/// Canonical binary-SI form of a byte count: `1536Mi`, `1Gi`; counts not divisible by 1024 stay plain.
pub fn from_binary(bytes: i64) -> Quantity {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes == 0 {
        return Quantity("0".into());
    }
    let mut mantissa = bytes;
    let mut exp = 0usize;
    while exp < SUFFIXES.len() && mantissa % 1024 == 0 {
        mantissa /= 1024;
        exp += 1;
    }
    match exp {
        0 => from_decimal(bytes),
        e => Quantity(format!("{mantissa}{}", SUFFIXES[e - 1])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn values_round_up() {
        assert_eq!(milli_value(&q("100m")).unwrap(), 100);
        assert_eq!(milli_value(&q("1.5")).unwrap(), 1500);
        assert_eq!(milli_value(&q("187500u")).unwrap(), 188);
        assert_eq!(value(&q("100m")).unwrap(), 1);
        assert_eq!(value(&q("1Gi")).unwrap(), 1 << 30);
        assert_eq!(value(&q("500M")).unwrap(), 500_000_000);
    }

    #[test]
    fn wholeness() {
        assert!(is_whole_milli(&q("100m")).unwrap());
        assert!(!is_whole_milli(&q("187500u")).unwrap());
        assert!(is_whole(&q("500M")).unwrap());
        assert!(!is_whole(&q("100m")).unwrap());
    }

    #[test]
    fn comparison_across_formats() {
        assert_eq!(cmp(&q("1Ki"), &q("1024")).unwrap(), Ordering::Equal);
        assert_eq!(cmp(&q("1k"), &q("1Ki")).unwrap(), Ordering::Less);
        assert_eq!(cmp(&q("1"), &q("1000m")).unwrap(), Ordering::Equal);
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(from_millis(1500).0, "1500m");
        assert_eq!(from_millis(2000).0, "2");
        assert_eq!(from_decimal(262_144_000).0, "262144k");
        assert_eq!(from_decimal(5_527_335_984).0, "5527335984");
        assert_eq!(from_binary(1536 << 20).0, "1536Mi");
        assert_eq!(from_binary(1000).0, "1k");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse(&q("lots")).is_err());
        assert!(milli_value(&q("")).is_err());
    }
}
