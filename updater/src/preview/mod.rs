//! Offline previews of the updater for `tailor plan`: one iteration over a cluster snapshot ([`plan`]), and
//! upstream's updater vectors evaluated through the shipped functions ([`case`]).

pub mod case;
pub mod plan;
pub mod snapshot;
