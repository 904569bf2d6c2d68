//! `tailor recommend --prometheus URL`: usage history from a Prometheus-compatible API, grouped into workloads,
//! fed into the model in bounded batches, and turned into [`Recommendations`] carrying each workload's kind.

use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tailor_engine::replay::ReplayConfig;
use tailor_prometheus::client::{PromClient, PromError};
use tailor_prometheus::feeder::HistorySink;
use tailor_prometheus::flags::PrometheusFlags;
use tailor_prometheus::history::{
    HistoryConfig, HistoryError, LoadState, Plan, discover, load as load_history,
};
use tailor_prometheus::model_sink::ModelSink;

use crate::error::InputError;
use crate::output::{Recommendation, Recommendations, Target};

use tailor_prometheus::flags::duration;

/// Flags of the Prometheus history source: the address and the history span here, the connection and query
/// flags shared with `tailor-recommender` in [`PrometheusFlags`].
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "History from Prometheus")]
pub struct PrometheusArgs {
    /// Read usage history from this Prometheus-compatible API (Prometheus, VictoriaMetrics, Thanos, Mimir, …)
    /// instead of --input.
    #[arg(long, value_name = "URL", alias = "prometheus-address")]
    pub prometheus: Option<String>,
    /// Only these namespaces (repeatable, or comma-separated).
    #[arg(long = "namespace", short = 'n', value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Only pods whose labels match this selector (`app=web,tier in (a,b)`), through kube-state-metrics'
    /// `kube_pod_labels`.
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// How much history to read.
    #[arg(long, value_parser = duration, default_value = "8d", alias = "history-length")]
    pub history: Duration,
    /// Query step: one CPU and one memory sample per container and step.
    #[arg(long, value_parser = duration, default_value = "1m", alias = "history-resolution")]
    pub step: Duration,
    /// End of the history (unix seconds or RFC 3339); default now.
    #[arg(long)]
    pub end: Option<String>,
    /// Connection and query flags (shared with `tailor-recommender`).
    #[command(flatten)]
    pub flags: PrometheusFlags,
}

impl PrometheusArgs {
    /// The query configuration: the shared flags plus namespaces and selector.
    pub fn history_config(&self) -> HistoryConfig {
        HistoryConfig {
            namespaces: self
                .namespaces
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            pod_selector: self.selector.clone(),
            ..self.flags.history_config(self.step)
        }
    }

    fn end_ms(&self) -> Result<i64, InputError> {
        let Some(e) = &self.end else {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return Ok(now.as_millis() as i64);
        };
        if let Ok(v) = e.parse::<f64>()
            && v.is_finite()
        {
            return Ok((v * 1000.0) as i64);
        }
        let t = humantime::parse_rfc3339_weak(e)
            .map_err(|_| InputError(format!("--end {e:?}: neither unix seconds nor RFC 3339")))?;
        let d = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| InputError(format!("--end {e:?}: before 1970")))?;
        Ok(d.as_millis() as i64)
    }
}

fn world_or_input(e: HistoryError) -> anyhow::Error {
    match e {
        e if e.is_config() => InputError(e.to_string()).into(),
        HistoryError::Prom(e @ PromError::Api { .. }) => {
            // The server refused the query as written: a bad metric or label name from the flags.
            InputError(e.to_string()).into()
        }
        e => anyhow::Error::new(e),
    }
}

/// What a Prometheus read gave.
#[derive(Debug)]
pub struct Loaded {
    /// One recommendation per workload, with its real kind.
    pub recommendations: Recommendations,
    /// The one-line summary for stderr (containers, samples, queries, bytes, time).
    pub summary: String,
    /// Why the history is incomplete, if it is (the recommendations use what loaded).
    pub incomplete: Option<String>,
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} queries ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn no_containers(url: &str, hcfg: &HistoryConfig) -> anyhow::Error {
    InputError(format!(
        "{url}: no container series of {} or {} matched (job {}, cluster {}, namespaces {:?}, selector {:?}); \
         check --prometheus-cadvisor-job-name, --cluster-label/--cluster and the container label flags",
        hcfg.cpu_metric,
        hcfg.memory_metric,
        if hcfg.cadvisor_job.is_empty() {
            "any".to_string()
        } else {
            format!("{:?}", hcfg.cadvisor_job)
        },
        hcfg.cluster
            .as_ref()
            .map_or("any".to_string(), |(l, v)| format!("{l}={v:?}")),
        hcfg.namespaces,
        hcfg.pod_selector.clone().unwrap_or_default()
    ))
    .into()
}

/// One line per source the containers are read from, naming the sources passed over.
pub fn source_report(plan: &tailor_prometheus::history::Plan) -> Vec<String> {
    plan.source_uses
        .iter()
        .map(|u| {
            let mut line = format!("reading {} containers from {}", u.containers, u.source);
            if u.contested > 0 {
                let others: Vec<String> = u.passed_over.iter().map(ToString::to_string).collect();
                line.push_str(&format!(
                    " ({} also scraped as {}: passed over, cAdvisor preferred; \
                     --prometheus-cadvisor-job-name chooses)",
                    u.contested,
                    others.join(", ")
                ));
            }
            line
        })
        .collect()
}

/// A history read by [`read`]: what the consumer made of it, the one-line summary and why it is incomplete.
#[derive(Debug)]
pub struct Read<T> {
    /// The consumer's result.
    pub value: T,
    /// The one-line summary for stderr (containers, samples, queries, bytes, time).
    pub summary: String,
    /// Why the history is incomplete, if it is (the value uses what loaded).
    pub incomplete: Option<String>,
}

