//! Resource amounts, time and the float conventions the recommender shares with upstream.
//!
//! CPU amounts are integer millicores, memory amounts integer bytes; histograms hold float cores and bytes.
//! Time is an `i64` of nanoseconds since the Unix epoch (`Nanos`); durations are `i64` nanoseconds.

/// Integer millicores (CPU) or bytes (memory).
pub type ResourceAmount = i64;

/// Nanoseconds since the Unix epoch.
pub type Nanos = i64;

/// Largest amount any float conversion produces (1e14).
pub const MAX_RESOURCE_AMOUNT: ResourceAmount = 100_000_000_000_000;

/// Nanoseconds per second.
pub const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Seconds from Go's zero time (0001-01-01T00:00:00Z) to the Unix epoch.
pub const GO_ZERO_TO_UNIX_SECS: i64 = 62_135_596_800;

/// The two resources the recommender handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// CPU, in millicores.
    Cpu,
    /// Memory, in bytes.
    Memory,
}

impl Resource {
    /// Kubernetes resource name.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }
}

/// Converts a float to an amount: above 1e14 → 1e14, negative → 0, otherwise truncation toward zero.
/// NaN maps to 0 (upstream's result is platform dependent and always lifted by the minimum afterwards).
pub fn resource_amount_from_float(v: f64) -> ResourceAmount {
    if v.is_nan() || v < 0.0 {
        0
    } else if v > MAX_RESOURCE_AMOUNT as f64 {
        MAX_RESOURCE_AMOUNT
    } else {
        v as i64
    }
}

/// Cores → millicores (`f(cores * 1000)`).
pub fn cpu_amount_from_cores(cores: f64) -> ResourceAmount {
    resource_amount_from_float(cores * 1000.0)
}

/// Millicores → cores.
pub fn cores_from_cpu_amount(millicores: ResourceAmount) -> f64 {
    millicores as f64 / 1000.0
}

/// Bytes (float) → bytes (integer amount).
pub fn memory_amount_from_bytes(bytes: f64) -> ResourceAmount {
    resource_amount_from_float(bytes)
}

/// Bytes amount → float bytes.
pub fn bytes_from_memory_amount(bytes: ResourceAmount) -> f64 {
    bytes as f64
}

/// `f(amount * factor)`.
pub fn scale_resource(amount: ResourceAmount, factor: f64) -> ResourceAmount {
    resource_amount_from_float(amount as f64 * factor)
}

