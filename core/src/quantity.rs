//! Resource quantities, exactly.
//!
//! Kubernetes quantities are decimal numbers with an SI or binary suffix (or an exponent). Both components
//! need Go's `Value()` / `MilliValue()` (rounded **up**), exact sums and comparisons, `floor(a·b/c)` without
//! overflow, and the canonical string form of a result in the format of the quantity it came from.
//! Everything here is exact (big integers, with a 128-bit fast path in `small` that every cluster value
//! takes), so huge values such as `1Ei` of CPU reach upstream's int64 cap instead of wrapping.
//!
//! Why not `kube_quantity`: it parses through `f64` (`9223372036854775807` becomes `...808`), rejects `1Ei`,
//! truncates fractional mantissas in its integer conversions (`1.5Gi` → `1Gi`) and compares binary with
//! decimal quantities through `f32` factors. Upstream's numbers must match to the byte, so Tailor keeps
//! this small exact implementation (tested against the cases above) instead.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

mod small;

use small::Num;
pub use small::{mul_div_ceil as mul_div_ceil_i128, mul_div_floor as mul_div_floor_i128};
use tailor_crds::schema::MAX_QUANTITY_LEN;

/// A quantity that is not a valid Kubernetes quantity, or does not fit where it is needed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub struct QuantityError {
    /// The text as given.
    pub value: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

/// How a quantity is written, kept for results derived from it (Go's `resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `1500m`, `2k`, `10M`.
    #[default]
    DecimalSi,
    /// `1Gi`, `512Mi`.
    BinarySi,
    /// `1e3`.
    DecimalExponent,
}

/// An exact quantity: `num / 10^scale`, plus the format it was written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amount {
    num: Num,
    scale: u32,
    /// The format of the source text.
    pub format: Format,
}

/// Largest decimal exponent accepted (far beyond anything a cluster uses; keeps arithmetic bounded).
const MAX_EXPONENT: i64 = 1000;

fn pow10(n: u32) -> BigInt {
    match 10u128.checked_pow(n) {
        Some(p) => BigInt::from(p),
        None => num_traits::pow(BigInt::from(10u8), n as usize),
    }
}

impl Amount {
    /// Parses a quantity string.
    pub fn parse(q: &Quantity) -> Result<Self, QuantityError> {
        parse_str(&q.0)
    }

    /// An integer amount of base units (bytes, cores).
    pub fn from_units(units: BigInt, format: Format) -> Self {
        Self {
            num: Num::from_big(units),
            scale: 0,
            format,
        }
    }

    /// An integer amount of thousandths (millicores).
    pub fn from_millis(millis: BigInt, format: Format) -> Self {
        Self {
            num: Num::from_big(millis),
            scale: 3,
            format,
        }
    }

    /// Zero, in decimal SI.
    pub fn zero() -> Self {
        Self::from_units(BigInt::zero(), Format::DecimalSi)
    }

    fn scaled_to(&self, scale: u32) -> BigInt {
        if let Some(v) = self.scaled_small(scale) {
            return BigInt::from(v);
        }
        let num = self.num.big();
        if scale >= self.scale {
            num * pow10(scale - self.scale)
        } else {
            num.div_floor(&pow10(self.scale - scale))
        }
    }

    /// `floor(value · 10^scale)` when it fits in 128 bits.
    fn scaled_small(&self, scale: u32) -> Option<i128> {
        let v = self.num.small()?;
        if scale >= self.scale {
            v.checked_mul(small::pow10(scale - self.scale)?)
        } else {
            small::div_floor(v, small::pow10(self.scale - scale)?)
        }
    }

    /// `ceil(value · 10^digits)`.
    fn ceil_at(&self, digits: u32) -> BigInt {
        if let Some(v) = self.ceil_small(digits) {
            return BigInt::from(v);
        }
        let num = self.num.big();
        if digits >= self.scale {
            num * pow10(digits - self.scale)
        } else {
            num.div_ceil(&pow10(self.scale - digits))
        }
    }

    /// `ceil(value · 10^digits)` when it fits in 128 bits.
    fn ceil_small(&self, digits: u32) -> Option<i128> {
        let v = self.num.small()?;
        if digits >= self.scale {
            v.checked_mul(small::pow10(digits - self.scale)?)
        } else {
            small::div_ceil(v, small::pow10(self.scale - digits)?)
        }
    }

    /// [`Amount::units`] when it fits in 128 bits (without big-integer work).
    pub fn units_i128(&self) -> Option<i128> {
        self.ceil_small(0)
    }

