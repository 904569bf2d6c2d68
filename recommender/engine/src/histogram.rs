//! Exponential/linear bucketed histograms with exponential decay, and their checkpoint form.
//!
//! Storage is sparse: a histogram keeps a dense window over the range of buckets it has ever touched
//! (typically a handful for memory and a few dozen for CPU), not all 176 `f64`s.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::units::{Nanos, go_pow, ldexp, round_to_multiple_from_go_zero, sat_sub};

/// Bucket growth of the VPA presets (5 %).
pub const BUCKET_SIZE_GROWTH: f64 = 0.05;
/// Weight of one CPU sample.
pub const MIN_SAMPLE_WEIGHT: f64 = 0.1;
/// Weight below which a bucket counts as empty in the VPA presets.
pub const EPSILON: f64 = 0.001 * MIN_SAMPLE_WEIGHT;
/// Largest integer bucket weight in a checkpoint.
pub const MAX_CHECKPOINT_WEIGHT: u32 = 10000;
/// Buckets allocated on each side of the first touched bucket.
const INITIAL_SLACK: usize = 1;
/// Extra buckets allocated beyond the needed one when the window grows.
const GROWTH_SLACK: usize = 3;
/// Renormalise a decaying histogram when a sample is this many half-lives after its reference.
pub const MAX_DECAY_EXPONENT: i64 = 100;

/// Errors building histogram options or loading checkpoints.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HistogramError {
    /// Options out of their domain.
    #[error("invalid histogram options: {0}")]
    InvalidOptions(&'static str),
    /// A checkpoint that cannot be loaded.
    #[error("invalid histogram checkpoint: {0}")]
    InvalidCheckpoint(String),
}

/// How values map to buckets.
#[derive(Debug, Clone, PartialEq)]
pub enum HistogramOptions {
    /// Equal-width buckets.
    Linear {
        /// Width of every bucket.
        bucket_size: f64,
        /// Empty-bucket threshold.
        epsilon: f64,
        /// Number of buckets.
        num_buckets: usize,
    },
    /// Bucket i has width `first * ratio^i`.
    Exponential {
        /// Width of bucket 0.
        first_bucket_size: f64,
        /// Growth ratio.
        ratio: f64,
        /// Empty-bucket threshold.
        epsilon: f64,
        /// Number of buckets.
        num_buckets: usize,
        /// `ln(ratio)`.
        ln_ratio: f64,
        /// Start of every bucket.
        starts: Vec<f64>,
        /// `thresholds[b]`: the smallest value the logarithmic formula puts in bucket ≥ b (b ≥ 1), found once
        /// by bisection over the formula itself, so lookups need no logarithm and give identical buckets.
        thresholds: Vec<f64>,
        /// Buckets per doubling, for the initial guess.
        buckets_per_octave: f64,
    },
}

impl HistogramOptions {
    /// Linear buckets of `bucket_size` up to `max_value`.
    pub fn linear(max_value: f64, bucket_size: f64, epsilon: f64) -> Result<Self, HistogramError> {
        if !(max_value > 0.0 && bucket_size > 0.0 && epsilon > 0.0) {
            return Err(HistogramError::InvalidOptions(
                "max_value, bucket_size and epsilon must be > 0",
            ));
        }
        let n = (max_value / bucket_size).ceil() + 1.0;
        if !(n.is_finite() && n <= 1_000_000.0) {
            return Err(HistogramError::InvalidOptions("too many buckets"));
        }
        Ok(HistogramOptions::Linear {
            bucket_size,
            epsilon,
            num_buckets: n as usize,
        })
    }

