//! Pricing CPU risk against waste: the request that minimises unused CPU plus a price for every minute usage is
//! above it, on a histogram of the container's own usage (the `auto` profile's CPU rule,
//! docs/decisions/auto-profile.md).

/// How a profile prices CPU risk against waste (the estimate chain's `RiskPriced` step): the CPU request is the one that
/// minimises, on the container's own history, the CPU requested above usage plus `price` × the time usage is
/// above the request. Risk minutes count time above the request whatever the size of the container, waste
/// counts cores: a large container's request above rare peaks costs more than a small one's, so a single
/// price sets large containers closer to their usual load and small ones above every peak they had.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RiskPrice {
    /// Core-minutes of unused request that one minute of usage above the request is worth (> 0).
    pub price: f64,
    /// The upper bound of the priced all-day target: the target × (1 + this), so that the updater resizes a
    /// request more than this above the target at once instead of after its 12 h wait (`None`: upstream's
    /// upper bound, at least the target). `auto` uses the updater's own in-place threshold, 10 %.
    pub upper_margin: Option<f64>,
}

/// The CPU request (cores) that minimises `E[(r − u)+] + price · P(u > r)` on the distribution of usage `u` in
/// `h` (each bucket's usage at its midpoint), over the candidates `r` = the upper ends of its non-empty
/// buckets; `None` when `h` is empty. Where nothing is worth leaving uncovered this is the end of the highest
/// bucket: the highest usage seen, within the bucket's 5 %.
pub fn priced_request(h: &crate::histogram::Histogram, price: &RiskPrice) -> Option<f64> {
    if h.is_empty() {
        return None;
    }
    let opts = h.options();
    priced_from_buckets(
        h.buckets()
            .map(|(b, w)| (opts.bucket_start(b), h.bucket_end(b), w)),
        price,
    )
}

/// [`priced_request`] over `(start, end, weight)` buckets in ascending order.
pub fn priced_from_buckets(
    buckets: impl Iterator<Item = (f64, f64, f64)>,
    price: &RiskPrice,
) -> Option<f64> {
    let buckets: Vec<(f64, f64, f64)> = buckets
        .filter(|b| b.2 > 0.0)
        .map(|(lo, hi, w)| (w, 0.5 * (lo + hi), hi))
        .collect();
    let total: f64 = buckets.iter().map(|b| b.0).sum();
    if total <= 0.0 {
        return None;
    }
    let lambda = price.price;
    let (mut below, mut below_sum) = (0.0, 0.0);
    let mut best: Option<(f64, f64)> = None;
    for &(w, m, hi) in &buckets {
        below += w;
        below_sum += w * m;
        let waste = (hi * below - below_sum).max(0.0) / total;
        let exceed = ((total - below) / total).max(0.0);
        let obj = waste + lambda * exceed;
        if best.is_none_or(|(o, _)| obj < o) {
            best = Some((obj, hi));
        }
    }
    best.map(|(_, r)| r)
}
