//! The updater's decisions, pure: which VPAs and pods it acts on, in which order, within which budgets,
//! in place or by eviction, and why a pod is skipped; each over values the iteration hands it.

pub mod calculator;
pub mod conditions;
pub mod config;
pub mod conflicts;
pub mod eviction_admission;
pub mod gate;
pub mod infeasible;
pub mod modes;
pub mod priority;
pub mod qos;
pub mod quota;
pub mod replacements;
pub mod resize;
pub mod resize_check;
pub mod restriction;
pub mod scope;
pub mod sizing;
pub mod skip;
pub mod upstream;