    /// [`Amount::millis`] when it fits in 128 bits (without big-integer work).
    pub fn millis_i128(&self) -> Option<i128> {
        self.ceil_small(3)
    }

    /// [`Amount::amount`] when it fits in 128 bits (without big-integer work).
    pub fn amount_i128(&self, resource: &str) -> Option<i128> {
        if resource == "cpu" {
            self.millis_i128()
        } else {
            self.units_i128()
        }
    }

    /// [`Amount::from_amount`] for an amount in 128 bits.
    pub fn from_amount_i128(resource: &str, amount: i128, format: Format) -> Self {
        Self {
            num: Num::Small(amount),
            scale: if resource == "cpu" { 3 } else { 0 },
            format,
        }
    }

    /// Whole base units, rounded up (Go's `Value()` without the int64 wrap).
    pub fn units(&self) -> BigInt {
        self.ceil_at(0)
    }

    /// Thousandths, rounded up (Go's `MilliValue()` without the int64 wrap).
    pub fn millis(&self) -> BigInt {
        self.ceil_at(3)
    }

    /// The resource's integer amount: millicores for `cpu`, rounded-up whole units otherwise.
    pub fn amount(&self, resource: &str) -> BigInt {
        if resource == "cpu" {
            self.millis()
        } else {
            self.units()
        }
    }

    /// Builds a quantity of `resource` from its integer amount (see [`Amount::amount`]).
    pub fn from_amount(resource: &str, amount: BigInt, format: Format) -> Self {
        if resource == "cpu" {
            Self::from_millis(amount, format)
        } else {
            Self::from_units(amount, format)
        }
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.num.is_negative()
    }

    /// Whether the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.num.is_zero()
    }

    /// Whether Go's `Value()` is zero (values are rounded up, so `1m` of memory is not zero).
    pub fn units_zero(&self) -> bool {
        match self.units_i128() {
            Some(v) => v == 0,
            None => self.units().is_zero(),
        }
    }

    /// Exact comparison.
    pub fn cmp_value(&self, other: &Self) -> Ordering {
        let scale = self.scale.max(other.scale);
        if let (Some(a), Some(b)) = (self.scaled_small(scale), other.scaled_small(scale)) {
            return a.cmp(&b);
        }
        self.scaled_to(scale).cmp(&other.scaled_to(scale))
    }

    /// Exact sum; keeps `self`'s format.
    pub fn add(&self, other: &Self) -> Self {
        let scale = self.scale.max(other.scale);
        let sum = match (self.scaled_small(scale), other.scaled_small(scale)) {
            (Some(a), Some(b)) => a.checked_add(b).map(Num::Small),
            _ => None,
        };
        Self {
            num: sum
                .unwrap_or_else(|| Num::from_big(self.scaled_to(scale) + other.scaled_to(scale))),
            scale,
            format: self.format,
        }
    }

    /// The canonical string form in this amount's format (Go's `Quantity.String()`); values finer than
    /// a nano-unit are rounded up to it, as Kubernetes does.
    pub fn to_quantity(&self) -> Quantity {
        Quantity(self.canonical())
    }

    fn canonical(&self) -> String {
        // Work in nano-units.
        if let Some(nanos) = self.ceil_small(9) {
            return match nanos.cmp(&0) {
                Ordering::Equal => "0".into(),
                Ordering::Greater => canonical_u128(nanos.unsigned_abs(), self.format),
                Ordering::Less => format!("-{}", canonical_u128(nanos.unsigned_abs(), self.format)),
            };
        }
        let nanos = self.ceil_at(9);
        if nanos.is_zero() {
            return "0".into();
        }
        let negative = nanos.is_negative();
        let abs = nanos.abs();
        let sign = if negative { "-" } else { "" };
        if let Some(small) = abs.to_u128() {
            return format!("{sign}{}", canonical_u128(small, self.format));
        }
        let billion = pow10(9);
        if self.format == Format::BinarySi {
            let (units, rem) = abs.div_rem(&billion);
            if rem.is_zero() && units >= BigInt::from(1024) {
                let mut mantissa = units;
                let mut exp = 0usize;
                let k = BigInt::from(1024);
                while binary_suffix(exp + 1).is_some() && (&mantissa % &k).is_zero() {
                    mantissa /= &k;
                    exp += 1;
                }
                if let Some(suffix) = binary_suffix(exp) {
                    return format!("{sign}{mantissa}{suffix}");
                }
                // Not a multiple of 1024: Go prints it in decimal SI.
            }
        }
        format!("{sign}{}", decimal_big(abs, self.format))
    }
}

