//! The price flags `tailor report` and `tailor backtest` share ([`PriceArgs`]): what one vCPU and one GiB of
//! memory cost for an hour, with the dashboard's defaults ([`tailor_dashboard::money`]); and what a backtest's
//! requests cost at them.

use serde_json::json;
use tailor_dashboard::money::{self, Prices};
use tailor_engine::backtest::Score;

use crate::error::InputError;

/// `--price-vcpu-hour`, `--price-gib-hour` and `--price-currency`, under the help heading "Prices".
#[derive(Debug, clap::Args)]
pub struct PriceArgs {
    /// Price of one vCPU for an hour (default: Google Compute Engine E2 on demand, us-central1, 2025).
    #[arg(long, value_name = "PRICE", default_value_t = money::DEFAULT_VCPU_HOUR,
          allow_negative_numbers = true, help_heading = "Prices")]
    pub price_vcpu_hour: f64,
    /// Price of one GiB of memory for an hour (default: the same price list).
    #[arg(long, value_name = "PRICE", default_value_t = money::DEFAULT_GIB_HOUR,
          allow_negative_numbers = true, help_heading = "Prices")]
    pub price_gib_hour: f64,
    /// Currency of the prices (letters only, at most 8).
    #[arg(
        long,
        value_name = "CODE",
        default_value = "USD",
        help_heading = "Prices"
    )]
    pub price_currency: String,
}

impl PriceArgs {
    /// The checked prices; a negative or not finite price is an error naming its flag.
    pub fn prices(&self) -> Result<Prices, InputError> {
        for (flag, vcpu_hour, gib_hour) in [
            ("--price-vcpu-hour", self.price_vcpu_hour, 0.0),
            ("--price-gib-hour", 0.0, self.price_gib_hour),
        ] {
            Prices::new(vcpu_hour, gib_hour, "").map_err(|e| InputError(format!("{flag}: {e}")))?;
        }
        Prices::new(
            self.price_vcpu_hour,
            self.price_gib_hour,
            &self.price_currency,
        )
        .map_err(|e| InputError(format!("--price-vcpu-hour / --price-gib-hour: {e}")))
    }
}

/// What the requests of `s` cost at `prices`: requested core-hours per vCPU-hour plus requested GiB-hours
/// per GiB-hour.
pub fn requested_cost(s: &Score, prices: &Prices) -> f64 {
    s.requested_cost(prices.vcpu_hour, prices.gib_hour)
}

/// The prices of the money figures, as JSON.
pub fn prices_json(prices: &Prices) -> serde_json::Value {
    json!({
        "vcpu_hour": prices.vcpu_hour,
        "gib_hour": prices.gib_hour,
        "currency": prices.currency,
        "source": prices.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(vcpu: f64, gib: f64) -> PriceArgs {
        PriceArgs {
            price_vcpu_hour: vcpu,
            price_gib_hour: gib,
            price_currency: "EUR".into(),
        }
    }

    #[test]
    fn a_bad_price_names_its_flag() {
        for (a, flag) in [
            (args(-1.0, 0.1), "--price-vcpu-hour"),
            (args(f64::NAN, 0.1), "--price-vcpu-hour"),
            (args(0.1, f64::NAN), "--price-gib-hour"),
            (args(0.1, f64::INFINITY), "--price-gib-hour"),
            (args(0.1, -0.5), "--price-gib-hour"),
        ] {
            let e = a.prices().expect_err("refused").0;
            assert!(e.starts_with(&format!("{flag}: ")), "{e}");
        }
        let p = args(0.05, 0.004).prices().expect("accepted");
        assert_eq!(
            (p.vcpu_hour, p.gib_hour, p.currency.as_str()),
            (0.05, 0.004, "EUR")
        );
    }
}
