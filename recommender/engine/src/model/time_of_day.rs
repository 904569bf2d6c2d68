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

/// Days of hourly CPU means kept for the daily-pattern test ([`HourlyCpu::daily_pattern`]).
pub const RECENT_DAYS: usize = 7;
const RECENT: usize = RECENT_DAYS * HOURS;

/// One hour of the recent series: which hour (hours since the epoch), summed cores and sample count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct HourMean {
    hour: i64,
    sum: f32,
    count: u32,
}

/// How strongly and how regularly a container's CPU follows the time of day, from its recent hourly means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DailyPattern {
    /// Pearson correlation of each hour's mean with the same hour a day earlier (lag 24 h).
    pub autocorrelation: f64,
    /// Share of the hourly means' variance explained by the hour of the day (R² of the hour-of-day means);
    /// 1 = every day the same curve, 0 = the hour says nothing.
    pub stability: f64,
    /// Busiest over quietest hour of the day (ratio of the hour-of-day means; infinite when the quietest is
    /// zero).
    pub swing: f64,
    /// Busiest minus quietest hour of the day (cores, hour-of-day means).
    pub amplitude: f64,
    /// Complete hours behind the figures.
    pub hours: usize,
}

/// CPU histograms per hour of the day with their sample counts, and the last [`RECENT_DAYS`] days of hourly
/// means (for [`HourlyCpu::daily_pattern`]).
#[derive(Debug, Clone)]
pub struct HourlyCpu {
    hours: Box<[DecayingHistogram]>,
    samples: [u32; HOURS],
    recent: Box<[HourMean]>,
    /// Hour (since the epoch) of the newest sample added or merged.
    newest: i64,
    plan: PlanMemo,
}

/// The last day plan computed ([`HourlyCpu::plan`]), for the hour of the newest sample and the prices it was
/// computed with: a recommendation reads it for its target and both bounds, and a recommender that estimates
/// every minute recomputes it once an hour. Samples within the hour change it too little to matter: a plan is
/// a schedule of whole hours. Clones share it (the recommender estimates on a copy of the model's aggregate
/// merged into an empty one, which is the same histograms), and a merge, which changes the histograms, gives
/// the merged one its own.
#[derive(Debug, Default, Clone)]
struct PlanMemo(std::sync::Arc<std::sync::Mutex<Option<MemoEntry>>>);

#[derive(Debug, Clone)]
struct MemoEntry {
    newest: i64,
    key: [u64; 3],
    plan: Option<crate::day_plan::DayPlan>,
}

impl PlanMemo {
    fn get(&self) -> Option<MemoEntry> {
        self.0.lock().map_or(None, |m| m.clone())
    }

    fn set(&self, entry: MemoEntry) {
        if let Ok(mut m) = self.0.lock() {
            *m = Some(entry);
        }
    }

    fn clear(&mut self) {
        *self = PlanMemo::default();
    }
}

/// Pearson's correlation of the pairs; 0 when either side does not vary.
fn correlation(pairs: &[(f64, f64)]) -> f64 {
    let k = pairs.len() as f64;
    let (ma, mb) = (
        pairs.iter().map(|p| p.0).sum::<f64>() / k,
        pairs.iter().map(|p| p.1).sum::<f64>() / k,
    );
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (a, b) in pairs {
        cov += (a - ma) * (b - mb);
        va += (a - ma).powi(2);
        vb += (b - mb).powi(2);
    }
    if va > 0.0 && vb > 0.0 {
        cov / (va * vb).sqrt()
    } else {
        0.0
    }
}

impl HourlyCpu {
    /// Empty histograms decaying with `half_life` (ns).
    pub fn new(half_life: i64) -> Self {
        HourlyCpu {
            hours: (0..HOURS)
                .map(|_| DecayingHistogram::new(HistogramOptions::vpa_cpu(), half_life))
                .collect(),
            samples: [0; HOURS],
            recent: vec![HourMean::default(); RECENT].into_boxed_slice(),
            newest: i64::MIN,
            plan: PlanMemo::default(),
        }
    }

    /// Adds a CPU sample (cores) taken at `t` to its hour.
    pub fn add(&mut self, cores: f64, weight: f64, t: Nanos) {
        let h = hour_of_day(t);
        self.hours[h].add_sample(cores, weight, t);
        self.samples[h] = self.samples[h].saturating_add(1);
        let id = t.div_euclid(HOUR);
        self.newest = self.newest.max(id);
        let slot = &mut self.recent[id.rem_euclid(RECENT as i64) as usize];
        if slot.hour != id || slot.count == 0 {
            if slot.hour > id && slot.count > 0 {
                return; // older than what the slot holds: out of the window
            }
            *slot = HourMean {
                hour: id,
                sum: 0.0,
                count: 0,
            };
        }
        slot.sum += cores as f32;
        slot.count = slot.count.saturating_add(1);
    }