/// [`Amount::canonical`] for a positive amount of nano-units that fits in 128 bits (the common case, without
/// big-integer arithmetic).
fn canonical_u128(nanos: u128, format: Format) -> String {
    const BILLION: u128 = 1_000_000_000;
    if format == Format::BinarySi && nanos.is_multiple_of(BILLION) && nanos / BILLION >= 1024 {
        let mut mantissa = nanos / BILLION;
        let mut exp = 0usize;
        while binary_suffix(exp + 1).is_some() && mantissa.is_multiple_of(1024) {
            mantissa /= 1024;
            exp += 1;
        }
        if let Some(suffix) = binary_suffix(exp) {
            return format!("{mantissa}{suffix}");
        }
    }
    let mut mantissa = nanos;
    let mut exp: i32 = -9;
    while mantissa != 0 && mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exp += 1;
    }
    while exp.rem_euclid(3) != 0 {
        match mantissa.checked_mul(10) {
            Some(m) => mantissa = m,
            // Too large for the fast path: the exact one prints it.
            None => return decimal_big(BigInt::from(nanos), format),
        }
        exp -= 1;
    }
    decimal_text(&mantissa, exp, format)
}

/// A positive number of nano-units in decimal form: every factor of ten moved into the exponent, then the
/// exponent lowered to a multiple of 3 (apimachinery's `AsCanonicalBytes`).
fn decimal_big(nanos: BigInt, format: Format) -> String {
    let mut mantissa = nanos;
    let mut exp: i32 = -9;
    let ten = BigInt::from(10u8);
    while !mantissa.is_zero() {
        let (q, r) = mantissa.div_rem(&ten);
        if !r.is_zero() {
            break;
        }
        mantissa = q;
        exp += 1;
    }
    while exp.rem_euclid(3) != 0 {
        mantissa *= &ten;
        exp -= 1;
    }
    decimal_text(&mantissa, exp, format)
}

/// `mantissa · 10^exp` (exp a multiple of 3) as Go prints it: an SI suffix from `n` to `E`, else (and for the
/// exponent format) `e<exp>`, as apimachinery does beyond `E` rather than drop the exponent.
fn decimal_text(mantissa: &impl std::fmt::Display, exp: i32, format: Format) -> String {
    if format == Format::DecimalSi && (-9..=18).contains(&exp) {
        return format!("{mantissa}{}", decimal_suffix(exp));
    }
    if exp == 0 {
        format!("{mantissa}")
    } else {
        format!("{mantissa}e{exp}")
    }
}

/// Clamps a big integer into `i64` (for reporting); `None` when out of range.
pub fn to_i64(v: &BigInt) -> Option<i64> {
    v.to_i64()
}

/// `floor(a · b / c)`; `None` when `c` is zero.
pub fn mul_div_floor(a: &BigInt, b: &BigInt, c: &BigInt) -> Option<BigInt> {
    if c.is_zero() {
        return None;
    }
    Some((a * b).div_floor(c))
}

/// `ceil(a · b / c)`; `None` when `c` is zero.
pub fn mul_div_ceil(a: &BigInt, b: &BigInt, c: &BigInt) -> Option<BigInt> {
    if c.is_zero() {
        return None;
    }
    Some((a * b).div_ceil(c))
}

/// `i64::MAX` as a big integer (upstream's cap for limits that do not fit).
pub fn int64_max() -> BigInt {
    BigInt::from(i64::MAX)
}

/// Suffix → (power of ten, power of two, format) of the value it multiplies.
const SUFFIXES: [(&str, i64, u32, Format); 15] = [
    ("n", -9, 0, Format::DecimalSi),
    ("u", -6, 0, Format::DecimalSi),
    ("m", -3, 0, Format::DecimalSi),
    ("k", 3, 0, Format::DecimalSi),
    ("M", 6, 0, Format::DecimalSi),
    ("G", 9, 0, Format::DecimalSi),
    ("T", 12, 0, Format::DecimalSi),
    ("P", 15, 0, Format::DecimalSi),
    ("E", 18, 0, Format::DecimalSi),
    ("Ki", 0, 10, Format::BinarySi),
    ("Mi", 0, 20, Format::BinarySi),
    ("Gi", 0, 30, Format::BinarySi),
    ("Ti", 0, 40, Format::BinarySi),
    ("Pi", 0, 50, Format::BinarySi),
    ("Ei", 0, 60, Format::BinarySi),
];

