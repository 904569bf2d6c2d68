//! `tailor report`: the dashboard's fleet pages as one offline HTML file (or the fleet they show, as JSON),
//! from one of three sources (a clap group: exactly one): a usage trace (`--input`) or Prometheus history
//! (`--prometheus`), the sources `tailor recommend` reads, replayed the same way ([`recommend::each_trace`],
//! [`prometheus::load_with`]); or a cluster snapshot (`--snapshot`), what `tailor plan` reads, whose VPAs
//! carry their recommendations ([`snapshot`]). [`tailor_dashboard`] renders; this module turns each trace,
//! Prometheus workload or VPA into the pages' [`Workload`]:
//!
//! - VPA: a trace id `namespace/name` is split at its first `/`; an id without one is in namespace
//!   `default`, where the replay puts every trace pod (and `-o vpa` its VPA). Prometheus workloads keep
//!   their namespace and name; a snapshot gives one workload per Tailor VPA (`autoscaling.tailor.dev`) and
//!   per upstream VPA (`autoscaling.k8s.io`). A `namespace/name` seen again gets ` (2)`, ` (3)`, … after its
//!   name, so every workload has its own anchor.
//! - kind: the owner kind Prometheus found, the VPA's `targetRef` (empty without one), else `Workload` (a
//!   trace names none); mode: the trace's `updateMode`, else `Off`; a VPA's, else its project's default
//!   (`Recreate`, upstream's `Auto`); profile: the trace's or Tailor VPA's `tailor.dev/profile` annotation,
//!   for a trace else `--profile` unless `upstream`.
//! - pods: a trace's distinct pods; for Prometheus the pods with a usage sample in the history's last
//!   five minutes (or two steps, if longer): the history knows no pod phase; for a VPA the pods in phase
//!   `Running` it selects, matched as `tailor plan` and the updater match them (the pod's top-most
//!   controller, the VPA targeting it, the oldest of several, the controller's selector).
//! - requests (and limits): each container name's largest `cpu_request_cores` / `memory_request_bytes` over
//!   the trace's pods; unknown for Prometheus, whose history carries none; for a VPA the largest requests
//!   and limits over its running pods (the status's resources where the pod reports them, else the spec's).
//! - recommendation: the replay's for a trace or Prometheus; a VPA's status (`target`, `lowerBound`,
//!   `upperBound`, `uncappedTarget` per container).
//! - usage: for a trace, its own samples in the engine's VPA histograms (one weight per sample); for
//!   Prometheus, the model's decaying histograms; for a VPA, its checkpoints' histograms
//!   (`VerticalPodAutoscalerCheckpoint`s of its group naming it), loaded as the recommender restores them.
//! - OOM kills of the last day: those in the day before the trace's `now` (else its latest sample or OOM),
//!   or before the end of the Prometheus history; for a VPA, its pods' containers with an `OOMKilled`
//!   termination (current or last state) that finished in the day before `--now` (else the present).
//! - flags: `Oom` for an OOM kill in that day; `LowConfidence` when a recommended container has less than a
//!   day of history (`tailor recommend`'s table note), or a VPA's `LowConfidence` condition is `True`;
//!   `UpdatesBlocked` when its `UpdatesBlocked` condition is; `NoPods`; `NoRecommendation`.
//! - conditions: a VPA's status conditions (none for the other sources).
//! - explanation: `tailor recommend --explain`'s text per container, or why the trace could not be run; for
//!   a VPA, that it is upstream's, that it has no `targetRef`, or why a checkpoint is not shown.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::builder::Resettable::Reset;
use k8s_openapi::jiff::Timestamp;
use tailor_dashboard::model::{Container, Flag, Fleet, Resources, Source, Usage, Workload};
use tailor_engine::histogram::{Histogram, HistogramOptions};
use tailor_engine::policy::Resources as Amounts;
use tailor_engine::profile::{self, PROFILE_ANNOTATION};
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer};
use tailor_engine::units::MAX_RESOURCE_AMOUNT;

use crate::output::{self, Recommendation};
use crate::prices::PriceArgs;
use crate::prometheus::{self, Fed};
use crate::recommend::{self, ModelArgs, TraceFileArgs};

mod snapshot;

/// How far back an OOM kill counts, in seconds.
const DAY_SECS: f64 = 86_400.0;
/// A Prometheus pod counts as running when it has a sample this close to the end of the history (or two
/// steps, if longer), in milliseconds.
const RUNNING_WITHIN_MS: i64 = 5 * 60 * 1000;

