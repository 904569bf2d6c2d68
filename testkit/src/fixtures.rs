//! Fluent builders for the VPAs and pods tests are made of.
