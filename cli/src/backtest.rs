//! `tailor backtest`: how good would the recommendations have been on this history? Replays the usage with
//! each strategy, applies the recommendations as an actuation model would, and prints cost, risk and churn.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use tailor_dashboard::money::Prices;
use tailor_engine::backtest::{
    self, Actuation, BacktestConfig, JobConfig, JobHandling, Score, Strategy, StrategyResult,
};
use tailor_engine::backtest_workloads::{
    JOB_SUITE, SUITE, TUNING_DRAWS, VALIDATION_DRAWS, Workload,
};
use tailor_engine::estimate_flags::EstimationFlags;
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer};
use tailor_prometheus::feeder::HistorySink;
use tailor_prometheus::history::Plan;

use crate::error::InputError;
use crate::prices::{PriceArgs, prices_json, requested_cost};
use crate::{frontier, input, plot, prometheus};

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Output formats of `tailor backtest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BacktestFormat {
    /// One table per strategy: containers and the total.
    Table,
    /// `{"prices", "strategies": [{"name", "total", "containers"}]}`.
    Json,
    /// Markdown tables: totals per strategy (with the requests' cost in money), then one row per trace
    /// (draws of a suite shape summed) with cost / risk minutes / OOM-risk samples / changes per pod-day per
    /// strategy (QUALITY.md's tables).
    Markdown,
}

/// Which draws of the suite's shapes `--suite` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteSet {
    /// The draws profiles may be tuned on.
    Tuning,
    /// The draws profiles are judged on (never used for tuning).
    Validation,
}

/// Which shapes `--suite` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteShapes {
    /// The nineteen service and batch shapes (QUALITY.md's main tables).
    Services,
    /// The Job/CronJob shapes: runs shorter than a metrics scrape, sampled every second (use with --jobs).
    Jobs,
}

/// Arguments of `tailor backtest`.
#[derive(Debug, clap::Args)]
pub struct BacktestArgs {
    /// Usage trace (JSON) or CSV, as for `tailor recommend`; `-` reads stdin.
    #[arg(long, short, required_unless_present_any = ["suite", "list_strategies", "prometheus"], conflicts_with_all = ["suite", "prometheus"])]
    pub input: Option<PathBuf>,
    /// Run the built-in workload suite (examples/workloads/) instead of --input.
    #[arg(long, conflicts_with = "prometheus")]
    pub suite: bool,
    /// Which draws of the suite's shapes to run: `validation` (what profiles are judged on) or `tuning`.
    #[arg(long, value_enum, default_value_t = SuiteSet::Validation, requires = "suite")]
    pub suite_set: SuiteSet,
    /// One other draw of every shape instead of a set (each draw picks the shape's parameters, noise and
    /// timing anew): a profile that wins only on some draws is tuned to them, not to the rule.
    #[arg(
        long,
        value_name = "N",
        requires = "suite",
        conflicts_with = "suite_set"
    )]
    pub suite_draw: Option<u64>,
    /// Which shapes `--suite` runs: `services` or `jobs` (the Job/CronJob shapes).
    #[arg(long, value_enum, default_value_t = SuiteShapes::Services, requires = "suite")]
    pub suite_shapes: SuiteShapes,
    /// Replay every trace container as one run of a Job (a pod of its own, sized at admission, killed when
    /// its memory passes its limit and retried from the start), once per handling given: `upstream` (the
    /// model sees a metrics scrape every --job-scrape and the OOMs; a retry gets the recommendation as it
    /// stands) and `tailor` (also each finished attempt's peak from the history source; a retry after an
    /// OOM gets max(prev × --oom-bump-up-ratio, prev + --oom-min-bump-up-bytes) of memory, per retry, at most
    /// the policy's maxAllowed). Results under `tailor` are named `<strategy>+jobs`.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with = "frontier")]
    pub jobs: Vec<JobHandling>,
    /// With --jobs: the metrics scrape interval both handlings sample at (metrics-server's).
    #[arg(long, value_parser = duration, default_value = "60s")]
    pub job_scrape: Duration,
    /// With --jobs tailor: the history source's scrape interval: the run's memory peak is the largest
    /// scraped working set, its CPU peak the largest rate between two scrapes (`0s`: every sample of the
    /// trace, one a second in the jobs shapes).
    #[arg(long, value_parser = duration, default_value = "15s")]
    pub job_history_step: Duration,
    /// With --jobs tailor: the window of the CPU rate whose largest value over the run is read
    /// (`rate(...[W])`).
    #[arg(long, value_parser = duration, default_value = "60s")]
    pub job_rate_window: Duration,
    /// With --jobs tailor: the memory target percentile of the Job's VPA when above the strategy's settings,
    /// as the recommender's --job-target-memory-percentile (the chart's 0.99); a profile's own percentile wins.
    /// Unset: the strategy's.
    #[arg(long, value_parser = job_percentile)]
    pub job_target_memory_percentile: Option<f64>,
    /// History from a Prometheus-compatible API (`--prometheus URL` and its flags), as for `tailor recommend`.
    #[command(flatten)]
    pub history: prometheus::PrometheusArgs,
    /// Strategies to compare, comma-separated (default: all; see --list-strategies).
    #[arg(long, value_delimiter = ',')]
    pub strategy: Vec<String>,
    /// Print the strategy names and exit.
    #[arg(long)]
    pub list_strategies: bool,
    /// Time between recommendations.
    #[arg(long, value_parser = duration, default_value = "1h")]
    pub every: Duration,
    /// History at the start that is replayed but not scored.
    #[arg(long, value_parser = duration, default_value = "1d")]
    pub warmup: Duration,
    /// How recommendations reach pods.
    #[arg(long, value_enum, default_value_t = Actuation::Inplace)]
    pub actuation: Actuation,
    /// Memory limit as a multiple of the memory request (the webhook keeps limits proportional).
    #[arg(long, default_value_t = 1.0)]
    pub memory_limit_ratio: f64,
    /// Write one SVG per container and strategy into this directory: usage, request, limit, breaches (with
    /// --frontier: one SVG of cost against risk minutes, DIR/frontier.svg).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Sweep each strategy's main knob (upstream and the all-day profiles: the CPU target percentile;
    /// krr-simple: its CPU percentile; diurnal: the hourly percentile; auto: its risk budget) and print
    /// cost against risk minutes for every setting: where each strategy sits on this history.
    #[arg(long)]
    pub frontier: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = BacktestFormat::Table)]
    pub output: BacktestFormat,
    /// What the requests cost in money: requested core-hours and GiB-hours at these prices.
    #[command(flatten)]
    pub prices: PriceArgs,
    /// Upstream's model and estimation flags (the `upstream` strategy's numbers; profiles start from them).
    #[command(flatten)]
    pub estimation: EstimationFlags,
}

/// Most traces one backtest reads.
const MAX_TRACES: usize = 100_000;

fn strategies(names: &[String]) -> Result<Vec<Strategy>, InputError> {
    if names.is_empty() {
        return Ok(Strategy::all());
    }
    let mut out: Vec<Strategy> = Vec::new();
    for n in names {
        let s = Strategy::parse(n.trim()).map_err(|e| InputError(format!("--strategy: {e}")))?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if out.len() > backtest::strategy::MAX_STRATEGIES {
        return Err(InputError("--strategy: too many strategies".into()));
    }
    Ok(out)
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Runs `tailor backtest`.
pub fn run(args: &BacktestArgs) -> anyhow::Result<ExitCode> {
    if args.list_strategies {
        for s in Strategy::all() {
            println!("{}", s.name());
        }
        return Ok(ExitCode::SUCCESS);
    }
    args.estimation.validate().map_err(|e| InputError(e.0))?;
    let config = args
        .estimation
        .engine_config(false)
        .map_err(|e| InputError(e.0))?;
    let strategies = strategies(&args.strategy)?;
    let prices = args.prices.prices()?;
    let (traces, incomplete) = load(args)?;
    let cfg = BacktestConfig {
        every: nanos(args.every),
        warmup: nanos(args.warmup),
        actuation: args.actuation,
        memory_limit_ratio: args.memory_limit_ratio,
        keep_series: args.plot.is_some(),
        keep_decisions: false,
    };
    if args.frontier {
        let points = frontier::run(&config, &strategies, |s| run_all(&traces, &config, s, &cfg))?;
        if let Some(dir) = &args.plot {
            frontier::plot(dir, &points)?;
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        match args.output {
            BacktestFormat::Json => {
                serde_json::to_writer_pretty(&mut out, &frontier::to_json(&points, &prices))?;
                writeln!(out)?;
            }
            BacktestFormat::Table | BacktestFormat::Markdown => {
                let markdown = args.output == BacktestFormat::Markdown;
                frontier::write_table(&mut out, &points, markdown, &prices)?
            }
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let results = if args.jobs.is_empty() {
        run_all(&traces, &config, &strategies, &cfg)?
    } else {
        run_job_handlings(args, &traces, &config, &strategies, &cfg)?
    };
    let jobs = !args.jobs.is_empty();
    if let Some(dir) = &args.plot {
        plot::write_all(dir, &results)?;
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match args.output {
        BacktestFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &to_json(&results, &prices, jobs))?;
            writeln!(out)?;
        }
        BacktestFormat::Table => write_table(&mut out, &results, &prices)?,
        BacktestFormat::Markdown => write_markdown(&mut out, &results, &prices)?,
    }
    if jobs && args.output != BacktestFormat::Json {
        write_job_runs(&mut out, &results, args.output == BacktestFormat::Markdown)?;
    }
    out.flush()?;
    if let Some(e) = incomplete {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The traces of the chosen source, and why a Prometheus history is incomplete if it is.
fn load(args: &BacktestArgs) -> anyhow::Result<(Vec<Trace>, Option<String>)> {
    if args.suite {
        let draws: Vec<u64> = match (args.suite_draw, args.suite_set) {
            (Some(d), _) => vec![d],
            (None, SuiteSet::Tuning) => TUNING_DRAWS.to_vec(),
            (None, SuiteSet::Validation) => VALIDATION_DRAWS.to_vec(),
        };
        let shapes = match args.suite_shapes {
            SuiteShapes::Services => SUITE,
            SuiteShapes::Jobs => JOB_SUITE,
        };
        return Ok((suite_of(shapes, &draws), None));
    }
    if args.history.prometheus.is_some() {
        let read = prometheus::read(&args.history, |plan, feed| {
            let mut sink = TraceSink::new(plan);
            feed(&mut sink);
            sink.traces
        })?;
        eprintln!("{}", read.summary);
        return Ok((read.value, read.incomplete));
    }
    let Some(path) = &args.input else {
        return Err(InputError("one of --input or --suite is required".into()).into());
    };
    let name = if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    // Streamed like `recommend --input`; impossible usage values are refused with their line.
    let reader = input::open(path)?;
    let mut traces = Vec::new();
    let mut too_many = false;
    tailor_engine::trace::parse_each(
        &name,
        reader,
        tailor_engine::samples::BadSamples::Reject,
        &mut |p| {
            if traces.len() < MAX_TRACES {
                traces.push(p.trace);
            } else {
                too_many = true;
            }
        },
    )
    .map_err(|e| InputError(e.0))?;
    if too_many {
        return Err(InputError(format!("{name}: more than {MAX_TRACES} traces")).into());
    }
    Ok((traces, None))
}

/// Every shape of the suite at each of `draws`, shape by shape; trace ids are `shape#draw`.
pub fn suite(draws: &[u64]) -> Vec<Trace> {
    suite_of(SUITE, draws)
}

