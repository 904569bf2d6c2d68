//! Quota fit (docs/decisions/quota-fit.md): a pod's raised requests and limits scaled down so that the pod stays within its
//! namespace's ResourceQuota headroom (`hard − used`), shared by the webhook (at creation) and the updater
//! (before an in-place resize or an eviction).
//!
//! - [`Quota`]: what the rule reads of a ResourceQuota — its name, its scopes and, for the tracked keys
//!   (`cpu`, `memory`, `requests.*`, `limits.*`), hard and used ([`Quota::of`]).
//! - [`applies_to`](Quota::applies_to): the quota's scopes evaluated against the pod, conservatively (a
//!   scope that cannot be evaluated counts as matching, so an unknown scope can only make the fit stricter).
//! - [`pod_total`]: the pod's charge as the API server's quota evaluator computes it
//!   (regular containers and native sidecars summed, init containers as peaks, plus the overhead).
//! - [`fit_to_quotas`]: the largest share of each raise that fits every quota.
//!
//! Everything here is pure: the callers pass in the quotas their caches hold.

use k8s_openapi::api::core::v1::ResourceQuota;

use crate::quantity::Amount;
use crate::sizing::{CPU, MEMORY};

mod charge;
mod fit;
mod scope;

pub use charge::{Change, PodAmounts, SHARE_SCALE, pod_total};
pub use fit::{Binding, Charged, QuotaFit, QuotaOutcome, fit_to_quotas};
pub use scope::ScopeTerm;

/// The quota keys the fit reads: the bare `cpu`/`memory` mean requests.
pub const TRACKED_KEYS: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// One tracked key of a quota, in thousandths of the resource's unit (millicores, millibytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The key as written in the quota (one of [`TRACKED_KEYS`]).
    pub key: &'static str,
    /// `cpu` or `memory`.
    pub resource: &'static str,
    /// Whether the key bounds the pods' limits (`limits.*`) rather than their requests.
    pub limits: bool,
    /// `hard`: the smaller of `spec.hard` and `status.hard` where both name the key.
    pub hard: i128,
    /// `status.used`; `None` until the quota controller has counted (the API server then refuses pods).
    pub used: Option<i128>,
}

impl Bound {
    /// `hard − used` (negative when the namespace is already over); `None` while `used` is unknown.
    pub fn headroom(&self) -> Option<i128> {
        self.used.map(|used| self.hard.saturating_sub(used))
    }
}

/// What the quota fit reads of one ResourceQuota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    /// `metadata.name`.
    pub name: Box<str>,
    /// `spec.scopes` and `spec.scopeSelector`, reduced to what can be evaluated against a pod.
    pub scopes: Box<[ScopeTerm]>,
    /// The tracked keys it bounds (at most [`TRACKED_KEYS`]`.len()`).
    pub bounds: Box<[Bound]>,
}

/// Reads `key` of a resource list in thousandths; `None` when absent or unparsable.
fn millis(
    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    key: &str,
) -> Option<i128> {
    list.and_then(|l| l.get(key))
        .and_then(|q| Amount::parse(q).ok())
        .and_then(|a| a.millis_i128())
}

impl Quota {
    /// The part of `quota` the fit reads; `None` when it bounds none of the tracked keys (nothing to keep).
    /// A hard value that does not parse is left out (the API server validates them; nothing to enforce).
    pub fn of(quota: &ResourceQuota) -> Option<Quota> {
        let spec = quota.spec.as_ref();
        let status = quota.status.as_ref();
        let bounds: Vec<Bound> = TRACKED_KEYS
            .into_iter()
            .filter_map(|key| {
                let spec_hard = millis(spec.and_then(|s| s.hard.as_ref()), key);
                let status_hard = millis(status.and_then(|s| s.hard.as_ref()), key);
                let hard = match (spec_hard, status_hard) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b)?,
                };
                Some(Bound {
                    key,
                    resource: if key.ends_with(CPU) { CPU } else { MEMORY },
                    limits: key.starts_with("limits."),
                    hard,
                    used: millis(status.and_then(|s| s.used.as_ref()), key),
                })
            })
            .collect();
        if bounds.is_empty() {
            return None;
        }
        Some(Quota {
            name: quota.metadata.name.clone().unwrap_or_default().into(),
            scopes: scope::terms(spec).into(),
            bounds: bounds.into(),
        })
    }
}

/// The resources (`cpu`, `memory`) whose `limits.*` a quota of `quotas` that applies to `pod` tracks: the API
/// server refuses a pod without those limits, so the limit policy's `unset` keeps them
/// (docs/limit-policy.md).
pub fn limits_tracked(
    quotas: &[Quota],
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for quota in quotas.iter().filter(|q| q.applies_to(pod)) {
        for bound in quota.bounds.iter().filter(|b| b.limits) {
            if !out.contains(&bound.resource) {
                out.push(bound.resource);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
