//! A pod's charge against a quota, as the API server's quota evaluator computes it: the regular
//! containers and the native sidecars summed; each other init container, plus the sidecars started before
//! it, as a peak; the larger of the two, plus the pod overhead. Each container's amount is a [`Change`], so
//! the total can be read at any share of the raises.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::sizing::{
    ContainerResources, CurrentResources, PodError, Slot, current_resources, is_native_sidecar,
    parse_opt,
};

/// The denominator of a share of the raises: [`SHARE_SCALE`] is the whole raise, 0 none of it.
pub const SHARE_SCALE: i128 = 1 << 16;

/// One container's amount of one resource (thousandths) before and after the change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// Now (0 when unset).
    pub before: i128,
    /// After the change (`before` when the change leaves it).
    pub after: i128,
}

impl Change {
    /// The amount with `share` / [`SHARE_SCALE`] of a raise (rounded down, never below `before`); a
    /// lowered amount is lowered whole.
    pub fn at(&self, share: i128) -> i128 {
        if self.after <= self.before {
            return self.after;
        }
        let raise = (self.after - self.before).saturating_mul(share) / SHARE_SCALE;
        self.before.saturating_add(raise)
    }

    /// Whether the change raises the amount.
    pub fn raises(&self) -> bool {
        self.after > self.before
    }
}

/// One resource's amounts in a pod, for requests or for limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAmounts {
    /// `spec.containers`, in order.
    pub regular: Vec<Change>,
    /// `spec.initContainers`, in order, with whether each is a native sidecar.
    pub init: Vec<(Change, bool)>,
    /// `spec.overhead`.
    pub overhead: i128,
}

/// The pod's total at `share` of the raises.
pub fn pod_total(amounts: &PodAmounts, share: i128) -> i128 {
    total_with(amounts, |c| c.at(share))
}

/// The pod's total before the change.
pub(crate) fn pod_total_before(amounts: &PodAmounts) -> i128 {
    total_with(amounts, |c| c.before)
}

fn total_with(amounts: &PodAmounts, amount: impl Fn(&Change) -> i128) -> i128 {
    let mut sum: i128 = amounts
        .regular
        .iter()
        .fold(0i128, |t, c| t.saturating_add(amount(c)));
    let mut sidecars = 0i128;
    let mut peak = 0i128;
    for (change, sidecar) in &amounts.init {
        let own = amount(change);
        if *sidecar {
            sum = sum.saturating_add(own);
            sidecars = sidecars.saturating_add(own);
            peak = peak.max(sidecars);
        } else {
            peak = peak.max(own.saturating_add(sidecars));
        }
    }
    sum.max(peak).saturating_add(amounts.overhead)
}

/// Reads one amount of a container in thousandths.
fn read(
    current: CurrentResources<'_>,
    resource: &str,
    limits: bool,
    name: &str,
) -> Result<i128, PodError> {
    let q = if limits {
        current.limit(resource)
    } else {
        current.request(resource)
    };
    let field = if limits { "limit" } else { "request" };
    let amount = parse_opt(q, || format!("{resource} {field} of {name}"))?;
    Ok(amount.and_then(|a| a.millis_i128()).unwrap_or(0))
}

/// The amounts of `resource` (limits when `limits`) in `pod`: now, and after the slots' new `resources`
/// (indexed like `slots`; an absent entry leaves the amount).
pub(crate) fn pod_amounts(
    pod: &Pod,
    slots: &[Slot<'_>],
    resources: &[ContainerResources],
    resource: &str,
    limits: bool,
) -> Result<PodAmounts, PodError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(PodAmounts::default());
    };
    let change = |container: &Container, init: bool, index: usize| -> Result<Change, PodError> {
        let name = &container.name;
        let before = read(
            current_resources(pod, container, init),
            resource,
            limits,
            name,
        )?;
        let new = slots
            .iter()
            .position(|s| s.init == init && s.index == index)
            .and_then(|i| resources.get(i))
            .and_then(|r| {
                let list = if limits { &r.limits } else { &r.requests };
                list.get(resource)
            });
        let field = if limits { "limit" } else { "request" };
        let after = parse_opt(new, || format!("new {resource} {field} of {name}"))?
            .and_then(|a| a.millis_i128())
            .unwrap_or(before);
        Ok(Change { before, after })
    };
    let regular = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| change(c, false, i))
        .collect::<Result<_, _>>()?;
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| Ok((change(c, true, i)?, is_native_sidecar(c))))
        .collect::<Result<_, PodError>>()?;
    let overhead = parse_opt(spec.overhead.as_ref().and_then(|o| o.get(resource)), || {
        format!("{resource} overhead")
    })?
    .and_then(|a| a.millis_i128())
    .unwrap_or(0);
    // The evaluator adds the overhead to limits too (where the pod has any); counting it always is the
    // stricter reading.
    Ok(PodAmounts {
        regular,
        init,
        overhead,
    })
}
