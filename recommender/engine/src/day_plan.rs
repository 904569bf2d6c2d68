//! A day of CPU requests as a few constant steps: the schedule over the 24 hours of the day that minimises the
//! priced objective of [`crate::risk_price`] (unused CPU + a price per minute above the request) plus a price
//! per request change, on the container's hourly histograms (the `auto` profile's daily rule,
//! docs/decisions/auto-profile.md).
//!
//! Following the day hour by hour saves the most CPU but resizes the pod up to 48 times a day; holding one
//! all-day request resizes it never. A schedule of a few steps sits between: each step's request is the priced
//! request of its hours weighed together, and a step is worth adding only when the CPU it frees over its hours
//! is worth more than the change that starts it. Where the day has no shape that pays for two changes the plan
//! has one step, and the all-day request holds.

use crate::histogram::Histogram;
use crate::risk_price::RiskPrice;

/// Hours in a day: the plan's resolution.
pub const HOURS: usize = 24;

/// What a change of request costs when a plan is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangePrice {
    /// Core-hours of the priced objective one request change (an in-place resize) is worth (> 0): a plan of
    /// k steps changes the request k times a day.
    pub core_hours: f64,
    /// Most steps a plan may have (≥ 2 to follow the day at all).
    pub max_steps: usize,
}

/// A day's requests by hour of the day.
#[derive(Debug, Clone, PartialEq)]
pub struct DayPlan {
    /// The request (cores) for each hour of the day (UTC), 0–23.
    pub requests: [f64; HOURS],
    /// Steps in the day: request changes per day (1 = one all-day request, no change).
    pub steps: usize,
    /// Priced objective of the plan (core-hours per day), its changes included.
    pub cost: f64,
    /// Priced objective of one all-day request on the same histograms (core-hours per day).
    pub flat_cost: f64,
}

/// The hours' bucket weights on a common axis: the union of the non-empty buckets, ascending, with each
/// bucket's midpoint and upper end, and prefix sums over twice the day (so a step may wrap past midnight).
struct Axis {
    mid: Vec<f64>,
    end: Vec<f64>,
    /// `prefix[i * m + k]`: weight of bucket `k` summed over hours `0..i` of the doubled day.
    prefix: Vec<f64>,
    /// Per hour of the day, the first and last index on the axis with weight.
    range: [(usize, usize); HOURS],
}

impl Axis {
    /// `None` when an hour has no weight.
    fn new(hours: &[&Histogram]) -> Option<Self> {
        let mut ids: Vec<usize> = hours
            .iter()
            .flat_map(|h| h.buckets().filter(|b| b.1 > 0.0).map(|b| b.0))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let first = hours.first()?;
        let opts = first.options();
        let m = ids.len();
        let mut prefix = vec![0.0; (2 * HOURS + 1) * m];
        let mut weights = vec![0.0; HOURS * m];
        let mut range = [(usize::MAX, 0); HOURS];
        for (j, h) in hours.iter().enumerate() {
            let total = h.total_weight();
            if !(total > 0.0 && total.is_finite()) {
                return None;
            }
            for (b, w) in h.buckets().filter(|b| b.1 > 0.0) {
                if let Ok(k) = ids.binary_search(&b) {
                    weights[j * m + k] = w / total;
                    range[j] = (range[j].0.min(k), range[j].1.max(k));
                }
            }
        }
        for i in 0..2 * HOURS {
            let j = i % HOURS;
            for k in 0..m {
                prefix[(i + 1) * m + k] = prefix[i * m + k] + weights[j * m + k];
            }
        }
        Some(Axis {
            mid: ids
                .iter()
                .map(|&b| 0.5 * (opts.bucket_start(b) + first.bucket_end(b)))
                .collect(),
            end: ids.iter().map(|&b| first.bucket_end(b)).collect(),
            prefix,
            range,
        })
    }

