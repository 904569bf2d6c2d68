//! Tailor recommender.
