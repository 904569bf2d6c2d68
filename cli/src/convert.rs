//! `tailor convert`: upstream VPA manifests in, Tailor manifests out.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::error::InputError;

/// Arguments of `tailor convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Manifest files (YAML, several documents allowed); none or `-` reads stdin.
    pub files: Vec<PathBuf>,
}

/// Runs the conversion.
pub fn run(args: &ConvertArgs) -> anyhow::Result<ExitCode> {
    let mut docs = Vec::new();
    if args.files.is_empty() {
        docs.push(("<stdin>".to_string(), read_stdin()?));
    }
    for f in &args.files {
        if f.as_os_str() == "-" {
            docs.push(("<stdin>".to_string(), read_stdin()?));
        } else {
            let text = std::fs::read_to_string(f)
                .map_err(|e| InputError(format!("reading {}: {e}", f.display())))?;
            docs.push((f.display().to_string(), text));
        }
    }
    let mut out = std::io::stdout().lock();
    for (i, (name, text)) in docs.iter().enumerate() {
        let converted = tailor_core::convert::convert_manifests(text)
            .map_err(|e| InputError(format!("{name}: {e}")))?;
        if i > 0 && !converted.starts_with("---") {
            writeln!(out, "---")?;
        }
        out.write_all(converted.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| InputError(format!("reading stdin: {e}")))?;
    Ok(s)
}
