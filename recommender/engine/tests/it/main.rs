//! Integration tests of the engine, one binary: property tests, the W1 sanity figures and the worked example.

mod fuzz;
mod w1_sanity;
mod worked_example;
