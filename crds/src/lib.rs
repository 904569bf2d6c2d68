//! Tailor API types.