    /// Merges `other` hour by hour.
    pub fn merge(&mut self, other: &HourlyCpu) {
        // Merged into an empty one (the recommender's copy of an aggregate), the histograms are `other`'s and
        // so is its plan; otherwise the merge makes new histograms.
        if self.samples.iter().all(|&n| n == 0) {
            self.plan = other.plan.clone();
        } else {
            self.plan.clear();
        }
        self.newest = self.newest.max(other.newest);
        for (h, o) in self.hours.iter_mut().zip(other.hours.iter()) {
            h.merge(o);
        }
        for (s, o) in self.samples.iter_mut().zip(other.samples) {
            *s = s.saturating_add(o);
        }
        for (s, o) in self.recent.iter_mut().zip(other.recent.iter()) {
            if o.count == 0 || (s.count > 0 && s.hour > o.hour) {
                continue;
            }
            if s.count > 0 && s.hour == o.hour {
                // Two pods of one aggregate in the same hour: the mean per pod, as the histograms see it.
                s.sum += o.sum;
                s.count = s.count.saturating_add(o.count);
            } else {
                *s = *o;
            }
        }
    }

    /// Whether CPU follows the time of day, from the complete hours (at least [`MIN_SAMPLES_PER_HOUR`]
    /// samples) of the last [`RECENT_DAYS`] days before the hour of `now`; `None` with fewer than two days of
    /// such hours or without variation.
    pub fn daily_pattern(&self, now: Nanos) -> Option<DailyPattern> {
        let current = now.div_euclid(HOUR);
        let mean_at = |id: i64| -> Option<f64> {
            let s = self.recent.get(id.rem_euclid(RECENT as i64) as usize)?;
            (s.hour == id
                && s.count >= MIN_SAMPLES_PER_HOUR
                && id < current
                && id >= current - RECENT as i64)
                .then(|| f64::from(s.sum) / f64::from(s.count))
        };
        let series: Vec<(i64, f64)> = (current - RECENT as i64..current)
            .filter_map(|id| mean_at(id).map(|m| (id, m)))
            .collect();
        if series.len() < 2 * HOURS {
            return None;
        }
        let n = series.len() as f64;
        let mean = series.iter().map(|x| x.1).sum::<f64>() / n;
        let total: f64 = series.iter().map(|x| (x.1 - mean).powi(2)).sum();
        if total <= f64::EPSILON * n * mean.abs().max(1e-9) {
            return None;
        }
        // Hour-of-day means and the variance left around them.
        let (mut sum, mut cnt) = ([0.0f64; HOURS], [0usize; HOURS]);
        for &(id, m) in &series {
            let h = id.rem_euclid(HOURS as i64) as usize;
            sum[h] += m;
            cnt[h] += 1;
        }
        let within: f64 = series
            .iter()
            .map(|&(id, m)| {
                let h = id.rem_euclid(HOURS as i64) as usize;
                (m - sum[h] / cnt[h] as f64).powi(2)
            })
            .sum();
        // Hours seen once explain themselves perfectly: count only hours seen at least twice.
        let repeated = series
            .iter()
            .filter(|&&(id, _)| cnt[id.rem_euclid(HOURS as i64) as usize] >= 2)
            .count();
        if repeated < 2 * HOURS {
            return None;
        }
        let stability = (1.0 - within / total).clamp(0.0, 1.0) * repeated as f64 / n;
        // Lag-24 h correlation over the pairs where both hours are complete.
        let pairs: Vec<(f64, f64)> = series
            .iter()
            .filter_map(|&(id, m)| mean_at(id - HOURS as i64).map(|p| (p, m)))
            .collect();
        if pairs.len() < HOURS {
            return None;
        }
        let autocorrelation = correlation(&pairs);
        let means = (0..HOURS)
            .filter(|&h| cnt[h] > 0)
            .map(|h| sum[h] / cnt[h] as f64);
        let (lo, hi) = means.fold((f64::INFINITY, 0.0f64), |(lo, hi), m| {
            (lo.min(m), hi.max(m))
        });
        let swing = if lo > 0.0 { hi / lo } else { f64::INFINITY };
        Some(DailyPattern {
            autocorrelation,
            stability,
            swing,
            amplitude: hi - lo,
            hours: series.len(),
        })
    }