/// Every one of `shapes` at each of `draws`, shape by shape; trace ids are `shape#draw`.
pub fn suite_of(shapes: &[Workload], draws: &[u64]) -> Vec<Trace> {
    shapes
        .iter()
        .flat_map(|w| {
            draws.iter().map(move |&d| {
                let mut t = w.trace_with_draw(d);
                t.id = format!("{}#{d}", w.name);
                t
            })
        })
        .collect()
}

/// Every trace under every strategy; per strategy the containers of all traces, in input order.
pub fn run_all(
    traces: &[Trace],
    config: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
) -> anyhow::Result<Vec<StrategyResult>> {
    let mut out: Vec<StrategyResult> = strategies
        .iter()
        .map(|s| StrategyResult {
            name: s.name().to_string(),
            containers: Vec::new(),
            decisions: Vec::new(),
        })
        .collect();
    for t in traces {
        let results =
            backtest::run(t, config, strategies, cfg).map_err(|e| InputError(e.to_string()))?;
        for (acc, r) in out.iter_mut().zip(results) {
            acc.containers.extend(r.containers);
            acc.decisions.extend(r.decisions);
        }
    }
    Ok(out)
}

/// The handlings asked for, each once, in the order given.
fn dedup(handlings: &[JobHandling]) -> Vec<JobHandling> {
    let mut out: Vec<JobHandling> = Vec::new();
    for h in handlings {
        if !out.contains(h) {
            out.push(*h);
        }
    }
    out
}