    /// Exponential buckets: first bucket `first_bucket_size`, each next one `ratio` times wider.
    pub fn exponential(
        max_value: f64,
        first_bucket_size: f64,
        ratio: f64,
        epsilon: f64,
    ) -> Result<Self, HistogramError> {
        if !(max_value > 0.0 && first_bucket_size > 0.0 && ratio > 1.0 && epsilon > 0.0) {
            return Err(HistogramError::InvalidOptions(
                "max_value, first_bucket_size, epsilon must be > 0 and ratio > 1",
            ));
        }
        let ln_ratio = ratio.ln();
        let n =
            ((max_value * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ln_ratio).ceil() + 1.0;
        if !(n.is_finite() && n <= 100_000.0) {
            return Err(HistogramError::InvalidOptions("too many buckets"));
        }
        let num_buckets = n as usize;
        let starts = (0..num_buckets)
            .map(|i| {
                if i == 0 {
                    0.0
                } else {
                    first_bucket_size * (go_pow(ratio, i as f64) - 1.0) / (ratio - 1.0)
                }
            })
            .collect();
        let formula = |v: f64| -> usize {
            if v.is_nan() || v < first_bucket_size {
                return 0;
            }
            let b = ((v * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ln_ratio) as i64;
            b.clamp(0, num_buckets as i64 - 1) as usize
        };
        // The formula is monotone in v (every step is), so each bucket has a smallest member.
        let thresholds = (0..num_buckets)
            .map(|b| {
                if b == 0 {
                    return f64::NEG_INFINITY;
                }
                let (mut lo, mut hi) = (first_bucket_size.to_bits(), f64::INFINITY.to_bits());
                if formula(f64::from_bits(lo)) >= b {
                    return f64::from_bits(lo);
                }
                // invariant: formula(lo) < b <= formula(hi)
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if formula(f64::from_bits(mid)) >= b {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                f64::from_bits(hi)
            })
            .collect();
        Ok(HistogramOptions::Exponential {
            first_bucket_size,
            ratio,
            epsilon,
            num_buckets,
            ln_ratio,
            starts,
            thresholds,
            buckets_per_octave: std::f64::consts::LN_2 / ln_ratio,
        })
    }

    /// Bucket of `v` by upstream's formula, `int(ln(v·(r−1)/first + 1) / ln r)` (reference for
    /// [`Self::find_bucket`]).
    pub fn find_bucket_by_formula(&self, v: f64) -> usize {
        match self {
            HistogramOptions::Linear { .. } => self.find_bucket(v),
            HistogramOptions::Exponential {
                first_bucket_size,
                ratio,
                num_buckets,
                ln_ratio,
                ..
            } => {
                if v.is_nan() || v < *first_bucket_size {
                    return 0;
                }
                let b = ((v * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ln_ratio) as i64;
                b.clamp(0, *num_buckets as i64 - 1) as usize
            }
        }
    }

    /// The VPA CPU preset (cores; 10m first bucket, 5 % growth, 1000 cores, 176 buckets).
    pub fn vpa_cpu() -> &'static HistogramOptions {
        static CPU: LazyLock<HistogramOptions> = LazyLock::new(|| {
            HistogramOptions::exponential(1000.0, 0.01, 1.0 + BUCKET_SIZE_GROWTH, EPSILON)
                .unwrap_or_else(|_| unreachable!("constant options are valid"))
        });
        &CPU
    }

    /// The VPA memory preset (bytes; 10 MB first bucket, 5 % growth, 1e12 bytes, 176 buckets).
    pub fn vpa_memory() -> &'static HistogramOptions {
        static MEM: LazyLock<HistogramOptions> = LazyLock::new(|| {
            HistogramOptions::exponential(1e12, 1e7, 1.0 + BUCKET_SIZE_GROWTH, EPSILON)
                .unwrap_or_else(|_| unreachable!("constant options are valid"))
        });
        &MEM
    }

    /// Number of buckets.
    #[inline]
    pub fn num_buckets(&self) -> usize {
        match self {
            HistogramOptions::Linear { num_buckets, .. }
            | HistogramOptions::Exponential { num_buckets, .. } => *num_buckets,
        }
    }

    /// Weight below which a bucket is empty.
    #[inline]
    pub fn epsilon(&self) -> f64 {
        match self {
            HistogramOptions::Linear { epsilon, .. }
            | HistogramOptions::Exponential { epsilon, .. } => *epsilon,
        }
    }

    /// Index of the bucket holding `v` (values below the first boundary, negatives and NaN → 0).
    #[inline]
    pub fn find_bucket(&self, v: f64) -> usize {
        match self {
            HistogramOptions::Linear {
                bucket_size,
                num_buckets,
                ..
            } => {
                let b = (v / bucket_size) as i64; // saturating, NaN → 0
                b.clamp(0, *num_buckets as i64 - 1) as usize
            }
            HistogramOptions::Exponential {
                first_bucket_size,
                ratio,
                num_buckets,
                thresholds,
                buckets_per_octave,
                ..
            } => {
                if v.is_nan() || v < *first_bucket_size {
                    return 0;
                }
                // Guess from the binary exponent and mantissa (log2 within 0.09), then settle on the thresholds.
                let x = v * (ratio - 1.0) / first_bucket_size + 1.0;
                let bits = x.to_bits();
                let log2 = ((bits >> 52) & 0x7ff) as f64 - 1023.0
                    + (bits & ((1u64 << 52) - 1)) as f64 * (1.0 / (1u64 << 52) as f64);
                let last = num_buckets - 1;
                let mut b = ((log2 * buckets_per_octave) as i64).clamp(0, last as i64) as usize;
                while b < last && thresholds[b + 1] <= v {
                    b += 1;
                }
                while b > 0 && thresholds[b] > v {
                    b -= 1;
                }
                b
            }
        }
    }

    /// Start of bucket `i` (`i` must be below `num_buckets`; larger values give the last start).
    #[inline]
    pub fn bucket_start(&self, i: usize) -> f64 {
        match self {
            HistogramOptions::Linear {
                bucket_size,
                num_buckets,
                ..
            } => i.min(num_buckets - 1) as f64 * bucket_size,
            HistogramOptions::Exponential { starts, .. } => starts[i.min(starts.len() - 1)],
        }
    }
}

/// Serialised histogram: integer bucket weights normalised to [`MAX_CHECKPOINT_WEIGHT`].
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistogramCheckpoint {
    /// Reference timestamp of a decaying histogram (ns since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_timestamp: Option<Nanos>,
    /// Bucket index → integer weight.
    #[serde(default)]
    pub bucket_weights: BTreeMap<i64, u32>,
    /// Total weight, copied unchanged.
    pub total_weight: f64,
}

/// A plain histogram with sparse bucket storage.
#[derive(Debug, Clone)]
pub struct Histogram {
    opts: &'static HistogramOptions,
    /// Dense window over buckets `offset .. offset + weights.len()`.
    weights: Box<[f64]>,
    offset: u32,
    min_bucket: u32,
    max_bucket: u32,
    total_weight: f64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(opts: &'static HistogramOptions) -> Self {
        Histogram {
            opts,
            weights: Box::new([]),
            offset: 0,
            min_bucket: (opts.num_buckets() - 1) as u32,
            max_bucket: 0,
            total_weight: 0.0,
        }
    }

    /// The bucketing scheme.
    pub fn options(&self) -> &'static HistogramOptions {
        self.opts
    }

    /// Weight of bucket `b`.
    #[inline]
    pub fn bucket_weight(&self, b: usize) -> f64 {
        let off = self.offset as usize;
        if b >= off && b < off + self.weights.len() {
            self.weights[b - off]
        } else {
            0.0
        }
    }

    /// Grows the window to hold buckets `lo..=hi` (in range) in one allocation, so that a merge does not
    /// reallocate once per few buckets.
    fn cover(&mut self, lo: usize, hi: usize) {
        let (off, len) = (self.offset as usize, self.weights.len());
        let hi = hi.min(self.opts.num_buckets() - 1);
        if lo > hi || (len > 0 && lo >= off && hi < off + len) {
            return;
        }
        let (new_lo, new_end) = if len == 0 {
            (lo, hi + 1)
        } else {
            (lo.min(off), (hi + 1).max(off + len))
        };
        let mut v = vec![0.0; new_end - new_lo];
        let start = off.saturating_sub(new_lo).min(v.len());
        v[start..][..len].copy_from_slice(&self.weights);
        self.weights = v.into_boxed_slice();
        self.offset = new_lo as u32;
    }

    #[inline]
    fn slot(&mut self, b: usize) -> &mut f64 {
        let off = self.offset as usize;
        let len = self.weights.len();
        let n = self.opts.num_buckets();
        if len == 0 {
            let lo = b.saturating_sub(INITIAL_SLACK);
            let hi = (b + INITIAL_SLACK + 1).min(n);
            self.weights = vec![0.0; hi - lo].into_boxed_slice();
            self.offset = lo as u32;
        } else if b < off {
            // Grow downwards with some slack so a drifting workload does not reallocate on every new bucket.
            let lo = b.saturating_sub(GROWTH_SLACK);
            let mut v = vec![0.0; off + len - lo];
            v[off - lo..].copy_from_slice(&self.weights);
            self.weights = v.into_boxed_slice();
            self.offset = lo as u32;
        } else if b >= off + len {
            let hi = (b + GROWTH_SLACK + 1).min(n);
            let mut v = vec![0.0; hi - off];
            v[..len].copy_from_slice(&self.weights);
            self.weights = v.into_boxed_slice();
        }
        let off = self.offset as usize;
        &mut self.weights[b - off]
    }

    /// Total weight, including sub-epsilon buckets.
    pub fn total_weight(&self) -> f64 {
        self.total_weight
    }

    /// First non-empty bucket (num_buckets-1 when empty).
    pub fn min_bucket(&self) -> usize {
        self.min_bucket as usize
    }

    /// Last non-empty bucket (0 when empty).
    pub fn max_bucket(&self) -> usize {
        self.max_bucket as usize
    }

    /// Heap bytes used by the bucket window.
    pub fn heap_bytes(&self) -> usize {
        self.weights.len() * std::mem::size_of::<f64>()
    }

    /// Adds `weight` at `value`. Negative or NaN weights are ignored.
    #[inline]
    pub fn add_sample(&mut self, value: f64, weight: f64) {
        if weight.is_nan() || weight < 0.0 {
            return;
        }
        let b = self.opts.find_bucket(value);
        let eps = self.opts.epsilon();
        let w = {
            let s = self.slot(b);
            *s += weight;
            *s
        };
        self.total_weight += weight;
        if w >= eps {
            if (b as u32) < self.min_bucket {
                self.min_bucket = b as u32;
            }
            if (b as u32) > self.max_bucket {
                self.max_bucket = b as u32;
            }
        }
    }

    /// Removes `weight` at `value`; results below epsilon become 0. Negative or NaN weights are ignored.
    pub fn subtract_sample(&mut self, value: f64, weight: f64) {
        if weight.is_nan() || weight < 0.0 {
            return;
        }
        let eps = self.opts.epsilon();
        let b = self.opts.find_bucket(value);
        self.total_weight = safe_subtract(self.total_weight, weight, eps);
        let s = self.slot(b);
        *s = safe_subtract(*s, weight, eps);
        self.update_min_and_max();
    }

    fn update_min_and_max(&mut self) {
        let last = self.opts.num_buckets() - 1;
        let eps = self.opts.epsilon();
        let mut min = self.min_bucket as usize;
        while self.bucket_weight(min) < eps && min < last {
            min += 1;
        }
        let mut max = self.max_bucket as usize;
        while self.bucket_weight(max) < eps && max > 0 {
            max -= 1;
        }
        self.min_bucket = min as u32;
        self.max_bucket = max as u32;
    }

    /// Adds every bucket of `other` in its [min, max] range, and its total. Options must be equal.
    pub fn merge(&mut self, other: &Histogram) {
        let (lo, hi) = (other.min_bucket as usize, other.max_bucket as usize);
        if lo <= hi {
            self.cover(lo, hi);
        }
        for b in lo..=hi {
            let w = other.bucket_weight(b);
            if w != 0.0 {
                *self.slot(b) += w;
            }
        }
        self.total_weight += other.total_weight;
        self.min_bucket = self.min_bucket.min(other.min_bucket);
        self.max_bucket = self.max_bucket.max(other.max_bucket);
    }

    /// Multiplies the buckets in [min, max] and the total by `factor` (≥ 0).
    pub fn scale(&mut self, factor: f64) {
        if factor.is_nan() || factor < 0.0 {
            return;
        }
        let off = self.offset as usize;
        let len = self.weights.len();
        let lo = (self.min_bucket as usize).max(off);
        let hi = (self.max_bucket as usize).min((off + len).saturating_sub(1));
        if len > 0 && lo <= hi {
            for w in &mut self.weights[lo - off..=hi - off] {
                *w *= factor;
            }
        }
        self.total_weight *= factor;
        self.update_min_and_max();
    }

    /// True when the first non-empty bucket is below epsilon, i.e. no bucket reaches epsilon.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bucket_weight(self.min_bucket as usize) < self.opts.epsilon()
    }

