//! Shared helpers for Tailor cross-component tests: the stand-in API server ([`standin`]) that lets the real
//! binaries run here, and the harness that starts them against it ([`process`]).

pub mod process;
pub mod standin;