/// Difference `a - b` as a Go `time.Duration` would compute it (saturating at the i64 range).
pub fn sat_sub(a: i128, b: i128) -> i64 {
    let d = a - b;
    d.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Rounds a timestamp (ns since Unix epoch) to the nearest multiple of `d` measured from Go's zero time;
/// exact halves round up (Go's `Time.Round`). `d <= 0` returns the time unchanged.
pub fn round_to_multiple_from_go_zero(t: i128, d: i64) -> i128 {
    if d <= 0 {
        return t;
    }
    let d = d as i128;
    let abs = t + GO_ZERO_TO_UNIX_SECS as i128 * NANOS_PER_SEC as i128;
    let r = abs.rem_euclid(d);
    if r + r < d { t - r } else { t + (d - r) }
}

/// Seconds (possibly fractional) → nanoseconds as upstream's trace reader does:
/// `time.Unix(floor(t), round((t - floor(t)) * 1e9))`.
pub fn nanos_from_unix_seconds(t: f64) -> Option<Nanos> {
    if !t.is_finite() {
        return None;
    }
    let secs = t.floor();
    let frac = ((t - secs) * 1e9).round();
    if secs.abs() > 9.0e9 {
        return None;
    }
    Some(secs as i64 * NANOS_PER_SEC + frac as i64)
}

/// Seconds (float) → duration in nanoseconds, `round(s * 1e9)`.
pub fn duration_from_secs(s: f64) -> i64 {
    let v = (s * 1e9).round();
    if v.is_nan() {
        0
    } else if v >= i64::MAX as f64 {
        i64::MAX
    } else if v <= i64::MIN as f64 {
        i64::MIN
    } else {
        v as i64
    }
}

/// Go's `math.Pow`: integer exponents use repeated squaring on the normalised mantissa, as Go does, so
/// results (histogram bucket boundaries, confidence multipliers) are bit-identical to upstream's.
pub fn go_pow(x: f64, y: f64) -> f64 {
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if y == 1.0 {
        return x;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 {
        return if y < 0.0 { f64::INFINITY } else { 0.0 };
    }
    if x.is_infinite() {
        if x > 0.0 {
            return if y < 0.0 { 0.0 } else { f64::INFINITY };
        }
        return x.powf(y);
    }
    if y.fract() != 0.0 || y.abs() >= 9.0e18 || x < 0.0 {
        return x.powf(y);
    }
    let yi = y.abs() as u64;
    let mut a1 = 1.0f64;
    let mut ae: i64 = 0;
    let (mut x1, xe) = frexp(x);
    let mut xe = xe as i64;
    let mut i = yi;
    while i != 0 {
        if !(-(1 << 12)..=(1 << 12)).contains(&xe) {
            ae += xe;
            break;
        }
        if i & 1 == 1 {
            a1 *= x1;
            ae += xe;
        }
        x1 *= x1;
        xe <<= 1;
        if x1 < 0.5 {
            x1 += x1;
            xe -= 1;
        }
        i >>= 1;
    }
    if y < 0.0 {
        a1 = 1.0 / a1;
        ae = -ae;
    }
    ldexp(a1, ae.clamp(-100_000, 100_000) as i32)
}

/// Splits `x` into a mantissa in [0.5, 1) and a power of two.
pub fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // subnormal: normalise first
        let (m, e) = frexp(x * (1u64 << 54) as f64);
        return (m, e - 54);
    }
    let e = exp - 1022;
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, e)
}

/// `x * 2^e`, exact where representable (like Go's `math.Ldexp`).
pub fn ldexp(x: f64, e: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mut x = x;
    let mut e = e;
    // Apply in steps so intermediate powers stay representable.
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
        if x.is_infinite() {
            return x;
        }
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
        if x == 0.0 {
            return x;
        }
    }
    if e < -1022 {
        // two steps to keep subnormal rounding single
        x * 2f64.powi(e + 1022) * 2f64.powi(-1022)
    } else {
        x * 2f64.powi(e)
    }
}

/// `2^x`. Uses the standard library's `exp2`.
#[inline]
pub fn exp2(x: f64) -> f64 {
    x.exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_pow_matches_small_cases() {
        assert_eq!(go_pow(1.05, 0.0), 1.0);
        assert_eq!(go_pow(1.5, 2.0), 2.25);
        assert_eq!(go_pow(2.0, 10.0), 1024.0);
    }

    #[test]
    fn round_half_up_from_go_zero() {
        let h = 3600 * NANOS_PER_SEC;
        // 2009-02-13T23:31:30Z → 2009-02-14T00:00:00Z
        let t = 1_234_567_890i128 * NANOS_PER_SEC as i128;
        assert_eq!(
            round_to_multiple_from_go_zero(t, h),
            1_234_569_600i128 * NANOS_PER_SEC as i128
        );
    }

    #[test]
    fn conversions_truncate_and_clamp() {
        assert_eq!(cpu_amount_from_cores(0.069946), 69);
        assert_eq!(resource_amount_from_float(-1.0), 0);
        assert_eq!(resource_amount_from_float(1e20), MAX_RESOURCE_AMOUNT);
        assert_eq!(resource_amount_from_float(f64::NAN), 0);
    }

    #[test]
    fn go_pow_special_cases() {
        assert_eq!(go_pow(f64::INFINITY, 1.0), f64::INFINITY);
        assert_eq!(go_pow(f64::INFINITY, -2.0), 0.0);
        assert_eq!(go_pow(1.2, 2.0), 1.2 * 1.2);
        assert_eq!(go_pow(17.0, 2.0), 289.0);
    }
}
