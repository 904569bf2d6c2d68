//! `tailor recommend`: replays usage through the engine with upstream's flags and prints recommendations.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use tailor_engine::estimate_flags::EstimationFlags;
use tailor_engine::replay::{ReplayConfig, replay};

use super::{InputError, input, output};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable table.
    Table,
    /// The trace-format §1.4 shape.
    Json,
    /// The same as YAML.
    Yaml,
    /// One row per container and resource.
    Csv,
    /// Tailor VerticalPodAutoscaler manifests carrying the recommendation in their status.
    Vpa,
}

/// Arguments of `tailor recommend`. Flag names and defaults follow upstream's recommender.
#[derive(Debug, clap::Args)]
pub struct RecommendArgs {
    /// Usage trace (JSON object or array, trace-format §1) or CSV with header
    /// `timestamp,namespace,pod,container,cpu_cores,memory_bytes`; `-` reads stdin.
    #[arg(
        long,
        short,
        required_unless_present = "prometheus",
        conflicts_with = "prometheus"
    )]
    pub input: Option<PathBuf>,
    /// History from a Prometheus-compatible API (`--prometheus URL` and its flags).
    #[command(flatten)]
    pub history: super::prometheus::PrometheusArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Show, per container and resource, the inputs of each number.
    #[arg(long)]
    pub explain: bool,

    /// Upstream's model and estimation flags (shared with `tailor-recommender`).
    #[command(flatten)]
    pub estimation: EstimationFlags,
    /// Judge OOM staleness like upstream ≤ 1.2 (against the window end instead of the last memory sample).
    #[arg(long, hide = true)]
    pub legacy_oom_staleness: bool,
}

impl RecommendArgs {
    /// The configuration these flags describe.
    pub fn config(&self) -> Result<ReplayConfig, InputError> {
        self.estimation
            .validate()
            .and_then(|()| self.estimation.engine_config(self.legacy_oom_staleness))
            .map_err(|e| InputError(e.0))
    }
}

/// Runs `tailor recommend`.
pub fn run(args: &RecommendArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    let Some(input) = &args.input else {
        let url = args.history.prometheus.clone().unwrap_or_default();
        return super::prometheus::run(&url, &args.history, &config, args.output, args.explain);
    };
    let name = if input.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        input.display().to_string()
    };
    let data = input::read_all(input)?;
    let loaded = tailor_engine::trace::parse(&name, &data).map_err(|e| InputError(e.0))?;
    drop(data);
    let outputs: Vec<_> = loaded
        .traces
        .iter()
        .map(|t| replay(t, &config, true))
        .collect();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    output::write(
        &mut stdout,
        args.output,
        &outputs,
        loaded.single,
        args.explain,
        &loaded.traces,
    )?;
    stdout.flush()?;
    let failed: Vec<String> = outputs
        .iter()
        .filter_map(|o| {
            o.error
                .as_ref()
                .map(|e| format!("{name}: trace {:?}: {e}", o.id))
        })
        .collect();
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("error: {f}");
        }
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