/// The binary suffix of `1024^power` (`Ki` for 1 … `Ei` for 6); `None` for 0 or beyond `Ei`.
pub fn binary_suffix(power: usize) -> Option<&'static str> {
    let bits = u32::try_from(power).ok()?.checked_mul(10)?;
    SUFFIXES
        .iter()
        .find(|&&(_, ten, two, format)| {
            format == Format::BinarySi && ten == 0 && two == bits && bits > 0
        })
        .map(|&(suffix, ..)| suffix)
}

/// The decimal SI suffix of `10^exp` for `exp` a multiple of 3 in [-9, 18] (`""` for 0).
fn decimal_suffix(exp: i32) -> &'static str {
    SUFFIXES
        .iter()
        .find(|&&(_, ten, _, format)| format == Format::DecimalSi && ten == i64::from(exp))
        .map_or("", |&(suffix, ..)| suffix)
}

/// How much of a rejected quantity's text an error keeps (the rest is summarised by its length).
const ERROR_TEXT_LEN: usize = 64;

fn parse_str(text: &str) -> Result<Amount, QuantityError> {
    let err = |reason| QuantityError {
        value: crate::text::cut(text, ERROR_TEXT_LEN),
        reason,
    };
    if text.len() > MAX_QUANTITY_LEN {
        return Err(err("longer than 128 characters"));
    }
    let s = text.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err("no digits"));
    }
    if frac_part.contains('.') {
        return Err(err("more than one decimal point"));
    }
    // Zeros that carry no value are dropped from the text, in one pass, before any arithmetic: equal values
    // then compare and print alike, and the big-integer work depends only on the significant digits.
    let frac_part = frac_part.trim_end_matches('0');
    let mut scale = i64::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;
    let mut binary_exp: u32 = 0;
    let format = if suffix.is_empty() {
        Format::DecimalSi
    } else if let Some(&(_, exponent, power_of_two, format)) =
        SUFFIXES.iter().find(|(name, ..)| *name == suffix)
    {
        scale -= exponent;
        binary_exp = power_of_two;
        format
    } else {
        let exp_text = suffix
            .strip_prefix('e')
            .or_else(|| suffix.strip_prefix('E'))
            .ok_or_else(|| err("unknown suffix"))?;
        let exp: i64 = exp_text.parse().map_err(|_| err("bad exponent"))?;
        if exp.abs() > MAX_EXPONENT {
            return Err(err("exponent out of range"));
        }
        scale -= exp;
        Format::DecimalExponent
    };
    if let Some((num, scale)) = small::parse(int_part, frac_part, negative, scale, binary_exp) {
        return Ok(Amount {
            num: Num::Small(num),
            scale,
            format,
        });
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let mut num: BigInt = if digits.is_empty() {
        BigInt::zero()
    } else {
        digits.parse().map_err(|_| err("bad digits"))?
    };
    if num.is_zero() {
        return Ok(Amount {
            num: Num::Small(0),
            scale: 0,
            format,
        });
    }
    if binary_exp > 0 {
        num <<= binary_exp as usize;
    }
    if scale < 0 {
        num *= pow10(u32::try_from(-scale).map_err(|_| err("exponent out of range"))?);
        scale = 0;
    }
    let mut scale = u32::try_from(scale).map_err(|_| err("too many digits"))?;
    if negative {
        num = -num;
    }
    // A suffix below one (`m`, `u`, `n`, `e-3`) can leave trailing zeros of the integer part in the scale:
    // at most as many as the text has digits, so this stays linear in the (capped) text.
    let ten = BigInt::from(10u8);
    while scale > 0 {
        let (q, r) = num.div_rem(&ten);
        if !r.is_zero() {
            break;
        }
        num = q;
        scale -= 1;
    }
    Ok(Amount {
        num: Num::from_big(num),
        scale,
        format,
    })
}

/// Whether two quantities are equal in value (`1Gi` == `1073741824`).
pub fn same_value(a: &Quantity, b: &Quantity) -> Result<bool, QuantityError> {
    Ok(Amount::parse(a)?.cmp_value(&Amount::parse(b)?) == Ordering::Equal)
}

/// `One` for big integers, re-exported for callers that build amounts.
pub fn one() -> BigInt {
    BigInt::one()
}

impl Amount {
    /// Whether the value is a whole number of `10^-digits` units (e.g. `100m` is whole at 3 digits).
    fn is_whole_at(&self, digits: u32) -> bool {
        if let (Some(c), Some(f)) = (self.ceil_small(digits), self.scaled_small(digits)) {
            return c == f;
        }
        self.ceil_at(digits) == self.scaled_to(digits)
    }

