//! When a recommendation reaches a container: at pod start, by the updater's rules, or at once.

use crate::policy::Resources;
use crate::units::Nanos;

/// Updater rule: a change this old may be replaced when the target moved by more than [`MIN_CHANGE`].
pub const UPDATE_AFTER: Nanos = 12 * 3600 * 1_000_000_000;
/// Updater rule: relative change of a resource that justifies an update after [`UPDATE_AFTER`].
pub const MIN_CHANGE: f64 = 0.10;

/// How recommendations are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "flags", derive(clap::ValueEnum))]
pub enum Actuation {
    /// New requests only when a pod starts (as seen in the data).
    Admission,
    /// The updater's rules on running pods: no request or outside [lower, upper], or more than 10 % off
    /// after 12 h.
    #[default]
    Inplace,
    /// Every recommendation immediately.
    Ideal,
}

/// A recommendation for one container name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rec {
    /// Target.
    pub target: Resources,
    /// Lower bound; absent = no bound.
    pub lower: Resources,
    /// Upper bound; absent = no bound.
    pub upper: Resources,
}

/// Requests in effect on one container and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The requests.
    pub requests: Resources,
    /// When they were set.
    pub since: Nanos,
}

fn outside(cur: Option<i64>, lower: Option<i64>, upper: Option<i64>) -> bool {
    let Some(c) = cur else { return false };
    lower.is_some_and(|l| c < l) || upper.is_some_and(|u| c > u)
}

fn changed_by(cur: Option<i64>, target: Option<i64>) -> f64 {
    match (cur, target) {
        (Some(c), Some(t)) if c > 0 => (t - c).abs() as f64 / c as f64,
        (None, Some(_)) => f64::INFINITY,
        _ => 0.0,
    }
}

/// Whether a running container with `applied` takes `rec` at `now` under `actuation`.
pub fn takes(actuation: Actuation, applied: &Applied, rec: &Rec, now: Nanos) -> bool {
    if rec.target == applied.requests {
        return false;
    }
    match actuation {
        Actuation::Admission => false,
        Actuation::Ideal => true,
        Actuation::Inplace => {
            let a = &applied.requests;
            // A container without a request for a resource the target sets is outside any bounds.
            let unset = (a.cpu.is_none() && rec.target.cpu.is_some())
                || (a.memory.is_none() && rec.target.memory.is_some());
            if unset
                || outside(a.cpu, rec.lower.cpu, rec.upper.cpu)
                || outside(a.memory, rec.lower.memory, rec.upper.memory)
            {
                return true;
            }
            let change =
                changed_by(a.cpu, rec.target.cpu).max(changed_by(a.memory, rec.target.memory));
            now.saturating_sub(applied.since) >= UPDATE_AFTER && change > MIN_CHANGE
        }
    }
}