    /// The end of the bucket where the cumulative weight first reaches `p * total`
    /// (the start of the last bucket if it lands there); 0 when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        self.percentile_bucket(p)
            .map_or(0.0, |b| self.bucket_end(b))
    }

    /// The bucket a percentile lands in, or `None` when the histogram is empty.
    pub fn percentile_bucket(&self, p: f64) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        let threshold = p * self.total_weight;
        let mut partial = 0.0;
        let mut b = self.min_bucket as usize;
        let max = self.max_bucket as usize;
        while b < max {
            partial += self.bucket_weight(b);
            if partial >= threshold {
                break;
            }
            b += 1;
        }
        Some(b)
    }

    /// Upper end of bucket `b` (its start for the last bucket).
    pub fn bucket_end(&self, b: usize) -> f64 {
        if b + 1 < self.opts.num_buckets() {
            self.opts.bucket_start(b + 1)
        } else {
            self.opts.bucket_start(b)
        }
    }

    /// Test equality: same options, same min/max and bucket weights within 1e-15 in that range.
    pub fn equals(&self, other: &Histogram) -> bool {
        if self.opts != other.opts
            || self.min_bucket != other.min_bucket
            || self.max_bucket != other.max_bucket
        {
            return false;
        }
        (self.min_bucket as usize..=self.max_bucket as usize)
            .all(|b| (self.bucket_weight(b) - other.bucket_weight(b)).abs() <= 1e-15)
    }

    /// Non-zero buckets (index, weight), ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        let off = self.offset as usize;
        self.weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w != 0.0)
            .map(move |(i, w)| (i + off, *w))
    }

    /// Serialises the [min, max] buckets normalised so the heaviest is [`MAX_CHECKPOINT_WEIGHT`].
    pub fn save_to_checkpoint(&self) -> HistogramCheckpoint {
        let mut cp = HistogramCheckpoint {
            total_weight: self.total_weight,
            ..Default::default()
        };
        let (lo, hi) = (self.min_bucket as usize, self.max_bucket as usize);
        let max_w = (lo..=hi).map(|b| self.bucket_weight(b)).fold(0.0, f64::max);
        if max_w > 0.0 {
            for b in lo..=hi {
                let w =
                    (self.bucket_weight(b) * MAX_CHECKPOINT_WEIGHT as f64 / max_w + 0.5).floor();
                let w = if w >= u32::MAX as f64 {
                    u32::MAX
                } else {
                    w as u32
                };
                if w > 0 {
                    cp.bucket_weights.insert(b as i64, w);
                }
            }
        }
        cp
    }

    /// Adds a checkpoint's content to this histogram.
    pub fn load_from_checkpoint(
        &mut self,
        cp: Option<&HistogramCheckpoint>,
    ) -> Result<(), HistogramError> {
        let cp = cp.ok_or_else(|| HistogramError::InvalidCheckpoint("checkpoint is nil".into()))?;
        if cp.total_weight.is_nan() || cp.total_weight < 0.0 {
            return Err(HistogramError::InvalidCheckpoint(format!(
                "negative total weight {}",
                cp.total_weight
            )));
        }
        let n = self.opts.num_buckets() as i64;
        let mut sum: u64 = 0;
        for (&b, &w) in &cp.bucket_weights {
            if b < 0 || b >= n {
                return Err(HistogramError::InvalidCheckpoint(format!(
                    "bucket index {b} out of range [0, {n})"
                )));
            }
            sum += w as u64;
        }
        if sum == 0 {
            return Ok(());
        }
        let ratio = cp.total_weight / sum as f64;
        for (&b, &w) in &cp.bucket_weights {
            let b = b as usize;
            *self.slot(b) += w as f64 * ratio;
            self.min_bucket = self.min_bucket.min(b as u32);
            self.max_bucket = self.max_bucket.max(b as u32);
        }
        self.total_weight += cp.total_weight;
        self.update_min_and_max();
        Ok(())
    }
}