    /// The value as a float in base units (cores, bytes); exact up to `f64` precision.
    pub fn to_f64(&self) -> f64 {
        let num = match self.num.small() {
            // Exact in f64: the same value as the big-integer conversion.
            Some(v) if v.unsigned_abs() < 1 << 53 => v as f64,
            _ => self.num.big().to_f64().unwrap_or(f64::NAN),
        };
        num / 10f64.powi(self.scale as i32)
    }
}

fn fit_i64(v: BigInt, q: &Quantity) -> Result<i64, QuantityError> {
    v.to_i64().ok_or(QuantityError {
        value: q.0.clone(),
        reason: "does not fit in 64 bits",
    })
}

/// [`fit_i64`] of the 128-bit value when there is one, else of the exact one.
fn fit_i64_or(
    v: Option<i128>,
    exact: impl FnOnce() -> BigInt,
    q: &Quantity,
) -> Result<i64, QuantityError> {
    match v {
        Some(v) => i64::try_from(v).map_err(|_| QuantityError {
            value: q.0.clone(),
            reason: "does not fit in 64 bits",
        }),
        None => fit_i64(exact(), q),
    }
}

/// The quantity as a float in base units (cores, bytes).
pub fn as_f64(q: &Quantity) -> Result<f64, QuantityError> {
    Ok(Amount::parse(q)?.to_f64())
}

/// The value in whole base units, rounded up (Go's `Quantity.Value`).
pub fn value(q: &Quantity) -> Result<i64, QuantityError> {
    let a = Amount::parse(q)?;
    fit_i64_or(a.units_i128(), || a.units(), q)
}

/// The value in thousandths, rounded up (Go's `Quantity.MilliValue`): CPU millicores.
pub fn milli_value(q: &Quantity) -> Result<i64, QuantityError> {
    let a = Amount::parse(q)?;
    fit_i64_or(a.millis_i128(), || a.millis(), q)
}

/// Whether the quantity is a whole number of thousandths (`100m` yes, `187500u` no).
pub fn is_whole_milli(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(Amount::parse(q)?.is_whole_at(3))
}

/// Whether the quantity is a whole number of base units (`500M` yes, `100m` no).
pub fn is_whole(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(Amount::parse(q)?.is_whole_at(0))
}

/// Whether the quantity equals zero.
pub fn is_zero(q: &Quantity) -> Result<bool, QuantityError> {
    Ok(Amount::parse(q)?.is_zero())
}

/// Compares two quantities by value, exactly.
pub fn cmp(a: &Quantity, b: &Quantity) -> Result<Ordering, QuantityError> {
    Ok(Amount::parse(a)?.cmp_value(&Amount::parse(b)?))
}

/// The amount of a resource in its integer unit: millicores for `cpu`, whole units otherwise.
pub fn amount(resource: &str, q: &Quantity) -> Result<i64, QuantityError> {
    let a = Amount::parse(q)?;
    fit_i64_or(a.amount_i128(resource), || a.amount(resource), q)
}

/// The canonical decimal-SI quantity for an integer amount of a resource (see [`amount`]).
pub fn from_amount(resource: &str, amount: i64) -> Quantity {
    Amount::from_amount(resource, BigInt::from(amount), Format::DecimalSi).to_quantity()
}

/// Canonical decimal-SI form of `millis` thousandths: `1500m`, `2`, `1k`.
pub fn from_millis(millis: i64) -> Quantity {
    Amount::from_millis(BigInt::from(millis), Format::DecimalSi).to_quantity()
}

/// Canonical decimal-SI form of an integer: `262144000` → `262144k`, `5527335984` → `5527335984`.
pub fn from_decimal(value: i64) -> Quantity {
    Amount::from_units(BigInt::from(value), Format::DecimalSi).to_quantity()
}

