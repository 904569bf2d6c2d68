//! Integration tests of the `tailor` binary, one test binary: recommend, patch, convert, crds; history from
//! real Prometheus and VictoriaMetrics servers and from a faulty stub; upstream's differential cases.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod backtest;
mod cli;
mod fleet;
mod patch;
mod plan;
mod prometheus;
mod prometheus_faults;
mod prometheus_stores;
mod report;
mod sigv4;
mod upstream_diff;
