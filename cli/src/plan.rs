//! `tailor plan`: what one updater iteration would do to the pods of a cluster snapshot (the
//! `tailor-updater` library's decisions, a dry run instead of the API), or upstream's updater vectors
//! evaluated with `--case`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tailor_conformance::updater as case;
use tailor_kube::rate::RateSettings;
use tailor_updater::decisions::resize_check::ResizeRules;
use tailor_updater::preview::plan::{PlanSettings, plan, table};
use tailor_updater::preview::snapshot::Snapshot;
use tailor_updater::process::flags::UpdaterFlags;

use crate::error::InputError;

/// Output formats of `tailor plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// An aligned table, one pod per line.
    Table,
    /// JSON: `{"now", "admissionAlive", "pods": [...], "skippedVpas": [...], "notes": [...]}`.
    Json,
}

/// An RFC 3339 time (`--now`; also `tailor report --now`).
pub(crate) fn parse_now(s: &str) -> Result<Timestamp, String> {
    s.parse()
        .map_err(|e| format!("{s:?} is not an RFC 3339 time: {e}"))
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Arguments of `tailor plan`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["snapshot", "case"])))]
pub struct PlanArgs {
    /// Snapshot files or directories (`kubectl get -o yaml` output: pods, Tailor VPAs, workloads,
    /// PodDisruptionBudgets, LimitRanges, the webhook's Lease and MutatingWebhookConfiguration, whose pod
    /// webhook gives the scope when no --webhook-* flag does), YAML or JSON, `List`s included.
    #[arg(value_name = "SNAPSHOT", conflicts_with = "case")]
    pub snapshot: Vec<PathBuf>,
    /// The iteration's clock (RFC 3339; default: now).
    #[arg(long, value_parser = parse_now)]
    pub now: Option<Timestamp>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: PlanFormat,
    /// Evaluate an updater vector file (upstream's format); prints `{"id", "output"}` per case.
    #[arg(long, value_name = "FILE")]
    pub case: Option<PathBuf>,
    /// The updater's `--updater-interval` (the window of the rate limits).
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub updater_interval: std::time::Duration,
    /// Name of the webhook's status Lease, looked up in the snapshot.
    #[arg(long, default_value = "tailor-admission")]
    pub admission_controller_status_lease_name: String,
    /// How long a renewal of that Lease keeps the webhook alive.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub admission_controller_status_lease_timeout: std::time::Duration,
    /// Comma-separated namespaces whose VPAs are ignored.
    #[arg(long, default_value = "")]
    pub ignored_vpa_object_namespaces: String,
    /// The cluster's Kubernetes version (`1.33`, `1.34`, …): what its API server accepts of an in-place
    /// resize (the updater reads it from the server).
    #[arg(long, value_parser = kubernetes_version, default_value = "1.34")]
    pub kubernetes_version: ResizeRules,
    #[command(flatten)]
    pub updater: UpdaterFlags,
}

fn kubernetes_version(s: &str) -> Result<ResizeRules, String> {
    let minor = s
        .trim()
        .trim_start_matches('v')
        .strip_prefix("1.")
        .ok_or_else(|| format!("{s:?} is not a Kubernetes 1.x version"))?;
    let minor = minor.split('.').next().unwrap_or_default();
    ResizeRules::for_version(minor).ok_or_else(|| format!("{s:?} is not a Kubernetes 1.x version"))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn write(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Runs `tailor plan`.
pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.case {
        return run_cases(path);
    }
    let snapshot = Snapshot::load(&args.snapshot).map_err(|e| InputError(e.to_string()))?;
    let settings = PlanSettings {
        iteration: args
            .updater
            .iteration_config(&args.ignored_vpa_object_namespaces),
        restriction: args.updater.restriction_config(),
        rate: RateSettings::from_flags(
            args.updater.eviction_rate_limit,
            args.updater.eviction_rate_burst,
        ),
        interval: args.updater_interval,
        status_lease: Some((
            args.admission_controller_status_lease_name.clone(),
            args.admission_controller_status_lease_timeout,
        )),
        now: args.now.unwrap_or_else(Timestamp::now),
        floor: args.updater.floor.floor(),
        resize_rules: args.kubernetes_version,
    };
    let planned = runtime()?.block_on(plan(&snapshot, &settings));
    match args.output {
        PlanFormat::Table => write(&table(&planned))?,
        PlanFormat::Json => write(&format!("{}\n", serde_json::to_string_pretty(&planned)?))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn run_cases(path: &PathBuf) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let cases: Vec<Value> = match &doc {
        Value::Array(list) => list.clone(),
        Value::Object(o) if o.contains_key("cases") => {
            doc["cases"].as_array().cloned().unwrap_or_default()
        }
        Value::Object(_) => vec![doc.clone()],
        _ => {
            return Err(InputError(format!(
                "{}: expected a case, an array of cases or {{\"cases\": [...]}}",
                path.display()
            ))
            .into());
        }
    };
    let rt = runtime()?;
    let mut out = Vec::with_capacity(cases.len());
    for (i, c) in cases.iter().enumerate() {
        // The error names the case's id and the field.
        let output = rt
            .block_on(case::evaluate_case(c))
            .map_err(|e| InputError(format!("{}: case {i}: {e}", path.display())))?;
        out.push(json!({"id": c["id"], "output": output}));
    }
    write(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
    Ok(ExitCode::SUCCESS)
}