/// The traces under each `--jobs` handling; the Tailor handling's memory percentile raised to
/// `--job-target-memory-percentile` when that is higher.
fn run_job_handlings(
    args: &BacktestArgs,
    traces: &[Trace],
    config: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
) -> anyhow::Result<Vec<StrategyResult>> {
    let mut all = Vec::new();
    for handling in dedup(&args.jobs) {
        let jobs = JobConfig {
            scrape: nanos(args.job_scrape),
            history_step: nanos(args.job_history_step),
            rate_window: nanos(args.job_rate_window),
            ..JobConfig::new(handling)
        };
        let mut config = config.clone();
        if let (JobHandling::Tailor, Some(p)) = (handling, args.job_target_memory_percentile) {
            let r = &mut config.recommender;
            r.target_memory_percentile = r.target_memory_percentile.max(p);
        }
        all.extend(run_all_jobs(traces, &config, strategies, cfg, &jobs)?);
    }
    Ok(all)
}

/// Every trace as a Job's runs under every strategy with `jobs`; per strategy the containers of all traces.
pub fn run_all_jobs(
    traces: &[Trace],
    config: &ReplayConfig,
    strategies: &[Strategy],
    cfg: &BacktestConfig,
    jobs: &JobConfig,
) -> anyhow::Result<Vec<StrategyResult>> {
    let mut out: Vec<StrategyResult> = Vec::new();
    for t in traces {
        let results = backtest::run_jobs(t, config, strategies, cfg, jobs)
            .map_err(|e| InputError(e.to_string()))?;
        if out.is_empty() {
            out = results;
            continue;
        }
        for (acc, r) in out.iter_mut().zip(results) {
            acc.containers.extend(r.containers);
            acc.decisions.extend(r.decisions);
        }
    }
    Ok(out)
}