/// Canonical binary-SI form of a byte count: `1536Mi`, `1Gi`; counts not divisible by 1024 print in decimal SI.
pub fn from_binary(bytes: i64) -> Quantity {
    Amount::from_units(BigInt::from(bytes), Format::BinarySi).to_quantity()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn canon(s: &str) -> String {
        Amount::parse(&q(s)).unwrap().to_quantity().0
    }

    #[test]
    fn rounding_up() {
        assert_eq!(
            Amount::parse(&q("187500u")).unwrap().millis(),
            BigInt::from(188)
        );
        assert_eq!(Amount::parse(&q("100m")).unwrap().units(), BigInt::from(1));
        assert_eq!(
            Amount::parse(&q("1Gi")).unwrap().units(),
            BigInt::from(1u64 << 30)
        );
        assert_eq!(Amount::parse(&q("-0.5")).unwrap().units(), BigInt::from(0));
    }

    #[test]
    fn canonical_strings() {
        assert_eq!(canon("0.5"), "500m");
        assert_eq!(canon("1000m"), "1");
        assert_eq!(canon("1024Mi"), "1Gi");
        assert_eq!(canon("1536Mi"), "1536Mi");
        assert_eq!(canon("262144000"), "262144k");
        assert_eq!(canon("1e3"), "1e3");
        assert_eq!(canon("1.5Gi"), "1536Mi");
        assert_eq!(canon("0"), "0");
        assert_eq!(canon("10M"), "10M");
        assert_eq!(canon("9223372036854775807m"), "9223372036854775807m");
        // Beyond E there is no suffix: exponent form, as apimachinery prints it.
        assert_eq!(canon("1000E"), "1e21");
        assert_eq!(canon("1E200"), "100e198");
        assert_eq!(canon("1e200"), "100e198");
    }

    #[test]
    fn zeros_without_value_are_dropped() {
        let longest = format!("1.{}", "0".repeat(MAX_QUANTITY_LEN - 2));
        assert_eq!(canon(&longest), "1");
        assert_eq!(canon("000250m"), "250m");
        assert_eq!(canon("0.000"), "0");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("1500000u"), "1500m");
    }

    /// The work per quantity must not grow faster than its text: the old normalisation divided an N-digit
    /// number once per trailing zero (25 s at N = 300,000).
    #[test]
    fn parse_time_is_linear_and_long_text_is_refused() {
        let time = |n: usize| {
            let text = q(&format!("1.{}", "0".repeat(n)));
            let start = std::time::Instant::now();
            for _ in 0..20 {
                let err = Amount::parse(&text).expect_err("longer than the cap");
                assert_eq!(err.reason, "longer than 128 characters");
                assert!(
                    err.value.len() < 100,
                    "error text is capped: {}",
                    err.value.len()
                );
                assert!(err.value.ends_with(&format!("[{} bytes]", n + 2)));
            }
            start.elapsed()
        };
        let small = time(10_000);
        let large = time(100_000);
        // Linear would be 10×; the quadratic parser was 100×. Slack for timer noise on a busy machine.
        assert!(
            large < small * 30 + std::time::Duration::from_millis(5),
            "N=10k {small:?}, N=100k {large:?}"
        );
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in ["", "lots", "1.2.3", "1Zi", "--1", ".", "1e"] {
            assert!(Amount::parse(&q(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn comparison() {
        assert!(same_value(&q("1Ki"), &q("1024")).unwrap());
        assert!(same_value(&q("1"), &q("1000m")).unwrap());
        assert!(!same_value(&q("1k"), &q("1Ki")).unwrap());
    }

    #[test]
    fn exact_where_float_parsers_are_not() {
        assert_eq!(value(&q("1Ei")).unwrap(), 1 << 60);
        assert_eq!(value(&q("1.5Gi")).unwrap(), 3 << 29);
        assert_eq!(value(&q("9223372036854775807")).unwrap(), i64::MAX);
        assert_eq!(cmp(&q("1Gi"), &q("1073741825")).unwrap(), Ordering::Less);
        assert_eq!(milli_value(&q("187500u")).unwrap(), 188);
        assert_eq!(milli_value(&q("1e3")).unwrap(), 1_000_000);
        assert!(!is_whole_milli(&q("187500u")).unwrap());
        assert!(is_whole_milli(&q("100m")).unwrap());
        assert!(is_whole(&q("500M")).unwrap());
        assert!(!is_whole(&q("100m")).unwrap());
        assert!(value(&q("10Ei")).is_err(), "does not fit in i64");
    }

    #[test]
    fn canonical_helpers() {
        assert_eq!(from_millis(1500).0, "1500m");
        assert_eq!(from_millis(2000).0, "2");
        assert_eq!(from_decimal(262_144_000).0, "262144k");
        assert_eq!(from_decimal(5_527_335_984).0, "5527335984");
        assert_eq!(from_binary(1536 << 20).0, "1536Mi");
        assert_eq!(from_amount("cpu", 250).0, "250m");
        assert_eq!(from_amount("memory", 1000).0, "1k");
    }
}
