//! `tailor crds`: prints the CustomResourceDefinitions.

use std::process::ExitCode;

/// Arguments of `tailor crds` (none).
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {}

/// Prints the CRDs as YAML.
pub fn run(_: &CrdsArgs) -> anyhow::Result<ExitCode> {
    let yaml = tailor_crds::crds_yaml()?;
    print!("{yaml}");
    Ok(ExitCode::SUCCESS)
}