    /// The priced request and its objective (core-hours) over `len` hours from hour `start`.
    fn step(&self, start: usize, len: usize, price: f64) -> (f64, f64) {
        let m = self.mid.len();
        let (lo, hi) = (start * m, (start + len) * m);
        let total = len as f64;
        let (mut below, mut below_sum) = (0.0, 0.0);
        let mut best = (f64::INFINITY, 0.0);
        // Only the buckets some hour of the step has weight in.
        let (first, last) = (start..start + len)
            .map(|i| self.range[i % HOURS])
            .fold((usize::MAX, 0), |(a, b), (c, d)| (a.min(c), b.max(d)));
        for k in first..=last.min(m.saturating_sub(1)) {
            let w = self.prefix[hi + k] - self.prefix[lo + k];
            if w <= 0.0 {
                continue;
            }
            below += w;
            below_sum += w * self.mid[k];
            let waste = (self.end[k] * below - below_sum).max(0.0);
            let exceed = (total - below).max(0.0);
            let obj = waste + price * exceed;
            if obj < best.0 {
                best = (obj, self.end[k]);
            }
        }
        (best.1, best.0)
    }
}

/// Priced request and objective of every step: `[s][len - 1]` for the step of `len` hours from hour `s`.
type Steps = [[(f64, f64); HOURS]; HOURS];

/// A cut of the day into steps: its objective (changes included), the hour the first step starts, and each
/// step's start relative to it (the first is 0).
type Cut = (f64, usize, Vec<usize>);

/// The plan for one container from its 24 hourly histograms (hour 0 first): the schedule of steps that
/// minimises the priced objective plus `change.core_hours` per step, or one all-day step when no schedule
/// pays for its changes. `None` unless there are 24 histograms, each with weight.
pub fn plan(hours: &[&Histogram], price: &RiskPrice, change: &ChangePrice) -> Option<DayPlan> {
    if hours.len() != HOURS {
        return None;
    }
    let axis = Axis::new(hours)?;
    let mut step: Steps = [[(0.0, 0.0); HOURS]; HOURS];
    for (s, row) in step.iter_mut().enumerate() {
        for (len, cell) in (1..=HOURS).zip(row.iter_mut()) {
            *cell = axis.step(s, len, price.price);
        }
    }
    let (flat_request, flat_cost) = step[0][HOURS - 1];
    let mut best = DayPlan {
        requests: [flat_request; HOURS],
        steps: 1,
        cost: flat_cost,
        flat_cost,
    };
    let cut = match change.max_steps.clamp(1, HOURS) {
        1 => None,
        2 => two_step_cut(&step, change.core_hours, flat_cost),
        k_max => best_cut(&step, change.core_hours, k_max, flat_cost),
    };
    if let Some((cost, s, starts)) = cut {
        for (n, &a) in starts.iter().enumerate() {
            let b = starts.get(n + 1).copied().unwrap_or(HOURS);
            let r = step[(s + a) % HOURS][b - a - 1].0;
            for h in a..b {
                best.requests[(s + h) % HOURS] = r;
            }
        }
        best.steps = starts.len();
        best.cost = cost;
    }
    Some(best)
}

/// The cheapest cut into two steps, each charged `mu`, if below `flat`: every start and length of the first
/// step, the second the rest of the day.
fn two_step_cut(step: &Steps, mu: f64, flat: f64) -> Option<Cut> {
    let mut cut: Option<Cut> = None;
    for (s, row) in step.iter().enumerate() {
        for len in 1..HOURS {
            let c = row[len - 1].1 + step[(s + len) % HOURS][HOURS - len - 1].1 + 2.0 * mu;
            if c < cut.as_ref().map_or(flat, |b| b.0) {
                cut = Some((c, s, vec![0, len]));
            }
        }
    }
    cut
}

