//! `tailor crds`: prints the CustomResourceDefinitions.

use std::process::ExitCode;

/// Arguments of `tailor crds` (none).
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {}

/// Prints the CRDs as YAML.
pub fn run(_: &CrdsArgs) -> anyhow::Result<ExitCode> {
    let yaml = tailor_crds::crds_yaml()?;
    std::io::Write::write_all(&mut std::io::stdout().lock(), yaml.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