/// Per strategy, the Job runs scored, the attempts OOM-killed and the runs that failed every attempt.
fn write_job_runs(
    w: &mut impl Write,
    results: &[StrategyResult],
    markdown: bool,
) -> std::io::Result<()> {
    writeln!(w)?;
    if markdown {
        writeln!(w, "| strategy | runs | OOM kills | failed runs |")?;
        writeln!(w, "|---|---|---|---|")?;
    } else {
        writeln!(
            w,
            "{:<36} {:>9} {:>9} {:>9}",
            "JOBS", "RUNS", "OOM-KILLS", "FAILED"
        )?;
    }
    for r in results {
        let s = backtest::total(&r.containers);
        if markdown {
            writeln!(
                w,
                "| {} | {} | {} | {} |",
                r.name, s.runs, s.oom_kills, s.failed_runs
            )?;
        } else {
            writeln!(
                w,
                "{:<36} {:>9} {:>9} {:>9}",
                r.name, s.runs, s.oom_kills, s.failed_runs
            )?;
        }
    }
    Ok(())
}

/// One score as JSON; `requested_cost` is the requests' cost at `prices`; `jobs` adds the Job run counts.
fn score_json(s: &Score, prices: &Prices, jobs: bool) -> serde_json::Value {
    let mut v = score_json_base(s, prices);
    if let (true, Some(o)) = (jobs, v.as_object_mut()) {
        o.insert("runs".into(), json!(s.runs));
        o.insert("oom_kills".into(), json!(s.oom_kills));
        o.insert("failed_runs".into(), json!(s.failed_runs));
    }
    v
}