/// Output formats of `tailor report` on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// The fleet the pages show: the dashboard's JSON model (`source`, `prices`, `workloads`).
    Json,
}

/// Arguments of `tailor report`: one source (a trace or Prometheus history as for `tailor recommend`, or a
/// cluster snapshot), where to write, prices, and `tailor recommend`'s model flags.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["input", "prometheus", "snapshot"])))]
// `--input` as the group says, not as `tailor recommend` (required unless `--prometheus`).
#[command(mut_arg("input", |a| a.required_unless_present(Reset).conflicts_with(Reset)))]
#[command(mut_arg("skip_bad_samples", |a| a.help(
    "Drop usage values that cannot be real (negative, not finite, beyond any machine) instead of failing on \
     the first; the count is in the workload's explanation")))]
#[command(mut_arg("profile", |a| a.help(
    "Tailor profile to recommend with (`upstream` keeps the flags' numbers; docs/profiles.md); a trace's \
     `tailor.dev/profile` annotation takes precedence, as in the recommender")))]
pub struct ReportArgs {
    /// The trace file.
    #[command(flatten)]
    pub trace: TraceFileArgs,
    /// A cluster snapshot instead of usage: files or directories as `tailor plan` reads them (`kubectl get
    /// -o yaml` output of VPAs, their checkpoints, pods and workloads; repeatable). One workload per Tailor or
    /// upstream VPA, as its status (recommendation, conditions), the running pods it selects (requests,
    /// limits, OOM kills) and its checkpoints (usage) say; the model flags do not apply.
    #[arg(long, value_name = "FILE", help_heading = "Input and output")]
    pub snapshot: Vec<PathBuf>,
    /// The snapshot's time (RFC 3339; default: now): OOM kills count in the day before it.
    // Not `requires = "snapshot"`: clap counts that met by any other argument of the source group.
    #[arg(long, value_parser = crate::plan::parse_now, conflicts_with_all = ["input", "prometheus"],
          help_heading = "Input and output")]
    pub now: Option<Timestamp>,
    /// Write the report to FILE: one self-contained HTML document (every workload, inline styles and SVG
    /// charts, no script, nothing loaded from anywhere).
    #[arg(long, value_name = "FILE", help_heading = "Input and output")]
    pub html: Option<PathBuf>,
    /// Print the fleet the report shows to stdout. With neither this nor --html, one summary line.
    #[arg(long, short, value_enum, help_heading = "Input and output")]
    pub output: Option<ReportFormat>,
    /// `--price-vcpu-hour`, `--price-gib-hour`, `--price-currency`.
    #[command(flatten)]
    pub prices: PriceArgs,
    /// Prometheus history, profile and estimation flags.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// What a source gave: the workloads, the input's name, and what to say on stderr after the output.
struct Gathered {
    workloads: Vec<Workload>,
    name: String,
    after: Vec<String>,
    code: ExitCode,
}

/// What is known of one workload before its recommendation is added.
struct Facts {
    namespace: String,
    name: String,
    kind: String,
    mode: String,
    profile: Option<String>,
    pods: i64,
    ooms_last_day: i64,
    containers: BTreeMap<String, Container>,
}

/// Runs `tailor report`: reads the source, writes the report and/or prints the fleet or a summary line,
/// then says what failed (exit 2 for traces that could not be run, 1 for incomplete history).
pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let prices = args.prices.prices()?;
    let config = args.model.config()?;
    // `config` accepted the name: an unknown profile cannot get here.
    let flag_profile = profile::by_name(args.model.profile.trim())
        .ok()
        .flatten()
        .map(|p| p.name.to_string());
    let mut gathered = match &args.trace.input {
        Some(input) => from_traces(input, args, &config, flag_profile)?,
        None if !args.snapshot.is_empty() => from_snapshot(args)?,
        None => from_prometheus(args, &config, flag_profile)?,
    };
    disambiguate(&mut gathered.workloads);
    let fleet = Fleet {
        source: Source {
            producer: format!("tailor report {}", gathered.name),
            generated_at: format!("{:.0}", k8s_openapi::jiff::Timestamp::now()),
            kubectl_context: None,
        },
        prices,
        workloads: gathered.workloads,
    };
    write(&fleet, args)?;
    for line in &gathered.after {
        eprintln!("{line}");
    }
    Ok(gathered.code)
}

