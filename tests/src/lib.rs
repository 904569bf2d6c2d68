//! Shared helpers for Tailor cross-component tests.
