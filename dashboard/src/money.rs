//! Costs in money: requested and recommended CPU and memory priced per vCPU-hour and per GiB-hour, shown per
//! month (730 hours, the average month of the public cloud price lists).
//!
//! The default prices are Google Compute Engine's on-demand E2 prices in us-central1 as its public price
//! list gave them in 2025: USD 0.021811 per vCPU-hour and USD 0.002923 per GiB-hour. They stand for "what a
//! general-purpose core and GiB cost on demand"; set your own (`--price-vcpu-hour`, `--price-gib-hour`,
//! the chart's `dashboard.prices`) for reserved, spot or another provider's prices.

use serde::{Deserialize, Serialize};

use crate::model::Resources;

/// Hours in the average month.
pub const HOURS_PER_MONTH: f64 = 730.0;
/// Default price of one vCPU for an hour.
pub const DEFAULT_VCPU_HOUR: f64 = 0.021811;
/// Default price of one GiB for an hour.
pub const DEFAULT_GIB_HOUR: f64 = 0.002923;
/// What the defaults are.
pub const DEFAULT_SOURCE: &str =
    "Google Compute Engine E2 on-demand, us-central1, public price list (2025)";
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Prices per hour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prices {
    /// One vCPU for an hour.
    pub vcpu_hour: f64,
    /// One GiB of memory for an hour.
    pub gib_hour: f64,
    /// Currency code.
    pub currency: String,
    /// Where the prices come from.
    pub source: String,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            vcpu_hour: DEFAULT_VCPU_HOUR,
            gib_hour: DEFAULT_GIB_HOUR,
            currency: "USD".into(),
            source: DEFAULT_SOURCE.into(),
        }
    }
}

/// Why prices are refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{what} must be a finite price of at least 0, not {value}")]
pub struct InvalidPrice {
    /// Which price.
    pub what: &'static str,
    /// The value given.
    pub value: f64,
}

impl Prices {
    /// Checked prices.
    pub fn new(vcpu_hour: f64, gib_hour: f64, currency: &str) -> Result<Prices, InvalidPrice> {
        for (what, value) in [
            ("the vCPU-hour price", vcpu_hour),
            ("the GiB-hour price", gib_hour),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(InvalidPrice { what, value });
            }
        }
        let default = Prices::default();
        let own = vcpu_hour != default.vcpu_hour || gib_hour != default.gib_hour;
        Ok(Prices {
            vcpu_hour,
            gib_hour,
            currency: currency
                .chars()
                .filter(char::is_ascii_alphabetic)
                .take(8)
                .collect(),
            source: if own {
                "set by the operator".into()
            } else {
                default.source
            },
        })
    }

    /// The monthly cost of `r` (unknown resources cost nothing).
    pub fn monthly(&self, r: Resources) -> f64 {
        let cpu = r.cpu_millicores.unwrap_or(0) as f64 / 1000.0 * self.vcpu_hour;
        let memory = r.memory_bytes.unwrap_or(0) as f64 / GIB * self.gib_hour;
        (cpu + memory) * HOURS_PER_MONTH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_and_a_gib_for_a_month() {
        let p = Prices::default();
        let month = p.monthly(Resources::new(1000, 1 << 30));
        assert!(
            (month - (0.021811 + 0.002923) * 730.0).abs() < 1e-9,
            "{month}"
        );
        assert_eq!(p.monthly(Resources::default()), 0.0);
        assert!(Prices::new(-1.0, 0.0, "USD").is_err());
        assert!(Prices::new(f64::NAN, 0.0, "USD").is_err());
        assert_eq!(
            Prices::new(0.05, 0.005, "EUR<script>").map(|p| p.currency),
            Ok("EURscrip".into())
        );
    }
}
