//! Reading `--input` (a file or stdin) with a progress bar for large files; parsing lives in
//! [`tailor_engine::trace`].

use std::io::Read;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::InputError;

/// Inputs at least this large get a progress bar on stderr (when stderr is a terminal).
const PROGRESS_THRESHOLD: u64 = 32 << 20;

/// Reads the whole input (stdin for `-`), with a progress bar for large files.
pub fn read_all(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        return Ok(buf);
    }
    let file =
        std::fs::File::open(path).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::with_capacity(len as usize);
    if len >= PROGRESS_THRESHOLD {
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("reading {msg} {bar:30} {bytes}/{total_bytes} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(path.display().to_string());
        bar.wrap_read(file)
            .read_to_end(&mut buf)
            .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
        bar.finish_and_clear();
    } else {
        let mut f = file;
        f.read_to_end(&mut buf)
            .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    }
    Ok(buf)
}