#[inline]
fn safe_subtract(a: f64, b: f64, eps: f64) -> f64 {
    let c = a - b;
    if c < eps { 0.0 } else { c }
}

/// Reference time of a fresh decaying histogram: Go's zero time, kept as a sentinel.
pub const ZERO_TIME: Nanos = i64::MIN;

#[inline]
fn wide(t: Nanos) -> i128 {
    if t == ZERO_TIME {
        -(crate::units::GO_ZERO_TO_UNIX_SECS as i128) * crate::units::NANOS_PER_SEC as i128
    } else {
        t as i128
    }
}

/// A histogram whose samples weigh `2^((t - ref) / half_life)`.
#[derive(Debug, Clone)]
pub struct DecayingHistogram {
    hist: Histogram,
    half_life: i64,
    reference: Nanos,
}

impl DecayingHistogram {
    /// An empty decaying histogram; `half_life` in nanoseconds (must be > 0).
    pub fn new(opts: &'static HistogramOptions, half_life: i64) -> Self {
        DecayingHistogram {
            hist: Histogram::new(opts),
            half_life: half_life.max(1),
            reference: ZERO_TIME,
        }
    }

    /// The underlying plain histogram.
    pub fn histogram(&self) -> &Histogram {
        &self.hist
    }

    /// Half-life in nanoseconds.
    pub fn half_life(&self) -> i64 {
        self.half_life
    }

