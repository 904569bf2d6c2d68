//! Fluent builders for the VPAs and pods tests are made of.
//!
//! A fixture starts from the smallest object of its kind ([`VpaFixture::new`], [`PodFixture::new`]), each
//! method sets one part of it, and it ends as the typed object (`build`), its JSON (`json`) or a manifest
//! string (`manifest`, a `---` document the snapshot readers and the stand-in API server take). Fixtures hold
//! the object as JSON, so a test sets exactly the fields it names: a value of `null` reads back as absent.
//!
//! To add a method: one line of doc, the field it sets, and a test that uses it.

mod json;
mod metadata;
mod pod;
mod vpa;

pub use pod::PodFixture;
pub use vpa::VpaFixture;
