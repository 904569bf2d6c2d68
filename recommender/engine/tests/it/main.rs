//! Integration tests of the engine, one binary: property tests, the W1 sanity figures and the worked example.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod backtest;
mod backtest_jobs;
mod fuzz;
mod matching;
mod w1_sanity;
mod worked_example;
