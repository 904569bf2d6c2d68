//! The fleet's metrics (`tailor_fleet_*`), served with the recommender's on `/metrics`. Every label value
//! comes from a fixed set: modes, skip reasons, write actions and results.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tailor_core::fleet::namespace_policy::MODES;

type Labels = Vec<(&'static str, &'static str)>;

/// The label value of a mode outside [`MODES`] (a created VPA edited by hand).
const OTHER_MODE: &str = "other";

/// Every fleet metric.
#[derive(Clone, Debug, Default)]
pub struct FleetMetrics {
    /// VPAs the fleet created and keeps, by `mode`.
    pub vpas: Family<Labels, Gauge>,
    /// Workloads newly left out, by `reason` (counted when a workload's decision changes, not per pass).
    pub skipped: Family<Labels, Counter>,
    /// Writes by `action` (`create`, `update`, `delete`) and `result` (`ok`, `conflict`, `error`).
    pub writes: Family<Labels, Counter>,
    /// Namespaces whose policy is refused.
    pub refused_namespaces: Gauge,
    /// Writes the last plan wanted that are not done yet (waiting for the token bucket).
    pub pending_writes: Gauge,
}

impl FleetMetrics {
    /// Registers every metric in `registry` (prefixed `tailor_fleet` by the caller).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "vpas",
            "VPAs the fleet created and keeps, by mode",
            self.vpas.clone(),
        );
        registry.register(
            "skipped",
            "Workloads of onboarded namespaces newly left out, by reason",
            self.skipped.clone(),
        );
        registry.register(
            "writes",
            "Fleet VPA writes by action and result",
            self.writes.clone(),
        );
        registry.register(
            "refused_namespaces",
            "Namespaces whose fleet policy is refused",
            self.refused_namespaces.clone(),
        );
        registry.register(
            "pending_writes",
            "Fleet writes planned and not done yet",
            self.pending_writes.clone(),
        );
    }

    /// Sets the per-mode gauge from `(mode, count)` pairs (modes absent are set to 0).
    pub fn set_vpas<'a>(&self, by_mode: impl IntoIterator<Item = (&'a str, usize)>) {
        let mut counts: Vec<(&'static str, i64)> = MODES.iter().map(|m| (*m, 0)).collect();
        counts.push((OTHER_MODE, 0));
        for (mode, n) in by_mode {
            let label = MODES
                .iter()
                .find(|m| **m == mode)
                .copied()
                .unwrap_or(OTHER_MODE);
            if let Some(c) = counts.iter_mut().find(|(m, _)| *m == label) {
                c.1 += i64::try_from(n).unwrap_or(i64::MAX);
            }
        }
        for (mode, n) in counts {
            self.vpas.get_or_create(&vec![("mode", mode)]).set(n);
        }
    }

    /// Counts one write.
    pub fn write(&self, action: &'static str, result: &'static str) {
        (self.writes)
            .get_or_create(&vec![("action", action), ("result", result)])
            .inc();
    }
}
