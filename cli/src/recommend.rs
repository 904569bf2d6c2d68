//! `tailor recommend`: replays usage through the engine with upstream's flags and prints recommendations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailor_engine::estimate_flags::EstimationFlags;
use tailor_engine::replay::{ReplayConfig, Trace, replay};
use tailor_engine::samples::BadSamples;

#[cfg(feature = "full")]
use crate::cluster_snapshot::{ClusterSnapshot, SnapshotArgs};
use crate::error::InputError;
use crate::input;
use crate::output::{self, OutputFormat, Recommendation, Recommendations, Target};
#[cfg(feature = "full")]
use crate::prometheus;

/// A usage trace file: `--input` and what to do with impossible values in it. Shared with `tailor report`.
#[derive(Debug, clap::Args)]
pub struct TraceFileArgs {
    /// Usage trace (JSON object or array, docs/design/trace-format.md §1) or CSV with header
    /// `timestamp,namespace,pod,container,cpu_cores,memory_bytes`; `-` reads stdin.
    #[arg(long, short, help_heading = "Input and output")]
    #[cfg_attr(
        feature = "full",
        arg(required_unless_present = "prometheus", conflicts_with = "prometheus")
    )]
    #[cfg_attr(not(feature = "full"), arg(required = true))]
    pub input: Option<PathBuf>,
    /// Drop usage values that cannot be real (negative, not finite, beyond any machine) instead of failing on
    /// the first; the count is reported per workload (table notes, `skipped` in JSON/YAML).
    #[arg(long, help_heading = "Input and output")]
    pub skip_bad_samples: bool,
}

impl TraceFileArgs {
    /// How the file is named in messages: its path, or `<stdin>` for `-`.
    pub fn name(input: &Path) -> String {
        if input.as_os_str() == "-" {
            "<stdin>".to_string()
        } else {
            input.display().to_string()
        }
    }

    /// What the parser does with impossible usage values.
    pub fn rule(&self) -> BadSamples {
        if self.skip_bad_samples {
            BadSamples::Skip
        } else {
            BadSamples::Reject
        }
    }
}

/// The other source and the model: Prometheus history, the profile, upstream's model and estimation flags.
/// Shared with `tailor report`.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// History from a Prometheus-compatible API (`--prometheus URL` and its flags).
    #[cfg(feature = "full")]
    #[command(flatten)]
    pub history: prometheus::PrometheusArgs,

    /// Tailor profile to recommend with (`upstream` keeps the flags' numbers; docs/profiles.md). With
    /// `--explain`, a profile that decides per container (`auto`) says which rule it applied and why.
    #[arg(long, default_value = "upstream", help_heading = "Input and output")]
    pub profile: String,
    /// Upstream's model and estimation flags (shared with `tailor-recommender`).
    #[command(flatten, next_help_heading = "Model and estimation (upstream's flags)")]
    pub estimation: EstimationFlags,
    /// Judge OOM staleness like upstream ≤ 1.2 (against the window end instead of the last memory sample).
    #[arg(long, hide = true)]
    pub legacy_oom_staleness: bool,
}

impl ModelArgs {
    /// The configuration these flags describe.
    pub fn config(&self) -> Result<ReplayConfig, InputError> {
        let mut config = self
            .estimation
            .validate()
            .and_then(|()| self.estimation.engine_config(self.legacy_oom_staleness))
            .map_err(|e| InputError(e.0))?;
        let profile = tailor_engine::profile::by_name(self.profile.trim())
            .map_err(|e| InputError(format!("--profile: {e}")))?;
        if let Some(p) = profile {
            config.recommender = p.apply(&config.recommender);
            config.aggregations.cpu_time_of_day |= p.cpu_time_of_day.is_some();
        }
        Ok(config)
    }
}

