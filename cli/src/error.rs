//! [`InputError`]: the error class that exits with code 2.

/// An error caused by the user's input (exit code 2); everything else exits 1.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);
