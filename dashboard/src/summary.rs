//! Totals of the fleet page: per namespace and for the whole fleet, requested against recommended, in
//! resources and in money, and the counts of what needs a look.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Flag, Resources, Workload};
use crate::money::Prices;

/// The totals of a set of workloads.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Workloads (VPAs).
    pub workloads: usize,
    /// Running pods.
    pub pods: i64,
    /// What the running pods request.
    pub requested: Resources,
    /// What they would request at the targets.
    pub recommended: Resources,
    /// The monthly cost of `requested`.
    pub requested_monthly: f64,
    /// The monthly cost of `recommended`.
    pub recommended_monthly: f64,
    /// Workloads per flag.
    pub flags: BTreeMap<String, usize>,
}

impl Totals {
    fn add(&mut self, w: &Workload, prices: &Prices) {
        self.workloads += 1;
        self.pods += w.pods;
        self.requested = self.requested.plus(w.requested());
        self.recommended = self.recommended.plus(w.recommended());
        self.requested_monthly += w.requested_monthly(prices);
        self.recommended_monthly += w.recommended_monthly(prices);
        for f in &w.flags {
            *self.flags.entry(format!("{f:?}")).or_default() += 1;
        }
    }

    /// Workloads with `flag`.
    pub fn count(&self, flag: Flag) -> usize {
        self.flags.get(&format!("{flag:?}")).copied().unwrap_or(0)
    }

    /// Requested minus recommended, per month (negative: the targets cost more, the pods are short).
    pub fn saving_monthly(&self) -> f64 {
        self.requested_monthly - self.recommended_monthly
    }
}

/// The fleet's totals and each namespace's.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The whole fleet.
    pub fleet: Totals,
    /// Per namespace, in name order.
    pub namespaces: BTreeMap<String, Totals>,
}

impl Summary {
    /// The totals of `workloads` at `prices`.
    pub fn of(workloads: &[Workload], prices: &Prices) -> Summary {
        let mut s = Summary::default();
        for w in workloads {
            s.fleet.add(w, prices);
            s.namespaces
                .entry(w.namespace.to_string())
                .or_default()
                .add(w, prices);
        }
        s
    }
}