fn score_json_base(s: &Score, prices: &Prices) -> serde_json::Value {
    json!({
        "cpu_waste_core_hours": s.cpu_waste_core_hours,
        "memory_waste_gib_hours": s.memory_waste_gib_hours,
        "cpu_waste_fraction": s.cpu_waste_fraction(),
        "memory_waste_fraction": s.memory_waste_fraction(),
        "cost_core_hours": s.cost(),
        "cpu_risk_minutes": s.cpu_risk_minutes,
        "memory_risk_minutes": s.memory_risk_minutes,
        "oom_risk_samples": s.oom_risk_samples,
        "uncovered_ooms": s.uncovered_ooms,
        "changes": s.changes,
        "changes_per_pod_day": s.changes_per_pod_day(),
        "pod_days": s.pod_days,
        "cpu_request_core_hours": s.cpu_request_core_hours,
        "memory_request_gib_hours": s.memory_request_gib_hours,
        "requested_cost": requested_cost(s, prices),
    })
}

/// The `-o json` document; `jobs` adds the Job run counts to every score.
pub fn to_json(results: &[StrategyResult], prices: &Prices, jobs: bool) -> serde_json::Value {
    let strategies: Vec<_> = results
        .iter()
        .map(|r| {
            let containers: Vec<_> = r
                .containers
                .iter()
                .map(|c| {
                    let mut v = score_json(&c.score, prices, jobs);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("name".into(), json!(c.name));
                    }
                    v
                })
                .collect();
            json!({
                "name": r.name,
                "total": score_json(&backtest::total(&r.containers), prices, jobs),
                "containers": containers,
            })
        })
        .collect();
    json!({ "prices": prices_json(prices), "strategies": strategies })
}

fn row(w: &mut impl Write, name: &str, s: &Score, prices: &Prices) -> std::io::Result<()> {
    writeln!(
        w,
        "{name:<36} {:>10.2} {:>5.0}% {:>10.2} {:>5.0}% {:>9.2} {:>9.0} {:>9.0} {:>6} {:>5} {:>7.3} {:>12.2}",
        s.cpu_waste_core_hours,
        100.0 * s.cpu_waste_fraction(),
        s.memory_waste_gib_hours,
        100.0 * s.memory_waste_fraction(),
        s.cost(),
        s.cpu_risk_minutes,
        s.memory_risk_minutes,
        s.oom_risk_samples,
        s.uncovered_ooms,
        s.changes_per_pod_day(),
        requested_cost(s, prices),
    )
}

