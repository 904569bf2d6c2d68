//! Tailor's pure shared rules: what the webhook, the updater, the recommender's engine and the `tailor` CLI
//! must agree on. No kube client, no runtime, no socket, no clock: the callers pass in what the cluster holds.
//!
//! - [`quantity`]: resource quantities, parsed, compared and printed exactly (Go's `resource.Quantity`
//!   rules, implemented here without floating point).
//! - [`label_selector`]: label-selector strings (`a=b,c in (d)`) parsed into the API's `LabelSelector`.
//! - [`policy`]: container-policy lookup and per-container settings.
//! - [`capping`]: min/max clamping of recommendations.
//! - [`validation`]: VPA validation and defaulting, with upstream's rules and messages.
//! - [`limit_range_merge`] and [`sizing`]: LimitRange merging and pod sizing (recommendation processing,
//!   proportional limits, pod-level budgets) shared by the webhook and the updater.
//! - [`quota`]: quota fit — raises cut to the namespace's ResourceQuota headroom (webhook and updater).
//! - [`target`]: target resolution (well-known kinds, controller owner, workload selectors, label-selector
//!   matching); kinds outside the well-known set are looked up by the caller.
//! - [`workload`]: the seven well-known workload kinds reduced to what target matching reads.
//! - [`convert`]: upstream manifests → Tailor manifests.
//! - [`fleet`]: fleet onboarding — which VPAs a namespace policy creates, changes and deletes.
//! - [`json_fields`] and [`text`]: which input fields a typed decode dropped; bounds on input-derived text.

pub mod capping;
pub mod convert;
pub mod fleet;
pub mod json_fields;
pub mod label_selector;
pub mod limit_range_merge;
pub mod policy;
pub mod quantity;
pub mod quota;
pub mod sizing;
pub mod target;
pub mod text;
pub mod trimmed;
pub mod validation;
pub mod workload;
