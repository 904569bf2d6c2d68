//! The one line each conformance test prints (`conformance: N/M …`), also kept for the suite's summary.
//!
//! `hack/test.sh` shows every conformance figure after the tests. Running the conformance tests a second time
//! with their output shown only to read these lines cost minutes (each `cargo test -p` resolves its own
//! features and rebuilds what `cargo test --workspace` built differently), so each test appends its line to
//! the file named by `TAILOR_CONFORMANCE_SUMMARY` when that is set, and the summary reads the file.

use std::io::Write;

/// The environment variable naming the file the figures are appended to.
pub const SUMMARY_ENV: &str = "TAILOR_CONFORMANCE_SUMMARY";

/// Prints `line` (shown with `--nocapture`) and appends it to the summary file when one is named.
///
/// # Panics
/// When the summary file is named but cannot be written: a figure the suite promised to show must not vanish.
pub fn report(line: &str) {
    println!("{line}");
    let Some(path) = std::env::var_os(SUMMARY_ENV) else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {} ({SUMMARY_ENV}): {e}", path.to_string_lossy()));
    writeln!(file, "{line}")
        .unwrap_or_else(|e| panic!("writing {} ({SUMMARY_ENV}): {e}", path.to_string_lossy()));
}
