//! Start-up boost (docs/design/upstream-admission.md §3.8).

use std::cmp::Ordering;

use num_bigint::BigInt;
use tailor_core::quantity::Amount;
use tailor_core::sizing::{PodError, parse};
use tailor_crds::{GenericStartupBoost, StartupBoostType};

pub(super) fn boost_error(msg: impl Into<String>) -> PodError {
    PodError::Boost(msg.into())
}

/// The boosted CPU request for `base` (docs/design/upstream-admission.md §3.8).
pub(super) fn boosted_cpu(
    base: &Amount,
    boost: &GenericStartupBoost,
    max: Option<&Amount>,
) -> Result<Amount, PodError> {
    let boosted = match boost.type_.as_ref() {
        None | Some(StartupBoostType::Factor) => {
            let factor = boost
                .factor
                .ok_or_else(|| boost_error("boost factor is required for type Factor"))?;
            if factor < 1 {
                return Err(boost_error("boost factor must be >= 1"));
            }
            Amount::from_millis(base.millis() * BigInt::from(factor), base.format)
        }
        Some(StartupBoostType::Quantity) => {
            let q = boost
                .quantity
                .as_ref()
                .ok_or_else(|| boost_error("boost quantity is required for type Quantity"))?;
            base.add(&parse(q, || "startupBoost.cpu.quantity".to_owned())?)
        }
        Some(StartupBoostType::Unknown(other)) => {
            return Err(boost_error(format!(
                "unsupported startup boost type: {other}"
            )));
        }
    };
    match max {
        Some(max) if !max.is_zero() && boosted.cmp_value(max) == Ordering::Greater => {
            Ok(max.clone())
        }
        _ => Ok(boosted),
    }
}
