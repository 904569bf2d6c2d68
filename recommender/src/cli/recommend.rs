//! `tailor recommend`: replays usage through the engine with upstream's flags and prints recommendations.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use tailor_recommender::estimate::RecommenderConfig;
use tailor_recommender::model::AggregationsConfig;
use tailor_recommender::policy::Resources;
use tailor_recommender::quantity;
use tailor_recommender::replay::{ReplayConfig, replay};

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

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
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

    /// CPU usage percentile that will be used as a base for the CPU target recommendation.
    #[arg(long, default_value_t = 0.9)]
    pub target_cpu_percentile: f64,
    /// CPU usage percentile that will be used for the lower bound on CPU recommendation.
    #[arg(long, default_value_t = 0.5)]
    pub recommendation_lower_bound_cpu_percentile: f64,
    /// CPU usage percentile that will be used for the upper bound on CPU recommendation.
    #[arg(long, default_value_t = 0.95)]
    pub recommendation_upper_bound_cpu_percentile: f64,
    /// Memory usage percentile that will be used as a base for the memory target recommendation.
    #[arg(long, default_value_t = 0.9)]
    pub target_memory_percentile: f64,
    /// Memory usage percentile that will be used for the lower bound on memory recommendation.
    #[arg(long, default_value_t = 0.5)]
    pub recommendation_lower_bound_memory_percentile: f64,
    /// Memory usage percentile that will be used for the upper bound on memory recommendation.
    #[arg(long, default_value_t = 0.95)]
    pub recommendation_upper_bound_memory_percentile: f64,
    /// Fraction of usage added as the safety margin to the recommended request.
    #[arg(long, default_value_t = 0.15)]
    pub recommendation_margin_fraction: f64,
    /// Minimum CPU recommendation for a pod (millicores), split across its containers.
    #[arg(long, default_value_t = 25.0)]
    pub pod_recommendation_min_cpu_millicores: f64,
    /// Minimum memory recommendation for a pod (MiB), split across its containers.
    #[arg(long, default_value_t = 250.0)]
    pub pod_recommendation_min_memory_mb: f64,
    /// Time unit of the confidence for CPU bounds.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub confidence_interval_cpu: Duration,
    /// Time unit of the confidence for memory bounds.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub confidence_interval_memory: Duration,
    /// Round CPU recommendations up to a multiple of this many millicores.
    #[arg(long, default_value_t = 1)]
    pub round_cpu_millicores: i64,
    /// Round memory recommendations up to a multiple of this many bytes.
    #[arg(long, default_value_t = 1)]
    pub round_memory_bytes: i64,
    /// (Deprecated upstream) humanize memory to two decimals of Ki/Mi/Gi/Ti.
    #[arg(long)]
    pub humanize_memory: bool,
    /// Length of one memory peak aggregation window.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub memory_aggregation_interval: Duration,
    /// Number of memory aggregation windows kept (history = interval × count).
    #[arg(long, default_value_t = 8)]
    pub memory_aggregation_interval_count: i64,
    /// Half-life of the memory histogram decay.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub memory_histogram_decay_half_life: Duration,
    /// Half-life of the CPU histogram decay.
    #[arg(long, value_parser = duration, default_value = "24h")]
    pub cpu_histogram_decay_half_life: Duration,
    /// Ratio by which memory is bumped up after an OOM.
    #[arg(long, default_value_t = 1.2)]
    pub oom_bump_up_ratio: f64,
    /// Minimum bytes memory is bumped up by after an OOM.
    #[arg(long, default_value_t = 104857600.0)]
    pub oom_min_bump_up_bytes: f64,
    /// Round CPU up to whole cores for containers annotated `vpa-post-processor.kubernetes.io/<name>_integerCPU=true`.
    #[arg(long)]
    pub cpu_integer_post_processor_enabled: bool,
    /// Maximum CPU recommendation per container (quantity, e.g. `4` or `3500m`).
    #[arg(long)]
    pub container_recommendation_max_allowed_cpu: Option<String>,
    /// Maximum memory recommendation per container (quantity, e.g. `8Gi`).
    #[arg(long)]
    pub container_recommendation_max_allowed_memory: Option<String>,
    /// Judge OOM staleness like upstream ≤ 1.2 (against the window end instead of the last memory sample).
    #[arg(long, hide = true)]
    pub legacy_oom_staleness: bool,
}

