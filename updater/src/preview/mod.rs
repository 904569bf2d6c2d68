//! Offline previews of the updater for `tailor plan`: one iteration over a cluster snapshot ([`plan`]), and,
//! with the `vectors` feature, upstream's updater vectors evaluated through the shipped functions (`case`,
//! which carries upstream's test doubles and so stays out of the `tailor-updater` binary).

#[cfg(feature = "vectors")]
pub mod case;
pub mod plan;
pub mod snapshot;