/// The trace source: one workload per trace, built as the trace is read; traces that could not be run are
/// listed after the output (exit 2), like `tailor recommend` does.
fn from_traces(
    input: &Path,
    args: &ReportArgs,
    config: &ReplayConfig,
    flag_profile: Option<String>,
) -> anyhow::Result<Gathered> {
    let name = TraceFileArgs::name(input);
    let mut workloads = Vec::new();
    let mut after = Vec::new();
    recommend::each_trace(input, &name, config, args.trace.rule(), &mut |t, r| {
        if let Some(e) = &r.output.error {
            after.push(format!("error: {name}: trace {:?}: {e}", r.output.id));
        }
        workloads.push(workload(trace_facts(t, flag_profile.as_deref()), &r));
    })?;
    let code = if after.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    };
    Ok(Gathered {
        workloads,
        name,
        after,
        code,
    })
}

/// The Prometheus source: one workload per workload of the history; the load's summary after the output,
/// and why the history is incomplete (exit 1).
fn from_prometheus(
    args: &ReportArgs,
    config: &ReplayConfig,
    flag_profile: Option<String>,
) -> anyhow::Result<Gathered> {
    let history = &args.model.history;
    let step_ms = i64::try_from(history.step.as_millis()).unwrap_or(i64::MAX);
    let read = prometheus::load_with(history, config, true, |fed| {
        prometheus_facts(fed, step_ms, flag_profile.as_deref())
    })?;
    let workloads = (read.value.into_iter())
        .map(|(r, facts)| workload(facts, &r))
        .collect();
    let mut after = vec![read.summary];
    let code = match read.incomplete {
        Some(e) => {
            after.push(format!("error: {e}"));
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    };
    Ok(Gathered {
        workloads,
        name: history.prometheus.clone().unwrap_or_default(),
        after,
        code,
    })
}

/// The snapshot source: one workload per VPA of the snapshot ([`snapshot`]).
fn from_snapshot(args: &ReportArgs) -> anyhow::Result<Gathered> {
    let now = args.now.unwrap_or_else(Timestamp::now);
    let workloads = snapshot::workloads(&args.snapshot, now)?;
    let names: Vec<String> = (args.snapshot.iter())
        .map(|p| p.display().to_string())
        .collect();
    Ok(Gathered {
        workloads,
        name: names.join(" "),
        after: Vec::new(),
        code: ExitCode::SUCCESS,
    })
}

/// `namespace/name` split at the first `/`; without one, the name in `default`.
fn split_id(id: &str) -> (String, String) {
    match id.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (tailor_engine::replay::NAMESPACE.to_string(), id.to_string()),
    }
}

fn trace_facts(t: &Trace, flag_profile: Option<&str>) -> Facts {
    let (namespace, name) = split_id(&t.id);
    let annotated = (t.annotations.as_ref())
        .and_then(|a| a.get(PROFILE_ANNOTATION))
        .and_then(|n| profile::by_name(n.trim()).ok().flatten())
        .map(|p| p.name.to_string());
    let pods: BTreeSet<&str> = (t.containers.iter())
        .map(|c| c.pod.as_deref().unwrap_or("pod-0"))
        .collect();
    Facts {
        namespace,
        name,
        kind: "Workload".into(),
        mode: t.update_mode.clone().unwrap_or_else(|| "Off".into()),
        profile: annotated.or_else(|| flag_profile.map(str::to_string)),
        pods: i64::try_from(pods.len()).unwrap_or(i64::MAX),
        ooms_last_day: trace_ooms_last_day(t),
        containers: trace_containers(t),
    }
}

/// A request in cores or bytes as an amount (millicores or bytes, rounded); `None` unless finite and ≥ 0.
fn amount(v: f64) -> Option<i64> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(MAX_RESOURCE_AMOUNT as f64) as i64)
}

/// Per container name: the largest requests over the trace's pods and histograms of its samples.
fn trace_containers(t: &Trace) -> BTreeMap<String, Container> {
    let mut by_name: BTreeMap<&str, (Resources, Histogram, Histogram)> = BTreeMap::new();
    for c in &t.containers {
        let (req, cpu, memory) = by_name.entry(&c.name).or_insert_with(|| {
            (
                Resources::default(),
                Histogram::new(HistogramOptions::vpa_cpu()),
                Histogram::new(HistogramOptions::vpa_memory()),
            )
        });
        let cpu_request = c.cpu_request_cores.and_then(|v| amount(v * 1000.0));
        *req = req.max(Resources::of(
            cpu_request,
            c.memory_request_bytes.and_then(amount),
        ));
        for (h, samples) in [
            (&mut *cpu, &c.cpu_samples),
            (&mut *memory, &c.memory_samples),
        ] {
            for &[_, v] in samples {
                if v.is_finite() && v >= 0.0 {
                    h.add_sample(v, 1.0);
                }
            }
        }
    }
    (by_name.into_iter())
        .map(|(name, (requests, cpu, memory))| {
            let c = Container {
                name: name.into(),
                requests,
                cpu_usage: Usage::of(&cpu),
                memory_usage: Usage::of(&memory),
                ..Container::default()
            };
            (name.to_string(), c)
        })
        .collect()
}

