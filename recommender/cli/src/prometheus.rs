//! `tailor recommend --prometheus URL`: usage history from a Prometheus-compatible API, grouped into workloads,
//! fed into the model in bounded batches, and printed in every output format of `tailor recommend`.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tailor_engine::replay::{ReplayConfig, Trace};
use tailor_prometheus::client::{Auth, ClientConfig, PromClient, PromError};
use tailor_prometheus::history::{HistoryConfig, HistoryError, LoadState, discover, load};
use tailor_prometheus::model_sink::ModelSink;

use super::InputError;
use super::output;
use super::recommend::OutputFormat;

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Flags of the Prometheus history source. Names follow upstream's recommender where the meaning is the same.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "History from Prometheus")]
pub struct PrometheusArgs {
    /// Read usage history from this Prometheus-compatible API (Prometheus, VictoriaMetrics, Thanos, Mimir, …)
    /// instead of --input.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Only these namespaces (repeatable, or comma-separated).
    #[arg(long = "namespace", short = 'n', value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Only pods whose labels match this selector (`app=web,tier in (a,b)`), through kube-state-metrics'
    /// `kube_pod_labels`.
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// How much history to read.
    #[arg(long, value_parser = duration, default_value = "8d")]
    pub history: Duration,
    /// Query step: one CPU and one memory sample per container and step.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub step: Duration,
    /// End of the history (unix seconds or RFC 3339); default now.
    #[arg(long)]
    pub end: Option<String>,
    /// Window of `rate()` for CPU; default the step.
    #[arg(long, value_parser = duration)]
    pub prometheus_rate_window: Option<Duration>,
    /// `job` label of the cAdvisor series; empty for no job matcher.
    #[arg(long, default_value = "kubernetes-cadvisor")]
    pub prometheus_cadvisor_job_name: String,
    /// CPU usage counter (queried with `rate`).
    #[arg(long, default_value = "container_cpu_usage_seconds_total")]
    pub history_cpu_metric: String,
    /// Memory usage gauge.
    #[arg(long, default_value = "container_memory_working_set_bytes")]
    pub history_memory_metric: String,
    /// Namespace label of the container series.
    #[arg(long, default_value = "namespace")]
    pub container_namespace_label: String,
    /// Pod label of the container series (upstream's default `pod_name` predates Kubernetes 1.16).
    #[arg(long, default_value = "pod")]
    pub container_pod_name_label: String,
    /// Container label of the container series (upstream's default `name` predates Kubernetes 1.16).
    #[arg(long, default_value = "container")]
    pub container_name_label: String,
    /// Bearer token sent with every query.
    #[arg(long, env = "PROMETHEUS_BEARER_TOKEN", hide_env_values = true)]
    pub prometheus_bearer_token: Option<String>,
    /// File holding the bearer token.
    #[arg(long)]
    pub prometheus_bearer_token_file: Option<std::path::PathBuf>,
    /// Basic-auth user name.
    #[arg(long, env = "PROMETHEUS_USERNAME")]
    pub username: Option<String>,
    /// Basic-auth password.
    #[arg(long, env = "PROMETHEUS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Extra header for every query, `Name: value` (repeatable), e.g. `X-Scope-OrgID: team-a`.
    #[arg(long = "prometheus-header", value_name = "NAME: VALUE")]
    pub prometheus_headers: Vec<String>,
    /// Skip TLS certificate verification.
    #[arg(long)]
    pub prometheus_insecure: bool,
    /// Time limit of one query, response included.
    #[arg(long, value_parser = duration, default_value = "5m")]
    pub prometheus_query_timeout: Duration,
    /// Time limit for connecting and for each wait on response bytes.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub prometheus_read_timeout: Duration,
    /// Retries of a failed query (with exponential backoff).
    #[arg(long, default_value_t = 3)]
    pub prometheus_retries: u32,
    /// Containers per query at most.
    #[arg(long, default_value_t = 1000)]
    pub prometheus_max_series_per_query: usize,
    /// Points per series and query at most (Prometheus refuses more than 11,000).
    #[arg(long, default_value_t = 11_000)]
    pub prometheus_max_points_per_query: usize,
    /// Queries in flight at most.
    #[arg(long, default_value_t = 2)]
    pub prometheus_concurrency: usize,
}

