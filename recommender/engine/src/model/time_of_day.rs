//! CPU usage by hour of the day: 24 decaying histograms beside an aggregate's all-day one, so that a profile can
//! ask for the CPU the next hours usually need instead of what the busiest hour of the day needs.
//!
//! Hours are UTC hours of the sample time. A daily pattern repeats every 24 hours whatever the time zone, so
//! UTC buckets follow it as well as local ones. Kept only when the model is asked to
//! ([`super::AggregationsConfig::cpu_time_of_day`]); not part of upstream's checkpoint format, so after a restart
//! they fill again from new samples (and estimators fall back to the all-day histogram until they have).

use crate::histogram::{DecayingHistogram, HistogramOptions};
use crate::units::Nanos;

/// Hours in a day, the number of buckets.
pub const HOURS: usize = 24;
const HOUR: Nanos = 3_600_000_000_000;
const DAY: Nanos = HOURS as Nanos * HOUR;
/// Samples an hour's histogram needs before its percentile is trusted.
pub const MIN_SAMPLES_PER_HOUR: u32 = 10;

/// The hour of the day (UTC, 0–23) of a timestamp.
pub fn hour_of_day(t: Nanos) -> usize {
    // rem_euclid of a positive divisor is in [0, DAY): the division is in [0, 24).
    (t.rem_euclid(DAY) / HOUR) as usize
}

/// CPU histograms per hour of the day with their sample counts.
#[derive(Debug, Clone)]
pub struct HourlyCpu {
    hours: Box<[DecayingHistogram]>,
    samples: [u32; HOURS],
}

impl HourlyCpu {
    /// Empty histograms decaying with `half_life` (ns).
    pub fn new(half_life: i64) -> Self {
        HourlyCpu {
            hours: (0..HOURS)
                .map(|_| DecayingHistogram::new(HistogramOptions::vpa_cpu(), half_life))
                .collect(),
            samples: [0; HOURS],
        }
    }

    /// Adds a CPU sample (cores) taken at `t` to its hour.
    pub fn add(&mut self, cores: f64, weight: f64, t: Nanos) {
        let h = hour_of_day(t);
        self.hours[h].add_sample(cores, weight, t);
        self.samples[h] = self.samples[h].saturating_add(1);
    }

    /// Merges `other` hour by hour.
    pub fn merge(&mut self, other: &HourlyCpu) {
        for (h, o) in self.hours.iter_mut().zip(other.hours.iter()) {
            h.merge(o);
        }
        for (s, o) in self.samples.iter_mut().zip(other.samples) {
            *s = s.saturating_add(o);
        }
    }

    /// The hours from `from` to `from + ahead` (both included), each once.
    fn window(from: Nanos, ahead: Nanos) -> impl Iterator<Item = usize> {
        let first = hour_of_day(from);
        let span = (ahead.clamp(0, DAY - 1) / HOUR) as usize + 1;
        (0..span.min(HOURS)).map(move |i| (first + i) % HOURS)
    }

    /// Whether every hour from `from` to `from + ahead` has at least [`MIN_SAMPLES_PER_HOUR`] samples.
    pub fn covers(&self, from: Nanos, ahead: Nanos) -> bool {
        Self::window(from, ahead).all(|h| self.samples[h] >= MIN_SAMPLES_PER_HOUR)
    }

    /// The highest `p` percentile (cores) over the hours from `from` to `from + ahead`.
    pub fn percentile_ahead(&self, p: f64, from: Nanos, ahead: Nanos) -> f64 {
        Self::window(from, ahead)
            .map(|h| self.hours[h].percentile(p))
            .fold(0.0, f64::max)
    }

    /// Samples seen per hour of the day.
    pub fn samples(&self) -> &[u32; HOURS] {
        &self.samples
    }

    /// Heap bytes of the 24 histograms.
    pub fn heap_bytes(&self) -> usize {
        self.hours.len() * std::mem::size_of::<DecayingHistogram>()
            + self.hours.iter().map(|h| h.heap_bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Nanos = HOUR;

    #[test]
    fn hours_wrap_and_negative_times_stay_in_range() {
        assert_eq!(hour_of_day(0), 0);
        assert_eq!(hour_of_day(13 * H + 59 * 60_000_000_000), 13);
        assert_eq!(hour_of_day(DAY * 3 + 23 * H), 23);
        assert_eq!(hour_of_day(-1), 23);
        assert_eq!(hour_of_day(i64::MIN), hour_of_day(i64::MIN.rem_euclid(DAY)));
    }

    #[test]
    fn window_takes_the_hours_ahead_and_wraps_past_midnight() {
        let w: Vec<usize> = HourlyCpu::window(22 * H + 30 * 60_000_000_000, 2 * H).collect();
        assert_eq!(w, vec![22, 23, 0]);
        assert_eq!(HourlyCpu::window(5 * H, 0).collect::<Vec<_>>(), vec![5]);
        assert_eq!(HourlyCpu::window(5 * H, 10 * DAY).count(), HOURS);
    }

    #[test]
    fn percentile_ahead_is_the_busiest_hour_of_the_window() {
        let mut h = HourlyCpu::new(DAY);
        for day in 0..2 {
            for hour in 0..HOURS as i64 {
                let cores = if hour == 14 { 2.0 } else { 0.1 };
                for m in 0..10 {
                    h.add(cores, 1.0, day * DAY + hour * H + m * 60_000_000_000);
                }
            }
        }
        assert!(h.covers(12 * H, 3 * H));
        let quiet = h.percentile_ahead(0.95, 2 * H, 2 * H);
        let busy = h.percentile_ahead(0.95, 12 * H, 2 * H);
        assert!(quiet < 0.2, "{quiet}");
        assert!(busy >= 2.0, "{busy}");
        let mut merged = HourlyCpu::new(DAY);
        merged.merge(&h);
        assert_eq!(merged.samples()[14], 20);
    }

    #[test]
    fn an_hour_with_too_few_samples_is_not_covered() {
        let mut h = HourlyCpu::new(DAY);
        for m in 0..(MIN_SAMPLES_PER_HOUR as i64 - 1) {
            h.add(1.0, 1.0, 3 * H + m);
        }
        assert!(!h.covers(3 * H, 0));
        h.add(1.0, 1.0, 3 * H + 100);
        assert!(h.covers(3 * H, 0));
        assert!(!h.covers(3 * H, H));
    }
}