/// One table per strategy, then a summary of the totals; the last column is the requests' cost in money
/// (`REQ-` and the currency).
pub fn write_table(
    w: &mut impl Write,
    results: &[StrategyResult],
    prices: &Prices,
) -> std::io::Result<()> {
    let money = format!("REQ-{}", prices.currency);
    let header = format!(
        "{:<36} {:>10} {:>6} {:>10} {:>6} {:>9} {:>9} {:>9} {:>6} {:>5} {:>7} {money:>12}",
        "CONTAINER",
        "CPU-WASTE",
        "",
        "MEM-WASTE",
        "",
        "COST",
        "CPU-RISK",
        "MEM-RISK",
        "OOM",
        "UNCOV",
        "CHURN"
    );
    for r in results {
        writeln!(w, "strategy {}", r.name)?;
        writeln!(w, "{header}")?;
        for c in &r.containers {
            row(w, &c.name, &c.score, prices)?;
        }
        row(w, "TOTAL", &backtest::total(&r.containers), prices)?;
        writeln!(w)?;
    }
    writeln!(w, "totals")?;
    writeln!(w, "{}", header.replacen("CONTAINER", "STRATEGY ", 1))?;
    for r in results {
        row(w, &r.name, &backtest::total(&r.containers), prices)?;
    }
    writeln!(
        w,
        "\nCPU-WASTE core-hours and % of usage; MEM-WASTE GiB-hours and %; COST = CPU-WASTE + MEM-WASTE/9; \
         RISK in minutes above the request; OOM = memory samples above the limit; UNCOV = recorded OOMs not \
         covered; CHURN = request changes per pod-day; {money} = requested core-hours × {} + requested \
         GiB-hours × {} ({} per vCPU-hour and per GiB-hour)",
        prices.vcpu_hour, prices.gib_hour, prices.currency
    )
}

/// The trace a container result belongs to, without a suite draw (`web-diurnal#3/web` → `web-diurnal`).
fn shape_of(container: &str) -> &str {
    let trace = container.rsplit_once('/').map_or(container, |(t, _)| t);
    trace.split_once('#').map_or(trace, |(s, _)| s)
}

fn pct(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:+.1} %", 100.0 * (a / b - 1.0))
    } else {
        "—".into()
    }
}

/// The Markdown totals table: one row per strategy, cost relative to the first strategy, and last what the
/// requests cost in money at `prices`.
fn write_markdown_totals(
    w: &mut impl Write,
    results: &[StrategyResult],
    prices: &Prices,
) -> std::io::Result<()> {
    let base = results.first().map(|r| backtest::total(&r.containers));
    writeln!(
        w,
        "| strategy | cost (core-h) | vs {} | CPU waste core-h (% of use) | memory waste GiB-h (% of use) | \
         CPU risk min | memory risk min | OOM-risk samples | uncovered OOMs | changes/pod-day | requested ({}) |",
        results.first().map_or("first", |r| r.name.as_str()),
        prices.currency
    )?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for r in results {
        let s = backtest::total(&r.containers);
        writeln!(
            w,
            "| {} | {:.1} | {} | {:.1} ({:.0} %) | {:.1} ({:.0} %) | {:.0} | {:.0} | {} | {} | {:.2} | {:.2} |",
            r.name,
            s.cost(),
            pct(s.cost(), base.map_or(0.0, |b| b.cost())),
            s.cpu_waste_core_hours,
            100.0 * s.cpu_waste_fraction(),
            s.memory_waste_gib_hours,
            100.0 * s.memory_waste_fraction(),
            s.cpu_risk_minutes,
            s.memory_risk_minutes,
            s.oom_risk_samples,
            s.uncovered_ooms,
            s.changes_per_pod_day(),
            requested_cost(&s, prices),
        )?;
    }
    Ok(())
}