/// OOM kills in the day before the trace's `now` (else its latest sample or OOM).
fn trace_ooms_last_day(t: &Trace) -> i64 {
    fn oom_times(c: &TraceContainer) -> impl Iterator<Item = f64> + '_ {
        c.ooms.iter().filter_map(|o| o.first().copied().flatten())
    }
    let ooms = || t.containers.iter().flat_map(oom_times);
    if ooms().next().is_none() {
        return 0;
    }
    let latest = || {
        (t.containers.iter())
            .flat_map(|c| c.cpu_samples.iter().chain(&c.memory_samples).map(|s| s[0]))
            .chain(ooms())
            .filter(|v| v.is_finite())
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let now = t.now.filter(|n| n.is_finite()).unwrap_or_else(latest);
    let recent = ooms()
        .filter(|at| at.is_finite() && *at <= now && now - *at <= DAY_SECS)
        .count();
    i64::try_from(recent).unwrap_or(i64::MAX)
}

/// Per workload of the plan: its containers with the model's histograms, the pods seen at the end of the
/// history, the OOM kills of its last day.
fn prometheus_facts(fed: &Fed<'_, '_>, step_ms: i64, flag_profile: Option<&str>) -> Vec<Facts> {
    let plan = fed.plan;
    let running_since =
        (plan.end_ms).saturating_sub(RUNNING_WITHIN_MS.max(step_ms.saturating_mul(2)));
    let day_ago = (plan.end_ms).saturating_sub(DAY_SECS as i64 * 1000);
    let mut facts: Vec<Facts> = (plan.workloads.iter())
        .map(|w| Facts {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            kind: if w.kind.is_empty() {
                "Workload".into()
            } else {
                w.kind.clone()
            },
            mode: "Off".into(),
            profile: flag_profile.map(str::to_string),
            pods: 0,
            ooms_last_day: 0,
            containers: BTreeMap::new(),
        })
        .collect();
    let mut running: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); facts.len()];
    for (i, c) in plan.containers.iter().enumerate() {
        let (Some(f), Some(pods)) = (facts.get_mut(c.workload), running.get_mut(c.workload)) else {
            continue;
        };
        f.containers
            .entry(c.container.clone())
            .or_insert_with(|| Container {
                name: c.container.as_str().into(),
                ..Container::default()
            });
        if fed
            .last_sample_ms
            .get(i)
            .is_some_and(|&t| t >= running_since)
        {
            pods.insert(&c.pod);
        }
        let ooms = plan.ooms.get(&i).map_or(0, |o| {
            (o.iter())
                .filter(|(t, _)| *t > day_ago && *t <= plan.end_ms)
                .count()
        });
        f.ooms_last_day += i64::try_from(ooms).unwrap_or(i64::MAX);
    }
    for (w, (f, pods)) in facts.iter_mut().zip(&running).enumerate() {
        f.pods = i64::try_from(pods.len()).unwrap_or(i64::MAX);
        for (name, agg) in fed.model.aggregates(w) {
            let c = f
                .containers
                .entry(name.clone())
                .or_insert_with(|| Container {
                    name: name.into(),
                    ..Container::default()
                });
            c.cpu_usage = Usage::of(agg.cpu.histogram());
            c.memory_usage = Usage::of(agg.memory.histogram());
        }
    }
    facts
}

fn resources(r: &Amounts) -> Resources {
    Resources::of(r.cpu, r.memory)
}

