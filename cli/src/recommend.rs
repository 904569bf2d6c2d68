//! `tailor recommend`: replays usage through the engine with upstream's flags and prints recommendations.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailor_engine::estimate_flags::EstimationFlags;
use tailor_engine::replay::{ReplayConfig, replay};
use tailor_engine::samples::BadSamples;

use crate::error::InputError;
use crate::output::{self, OutputFormat, Recommendation, Recommendations, Target};
use crate::{input, prometheus};

/// Arguments of `tailor recommend`. Flag names and defaults follow upstream's recommender.
#[derive(Debug, clap::Args)]
pub struct RecommendArgs {
    /// Usage trace (JSON object or array, trace-format §1) or CSV with header
    /// `timestamp,namespace,pod,container,cpu_cores,memory_bytes`; `-` reads stdin.
    #[arg(
        long,
        short,
        required_unless_present = "prometheus",
        conflicts_with = "prometheus",
        help_heading = "Input and output"
    )]
    pub input: Option<PathBuf>,
    /// Drop usage values that cannot be real (negative, not finite, beyond any machine) instead of failing on
    /// the first; the count is reported per workload (table notes, `skipped` in JSON/YAML).
    #[arg(long, help_heading = "Input and output")]
    pub skip_bad_samples: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Table, help_heading = "Input and output")]
    pub output: OutputFormat,
    /// Show, per container and resource, the inputs of each number and the final value (table, json, yaml).
    #[arg(long, help_heading = "Input and output")]
    pub explain: bool,
    /// History from a Prometheus-compatible API (`--prometheus URL` and its flags).
    #[command(flatten)]
    pub history: prometheus::PrometheusArgs,

    /// Upstream's model and estimation flags (shared with `tailor-recommender`).
    #[command(flatten, next_help_heading = "Model and estimation (upstream's flags)")]
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

/// Runs `tailor recommend`: reads the source, prints the recommendations, then reports what failed.
pub fn run(args: &RecommendArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    if args.explain && matches!(args.output, OutputFormat::Csv | OutputFormat::Vpa) {
        return Err(InputError(format!(
            "--explain is not available with -o {}: use -o table, json or yaml",
            if args.output == OutputFormat::Csv {
                "csv"
            } else {
                "vpa"
            }
        ))
        .into());
    }
    let Some(input) = &args.input else {
        return run_prometheus(args, &config);
    };
    let name = if input.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        input.display().to_string()
    };
    let rule = if args.skip_bad_samples {
        BadSamples::Skip
    } else {
        BadSamples::Reject
    };
    let recs = from_trace_file(input, &name, &config, rule)?;
    print(&recs, args)?;
    let failed: Vec<String> = recs
        .items
        .iter()
        .filter_map(|r| {
            r.output
                .error
                .as_ref()
                .map(|e| format!("{name}: trace {:?}: {e}", r.output.id))
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

/// The trace source: every trace of the file replayed as soon as it has been read (a JSON array is streamed,
/// never held whole); the VPA spec comes from the trace.
fn from_trace_file(
    input: &std::path::Path,
    name: &str,
    config: &ReplayConfig,
    rule: BadSamples,
) -> anyhow::Result<Recommendations> {
    let reader = input::open(input)?;
    let mut items = Vec::new();
    let single = tailor_engine::trace::parse_each(name, reader, rule, &mut |p| {
        let t = p.trace;
        // Explain details always: the table's history column and notes come from them (small per container).
        items.push(Recommendation {
            output: replay(&t, config, true),
            target: Target {
                kind: String::new(),
                policy: t.policy,
                update_mode: t.update_mode,
            },
            skipped: p.skipped,
        });
    })
    .map_err(|e| InputError(e.0))?;
    Ok(Recommendations { items, single })
}

/// The Prometheus source: prints what loaded, then the load's summary, then why it is incomplete (exit 1).
fn run_prometheus(args: &RecommendArgs, config: &ReplayConfig) -> anyhow::Result<ExitCode> {
    let loaded = prometheus::load(&args.history, config, args.explain)?;
    print(&loaded.recommendations, args)?;
    eprintln!("{}", loaded.summary);
    if let Some(e) = loaded.incomplete {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn print(recs: &Recommendations, args: &RecommendArgs) -> anyhow::Result<()> {
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    output::write(&mut stdout, args.output, recs, args.explain)?;
    stdout.flush()?;
    Ok(())
}