/// Markdown: a totals table ([`write_markdown_totals`]), then one row per shape with `cost (vs first) /
/// risk minutes / OOM-risk samples / changes per pod-day` for every strategy.
pub fn write_markdown(
    w: &mut impl Write,
    results: &[StrategyResult],
    prices: &Prices,
) -> std::io::Result<()> {
    write_markdown_totals(w, results, prices)?;
    let base = results.first().map(|r| backtest::total(&r.containers));
    // Per shape, in order of first appearance.
    let mut shapes: Vec<&str> = Vec::new();
    for c in results.iter().flat_map(|r| &r.containers) {
        let s = shape_of(&c.name);
        if !shapes.contains(&s) {
            shapes.push(s);
        }
    }
    let per = |r: &StrategyResult, shape: &str| {
        backtest::total(r.containers.iter().filter(|c| shape_of(&c.name) == shape))
    };
    writeln!(w)?;
    write!(w, "| shape |")?;
    for r in results {
        write!(w, " {} |", r.name)?;
    }
    writeln!(w)?;
    write!(w, "|---|")?;
    for _ in results {
        write!(w, "---|")?;
    }
    writeln!(w)?;
    let cell = |s: &Score, b: Option<&Score>| {
        let vs = match b {
            Some(b) => format!(" ({})", pct(s.cost(), b.cost())),
            None => String::new(),
        };
        format!(
            "{:.1}{vs} / {:.0} / {} / {:.2}",
            s.cost(),
            s.risk_minutes(),
            s.oom_risk_samples,
            s.changes_per_pod_day()
        )
    };
    for shape in shapes {
        let first = results.first().map(|r| per(r, shape));
        write!(w, "| {shape} |")?;
        for (i, r) in results.iter().enumerate() {
            let s = per(r, shape);
            write!(w, " {} |", cell(&s, first.as_ref().filter(|_| i > 0)))?;
        }
        writeln!(w)?;
    }
    write!(w, "| **total** |")?;
    for (i, r) in results.iter().enumerate() {
        let s = backtest::total(&r.containers);
        write!(w, " **{}** |", cell(&s, base.as_ref().filter(|_| i > 0)))?;
    }
    writeln!(w)
}

/// Collects Prometheus history into one trace per workload (id `namespace/name`), one trace container per
/// container of the plan.
struct TraceSink {
    traces: Vec<Trace>,
    /// Per plan container: (trace index, container index in the trace).
    slot: Vec<(usize, usize)>,
}

impl TraceSink {
    fn new(plan: &Plan) -> Self {
        let mut traces: Vec<Trace> = plan
            .workloads
            .iter()
            .map(|w| Trace {
                id: format!("{}/{}", w.namespace, w.name),
                ..Default::default()
            })
            .collect();
        let mut slot = Vec::with_capacity(plan.containers.len());
        for c in &plan.containers {
            let Some(t) = traces.get_mut(c.workload) else {
                slot.push((usize::MAX, 0));
                continue;
            };
            t.containers.push(TraceContainer {
                name: c.container.clone(),
                pod: Some(c.pod.clone()),
                ..Default::default()
            });
            slot.push((c.workload, t.containers.len() - 1));
        }
        TraceSink { traces, slot }
    }

    fn container(&mut self, i: usize) -> Option<&mut TraceContainer> {
        let &(t, c) = self.slot.get(i)?;
        self.traces.get_mut(t)?.containers.get_mut(c)
    }
}

fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

impl HistorySink for TraceSink {
    fn cpu(&mut self, container: usize, points: &[(i64, f64)]) {
        if let Some(c) = self.container(container) {
            c.cpu_samples
                .extend(points.iter().map(|&(t, v)| [secs(t), v]));
        }
    }

    fn memory(&mut self, container: usize, points: &[(i64, f64)], ooms: &[(i64, Option<f64>)]) {
        if let Some(c) = self.container(container) {
            c.memory_samples
                .extend(points.iter().map(|&(t, v)| [secs(t), v]));
            c.ooms
                .extend(ooms.iter().map(|&(t, b)| vec![Some(secs(t)), b]));
        }
    }
}

/// A percentile in (0, 1].
fn job_percentile(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err("must be a number above 0 and at most 1".into()),
    }
}
