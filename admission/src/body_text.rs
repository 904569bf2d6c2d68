//! A string of a review's body as the decoder reads it: borrowed from the body, unless it holds escapes and
//! has to be unescaped into a string of its own (the API server writes none in the fields read this way).

use std::borrow::Cow;

/// A string of the body: borrowed from it unless it holds escapes.
#[derive(Debug, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);
