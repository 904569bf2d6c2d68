//! Costs in money: requested and recommended CPU and memory priced per vCPU-hour and per GiB-hour, shown per
//! month (730 hours, the average month of the public cloud price lists).
//!
//! The default prices are Google Compute Engine's on-demand E2 prices in us-central1 as its public price
//! list gave them in 2025: USD 0.021811 per vCPU-hour and USD 0.002923 per GiB-hour. They stand for "what a
//! general-purpose core and GiB cost on demand"; set your own (`--price-vcpu-hour`, `--price-gib-hour`,
//! the chart's `dashboard.prices`) for reserved, spot or another provider's prices.
//!
//! Prices per instance family (`--price-instance-family m6i=0.0240/0.0030`) override the defaults for the
//! workloads whose pods run on nodes of that family ([`instance_family`] reads it from a node's labels). A
//! workload is priced at the family most of its running pods run on.

use std::collections::BTreeMap;

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
/// Most instance families priced.
pub const MAX_FAMILIES: usize = 256;
/// Longest instance family name.
pub const MAX_FAMILY_LEN: usize = 63;

/// Karpenter's label naming a node's instance family (AWS provider).
pub const KARPENTER_FAMILY_LABEL: &str = "karpenter.k8s.aws/instance-family";
/// GKE's label naming a node's machine family.
pub const GKE_FAMILY_LABEL: &str = "cloud.google.com/machine-family";
/// The well-known label naming a node's instance type.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// The instance family a node's labels name: Karpenter's or GKE's family label, else the instance type up
/// to its first `.` (`m6i.large` is family `m6i`; a type without a dot is its own family). `None` when the
/// node names none or the name is not a plain family name.
pub fn instance_family<'a>(label: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    let family = (label(KARPENTER_FAMILY_LABEL))
        .or_else(|| label(GKE_FAMILY_LABEL))
        .or_else(|| label(INSTANCE_TYPE_LABEL).and_then(|t| t.split('.').next()))?;
    valid_family(family).then_some(family)
}

fn valid_family(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= MAX_FAMILY_LEN
        && (f.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The prices of one instance family.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyPrice {
    /// One vCPU for an hour.
    pub vcpu_hour: f64,
    /// One GiB of memory for an hour.
    pub gib_hour: f64,
}

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
    /// Prices of instance families, overriding the two above for workloads on their nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub families: BTreeMap<String, FamilyPrice>,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            vcpu_hour: DEFAULT_VCPU_HOUR,
            gib_hour: DEFAULT_GIB_HOUR,
            currency: "USD".into(),
            source: DEFAULT_SOURCE.into(),
            families: BTreeMap::new(),
        }
    }
}

/// Why prices are refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InvalidPrice {
    /// A price that is negative or not a number.
    #[error("{what} must be a finite price of at least 0, not {value}")]
    Value {
        /// Which price.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// An instance family's price that does not read as `FAMILY=VCPU_HOUR/GIB_HOUR`.
    #[error(
        "instance family price {0:?}: expected FAMILY=VCPU_HOUR/GIB_HOUR (for example m6i=0.024/0.003), \
         a family of letters, digits, '-' and '_' (at most 63)"
    )]
    Family(String),
    /// More families than [`MAX_FAMILIES`].
    #[error("at most {MAX_FAMILIES} instance families can be priced")]
    TooManyFamilies,
}

fn checked(what: &'static str, value: f64) -> Result<f64, InvalidPrice> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(InvalidPrice::Value { what, value })
    }
}

