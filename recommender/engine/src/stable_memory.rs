//! Memory for containers whose daily peaks hold steady: a smaller margin over the highest peak seen than
//! upstream's 15 % over the 90th percentile of peaks (the `auto` profile's memory rule,
//! docs/decisions/auto-profile.md).

use crate::histogram::{Histogram, ZERO_TIME};
use crate::model::AggregateContainerState;
use crate::units::sat_sub;

const DAY_NS: f64 = 86_400e9;

/// When and how far a profile lowers memory below upstream's target (the estimate chain's `StablePeaks`
/// step): when every daily peak in the memory histogram lies within `max_spread` of the lowest one and the
/// history is at least `min_days` long, the target is the highest peak × (1 + `margin`), never above
/// upstream's. Peaks that grow, spike or follow an OOM (upstream records an OOM as a raised peak) spread the
/// histogram and keep upstream's target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StablePeaks {
    /// Most the highest peak's bucket end may exceed the lowest peak's bucket start, as a fraction (≥ 0). The
    /// memory histogram's buckets are 5-7 % wide from a few hundred MiB up: 0.1 admits the peaks of one bucket,
    /// and none below about 190 MiB, where one bucket is wider than 10 %.
    pub max_spread: f64,
    /// Margin over the end of the highest peak's bucket (≥ 0).
    pub margin: f64,
    /// Least history (first to last sample, in days) before the peaks are trusted.
    pub min_days: f64,
}

/// The memory request (bytes) for a histogram of daily peaks `h` under `rule`: the end of its highest bucket
/// × (1 + margin) when its peaks are within the spread, `None` otherwise or when `h` is empty. Every
/// non-empty bucket counts, however decayed: an old low or high peak widens the spread.
pub fn stable_peak_request(h: &Histogram, rule: &StablePeaks) -> Option<f64> {
    let (low, high) = peak_range(h)?;
    (high <= low * (1.0 + rule.max_spread)).then_some(high * (1.0 + rule.margin))
}

/// The start of the lowest and the end of the highest non-empty bucket of `h` (bytes); `None` when empty.
fn peak_range(h: &Histogram) -> Option<(f64, f64)> {
    if h.is_empty() {
        return None;
    }
    let mut buckets = h.buckets().map(|(b, _)| b);
    let lowest = buckets.next()?;
    let highest = buckets.last().unwrap_or(lowest);
    let low = h.options().bucket_start(lowest);
    (low > 0.0).then_some((low, h.bucket_end(highest)))
}

/// Whether `agg`'s history (first to last sample) is at least `days` long.
fn history_of(agg: &AggregateContainerState, days: f64) -> bool {
    agg.first_sample_start != ZERO_TIME
        && sat_sub(
            agg.last_sample_start as i128,
            agg.first_sample_start as i128,
        ) as f64
            >= days * DAY_NS
}

/// [`stable_peak_request`] on `agg`'s memory peaks, `None` before `rule.min_days` of history.
pub fn steady_peaks_bytes(agg: &AggregateContainerState, rule: &StablePeaks) -> Option<f64> {
    history_of(agg, rule.min_days)
        .then(|| stable_peak_request(agg.memory.histogram(), rule))
        .flatten()
}

/// The highest peak × (1 + margin) whatever the spread (the lower bound of the rule: a request that holds
/// every peak seen with the margin is not raised again until a peak comes above it); `None` as for
/// [`steady_peaks_bytes`].
pub fn highest_peak_bytes(agg: &AggregateContainerState, rule: &StablePeaks) -> Option<f64> {
    steady_peaks_bytes(
        agg,
        &StablePeaks {
            max_spread: f64::INFINITY,
            ..*rule
        },
    )
}

/// The rule a profile with [`StablePeaks`] applied to a container's memory, and why (`--explain`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemoryRule {
    /// `steady` (a small margin over steady daily peaks) or `upstream` (upstream's percentile and margin).
    pub rule: &'static str,
    /// Why, in one sentence.
    pub reason: String,
}

/// Which memory rule `rule` applies to `agg`, given upstream's target (bytes).
pub fn memory_rule(
    rule: &StablePeaks,
    agg: &AggregateContainerState,
    upstream_bytes: f64,
) -> MemoryRule {
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let Some((low, high)) = peak_range(agg.memory.histogram()) else {
        return upstream_memory("no memory peaks yet".into());
    };
    if !history_of(agg, rule.min_days) {
        return upstream_memory(format!("less than {} day(s) of history", rule.min_days));
    }
    if high > low * (1.0 + rule.max_spread) {
        return upstream_memory(format!(
            "daily peaks spread from {:.0} to {:.0} MiB (more than {:.0} %: growth, spikes or an OOM)",
            mib(low),
            mib(high),
            100.0 * rule.max_spread
        ));
    }
    let steady = high * (1.0 + rule.margin);
    MemoryRule {
        rule: if steady < upstream_bytes {
            "steady"
        } else {
            "upstream"
        },
        reason: format!(
            "daily peaks steady within {:.0}–{:.0} MiB: the highest + {:.0} % ({:.0} MiB), at most upstream's \
             p90 of peaks + margin ({:.0} MiB)",
            mib(low),
            mib(high),
            100.0 * rule.margin,
            mib(steady),
            mib(upstream_bytes)
        ),
    }
}

fn upstream_memory(why: String) -> MemoryRule {
    MemoryRule {
        rule: "upstream",
        reason: format!("{why}: upstream's p90 of daily peaks + margin"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::HistogramOptions;

    const MIB: f64 = 1024.0 * 1024.0;

    fn peaks(values: &[f64]) -> Histogram {
        let mut h = Histogram::new(HistogramOptions::vpa_memory());
        for v in values {
            h.add_sample(v * MIB, 1.0);
        }
        h
    }

    #[test]
    fn steady_peaks_get_a_small_margin_over_the_highest() {
        let rule = StablePeaks {
            max_spread: 0.1,
            margin: 0.05,
            min_days: 1.0,
        };
        let h = peaks(&[800.0, 801.0, 802.0]);
        let r = stable_peak_request(&h, &rule).unwrap() / MIB;
        assert!((802.0..=802.0 * 1.05 * 1.06).contains(&r), "{r}");
        // Growing or spiking peaks keep upstream's rule.
        assert_eq!(stable_peak_request(&peaks(&[800.0, 900.0]), &rule), None);
        assert_eq!(stable_peak_request(&peaks(&[]), &rule), None);
    }
}
