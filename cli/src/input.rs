//! Opening `--input` (a file or stdin) for streaming, with a progress bar for large files; parsing lives in
//! [`tailor_engine::trace`].

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::InputError;

/// Inputs at least this large get a progress bar on stderr (when stderr is a terminal).
const PROGRESS_THRESHOLD: u64 = 32 << 20;

/// Read buffer: large enough for fast parsing, small next to any trace worth streaming.
const BUFFER: usize = 256 << 10;

/// A buffered reader of the input (stdin for `-`), with a progress bar for large files that clears itself
/// at the end of the input.
pub fn open(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::with_capacity(BUFFER, std::io::stdin())));
    }
    let file =
        std::fs::File::open(path).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len < PROGRESS_THRESHOLD {
        return Ok(Box::new(BufReader::with_capacity(BUFFER, file)));
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("reading {msg} {bar:30} {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(path.display().to_string());
    Ok(Box::new(BufReader::with_capacity(
        BUFFER,
        Progress {
            inner: bar.wrap_read(file),
            bar,
        },
    )))
}

/// A reader that clears its progress bar at the end of the input.
struct Progress<R: Read> {
    inner: indicatif::ProgressBarIter<R>,
    bar: ProgressBar,
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            self.bar.finish_and_clear();
        }
        Ok(n)
    }
}