impl Prices {
    /// Checked prices.
    pub fn new(vcpu_hour: f64, gib_hour: f64, currency: &str) -> Result<Prices, InvalidPrice> {
        checked("the vCPU-hour price", vcpu_hour)?;
        checked("the GiB-hour price", gib_hour)?;
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
            families: BTreeMap::new(),
        })
    }

    /// These prices with instance families' prices, each `FAMILY=VCPU_HOUR/GIB_HOUR`; a family given twice
    /// keeps its last price.
    pub fn with_families<S: AsRef<str>>(mut self, specs: &[S]) -> Result<Prices, InvalidPrice> {
        for spec in specs {
            let spec = spec.as_ref().trim();
            let bad = || InvalidPrice::Family(spec.chars().take(100).collect());
            let (family, prices) = spec.split_once('=').ok_or_else(bad)?;
            let (vcpu, gib) = prices.split_once('/').ok_or_else(bad)?;
            let family = family.trim();
            if !valid_family(family) {
                return Err(bad());
            }
            let price = |what, v: &str| checked(what, v.trim().parse::<f64>().map_err(|_| bad())?);
            let p = FamilyPrice {
                vcpu_hour: price("the family's vCPU-hour price", vcpu)?,
                gib_hour: price("the family's GiB-hour price", gib)?,
            };
            self.families.insert(family.to_owned(), p);
            if self.families.len() > MAX_FAMILIES {
                return Err(InvalidPrice::TooManyFamilies);
            }
        }
        Ok(self)
    }

    /// The monthly cost of `r` at the default prices (unknown resources cost nothing).
    pub fn monthly(&self, r: Resources) -> f64 {
        self.monthly_in(r, None)
    }

    /// The monthly cost of `r` on nodes of `family`: its prices when it has some, else the defaults.
    pub fn monthly_in(&self, r: Resources, family: Option<&str>) -> f64 {
        let (vcpu_hour, gib_hour) = match family.and_then(|f| self.families.get(f)) {
            Some(p) => (p.vcpu_hour, p.gib_hour),
            None => (self.vcpu_hour, self.gib_hour),
        };
        let cpu = r.cpu_millicores().unwrap_or(0) as f64 / 1000.0 * vcpu_hour;
        let memory = r.memory_bytes().unwrap_or(0) as f64 / GIB * gib_hour;
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

    #[test]
    fn a_family_has_its_own_prices_and_others_the_defaults() {
        let p = Prices::default()
            .with_families(&["m6i=0.04/0.005", " c7g = 0.03 / 0.004 "])
            .unwrap();
        let core = Resources::new(1000, 0);
        assert!((p.monthly_in(core, Some("m6i")) - 0.04 * 730.0).abs() < 1e-9);
        assert!((p.monthly_in(core, Some("c7g")) - 0.03 * 730.0).abs() < 1e-9);
        assert_eq!(p.monthly_in(core, Some("e2")), p.monthly(core));
        assert_eq!(p.monthly_in(core, None), p.monthly(core));
        for bad in [
            "m6i",
            "m6i=0.04",
            "m6i=x/0.1",
            "=0.1/0.1",
            "m6i=-1/0",
            "<b>=1/1",
            "a=NaN/1",
        ] {
            assert!(Prices::default().with_families(&[bad]).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_FAMILIES).map(|i| format!("f{i}=1/1")).collect();
        assert_eq!(
            Prices::default().with_families(&many),
            Err(InvalidPrice::TooManyFamilies)
        );
    }

    #[test]
    fn a_node_names_its_family_by_label_or_instance_type() {
        let labels = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v)
        };
        assert_eq!(
            instance_family(labels(&[(INSTANCE_TYPE_LABEL, "m6i.large")])),
            Some("m6i")
        );
        assert_eq!(
            instance_family(labels(&[
                (INSTANCE_TYPE_LABEL, "m6i.large"),
                (KARPENTER_FAMILY_LABEL, "m6in")
            ])),
            Some("m6in")
        );
        assert_eq!(
            instance_family(labels(&[
                (INSTANCE_TYPE_LABEL, "e2-standard-4"),
                (GKE_FAMILY_LABEL, "e2")
            ])),
            Some("e2")
        );
        assert_eq!(
            instance_family(labels(&[(INSTANCE_TYPE_LABEL, "Standard_D4s_v5")])),
            Some("Standard_D4s_v5")
        );
        assert_eq!(
            instance_family(labels(&[(INSTANCE_TYPE_LABEL, "<x>")])),
            None
        );
        assert_eq!(instance_family(labels(&[])), None);
    }
}
