//! Conformance with upstream's vectors, through Tailor's shipped functions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod updater;
