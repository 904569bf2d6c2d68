//! The fit: for each resource, the largest share of the pod's raises that keeps the pod within every
//! quota that applies to it. Lowered amounts are always applied whole (they only free headroom); a raise is
//! never cut below the amount the pod has now; limits raised in proportion are cut by the same share, so
//! they keep their proportion and fit `limits.*` keys too. When even the pod as it is (its raises dropped)
//! does not fit, the pod is left alone: the API server's quota admission judges it, and Tailor's patch is
//! not the reason.

use num_bigint::BigInt;

use super::charge::{PodAmounts, SHARE_SCALE, pod_amounts, pod_total, pod_total_before};
use super::{Bound, Quota};
use crate::quantity::{Amount, Format};
use crate::sizing::{CPU, ContainerResources, MEMORY, PodError, Slot, pod_level_resources};

/// Whether the quotas already count the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charged {
    /// A pod being created: `used` does not include it.
    New,
    /// A running pod (resized in place, or replaced after an eviction): `used` includes it as it is.
    Running,
}

/// What [`fit_to_quotas`] did to the pod's resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuotaOutcome {
    /// Every change fits (or no quota applies): nothing cut.
    #[default]
    Fits,
    /// Some raise was cut to a share of it.
    Scaled,
    /// Every raise that did not fit was dropped whole (the pod keeps its amounts for those resources).
    Dropped,
    /// Even the pod without its raises exceeds a quota: no resource is changed.
    LeftAlone,
}

impl QuotaOutcome {
    /// The label value in metrics: `fits`, `scaled`, `dropped`, `left_alone`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaOutcome::Fits => "fits",
            QuotaOutcome::Scaled => "scaled",
            QuotaOutcome::Dropped => "dropped",
            QuotaOutcome::LeftAlone => "left_alone",
        }
    }
}

/// The quota key that held a resource back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// `cpu` or `memory`.
    pub resource: &'static str,
    /// The quota's name.
    pub quota: Box<str>,
    /// The key, e.g. `requests.cpu`.
    pub key: &'static str,
    /// `hard − used` in thousandths (without the pod itself when it is [`Charged::Running`]).
    pub headroom: i128,
    /// The share of the raise kept, out of [`SHARE_SCALE`] (0 for [`QuotaOutcome::LeftAlone`]).
    pub share: i128,
}

impl Binding {
    /// The note for the updates annotation and the Event, e.g. `cpu raise cut to 40% to fit
    /// ResourceQuota compute (requests.cpu headroom 300m)`.
    pub fn note(&self, outcome: QuotaOutcome) -> String {
        let quota = format!(
            "ResourceQuota {} ({} headroom {})",
            self.quota,
            self.key,
            headroom_text(self.resource, self.headroom)
        );
        match outcome {
            QuotaOutcome::LeftAlone => {
                format!("resources left alone: the pod without Tailor's raises exceeds {quota}")
            }
            _ if self.share == 0 => format!("{} raise dropped to fit {quota}", self.resource),
            _ => format!(
                "{} raise cut to {}% to fit {quota}",
                self.resource,
                self.share * 100 / SHARE_SCALE
            ),
        }
    }
}

/// A headroom as a quantity (`300m`, `64Mi`).
fn headroom_text(resource: &str, millis: i128) -> String {
    let amount = if resource == CPU {
        Amount::from_millis(BigInt::from(millis), Format::DecimalSi)
    } else {
        Amount::from_units(BigInt::from(millis.div_euclid(1000)), Format::BinarySi)
    };
    amount.to_quantity().0
}

/// The result of [`fit_to_quotas`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaFit {
    /// What was done.
    pub outcome: QuotaOutcome,
    /// The keys that held resources back (one per resource; for `LeftAlone`, the one exceeded).
    pub bindings: Vec<Binding>,
}

impl QuotaFit {
    /// One note per binding, for the updates annotation.
    pub fn notes(&self) -> Vec<String> {
        self.bindings.iter().map(|b| b.note(self.outcome)).collect()
    }
}

