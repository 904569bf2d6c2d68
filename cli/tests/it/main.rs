//! Integration tests of the `tailor` binary, one test binary: recommend, patch, convert, crds; history from
//! real Prometheus and VictoriaMetrics servers and from a faulty stub; upstream's differential cases.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::process::{Command, Output};

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
mod snapshot;
mod upstream_diff;

/// The repository's root: the examples the tests read are named from it.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Runs `tailor ARGS` from the repository's root.
fn tailor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(args)
        .current_dir(ROOT)
        .output()
        .expect("run tailor")
}

/// The standard output of a run that must have succeeded (its standard error otherwise).
fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}
