//! Tailor recommender: the pure recommendation engine (histograms, model, estimators, replay) and the
//! `tailor` CLI built on it.
//!
//! Data flows one way: samples → [`model`] → [`estimate`] → [`policy`] capping. Nothing here reads a clock,
//! a socket or a kube client: time is always a parameter.

pub mod controller;
pub mod estimate;
pub mod estimate_flags;
pub mod histogram;
pub mod input;
pub mod model;
pub mod policy;
pub mod quantity;
pub mod replay;
pub mod source;
pub mod status;
pub mod units;
pub mod workload;