/// Fits the new `resources` of `slots` (indexed like `slots`) into the headroom of the `quotas` that apply
/// to `pod`, in place: raises cut to the largest share that fits, or every change taken out when even the
/// pod without its raises does not fit. Resources the pod budgets at pod level are left to that rule.
pub fn fit_to_quotas(
    pod: &k8s_openapi::api::core::v1::Pod,
    slots: &[Slot<'_>],
    resources: &mut [ContainerResources],
    quotas: &[Quota],
    charged: Charged,
) -> Result<QuotaFit, PodError> {
    let applying: Vec<&Quota> = quotas.iter().filter(|q| q.applies_to(pod)).collect();
    if applying.is_empty() {
        return Ok(QuotaFit::default());
    }
    let pod_level = pod_level_resources(pod);
    let mut fit = QuotaFit::default();
    for resource in [CPU, MEMORY] {
        if pod_level.contains(&resource) {
            continue;
        }
        let requests = pod_amounts(pod, slots, resources, resource, false)?;
        let limits = pod_amounts(pod, slots, resources, resource, true)?;
        match tightest(&applying, resource, &requests, &limits, charged) {
            Tightest::Fits => {}
            Tightest::Exceeded(binding) => {
                leave_alone(resources);
                return Ok(QuotaFit {
                    outcome: QuotaOutcome::LeftAlone,
                    bindings: vec![binding],
                });
            }
            Tightest::Cut(mut binding) => {
                let kept = apply_share(
                    slots,
                    resources,
                    resource,
                    &requests,
                    &limits,
                    binding.share,
                );
                if !kept {
                    // A share too small to raise anything by a whole unit is no raise at all.
                    binding.share = 0;
                }
                fit.bindings.push(binding);
            }
        }
    }
    if !fit.bindings.is_empty() {
        let all_dropped = fit.bindings.iter().all(|b| b.share == 0);
        fit.outcome = if all_dropped {
            QuotaOutcome::Dropped
        } else {
            QuotaOutcome::Scaled
        };
    }
    Ok(fit)
}

/// The outcome for one resource over all applying quotas.
enum Tightest {
    Fits,
    Cut(Binding),
    Exceeded(Binding),
}

fn tightest(
    quotas: &[&Quota],
    resource: &'static str,
    requests: &PodAmounts,
    limits: &PodAmounts,
    charged: Charged,
) -> Tightest {
    let mut tightest: Option<Binding> = None;
    for quota in quotas {
        for bound in quota.bounds.iter().filter(|b| b.resource == resource) {
            let amounts = if bound.limits { limits } else { requests };
            let binding = |headroom, share| Binding {
                resource,
                quota: quota.name.clone(),
                key: bound.key,
                headroom,
                share,
            };
            // Unknown usage: the API server refuses pods until the quota controller has counted.
            let headroom = bound.headroom().unwrap_or(0);
            let Some(share) = largest_share(bound, amounts, charged) else {
                return Tightest::Exceeded(binding(headroom, 0));
            };
            if share < tightest.as_ref().map_or(SHARE_SCALE, |b| b.share) {
                tightest = Some(binding(headroom, share));
            }
        }
    }
    tightest.map_or(Tightest::Fits, Tightest::Cut)
}

/// The largest share of the raises with which the pod fits `bound`; `None` when it does not fit even
/// without them.
fn largest_share(bound: &Bound, amounts: &PodAmounts, charged: Charged) -> Option<i128> {
    let headroom = bound.headroom()?;
    let room = match charged {
        Charged::New => headroom,
        Charged::Running => headroom.saturating_add(pod_total_before(amounts)),
    };
    let fits = |share| pod_total(amounts, share) <= room;
    if !fits(0) {
        return None;
    }
    if fits(SHARE_SCALE) {
        return Some(SHARE_SCALE);
    }
    // The total grows with the share: bisect (16 steps for 2^16) for the largest share that fits ...
    let largest = last_true(0, SHARE_SCALE, fits);
    // ... then take the smallest share giving the same total, so that amounts rounded down elsewhere (the
    // limits when requests bind) are not raised further than the share the binding amounts need.
    let total = pod_total(amounts, largest);
    Some(last_true(0, largest, |share| {
        share == 0 || pod_total(amounts, share - 1) < total
    }))
}

/// The largest `x` in `low..=high` with `holds(x)`, for a `holds` true up to some point and false after;
/// `holds(low)` must be true.
fn last_true(mut low: i128, mut high: i128, holds: impl Fn(i128) -> bool) -> i128 {
    if holds(high) {
        return high;
    }
    while high - low > 1 {
        let mid = (low + high) / 2;
        if holds(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    low
}

/// Writes `share` of each slot's raise of `resource` into `resources`; an amount cut back to what the pod
/// has now is taken out of the patch. Returns whether some raise remains.
fn apply_share(
    slots: &[Slot<'_>],
    resources: &mut [ContainerResources],
    resource: &str,
    requests: &PodAmounts,
    limits: &PodAmounts,
    share: i128,
) -> bool {
    let mut kept = false;
    for (slot, res) in slots.iter().zip(resources.iter_mut()) {
        for (amounts, list) in [(requests, &mut res.requests), (limits, &mut res.limits)] {
            let change = if slot.init {
                amounts.init.get(slot.index).map(|(c, _)| *c)
            } else {
                amounts.regular.get(slot.index).copied()
            };
            let Some(change) = change.filter(|c| c.raises()) else {
                continue;
            };
            let Some(format) = list
                .get(resource)
                .and_then(|q| Amount::parse(q).ok())
                .map(|a| a.format)
            else {
                continue;
            };
            let mut cut = change.at(share);
            if resource == MEMORY {
                cut -= cut.rem_euclid(1000);
            }
            if cut <= change.before {
                list.remove(resource);
            } else {
                let amount = if resource == CPU {
                    Amount::from_millis(BigInt::from(cut), format)
                } else {
                    Amount::from_units(BigInt::from(cut / 1000), format)
                };
                list.insert(resource.to_owned(), amount.to_quantity());
                kept = true;
            }
        }
    }
    kept
}

/// Takes every change out: the pod keeps what it asked for.
fn leave_alone(resources: &mut [ContainerResources]) {
    for res in resources {
        *res = ContainerResources::default();
    }
}
