//! Writes the CRDs generated from the Rust types into `crds/yaml/` and `charts/tailor/crds/`.
//!
//! `cargo run -p tailor-crds --bin crdgen` regenerates both; `--check` only compares and exits 1 on drift;
//! `--stdout` prints the multi-document YAML instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailor_crds::crd;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--stdout") {
        return match tailor_crds::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("crdgen: cannot render CRDs: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let check = args.iter().any(|a| a == "--check");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = [root.join("crds/yaml"), root.join("charts/tailor/crds")];
    match run(&dirs, check) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "crdgen: generated CRDs differ from the files; run `cargo run -p tailor-crds --bin crdgen`"
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("crdgen: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Writes (or with `check`, compares) every CRD in every directory; returns whether all were up to date.
fn run(dirs: &[PathBuf], check: bool) -> Result<bool, String> {
    let mut up_to_date = true;
    for crd in crd::crds() {
        let yaml = crd::to_yaml(&crd)
            .map_err(|e| format!("cannot render {}: {e}", crd::file_name(&crd)))?;
        for dir in dirs {
            let path = dir.join(crd::file_name(&crd));
            let current = std::fs::read_to_string(&path).ok();
            if current.as_deref() == Some(yaml.as_str()) {
                continue;
            }
            up_to_date = false;
            if !check {
                write(&path, &yaml)?;
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(up_to_date || !check)
}

fn write(path: &Path, contents: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