impl RecommendArgs {
    /// The configuration these flags describe.
    pub fn config(&self) -> Result<ReplayConfig, InputError> {
        for (name, d) in [
            ("--confidence-interval-cpu", self.confidence_interval_cpu),
            (
                "--confidence-interval-memory",
                self.confidence_interval_memory,
            ),
            (
                "--memory-aggregation-interval",
                self.memory_aggregation_interval,
            ),
            (
                "--memory-histogram-decay-half-life",
                self.memory_histogram_decay_half_life,
            ),
            (
                "--cpu-histogram-decay-half-life",
                self.cpu_histogram_decay_half_life,
            ),
        ] {
            if d.is_zero() {
                return Err(InputError(format!("{name} must be greater than zero")));
            }
        }
        if self.memory_aggregation_interval_count <= 0 {
            return Err(InputError(
                "--memory-aggregation-interval-count must be greater than zero".into(),
            ));
        }
        let max_cpu = self
            .container_recommendation_max_allowed_cpu
            .as_deref()
            .map(quantity::cpu_millis)
            .transpose()
            .map_err(|e| InputError(format!("--container-recommendation-max-allowed-cpu: {e}")))?;
        let max_mem = self
            .container_recommendation_max_allowed_memory
            .as_deref()
            .map(quantity::memory_bytes)
            .transpose()
            .map_err(|e| {
                InputError(format!(
                    "--container-recommendation-max-allowed-memory: {e}"
                ))
            })?;
        Ok(ReplayConfig {
            aggregations: AggregationsConfig {
                memory_aggregation_interval: nanos(self.memory_aggregation_interval),
                memory_aggregation_interval_count: self.memory_aggregation_interval_count,
                memory_histogram_decay_half_life: nanos(self.memory_histogram_decay_half_life),
                cpu_histogram_decay_half_life: nanos(self.cpu_histogram_decay_half_life),
                oom_bump_up_ratio: self.oom_bump_up_ratio,
                oom_min_bump_up_bytes: self.oom_min_bump_up_bytes,
                legacy_oom_staleness: self.legacy_oom_staleness,
            },
            recommender: RecommenderConfig {
                target_cpu_percentile: self.target_cpu_percentile,
                lower_bound_cpu_percentile: self.recommendation_lower_bound_cpu_percentile,
                upper_bound_cpu_percentile: self.recommendation_upper_bound_cpu_percentile,
                target_memory_percentile: self.target_memory_percentile,
                lower_bound_memory_percentile: self.recommendation_lower_bound_memory_percentile,
                upper_bound_memory_percentile: self.recommendation_upper_bound_memory_percentile,
                safety_margin_fraction: self.recommendation_margin_fraction,
                pod_min_cpu_millicores: self.pod_recommendation_min_cpu_millicores,
                pod_min_memory_mb: self.pod_recommendation_min_memory_mb,
                confidence_interval_cpu: nanos(self.confidence_interval_cpu),
                confidence_interval_memory: nanos(self.confidence_interval_memory),
                round_cpu_millicores: self.round_cpu_millicores,
                round_memory_bytes: self.round_memory_bytes,
                humanize_memory: self.humanize_memory,
                cpu_integer_post_processor_enabled: self.cpu_integer_post_processor_enabled,
                global_max_allowed: Resources {
                    cpu: max_cpu,
                    memory: max_mem,
                },
            },
        })
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
    let loaded = tailor_recommender::input::parse(&name, &data).map_err(|e| InputError(e.0))?;
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
