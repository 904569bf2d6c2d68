//! Fleet onboarding: one Tailor VPA for each workload of a chosen namespace, without the user writing one
//! per workload (docs/fleet.md).
//!
//! A namespace is chosen by its label `tailor.dev/vpa=<mode>`, or by the operator's namespace selector
//! (then with the operator's default mode). Its annotations give the created VPAs' defaults; a workload's
//! annotation `tailor.dev/vpa` leaves it out (`"false"`) or sets its mode. The rules are pure: the
//! recommender's leader feeds them what its watches hold and applies the [`FleetPlan`]; `tailor fleet`
//! feeds them a snapshot and prints it.
//!
//! - [`namespace_policy`]: a namespace's labels and annotations read into a [`NamespacePolicy`], or the
//!   reason it is refused.
//! - [`mod@plan`]: which VPAs to create, change and delete, and which workloads are left out and why.

pub mod namespace_policy;
pub mod plan;

use std::collections::BTreeMap;

pub use namespace_policy::{FleetSettings, NamespacePolicy, PolicyError, PolicySource};
pub use plan::{
    Apply, Change, Delete, DeleteReason, ExistingVpa, FleetPlan, Namespace, Refusal, Skip,
    SkipReason, UpstreamTarget, Workload, plan,
};

/// Namespace label (and workload annotation) that puts workloads under Tailor with a mode; on a
/// workload, `"false"` leaves it out.
pub const VPA_KEY: &str = "tailor.dev/vpa";
/// The workload annotation value that leaves a workload out.
pub const OPT_OUT: &str = "false";
/// The workload annotation value that keeps the namespace's mode.
pub const OPT_IN: &str = "true";
/// Namespace annotation: the created VPAs' profile (copied to their `tailor.dev/profile`).
pub const PROFILE_KEY: &str = "tailor.dev/profile";
/// Namespace annotation: `minAllowed` for every container, `cpu=50m,memory=64Mi`.
pub const MIN_ALLOWED_KEY: &str = "tailor.dev/min-allowed";
/// Namespace annotation: `maxAllowed` for every container, `cpu=4,memory=8Gi`.
pub const MAX_ALLOWED_KEY: &str = "tailor.dev/max-allowed";
/// Namespace annotation: `controlledValues` for every container (`RequestsAndLimits` or `RequestsOnly`).
pub const CONTROLLED_VALUES_KEY: &str = "tailor.dev/controlled-values";
/// Namespace annotation: `updatePolicy.minReplicas`.
pub const MIN_REPLICAS_KEY: &str = "tailor.dev/min-replicas";
/// Annotation on a created VPA naming the policy it came from; with [`MANAGED_BY_LABEL`] it marks the
/// VPAs Tailor created (the only ones it changes or deletes).
pub const POLICY_ANNOTATION: &str = "tailor.dev/fleet-policy";
/// The recommended label for the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// [`MANAGED_BY_LABEL`]'s value on created VPAs.
pub const MANAGED_BY: &str = "tailor";
/// Longest annotation or label value read (longer ones are refused, not cut).
pub const MAX_VALUE_LEN: usize = 1024;
/// Longest VPA name (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;

/// Every namespace annotation and label the fleet reads, with what it does (for `--help` and the docs'
/// drift check).
pub const KEYS: &[(&str, &str)] = &[
    (
        VPA_KEY,
        "namespace label: the mode of the namespace's VPAs (Off, Initial, Recreate, InPlaceOrRecreate, \
         InPlace); workload annotation: \"false\" leaves the workload out, a mode overrides the namespace's",
    ),
    (
        PROFILE_KEY,
        "namespace annotation: the created VPAs' profile",
    ),
    (
        MIN_ALLOWED_KEY,
        "namespace annotation: minAllowed for every container (cpu=50m,memory=64Mi)",
    ),
    (
        MAX_ALLOWED_KEY,
        "namespace annotation: maxAllowed for every container (cpu=4,memory=8Gi)",
    ),
    (
        CONTROLLED_VALUES_KEY,
        "namespace annotation: controlledValues (RequestsAndLimits or RequestsOnly)",
    ),
    (
        MIN_REPLICAS_KEY,
        "namespace annotation: updatePolicy.minReplicas",
    ),
];

/// Whether an object with these labels and annotations is a VPA Tailor's fleet created.
pub fn is_managed(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        && annotations.contains_key(POLICY_ANNOTATION)
}

/// The name of the VPA created for a workload: `<name>-<kind in lower case>`; `None` when longer than a
/// name may be.
pub fn vpa_name(kind: &str, name: &str) -> Option<String> {
    let n = format!("{name}-{}", kind.to_ascii_lowercase());
    (n.len() <= MAX_NAME_LEN).then_some(n)
}
