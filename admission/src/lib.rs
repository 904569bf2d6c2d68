//! Tailor admission webhook.