    /// Reference timestamp (`None` = Go's zero time).
    pub fn reference_timestamp(&self) -> Option<Nanos> {
        (self.reference != ZERO_TIME).then_some(self.reference)
    }

    /// Heap bytes used by the bucket window.
    pub fn heap_bytes(&self) -> usize {
        self.hist.heap_bytes()
    }

    #[inline]
    fn decay_factor(&mut self, t: Nanos) -> f64 {
        let limit = if self.reference == ZERO_TIME {
            None
        } else {
            self.reference
                .checked_add(self.half_life.saturating_mul(MAX_DECAY_EXPONENT))
        };
        if limit.is_none_or(|l| t > l) {
            self.shift_reference(wide(t));
        }
        crate::units::exp2(sat_sub(t as i128, wide(self.reference)) as f64 / self.half_life as f64)
    }

    fn shift_reference(&mut self, new_ref: i128) {
        let new_ref = round_to_multiple_from_go_zero(new_ref, self.half_life);
        let x = sat_sub(wide(self.reference), new_ref) as f64 / self.half_life as f64;
        let exponent = (x + 0.5).floor();
        let exponent = exponent.clamp(-100_000.0, 100_000.0) as i32;
        self.hist.scale(ldexp(1.0, exponent));
        self.reference = new_ref.clamp(i64::MIN as i128 + 1, i64::MAX as i128) as i64;
    }

