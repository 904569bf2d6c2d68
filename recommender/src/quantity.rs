//! Kubernetes quantity strings → integer millicores / bytes.
//!
//! TODO(crds): switch to `tailor_crds::quantity` once it lands; this local parser only covers what traces use.

/// Error for a quantity string that cannot be parsed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// Parses a quantity and returns its value × 1000, rounded up (Go's `MilliValue`).
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(s.to_string());
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err());
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return Err(err());
    }
    let mantissa: i128 = digits.parse().map_err(|_| err())?;
    // value = mantissa * 10^(dec_exp) * 2^(bin_exp); we want value * 1000
    let mut dec_exp: i32 = 3 - frac_part.len() as i32;
    let mut bin_exp: u32 = 0;
    match suffix {
        "" => {}
        "n" => dec_exp -= 9,
        "u" => dec_exp -= 6,
        "m" => dec_exp -= 3,
        "k" => dec_exp += 3,
        "M" => dec_exp += 6,
        "G" => dec_exp += 9,
        "T" => dec_exp += 12,
        "P" => dec_exp += 15,
        "E" => dec_exp += 18,
        "Ki" => bin_exp = 10,
        "Mi" => bin_exp = 20,
        "Gi" => bin_exp = 30,
        "Ti" => bin_exp = 40,
        "Pi" => bin_exp = 50,
        "Ei" => bin_exp = 60,
        other => {
            let e = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(err)?;
            let e: i32 = e.parse().map_err(|_| err())?;
            if e.abs() > 30 {
                return Err(err());
            }
            dec_exp += e;
        }
    }
    let mut v = mantissa.checked_mul(1i128 << bin_exp).ok_or_else(err)?;
    if dec_exp >= 0 {
        v = v
            .checked_mul(10i128.checked_pow(dec_exp as u32).ok_or_else(err)?)
            .ok_or_else(err)?;
    } else {
        let d = 10i128.checked_pow((-dec_exp) as u32).ok_or_else(err)?;
        v = (v + d - 1) / d; // ceil for non-negative
    }
    Ok(if neg { -v } else { v })
}

/// Millicores of a CPU quantity (rounded up).
pub fn cpu_millis(s: &str) -> Result<i64, QuantityError> {
    let v = parse_milli(s)?;
    i64::try_from(v).map_err(|_| QuantityError(s.to_string()))
}

/// Bytes of a memory quantity (rounded up, Go's `Value`).
pub fn memory_bytes(s: &str) -> Result<i64, QuantityError> {
    let v = parse_milli(s)?;
    let b = if v >= 0 { (v + 999) / 1000 } else { v / 1000 };
    i64::try_from(b).map_err(|_| QuantityError(s.to_string()))
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