    /// The share of CPU samples (decayed weights) above `cores`, averaged over the hours of the day that have
    /// samples: how often a request of `cores` would have been exceeded.
    pub fn fraction_above(&self, cores: f64) -> f64 {
        let (mut sum, mut n) = (0.0, 0usize);
        for h in self.hours.iter() {
            let hist = h.histogram();
            let total = hist.total_weight();
            if total <= 0.0 {
                continue;
            }
            let opts = hist.options();
            let above: f64 = hist
                .buckets()
                .filter(|&(b, _)| opts.bucket_start(b) >= cores)
                .map(|(_, w)| w)
                .sum();
            sum += above / total;
            n += 1;
        }
        if n == 0 { 0.0 } else { sum / n as f64 }
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

    /// The priced CPU request ([`crate::risk_price::priced_from_buckets`]) over the hours from `from` to
    /// `from + ahead`, each hour's histogram normalised to weigh the same.
    pub fn priced_ahead(
        &self,
        price: &crate::risk_price::RiskPrice,
        from: Nanos,
        ahead: Nanos,
    ) -> Option<f64> {
        let mut merged: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
        let mut opts = None;
        for h in Self::window(from, ahead) {
            let hist = self.hours[h].histogram();
            let total = hist.total_weight();
            if hist.is_empty() || total <= 0.0 {
                continue;
            }
            opts = Some(hist);
            for (b, w) in hist.buckets() {
                *merged.entry(b).or_default() += w / total;
            }
        }
        let hist = opts?;
        let o = hist.options();
        crate::risk_price::priced_from_buckets(
            merged
                .into_iter()
                .map(|(b, w)| (o.bucket_start(b), hist.bucket_end(b), w)),
            price,
        )
    }

    /// The day's plan of requests ([`crate::day_plan::plan`]) on the 24 hourly histograms; `None` unless every
    /// hour has weight. Computed once for the hour of the newest sample and these prices (see `PlanMemo`).
    pub fn plan(
        &self,
        price: &crate::risk_price::RiskPrice,
        change: &crate::day_plan::ChangePrice,
    ) -> Option<crate::day_plan::DayPlan> {
        let key = [
            price.price.to_bits(),
            change.core_hours.to_bits(),
            change.max_steps as u64,
        ];
        if let Some(m) = self
            .plan
            .get()
            .filter(|m| m.newest == self.newest && m.key == key)
        {
            return m.plan;
        }
        let plan = self.plan_fresh(price, change);
        self.plan.set(MemoEntry {
            newest: self.newest,
            key,
            plan: plan.clone(),
        });
        plan
    }

    /// [`HourlyCpu::plan`] computed now, without reading or replacing the memo (for a plan at other prices
    /// than the profile's, as `--explain` asks for, which would otherwise evict the profile's plan).
    pub fn plan_fresh(
        &self,
        price: &crate::risk_price::RiskPrice,
        change: &crate::day_plan::ChangePrice,
    ) -> Option<crate::day_plan::DayPlan> {
        let hours: Vec<&crate::histogram::Histogram> = self
            .hours
            .iter()
            .map(DecayingHistogram::histogram)
            .collect();
        crate::day_plan::plan(&hours, price, change)
    }

    /// Samples seen per hour of the day.
    pub fn samples(&self) -> &[u32; HOURS] {
        &self.samples
    }

    /// Heap bytes of the 24 histograms.
    pub fn heap_bytes(&self) -> usize {
        self.hours.len() * std::mem::size_of::<DecayingHistogram>()
            + self.hours.iter().map(|h| h.heap_bytes()).sum::<usize>()
            + self.recent.len() * std::mem::size_of::<HourMean>()
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

    /// A curve that repeats every day has a strong daily pattern; a burst at a different hour each day has
    /// none; less than two days of complete hours gives no figure.
    #[test]
    fn daily_pattern_tells_a_repeating_day_from_wandering_bursts() {
        let fill = |f: &dyn Fn(i64, i64) -> f64, days: i64| {
            let mut h = HourlyCpu::new(DAY);
            for day in 0..days {
                for hour in 0..HOURS as i64 {
                    for m in 0..12 {
                        h.add(
                            f(day, hour),
                            1.0,
                            day * DAY + hour * H + m * 5 * 60_000_000_000,
                        );
                    }
                }
            }
            h
        };
        let now = 6 * DAY;
        let daily = fill(
            &|_, hour| if (9..18).contains(&hour) { 1.0 } else { 0.1 },
            6,
        );
        let p = daily.daily_pattern(now).unwrap();
        assert!(p.autocorrelation > 0.99 && p.stability > 0.99, "{p:?}");
        assert!((p.swing - 10.0).abs() < 1e-3, "{p:?}");
        assert_eq!(p.hours, 6 * HOURS);
        // One busy hour a day, at a different hour each day.
        let wandering = fill(
            &|day, hour| if hour == (day * 7) % 24 { 1.0 } else { 0.1 },
            6,
        );
        let q = wandering.daily_pattern(now).unwrap();
        assert!(q.autocorrelation < 0.2, "{q:?}");
        assert!(fill(&|_, _| 1.0, 1).daily_pattern(DAY).is_none());
        // Flat usage has no variation to explain.
        assert!(fill(&|_, _| 1.0, 6).daily_pattern(now).is_none());
    }

    #[test]
    fn fraction_above_counts_the_samples_over_a_request() {
        // A half-life far beyond the samples' span: every sample weighs the same.
        let mut h = HourlyCpu::new(10_000 * DAY);
        for m in 0..100 {
            // All within hour 0 (the fraction is averaged over the hours that have samples).
            h.add(if m < 90 { 0.1 } else { 2.0 }, 1.0, m * 30_000_000_000);
        }
        let f = h.fraction_above(1.0);
        assert!((f - 0.1).abs() < 1e-3, "{f}");
        assert_eq!(h.fraction_above(5.0), 0.0);
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