    /// Adds a sample taken at `t`.
    #[inline]
    pub fn add_sample(&mut self, value: f64, weight: f64, t: Nanos) {
        let f = self.decay_factor(t);
        self.hist.add_sample(value, weight * f);
    }

    /// Removes a sample taken at `t`.
    pub fn subtract_sample(&mut self, value: f64, weight: f64, t: Nanos) {
        let f = self.decay_factor(t);
        self.hist.subtract_sample(value, weight * f);
    }

    /// Merges `other` into `self`, first aligning both to the newer reference. `other` is not modified.
    pub fn merge(&mut self, other: &DecayingHistogram) {
        let (a, b) = (wide(self.reference), wide(other.reference));
        if a < b {
            self.shift_reference(b);
            self.hist.merge(&other.hist);
        } else if b < a {
            let mut o = other.clone();
            o.shift_reference(a);
            self.hist.merge(&o.hist);
        } else {
            self.hist.merge(&other.hist);
        }
    }

    /// See [`Histogram::percentile`].
    pub fn percentile(&self, p: f64) -> f64 {
        self.hist.percentile(p)
    }

    /// See [`Histogram::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Equal half-life, reference and histogram.
    pub fn equals(&self, other: &DecayingHistogram) -> bool {
        self.half_life == other.half_life
            && self.reference == other.reference
            && self.hist.equals(&other.hist)
    }

