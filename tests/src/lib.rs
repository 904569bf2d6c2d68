//! Shared helpers for Tailor cross-component tests: the stand-in API server ([`standin`]) that lets the real
//! binaries run here.

pub mod standin;
