//! `tailor patch`: what the admission webhook would do to a pod, offline (the `tailor-admission` library's
//! pure patch computation, no server).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_admission::pod::PatchOptions;
use tailor_admission::preview::{InputFile, preview_patch, run_cases};

use crate::error::InputError;

/// Arguments of `tailor patch`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["pod", "case"])))]
pub struct PatchArgs {
    /// The pod (or a workload whose pod template is used), YAML or JSON.
    #[arg(long, requires = "vpa", conflicts_with = "case")]
    pub pod: Option<PathBuf>,
    /// The Tailor VPA with its status recommendation, YAML or JSON (other documents in the file are ignored).
    #[arg(long)]
    pub vpa: Option<PathBuf>,
    /// LimitRange manifests of the pod's namespace (repeatable; a file may hold several).
    #[arg(long = "limit-range")]
    pub limit_ranges: Vec<PathBuf>,
    /// An admission case file (one case or an array); prints `{"id","patches","allowed"}` per case.
    #[arg(long)]
    pub case: Option<PathBuf>,
    /// Apply `startupBoost` at admission (upstream feature gate CPUStartupBoost).
    #[arg(long)]
    pub cpu_startup_boost: bool,
    /// Ceiling of a boosted CPU request.
    #[arg(long)]
    pub max_allowed_cpu_boost: Option<String>,
    /// Keep proportional limits within the container LimitRange's maxLimitRequestRatio (Tailor option).
    #[arg(long)]
    pub honor_max_limit_request_ratio: bool,
    /// Also size native sidecars, init containers with restartPolicy Always (Tailor option).
    #[arg(long)]
    pub native_sidecars: bool,
}

fn read(path: &Path) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    Ok((path.display().to_string(), text))
}

/// Runs the preview and prints JSON on stdout.
pub fn run(args: &PatchArgs) -> anyhow::Result<ExitCode> {
    let options = PatchOptions {
        cpu_startup_boost: args.cpu_startup_boost,
        max_allowed_cpu_boost: args.max_allowed_cpu_boost.clone().map(Quantity),
        honor_max_limit_request_ratio: args.honor_max_limit_request_ratio,
        native_sidecars: args.native_sidecars,
    };
    let result = if let Some(case) = &args.case {
        let (name, text) = read(case)?;
        run_cases(
            InputFile {
                name: &name,
                content: &text,
            },
            &options,
        )
    } else {
        let (Some(pod), Some(vpa)) = (&args.pod, &args.vpa) else {
            return Err(InputError("--pod needs --vpa".into()).into());
        };
        let (pod_name, pod_text) = read(pod)?;
        let (vpa_name, vpa_text) = read(vpa)?;
        let lrs = args
            .limit_ranges
            .iter()
            .map(|p| read(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let lr_files: Vec<InputFile<'_>> = lrs
            .iter()
            .map(|(name, content)| InputFile { name, content })
            .collect();
        preview_patch(
            InputFile {
                name: &pod_name,
                content: &pod_text,
            },
            InputFile {
                name: &vpa_name,
                content: &vpa_text,
            },
            &lr_files,
            &options,
        )
    };
    let value = result.map_err(|e| InputError(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &value)?;
    writeln!(out)?;
    Ok(ExitCode::SUCCESS)
}