    /// Checkpoint including the reference timestamp.
    pub fn save_to_checkpoint(&self) -> HistogramCheckpoint {
        let mut cp = self.hist.save_to_checkpoint();
        cp.reference_timestamp = self.reference_timestamp();
        cp
    }

    /// Adds a checkpoint; the reference timestamp is taken verbatim.
    pub fn load_from_checkpoint(
        &mut self,
        cp: Option<&HistogramCheckpoint>,
    ) -> Result<(), HistogramError> {
        self.hist.load_from_checkpoint(cp)?;
        if let Some(c) = cp {
            self.reference = c.reference_timestamp.unwrap_or(ZERO_TIME);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_176_buckets() {
        assert_eq!(HistogramOptions::vpa_cpu().num_buckets(), 176);
        assert_eq!(HistogramOptions::vpa_memory().num_buckets(), 176);
        assert_eq!(HistogramOptions::vpa_memory().find_bucket(1e7), 1);
    }

    #[test]
    fn threshold_lookup_equals_formula() {
        let mut state = 1u64;
        for opts in [HistogramOptions::vpa_cpu(), HistogramOptions::vpa_memory()] {
            for b in 0..opts.num_buckets() {
                let s = opts.bucket_start(b);
                for v in [
                    s,
                    s * (1.0 - 1e-15),
                    s * (1.0 + 1e-15),
                    s * 1.01,
                    f64::from_bits(s.to_bits().wrapping_sub(1)),
                ] {
                    assert_eq!(opts.find_bucket(v), opts.find_bucket_by_formula(v), "v={v}");
                }
            }
            for _ in 0..200_000 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = f64::from_bits(state >> 2) % 1e13;
                assert_eq!(opts.find_bucket(v), opts.find_bucket_by_formula(v), "v={v}");
            }
            for v in [f64::INFINITY, f64::MAX, 0.0, -1.0, f64::NAN, 1e-300] {
                assert_eq!(opts.find_bucket(v), opts.find_bucket_by_formula(v), "v={v}");
            }
        }
    }

    #[test]
    fn percentile_is_bucket_end() {
        let mut h = Histogram::new(HistogramOptions::vpa_cpu());
        h.add_sample(0.25, 1.0);
        assert_eq!(crate::units::cpu_amount_from_cores(h.percentile(0.9)), 258);
    }
}