/// Arguments of `tailor recommend`. Flag names and defaults follow upstream's recommender. (The two
/// flattened parts keep the order of `--help`: the trace file, then output, then history and model.)
#[derive(Debug, clap::Args)]
pub struct RecommendArgs {
    /// The trace file.
    #[command(flatten)]
    pub trace: TraceFileArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Table, help_heading = "Input and output")]
    pub output: OutputFormat,
    /// Show, per container and resource, the inputs of each number and the final value (table, json, yaml).
    #[arg(long, help_heading = "Input and output")]
    pub explain: bool,
    /// Prometheus history, profile and estimation flags.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sizing within a cluster snapshot.
    #[cfg(feature = "full")]
    #[command(flatten)]
    pub cluster: SnapshotArgs,
}

/// Runs `tailor recommend`: reads the source, prints the recommendations, then reports what failed.
pub fn run(args: &RecommendArgs) -> anyhow::Result<ExitCode> {
    let config = args.model.config()?;
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
    #[cfg(feature = "full")]
    let cluster = args.cluster.load()?;
    let Some(input) = &args.trace.input else {
        #[cfg(feature = "full")]
        return run_prometheus(args, &config, cluster.as_ref());
        #[cfg(not(feature = "full"))]
        return Err(InputError("--input is required".into()).into());
    };
    let name = TraceFileArgs::name(input);
    let recs = from_trace_file(input, &name, &config, args.trace.rule())?;
    #[cfg(feature = "full")]
    let recs = size_within(recs, cluster.as_ref());
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
/// never held whole) and handed to `each` with its recommendation; the VPA spec comes from the trace.
/// Returns whether the input was one trace object.
pub(crate) fn each_trace(
    input: &Path,
    name: &str,
    config: &ReplayConfig,
    rule: BadSamples,
    each: &mut dyn FnMut(&Trace, Recommendation),
) -> anyhow::Result<bool> {
    let reader = input::open(input)?;
    let single = tailor_engine::trace::parse_each(name, reader, rule, &mut |p| {
        let t = p.trace;
        // Explain details always: the table's history column and notes come from them (small per container).
        let r = Recommendation {
            output: replay(&t, config, true),
            target: Target {
                kind: String::new(),
                policy: t.policy.clone(),
                update_mode: t.update_mode.clone(),
            },
            skipped: p.skipped,
            cluster: Vec::new(),
        };
        each(&t, r);
    })
    .map_err(|e| InputError(e.0))?;
    Ok(single)
}

/// Every trace of the file, replayed ([`each_trace`]), in file order.
pub(crate) fn from_trace_file(
    input: &Path,
    name: &str,
    config: &ReplayConfig,
    rule: BadSamples,
) -> anyhow::Result<Recommendations> {
    let mut items = Vec::new();
    let single = each_trace(input, name, config, rule, &mut |_, r| items.push(r))?;
    Ok(Recommendations { items, single })
}

/// With `--snapshot`, each recommendation sized within the snapshot's cluster; a trace whose VPA the
/// snapshot lacks is printed as it is, with a warning.
#[cfg(feature = "full")]
fn size_within(mut recs: Recommendations, cluster: Option<&ClusterSnapshot>) -> Recommendations {
    let Some(cluster) = cluster else {
        return recs;
    };
    for r in &mut recs.items {
        if !cluster.size(r) {
            eprintln!(
                "warning: --snapshot has no Tailor VPA {:?}: its recommendation is not sized within the cluster",
                r.output.id
            );
        }
    }
    recs
}

/// The Prometheus source: prints what loaded, then the load's summary, then why it is incomplete (exit 1).
#[cfg(feature = "full")]
fn run_prometheus(
    args: &RecommendArgs,
    config: &ReplayConfig,
    cluster: Option<&ClusterSnapshot>,
) -> anyhow::Result<ExitCode> {
    let mut loaded = prometheus::load(&args.model.history, config, args.explain)?;
    loaded.recommendations = size_within(std::mem::take(&mut loaded.recommendations), cluster);
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
