//! Offline previews of the updater for `tailor plan`: one iteration over a cluster snapshot ([`plan`]).
//! Upstream's updater vectors, with the test doubles they name, are evaluated by the `tailor-conformance`
//! crate, outside this library.

pub mod plan;
pub mod snapshot;