/// Reads history from `p.prometheus`: discovers the containers, then hands `consume` the plan and a feeder
/// that loads every window into the sink it is given. `recommend` feeds the model; `backtest` collects traces.
/// Errors before any history loaded fail; a load that fails half-way gives what loaded and says why.
pub fn read<T>(
    p: &PrometheusArgs,
    consume: impl FnOnce(&Plan, &mut dyn FnMut(&mut (dyn HistorySink + Send))) -> T,
) -> anyhow::Result<Read<T>> {
    let url = p.prometheus.clone().unwrap_or_default();
    let client_cfg = p
        .flags
        .client_config(&url)
        .map_err(|e| InputError(e.to_string()))?;
    let hcfg = p.history_config();
    let end_ms = p.end_ms()?;
    if p.history < p.step {
        return Err(InputError("--history must be at least one --step".into()).into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let started = Instant::now();
    let client = PromClient::new(client_cfg).map_err(|e| InputError(e.to_string()))?;
    let bar = progress_bar();
    bar.set_message("discovering containers");
    let plan = rt
        .block_on(discover(&client, &hcfg, end_ms, p.history))
        .map_err(world_or_input)?;
    if plan.containers.is_empty() {
        bar.finish_and_clear();
        return Err(no_containers(&url, &hcfg));
    }
    bar.suspend(|| {
        for line in source_report(&plan) {
            eprintln!("{line}");
        }
    });
    bar.set_length(plan.load_queries() as u64);
    let mut state = LoadState::default();
    let mut result = Ok(());
    let value = consume(&plan, &mut |sink| {
        result = rt.block_on(load_history(
            &client,
            &hcfg,
            &plan,
            &mut state,
            sink,
            &mut |pr| {
                bar.set_position(pr.queries_done as u64);
                bar.set_message(format!("{} samples", pr.samples));
            },
        ));
    });
    bar.finish_and_clear();
    let summary = format!(
        "{} containers in {} workloads, {} samples, {} HTTP queries, {:.1} MB received, {:.2} s",
        plan.containers.len(),
        plan.workloads.len(),
        state.samples,
        client.requests(),
        client.bytes_received() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let incomplete = result.err().map(|e| {
        format!(
            "history incomplete ({} of {} windows loaded; recommendations above use what loaded): {e}",
            state.next_window,
            plan.windows.len()
        )
    });
    Ok(Read {
        value,
        summary,
        incomplete,
    })
}

/// The model fed with a Prometheus read, before it recommends: what a consumer may read besides the
/// recommendations ([`load_with`]).
pub(crate) struct Fed<'a, 'p> {
    /// The containers and workloads read.
    pub plan: &'p Plan,
    /// The model (its aggregates' histograms).
    pub model: &'a ModelSink<'p>,
    /// Per container of the plan, the time of its latest usage sample (unix ms; `i64::MIN` for none).
    pub last_sample_ms: &'a [i64],
}

/// A sink that notes each container's latest sample and hands everything on.
struct Noting<'a, S> {
    inner: &'a mut S,
    last: &'a mut [i64],
}

impl<S: HistorySink> Noting<'_, S> {
    fn note(&mut self, container: usize, points: &[(i64, f64)]) {
        if let (Some(last), Some(&(t, _))) = (self.last.get_mut(container), points.last()) {
            *last = (*last).max(t);
        }
    }
}

impl<S: HistorySink> HistorySink for Noting<'_, S> {
    fn cpu(&mut self, container: usize, points: &[(i64, f64)]) {
        self.note(container, points);
        self.inner.cpu(container, points);
    }

    fn memory(&mut self, container: usize, points: &[(i64, f64)], ooms: &[(i64, Option<f64>)]) {
        self.note(container, points);
        self.inner.memory(container, points, ooms);
    }

    fn window_done(&mut self, end_ms: i64) {
        self.inner.window_done(end_ms);
    }
}

/// Reads history from `p.prometheus` and turns it into one recommendation per workload. Errors before any
/// history loaded fail; a load that fails half-way gives what loaded and says why in `incomplete`.
pub fn load(p: &PrometheusArgs, config: &ReplayConfig, explain: bool) -> anyhow::Result<Loaded> {
    let read = load_with(p, config, explain, |fed| vec![(); fed.plan.workloads.len()])?;
    Ok(Loaded {
        recommendations: Recommendations {
            items: read.value.into_iter().map(|(r, ())| r).collect(),
            single: false,
        },
        summary: read.summary,
        incomplete: read.incomplete,
    })
}

/// [`load`], also handing `facts` the fed model before it recommends; `facts` gives one value per workload
/// of the plan, in its order, and each recommendation comes with its workload's.
pub(crate) fn load_with<F>(
    p: &PrometheusArgs,
    config: &ReplayConfig,
    explain: bool,
    facts: impl FnOnce(&Fed<'_, '_>) -> Vec<F>,
) -> anyhow::Result<Read<Vec<(Recommendation, F)>>> {
    read(p, |plan, feed| {
        let mut sink = ModelSink::new(plan, config);
        let mut last = vec![i64::MIN; plan.containers.len()];
        feed(&mut Noting {
            inner: &mut sink,
            last: &mut last,
        });
        let fed = Fed {
            plan,
            model: &sink,
            last_sample_ms: &last,
        };
        let mut per_workload: Vec<Option<F>> = facts(&fed).into_iter().map(Some).collect();
        sink.finish(explain)
            .into_iter()
            .filter_map(|w| {
                let f = per_workload.get_mut(w.workload)?.take()?;
                let r = Recommendation {
                    target: Target {
                        kind: plan
                            .workloads
                            .get(w.workload)
                            .map(|i| i.kind.clone())
                            .unwrap_or_default(),
                        ..Target::default()
                    },
                    output: w.output,
                    skipped: [0, 0],
                    cluster: Vec::new(),
                };
                Some((r, f))
            })
            .collect()
    })
}
