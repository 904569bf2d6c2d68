//! Integration tests of the API crate, one binary: conformance vectors, CRD drift, and the examples against
//! the CRD schema and the webhook rules.

mod conformance;
mod crd_drift;
mod examples;