/// The page's workload: the facts with the recommendation, the flags and the explanation.
fn workload(f: Facts, r: &Recommendation) -> Workload {
    let o = &r.output;
    let mut containers = f.containers;
    for rec in &o.recommendations {
        let c = (containers.entry(rec.container_name.clone())).or_insert_with(|| Container {
            name: rec.container_name.as_str().into(),
            ..Container::default()
        });
        c.target = resources(&rec.target);
        c.lower_bound = resources(&rec.lower_bound);
        c.upper_bound = resources(&rec.upper_bound);
        c.uncapped_target = resources(&rec.uncapped_target);
    }
    let low_confidence = (o.explain.iter().flatten()).any(|e| {
        e.detail.confidence_cpu < 1.0
            && (o.recommendations.iter()).any(|r| r.container_name == e.detail.container)
    });
    let flags = [
        (Flag::Oom, f.ooms_last_day > 0),
        (Flag::LowConfidence, low_confidence),
        (Flag::NoPods, f.pods == 0),
        (Flag::NoRecommendation, o.recommendations.is_empty()),
    ];
    Workload {
        namespace: f.namespace.into(),
        vpa: f.name.as_str().into(),
        kind: f.kind.into(),
        name: f.name.into(),
        mode: f.mode.into(),
        profile: f.profile.map(Into::into),
        pods: f.pods,
        ooms_last_day: f.ooms_last_day,
        containers: containers.into_values().collect(),
        conditions: Default::default(),
        flags: (flags.into_iter())
            .filter(|(_, on)| *on)
            .map(|(f, _)| f)
            .collect(),
        explain: explain(r).into(),
        ..Workload::default()
    }
}

/// `tailor recommend --explain`'s text for each container, or why there is no recommendation; first the
/// impossible samples `--skip-bad-samples` dropped, if any.
fn explain(r: &Recommendation) -> String {
    let o = &r.output;
    let mut parts = Vec::new();
    if r.skipped != [0, 0] {
        parts.push(format!(
            "{} bad sample(s) skipped ({} cpu, {} memory)\n",
            r.skipped[0].saturating_add(r.skipped[1]),
            r.skipped[0],
            r.skipped[1]
        ));
    }
    if let Some(e) = &o.error {
        parts.push(format!("No recommendation: {e}\n"));
    }
    let details = o.explain.as_deref().unwrap_or_default();
    for rec in &o.recommendations {
        if let Some(e) = details
            .iter()
            .find(|e| e.detail.container == rec.container_name)
        {
            parts.push(output::explain_text(&o.id, e, rec));
        }
    }
    parts.join("\n")
}

/// Sorts by (namespace, VPA) and gives a key seen again ` (2)`, ` (3)`, … after its VPA name.
fn disambiguate(workloads: &mut [Workload]) {
    let by_key = |a: &Workload, b: &Workload| (&a.namespace, &a.vpa).cmp(&(&b.namespace, &b.vpa));
    workloads.sort_by(by_key);
    let keys: Vec<(Arc<str>, Arc<str>)> = (workloads.iter())
        .map(|w| (w.namespace.clone(), w.vpa.clone()))
        .collect();
    let mut seen = 1;
    for (i, w) in workloads.iter_mut().enumerate().skip(1) {
        seen = if keys.get(i) == keys.get(i - 1) {
            seen + 1
        } else {
            1
        };
        if seen > 1 {
            w.vpa = format!("{} ({seen})", w.vpa).into();
        }
    }
    workloads.sort_by(by_key);
}

/// Writes the report and prints the fleet as JSON or one summary line.
fn write(fleet: &Fleet, args: &ReportArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.html {
        std::fs::write(path, tailor_dashboard::report(fleet))
            .with_context(|| format!("writing the report to {}", path.display()))?;
        eprintln!("wrote {}: {}", path.display(), summary_line(fleet));
    }
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    match args.output {
        Some(ReportFormat::Json) => {
            // As an I/O error, so that a reader going away (`| head`) is recognised as such.
            serde_json::to_writer_pretty(&mut stdout, fleet).map_err(std::io::Error::from)?;
            writeln!(stdout)?;
        }
        None if args.html.is_none() => writeln!(stdout, "{}", summary_line(fleet))?,
        None => {}
    }
    stdout.flush()?;
    Ok(())
}

/// `2 workloads, 3 pods: requested … a month, at the targets … a month; N with an OOM kill in the last day`.
fn summary_line(fleet: &Fleet) -> String {
    use tailor_dashboard::html::{both, money};
    let t = tailor_dashboard::summary::Summary::of(&fleet.workloads, &fleet.prices).fleet;
    let currency = &fleet.prices.currency;
    format!(
        "{} workloads, {} pods: requested {} ({} a month), at the targets {} ({} a month); \
         {} with an OOM kill in the last day, {} without a recommendation",
        t.workloads,
        t.pods,
        both(t.requested),
        money(t.requested_monthly, currency),
        both(t.recommended),
        money(t.recommended_monthly, currency),
        t.count(Flag::Oom),
        t.count(Flag::NoRecommendation),
    )
}
