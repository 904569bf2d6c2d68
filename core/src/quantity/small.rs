//! The 128-bit fast path of [`super::Amount`]: every quantity a cluster writes fits, so parsing, rounding,
//! comparing and printing it need no big-integer allocation. Values that do not fit (`1E200`, 40-digit
//! mantissas) take the exact big-integer path; both give the same results.

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

/// The numerator of an amount: 128 bits whenever it fits (always, so that equal values are equal
/// structurally), a big integer otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Num {
    Small(i128),
    Big(BigInt),
}

impl Num {
    /// The numerator for `value`, small when it fits.
    pub(super) fn from_big(value: BigInt) -> Self {
        match value.to_i128() {
            Some(v) => Num::Small(v),
            None => Num::Big(value),
        }
    }

    /// The numerator as a big integer.
    pub(super) fn big(&self) -> BigInt {
        match self {
            Num::Small(v) => BigInt::from(*v),
            Num::Big(b) => b.clone(),
        }
    }

    /// The numerator when it fits in 128 bits.
    pub(super) fn small(&self) -> Option<i128> {
        match self {
            Num::Small(v) => Some(*v),
            Num::Big(_) => None,
        }
    }

    pub(super) fn is_zero(&self) -> bool {
        match self {
            Num::Small(v) => *v == 0,
            Num::Big(b) => b.is_zero(),
        }
    }

    pub(super) fn is_negative(&self) -> bool {
        match self {
            Num::Small(v) => *v < 0,
            Num::Big(b) => b.is_negative(),
        }
    }
}

/// `10^n` when it fits in 128 bits.
pub(super) fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// `floor(a / b)`; `None` when `b` is zero or the quotient overflows.
pub(super) fn div_floor(a: i128, b: i128) -> Option<i128> {
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// `ceil(a / b)`; `None` when `b` is zero or the quotient overflows.
pub(super) fn div_ceil(a: i128, b: i128) -> Option<i128> {
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    Some(if r != 0 && ((r > 0) == (b > 0)) {
        q + 1
    } else {
        q
    })
}

/// The fast path of parsing: `num / 10^scale` from the digits of the integer and fractional parts (the
/// latter without trailing zeros), the sign, the scale before normalisation and the suffix's power of two.
/// `None` when a step does not fit in 128 bits (the caller then parses exactly with big integers).
pub(super) fn parse(
    int_part: &str,
    frac_part: &str,
    negative: bool,
    scale: i64,
    binary_exp: u32,
) -> Option<(i128, u32)> {
    let mut n: i128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        n = n
            .checked_mul(10)?
            .checked_add(i128::from(b.wrapping_sub(b'0')))?;
    }
    if n == 0 {
        return Some((0, 0));
    }
    if binary_exp > 0 {
        n = n.checked_mul(1i128.checked_shl(binary_exp)?)?;
    }
    let mut scale = scale;
    if scale < 0 {
        n = n.checked_mul(pow10(u32::try_from(-scale).ok()?)?)?;
        scale = 0;
    }
    let mut scale = u32::try_from(scale).ok()?;
    if negative {
        n = -n;
    }
    while scale > 0 && n % 10 == 0 {
        n /= 10;
        scale -= 1;
    }
    Some((n, scale))
}

/// `floor(a · b / c)` in 128 bits; `None` when `c` is zero or the product does not fit.
pub fn mul_div_floor(a: i128, b: i128, c: i128) -> Option<i128> {
    div_floor(a.checked_mul(b)?, c)
}

/// `ceil(a · b / c)` in 128 bits; `None` when `c` is zero or the product does not fit.
pub fn mul_div_ceil(a: i128, b: i128, c: i128) -> Option<i128> {
    div_ceil(a.checked_mul(b)?, c)
}

#[cfg(test)]
mod tests {
    use num_integer::Integer;

    use super::*;

    #[test]
    fn rounding_matches_big_integers() {
        let values = [-9, -7, -3, -1, 0, 1, 3, 7, 9, 1000, -1000];
        for a in values {
            for b in values {
                if b == 0 {
                    assert_eq!(div_floor(a, b), None);
                    continue;
                }
                let (ba, bb) = (BigInt::from(a), BigInt::from(b));
                assert_eq!(div_floor(a, b).map(BigInt::from), Some(ba.div_floor(&bb)));
                assert_eq!(div_ceil(a, b).map(BigInt::from), Some(ba.div_ceil(&bb)));
            }
        }
        assert_eq!(div_floor(i128::MIN, -1), None);
        assert_eq!(mul_div_floor(i128::MAX, 2, 3), None);
    }
}
