//! Integration tests of the recommender controller, one binary: the loop against a mocked API server,
//! the leader lease, and the recommender conformance vectors.

mod controller;
mod lease;
mod support;
mod unit_vectors;