/// The cheapest cut into 2 to `k_max` steps, each charged `mu`, if below `flat`: for every hour a step may
/// start at, the best cut of the day from there by dynamic programming.
fn best_cut(step: &Steps, mu: f64, k_max: usize, flat: f64) -> Option<Cut> {
    let mut cut: Option<Cut> = None;
    // dp[k][i]: the best objective of hours s..s+i cut into k steps; from[k][i]: where its last step starts.
    let mut dp = vec![[f64::INFINITY; HOURS + 1]; k_max + 1];
    let mut from = vec![[0usize; HOURS + 1]; k_max + 1];
    for s in 0..HOURS {
        for row in dp.iter_mut() {
            row.fill(f64::INFINITY);
        }
        dp[0][0] = 0.0;
        for k in 1..=k_max {
            for i in k..=HOURS {
                for j in (k - 1)..i {
                    let c = dp[k - 1][j] + step[(s + j) % HOURS][i - j - 1].1 + mu;
                    if c < dp[k][i] {
                        dp[k][i] = c;
                        from[k][i] = j;
                    }
                }
            }
        }
        // One step from `s` is the flat request plus a change it does not make: never below `flat`.
        for (k, row) in dp.iter().enumerate().skip(2) {
            if row[HOURS] < cut.as_ref().map_or(flat, |b| b.0) {
                let mut starts = Vec::with_capacity(k);
                let mut i = HOURS;
                for kk in (1..=k).rev() {
                    i = from[kk][i];
                    starts.push(i);
                }
                starts.reverse();
                cut = Some((row[HOURS], s, starts));
            }
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::HistogramOptions;

    const PRICE: RiskPrice = RiskPrice {
        price: 3.5,
        upper_margin: None,
    };

    fn change(core_hours: f64, max_steps: usize) -> ChangePrice {
        ChangePrice {
            core_hours,
            max_steps,
        }
    }

    /// 24 hourly histograms, hour `h` holding 60 samples drawn around `cores(h)` (±5 %).
    fn day(cores: impl Fn(usize) -> f64) -> Vec<Histogram> {
        (0..HOURS)
            .map(|h| {
                let mut hist = Histogram::new(HistogramOptions::vpa_cpu());
                for m in 0..60 {
                    let wobble = 1.0 + 0.05 * ((m % 7) as f64 - 3.0) / 3.0;
                    hist.add_sample(cores(h) * wobble, 1.0);
                }
                hist
            })
            .collect()
    }

    fn plan_of(hours: &[Histogram], c: ChangePrice) -> Option<DayPlan> {
        let refs: Vec<&Histogram> = hours.iter().collect();
        plan(&refs, &PRICE, &c)
    }

    fn business(h: usize) -> f64 {
        if (8..18).contains(&h) { 2.0 } else { 0.1 }
    }

    /// A business day becomes a day request over its busy hours and a night request, each covering its hours.
    #[test]
    fn a_business_day_gets_a_day_and_a_night_request() {
        let p = plan_of(&day(business), change(0.5, 2)).unwrap();
        assert_eq!(p.steps, 2, "{p:?}");
        for h in 0..HOURS {
            if (8..18).contains(&h) {
                assert!(p.requests[h] >= 2.0 * 1.05, "hour {h}: {p:?}");
            } else {
                assert!(p.requests[h] < 0.2, "hour {h}: {p:?}");
            }
        }
        assert!(p.cost < p.flat_cost, "{p:?}");
    }

    /// A step may run past midnight: a night shift keeps one busy step from 20:00 to 04:00.
    #[test]
    fn a_step_wraps_past_midnight() {
        let night = |h: usize| if !(4..20).contains(&h) { 1.5 } else { 0.2 };
        let p = plan_of(&day(night), change(0.5, 2)).unwrap();
        assert_eq!(p.steps, 2, "{p:?}");
        assert!(
            p.requests[22] > 1.5 && p.requests[2] == p.requests[22],
            "{p:?}"
        );
        assert!(p.requests[12] < 0.3, "{p:?}");
    }

    /// Flat usage has nothing to follow, and a day whose swing frees less than its two changes cost stays
    /// at one all-day request.
    #[test]
    fn one_step_when_the_day_does_not_pay_for_its_changes() {
        let flat = plan_of(&day(|_| 1.0), change(0.01, 2)).unwrap();
        assert_eq!(flat.steps, 1, "{flat:?}");
        assert!(flat.requests.iter().all(|&r| r == flat.requests[0]));
        assert_eq!(flat.cost, flat.flat_cost);
        // The business day frees about 1.9 cores × 14 h a day: a change price above half of that keeps
        // one step.
        let dear = plan_of(&day(business), change(20.0, 2)).unwrap();
        assert_eq!(dear.steps, 1, "{dear:?}");
    }

    /// Two peaks a day take four steps when they may and the changes are cheap, covering both; with at most
    /// two steps one peak is held and the other priced: at 2 cores, holding the seven hours between the peaks
    /// would waste more than the three hours above the request are worth.
    #[test]
    fn max_steps_bounds_the_changes_a_day() {
        let peaks = |h: usize| {
            if (8..11).contains(&h) || (18..21).contains(&h) {
                2.0
            } else {
                0.2
            }
        };
        let four = plan_of(&day(peaks), change(0.1, 4)).unwrap();
        assert_eq!(four.steps, 4, "{four:?}");
        let two = plan_of(&day(peaks), change(0.1, 2)).unwrap();
        assert_eq!(two.steps, 2, "{two:?}");
        assert!(four.cost <= two.cost, "{four:?} {two:?}");
        assert!(
            four.requests[9] >= 2.0 && four.requests[19] >= 2.0,
            "{four:?}"
        );
        let held = |p: &DayPlan, hours: std::ops::Range<usize>| {
            hours.clone().all(|h| p.requests[h] >= 2.0)
        };
        assert!(held(&two, 8..11) != held(&two, 18..21), "{two:?}");
    }

    /// Without a histogram per hour, or with an hour that has no weight, there is no plan.
    #[test]
    fn no_plan_without_every_hour() {
        let mut hours = day(business);
        assert!(plan_of(&hours[..23], change(0.5, 2)).is_none());
        hours[5] = Histogram::new(HistogramOptions::vpa_cpu());
        assert!(plan_of(&hours, change(0.5, 2)).is_none());
    }

    /// The objective of a request of `r` cores over one hour's histogram (weights normalised): unused CPU
    /// of the buckets whose end it covers, the price for the others.
    fn objective(h: &Histogram, r: f64) -> f64 {
        let total = h.total_weight();
        let opts = h.options();
        h.buckets()
            .map(|(b, w)| {
                let mid = 0.5 * (opts.bucket_start(b) + h.bucket_end(b));
                let each = if h.bucket_end(b) <= r {
                    r - mid
                } else {
                    PRICE.price
                };
                w / total * each
            })
            .sum()
    }

    proptest::proptest! {
        /// On any day: at most `max_steps` steps and as many distinct requests, never dearer than one all-day
        /// request, and the cost it reports is its requests' objective hour by hour plus its changes.
        #[test]
        fn a_plan_costs_what_it_says_and_no_more_than_flat(
            levels in proptest::collection::vec(0.01f64..8.0, HOURS),
            mu in 0.0f64..5.0,
            max_steps in 1usize..5,
        ) {
            let hours = day(|h| levels[h]);
            let p = plan_of(&hours, change(mu, max_steps)).unwrap();
            proptest::prop_assert!(p.steps >= 1 && p.steps <= max_steps.max(1));
            let mut distinct = p.requests.to_vec();
            distinct.sort_by(f64::total_cmp);
            distinct.dedup();
            proptest::prop_assert!(distinct.len() <= p.steps);
            proptest::prop_assert!(p.cost <= p.flat_cost + 1e-9);
            let changes = if p.steps > 1 { mu * p.steps as f64 } else { 0.0 };
            let recomputed: f64 = hours
                .iter()
                .zip(p.requests)
                .map(|(h, r)| objective(h, r))
                .sum::<f64>()
                + changes;
            proptest::prop_assert!(
                (recomputed - p.cost).abs() <= 1e-6 * p.cost.max(1.0),
                "reported {} recomputed {}", p.cost, recomputed
            );
        }
    }
}