impl PrometheusArgs {
    /// The client configuration (reads the token file).
    pub fn client_config(&self, url: &str) -> Result<ClientConfig, InputError> {
        let token = match (
            &self.prometheus_bearer_token,
            &self.prometheus_bearer_token_file,
        ) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| {
                InputError(format!(
                    "--prometheus-bearer-token-file {}: {e}",
                    f.display()
                ))
            })?),
            (None, None) => None,
        };
        let auth = match (token, &self.username) {
            (Some(t), _) => Auth::Bearer(t.trim().to_string()),
            (None, Some(u)) if !u.is_empty() => Auth::Basic {
                username: u.clone(),
                password: self.password.clone().unwrap_or_default(),
            },
            _ => Auth::None,
        };
        let mut headers = Vec::new();
        for h in &self.prometheus_headers {
            let (k, v) = h.split_once(':').ok_or_else(|| {
                InputError(format!("--prometheus-header {h:?}: expected `Name: value`"))
            })?;
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(ClientConfig {
            url: url.to_string(),
            auth,
            headers,
            query_timeout: self.prometheus_query_timeout,
            read_timeout: self.prometheus_read_timeout,
            retries: self.prometheus_retries,
            backoff: Duration::from_millis(500),
            insecure: self.prometheus_insecure,
        })
    }

    /// The query configuration.
    pub fn history_config(&self) -> HistoryConfig {
        HistoryConfig {
            cadvisor_job: self.prometheus_cadvisor_job_name.clone(),
            cpu_metric: self.history_cpu_metric.clone(),
            memory_metric: self.history_memory_metric.clone(),
            namespace_label: self.container_namespace_label.clone(),
            pod_label: self.container_pod_name_label.clone(),
            container_label: self.container_name_label.clone(),
            step: self.step,
            rate_window: self.prometheus_rate_window,
            max_series_per_query: self.prometheus_max_series_per_query,
            max_points_per_series: self.prometheus_max_points_per_query,
            concurrency: self.prometheus_concurrency,
            namespaces: self
                .namespaces
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            pod_selector: self.selector.clone(),
            pod_regex: None,
            owners: true,
            ooms: true,
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
        HistoryError::Config(m) | HistoryError::Prom(PromError::Config(m)) => InputError(m).into(),
        HistoryError::Prom(e @ PromError::Api { .. }) => {
            // The server refused the query as written: a bad metric or label name from the flags.
            InputError(e.to_string()).into()
        }
        e => anyhow::Error::new(e),
    }
}

/// Runs `tailor recommend --prometheus`.
pub fn run(
    url: &str,
    p: &PrometheusArgs,
    config: &ReplayConfig,
    format: OutputFormat,
    explain: bool,
) -> anyhow::Result<ExitCode> {
    let client_cfg = p.client_config(url)?;
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
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} queries ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("discovering containers");
    let plan = rt
        .block_on(discover(&client, &hcfg, end_ms, p.history))
        .map_err(world_or_input)?;
    if plan.containers.is_empty() {
        bar.finish_and_clear();
        return Err(InputError(format!(
            "{url}: no container series of {} or {} matched (job {:?}, namespaces {:?}, selector {:?}); \
             check --prometheus-cadvisor-job-name and the container label flags",
            hcfg.cpu_metric,
            hcfg.memory_metric,
            hcfg.cadvisor_job,
            hcfg.namespaces,
            hcfg.pod_selector.clone().unwrap_or_default()
        ))
        .into());
    }
    bar.set_length(plan.load_queries() as u64);
    let mut sink = ModelSink::new(&plan, config);
    let mut state = LoadState::default();
    let result = rt.block_on(load(
        &client,
        &hcfg,
        &plan,
        &mut state,
        &mut sink,
        &mut |pr| {
            bar.set_position(pr.queries_done as u64);
            bar.set_message(format!("{} samples", pr.samples));
        },
    ));
    bar.finish_and_clear();
    let outputs = sink.finish(explain);
    let traces: Vec<Trace> = outputs
        .iter()
        .map(|o| Trace {
            id: o.id.clone(),
            ..Default::default()
        })
        .collect();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    output::write(&mut stdout, format, &outputs, false, explain, &traces)?;
    stdout.flush()?;
    eprintln!(
        "{} containers in {} workloads, {} samples, {} HTTP queries, {:.1} MB received, {:.2} s",
        plan.containers.len(),
        plan.workloads.len(),
        state.samples,
        client.requests(),
        client.bytes_received() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        eprintln!(
            "error: history incomplete ({} of {} windows loaded; recommendations above use what loaded): {e}",
            state.next_window,
            plan.windows.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
