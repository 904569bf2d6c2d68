//! Usage history from a Prometheus-compatible API, loaded in bounded pieces.
//!
//! [`discover`] finds the containers (cAdvisor series), their workloads (kube-state-metrics owners, else
//! the pod name's stem) and their OOM kills, and cuts the work into **batches** of at most
//! `max_series_per_query` containers (whole namespaces when they fit, else pods of one namespace) and
//! **windows** of at most `max_points_per_series` steps or raw samples. [`load`] then runs, window after
//! window, one CPU and one memory query per batch, `concurrency` at a time, and streams every series into a
//! [`HistorySink`] as soon as it has been parsed: memory use is bounded by the queries in flight, not by the
//! length of the history.
//!
//! **Series discovery adapts** to how the store was filled: no `job` matcher by default; every container's
//! series are grouped by where they were scraped from ([`Source`]: `job` and `metrics_path`), and when several
//! sources hold one container (kube-prometheus-stack scrapes the kubelet's `/metrics/cadvisor` and
//! `/metrics/resource`, both with `container_cpu_usage_seconds_total`) one is chosen deterministically,
//! the cAdvisor one first ([`Source::rank`]); [`Plan::source_uses`] says which.
//!
//! **Raw samples**: CPU and memory are read as raw samples with their real timestamps (an instant query of a
//! range selector), not resampled at the step, so sparse scrapes and downsampled stores give the usage between
//! two samples over their real distance; the step only bounds the resolution ([`Feeder`]).
//!
//! Every container keeps a watermark per resource, so a query that fails half-way and is retried, or a
//! load resumed after a failure ([`LoadState`]), never feeds a point twice; what already loaded is kept.
//! Those rules and the CPU counter differencing live in the pure [`Feeder`]; owner resolution in
//! [`Owners`]; this module does the I/O around them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::client::{PromClient, PromError, Series};
pub use crate::feeder::HistorySink;
use crate::feeder::{CpuSeries, Feeder, oom_kills};
use crate::owners::Owners;
pub use crate::owners::WorkloadInfo;
use tailor_engine::model::selector::{Requirement, Selector};

/// What to query and how to cut it up. Label names follow upstream's flags; the defaults are those of
/// current cAdvisor (`pod`, `container`; upstream still defaults to the pre-1.16 `pod_name`, `name`).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryConfig {
    /// `job` of the cAdvisor series; empty (the default) = any job, chosen per container
    /// (`--prometheus-cadvisor-job-name`).
    pub cadvisor_job: String,
    /// Only series with this label value, `(label, value)`, for stores shared by several clusters
    /// (`--cluster-label`, `--cluster`).
    pub cluster: Option<(String, String)>,
    /// CPU counter (`--history-cpu-metric`), queried as `rate`.
    pub cpu_metric: String,
    /// Memory gauge (`--history-memory-metric`).
    pub memory_metric: String,
    /// Namespace label of container series (`--container-namespace-label`).
    pub namespace_label: String,
    /// Pod label of container series (`--container-pod-name-label`).
    pub pod_label: String,
    /// Container label of container series (`--container-name-label`).
    pub container_label: String,
    /// Query step (`--history-resolution`, `--step`).
    pub step: Duration,
    /// Window of a server-side `rate()`. None (the default): the counter's raw samples are read and
    /// differenced here, so each CPU point is the exact average between two samples on every server (servers
    /// disagree on which samples `rate` sees: Prometheus 2 takes `[t−w, t]`, VictoriaMetrics also the sample
    /// before; and a window shorter than the scrape interval sees one sample or none).
    pub rate_window: Option<Duration>,
    /// Containers per query at most (`--prometheus-max-series-per-query`).
    pub max_series_per_query: usize,
    /// Points (steps, and raw samples) per series and query at most (Prometheus refuses more than 11,000
    /// steps).
    pub max_points_per_series: usize,
    /// Queries read at once (`--prometheus-concurrency`); each may have its next window's query in flight too.
    pub concurrency: usize,
    /// Only these namespaces (empty = all).
    pub namespaces: Vec<String>,
    /// Only pods whose labels (from kube-state-metrics `kube_pod_labels`) match this selector.
    pub pod_selector: Option<String>,
    /// Only pods whose name matches this regular expression (anchored, PromQL syntax).
    pub pod_regex: Option<String>,
    /// Resolve workloads from kube-state-metrics owners.
    pub owners: bool,
    /// Load OOM kills from kube-state-metrics.
    pub ooms: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            cadvisor_job: String::new(),
            cluster: None,
            cpu_metric: "container_cpu_usage_seconds_total".into(),
            memory_metric: "container_memory_working_set_bytes".into(),
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            step: Duration::from_secs(60),
            rate_window: None,
            max_series_per_query: 1000,
            max_points_per_series: 11_000,
            concurrency: 2,
            namespaces: Vec::new(),
            pod_selector: None,
            pod_regex: None,
            owners: true,
            ooms: true,
        }
    }
}

/// Why history could not be (fully) loaded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HistoryError {
    /// A query failed (after its retries).
    #[error(transparent)]
    Prom(#[from] PromError),
    /// The step is shorter than a second.
    #[error("the step must be at least 1s")]
    StepTooShort,
    /// A batch size or the concurrency is zero.
    #[error("--prometheus-max-series-per-query and --prometheus-concurrency must be positive")]
    ZeroLimit,
    /// The history does not cover one step.
    #[error("the history is shorter than one step")]
    HistoryTooShort,
    /// The pod selector does not parse.
    #[error("invalid --selector {0:?}")]
    Selector(String),
}

impl HistoryError {
    /// Whether the request itself is wrong (flags or selector), as opposed to a failure of the server or
    /// the network.
    pub fn is_config(&self) -> bool {
        match self {
            HistoryError::Prom(PromError::Config(_)) => true,
            HistoryError::Prom(_) => false,
            _ => true,
        }
    }
}

/// A container found in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Namespace.
    pub namespace: String,
    /// Pod.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Index in [`Plan::workloads`].
    pub workload: usize,
    /// Index in [`Plan::source_uses`] of the source it is read from.
    pub source: usize,
    /// It has several CPU or memory series in its source (a restart gave it a new cgroup `id`).
    pub several_series: bool,
}

/// A set of containers queried together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Label matchers (inside `{}`) that select the batch's containers.
    pub matchers: String,
    /// Number of containers.
    pub containers: usize,
    /// The containers (indices in [`Plan::containers`]).
    pub members: Vec<usize>,
}

/// Where a container's series were scraped from: their `job` and `metrics_path` labels (empty when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// `job`.
    pub job: String,
    /// `metrics_path`.
    pub metrics_path: String,
}

impl Source {
    /// Matchers selecting exactly this source's series (`job=""` also matches series without the label).
    pub fn matchers(&self) -> String {
        format!(
            "job=\"{}\", metrics_path=\"{}\"",
            promql_str(&self.job),
            promql_str(&self.metrics_path)
        )
    }

    /// Sort key of the preference among sources of one container: the cAdvisor endpoint first (its path or
    /// job names it; the kubelet's `/metrics/resource` also carries the usage metrics, coarser), then by name.
    pub fn rank(&self) -> (bool, &str, &str) {
        let cadvisor = self.metrics_path.contains("cadvisor") || self.job.contains("cadvisor");
        (!cadvisor, &self.job, &self.metrics_path)
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.job.is_empty(), self.metrics_path.is_empty()) {
            (true, true) => f.write_str("series without job"),
            (false, true) => write!(f, "job {:?}", self.job),
            (true, false) => write!(f, "metrics_path {:?}", self.metrics_path),
            (false, false) => write!(f, "job {:?} metrics_path {:?}", self.job, self.metrics_path),
        }
    }
}

/// How one source is used by a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceUse {
    /// The source.
    pub source: Source,
    /// Containers read from it.
    pub containers: usize,
    /// Of those, containers another source also holds (this one was preferred).
    pub contested: usize,
    /// Sources passed over for those containers.
    pub passed_over: Vec<Source>,
}

/// What [`load`] will fetch.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// First point (unix ms, aligned to the step).
    pub start_ms: i64,
    /// Last point (unix ms, aligned to the step).
    pub end_ms: i64,
    /// Containers, sorted by (namespace, pod, container).
    pub containers: Vec<ContainerInfo>,
    /// Workloads, sorted.
    pub workloads: Vec<WorkloadInfo>,
    /// Query batches.
    pub batches: Vec<Batch>,
    /// Time windows `[start, end]` (unix ms, inclusive, disjoint).
    pub windows: Vec<(i64, i64)>,
    /// OOM kills per container: (unix ms, memory request in bytes if known), in time order.
    pub ooms: HashMap<usize, Vec<(i64, Option<f64>)>>,
    /// HTTP queries discovery took.
    pub discovery_queries: u64,
    /// The sources containers are read from, and which were passed over.
    pub source_uses: Vec<SourceUse>,
    /// Raw CPU samples per step in the densest series (1 when unknown); windows are cut to hold at most
    /// `max_points_per_series` of them.
    pub samples_per_step: usize,
    index: HashMap<(String, String, String), usize>,
}

impl Plan {
    /// The container with these names.
    pub fn find(&self, namespace: &str, pod: &str, container: &str) -> Option<usize> {
        self.index
            .get(&(
                namespace.to_string(),
                pod.to_string(),
                container.to_string(),
            ))
            .copied()
    }

    /// Range queries [`load`] sends when nothing fails.
    pub fn load_queries(&self) -> usize {
        self.windows.len() * self.batches.len() * 2
    }
}

/// PromQL string literal contents.
pub fn promql_str(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A regular expression matching exactly `s`, as PromQL string contents.
pub fn promql_regex_literal(s: &str) -> String {
    let mut r = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            r.push('\\');
        }
        r.push(c);
    }
    promql_str(&r)
}

fn alternation(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| promql_regex_literal(v))
        .collect::<Vec<_>>()
        .join("|")
}

/// kube-state-metrics' name for a pod label key (`app.kubernetes.io/name` → `label_app_kubernetes_io_name`).
pub fn ksm_label(key: &str) -> String {
    let mut s = String::from("label_");
    for c in key.chars() {
        s.push(if c.is_ascii_alphanumeric() { c } else { '_' });
    }
    s
}

/// A Kubernetes label selector as matchers on `kube_pod_labels`.
pub fn selector_matchers(selector: &str) -> Result<Vec<String>, HistoryError> {
    let sel = Selector::parse(selector).map_err(|e| HistoryError::Selector(e.0))?;
    let Selector::Requirements(reqs) = sel else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for r in reqs {
        out.push(match r {
            Requirement::In(k, v) if v.len() == 1 => {
                format!("{}=\"{}\"", ksm_label(&k), promql_str(&v[0]))
            }
            Requirement::In(k, v) => {
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                format!("{}=~\"{}\"", ksm_label(&k), alternation(&v))
            }
            Requirement::NotIn(k, v) => {
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                format!("{}!~\"{}\"", ksm_label(&k), alternation(&v))
            }
            Requirement::Exists(k) => format!("{}!=\"\"", ksm_label(&k)),
            Requirement::DoesNotExist(k) => format!("{}=\"\"", ksm_label(&k)),
        });
    }
    Ok(out)
}

impl HistoryConfig {
    fn step_ms(&self) -> i64 {
        self.step.as_millis().min(i64::MAX as u128) as i64
    }

    fn ns_matcher(&self, label: &str) -> Option<String> {
        if self.namespaces.is_empty() {
            return None;
        }
        let v: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        Some(format!("{label}=~\"{}\"", alternation(&v)))
    }

    /// The cluster matcher, if any.
    fn cluster_matcher(&self) -> Option<String> {
        self.cluster
            .as_ref()
            .map(|(l, v)| format!("{l}=\"{}\"", promql_str(v)))
    }

    /// Matchers of kube-state-metrics queries: namespaces and cluster, joined (maybe empty).
    fn ksm_filter(&self) -> String {
        let mut m: Vec<String> = self.ns_matcher("namespace").into_iter().collect();
        m.extend(self.cluster_matcher());
        m.join(", ")
    }

    /// Matchers every container series query carries.
    pub(crate) fn base_matchers(&self) -> Vec<String> {
        let (p, c) = (&self.pod_label, &self.container_label);
        let mut m = Vec::new();
        if !self.cadvisor_job.is_empty() {
            m.push(format!("job=\"{}\"", promql_str(&self.cadvisor_job)));
        }
        m.extend(self.cluster_matcher());
        m.push(format!("{p}!=\"\""));
        m.push(format!("{c}!=\"\""));
        m.push(format!("{c}!=\"POD\""));
        if let Some(r) = &self.pod_regex {
            m.push(format!("{p}=~\"{}\"", promql_str(r)));
        }
        m
    }

    fn by(&self) -> String {
        format!(
            "{}, {}, {}",
            self.namespace_label, self.pod_label, self.container_label
        )
    }

    /// The CPU query of a batch: the counter's raw samples over `span` ending at the query time (differenced
    /// by [`load`]) or, with a rate window, its rate at every step (a range query; `span` unused).
    pub fn cpu_query(&self, batch: &Batch, span: Duration) -> String {
        match self.rate_window {
            Some(w) => format!(
                "max by ({}) (rate({}{{{}}}[{}s]))",
                self.by(),
                self.cpu_metric,
                batch.matchers,
                w.as_secs().max(1)
            ),
            None => raw_query(&self.cpu_metric, &batch.matchers, span),
        }
    }

    /// The memory query of a batch: the gauge's raw samples over `span` ending at the query time.
    pub fn memory_query(&self, batch: &Batch, span: Duration) -> String {
        raw_query(&self.memory_metric, &batch.matchers, span)
    }
}

/// Splits `[start, end]` (aligned to `step`) into windows of at most `max_points` points, as even as possible.
pub fn windows(start_ms: i64, end_ms: i64, step_ms: i64, max_points: usize) -> Vec<(i64, i64)> {
    if end_ms < start_ms || step_ms <= 0 {
        return Vec::new();
    }
    let points = (end_ms - start_ms) / step_ms + 1;
    let max = (max_points.max(1)) as i64;
    let n = (points + max - 1) / max;
    let per = (points + n - 1) / n;
    let mut out = Vec::new();
    let mut s = start_ms;
    while s <= end_ms {
        let e = (s + (per - 1) * step_ms).min(end_ms);
        out.push((s, e));
        s = e + step_ms;
    }
    out
}

/// The raw samples of `metric{matchers}` in the `span` before the query time (an instant query).
fn raw_query(metric: &str, matchers: &str, span: Duration) -> String {
    format!("{metric}{{{matchers}}}[{}ms]", span.as_millis().max(1))
}

fn get<'a>(l: &'a BTreeMap<String, String>, k: &str) -> &'a str {
    l.get(k).map_or("", String::as_str)
}

/// Finds containers, workloads and OOMs in `[end − history, end]`, and plans the batches and windows.
pub async fn discover(
    client: &PromClient,
    cfg: &HistoryConfig,
    end_ms: i64,
    history: Duration,
) -> Result<Plan, HistoryError> {
    let (start_ms, end_ms) = time_range(cfg, end_ms, history)?;
    let before = client.requests();
    let mut found = find_containers(client, cfg, start_ms, end_ms).await?;
    if let Some(selector) = &cfg.pod_selector {
        let pods = pods_matching(client, cfg, selector, start_ms, end_ms).await?;
        found.retain(|(n, p, _), _| pods.contains(&(n.clone(), p.clone())));
    }
    let owners = if cfg.owners && !found.is_empty() {
        find_owners(client, cfg, start_ms, end_ms).await?
    } else {
        Owners::default()
    };
    let mut plan = Plan::new(start_ms, end_ms, found, &owners);
    plan.samples_per_step = if plan.containers.is_empty() {
        1
    } else {
        samples_per_step(client, cfg, end_ms).await?
    };
    plan.windows = windows(
        start_ms,
        end_ms,
        cfg.step_ms(),
        cfg.max_points_per_series / plan.samples_per_step.max(1),
    );
    plan.batches = batches(cfg, &plan);
    if cfg.ooms && !plan.containers.is_empty() {
        discover_ooms(client, &mut plan, cfg).await?;
    }
    plan.discovery_queries = client.requests() - before;
    Ok(plan)
}

/// The first and last point (unix ms, aligned to the step) of `history` ending at `end_ms`; checks the
/// configuration.
fn time_range(
    cfg: &HistoryConfig,
    end_ms: i64,
    history: Duration,
) -> Result<(i64, i64), HistoryError> {
    let step = cfg.step_ms();
    if step < 1000 {
        return Err(HistoryError::StepTooShort);
    }
    if cfg.max_series_per_query == 0 || cfg.concurrency == 0 {
        return Err(HistoryError::ZeroLimit);
    }
    let end_ms = end_ms - end_ms.rem_euclid(step);
    let hist = history.as_millis().min(i64::MAX as u128) as i64;
    let start_ms = end_ms - hist + step;
    let start_ms = start_ms + (step - start_ms.rem_euclid(step)) % step;
    if start_ms > end_ms {
        return Err(HistoryError::HistoryTooShort);
    }
    Ok((start_ms, end_ms))
}

/// A container's names: (namespace, pod, container).
type ContainerKey = (String, String, String);

/// Per container, its sources and how many (CPU, memory) series each holds.
type Found = BTreeMap<ContainerKey, BTreeMap<Source, [u32; 2]>>;

/// Every cAdvisor container series in the range, grouped by container and source.
async fn find_containers(
    client: &PromClient,
    cfg: &HistoryConfig,
    start_ms: i64,
    end_ms: i64,
) -> Result<Found, HistoryError> {
    let mut m = cfg.base_matchers();
    m.extend(cfg.ns_matcher(&cfg.namespace_label));
    let sel = m.join(", ");
    let matchers = vec![
        format!("{}{{{sel}}}", cfg.cpu_metric),
        format!("{}{{{sel}}}", cfg.memory_metric),
    ];
    let (nl, pl, cl) = (&cfg.namespace_label, &cfg.pod_label, &cfg.container_label);
    let mut found = Found::new();
    client
        .series(&matchers, start_ms, end_ms, &mut |l| {
            let (n, p, c) = (get(&l, nl), get(&l, pl), get(&l, cl));
            if !n.is_empty() && !p.is_empty() && !c.is_empty() {
                let source = Source {
                    job: get(&l, "job").into(),
                    metrics_path: get(&l, "metrics_path").into(),
                };
                let i = usize::from(get(&l, "__name__") != cfg.cpu_metric);
                let counts = found
                    .entry((n.into(), p.into(), c.into()))
                    .or_default()
                    .entry(source)
                    .or_default();
                counts[i] = counts[i].saturating_add(1);
            }
            Ok(())
        })
        .await?;
    Ok(found)
}

/// Raw CPU samples per step in the densest series (one hour before the end; 1 when there is none).
async fn samples_per_step(
    client: &PromClient,
    cfg: &HistoryConfig,
    end_ms: i64,
) -> Result<usize, HistoryError> {
    let mut m = cfg.base_matchers();
    m.extend(cfg.ns_matcher(&cfg.namespace_label));
    let q = format!(
        "max(count_over_time({}{{{}}}[1h]))",
        cfg.cpu_metric,
        m.join(", ")
    );
    let per_hour = client
        .query(&q, end_ms)
        .await?
        .iter()
        .filter_map(|s| s.points.last().map(|p| p.1))
        .fold(0.0, f64::max);
    let per_step = per_hour * cfg.step.as_secs_f64() / 3600.0;
    // Bounded: a store holding more than 10,000 samples per step is cut as if it held 10,000.
    Ok(per_step.ceil().clamp(1.0, 10_000.0) as usize)
}

/// (namespace, pod) of the pods whose labels match `selector`, through kube-state-metrics' `kube_pod_labels`.
async fn pods_matching(
    client: &PromClient,
    cfg: &HistoryConfig,
    selector: &str,
    start_ms: i64,
    end_ms: i64,
) -> Result<BTreeSet<(String, String)>, HistoryError> {
    let mut m = selector_matchers(selector)?;
    m.extend(cfg.ns_matcher("namespace"));
    m.extend(cfg.cluster_matcher());
    let q = if m.is_empty() {
        "kube_pod_labels".to_string()
    } else {
        format!("kube_pod_labels{{{}}}", m.join(", "))
    };
    let mut pods = BTreeSet::new();
    client
        .series(&[q], start_ms, end_ms, &mut |l| {
            pods.insert((get(&l, "namespace").into(), get(&l, "pod").into()));
            Ok(())
        })
        .await?;
    Ok(pods)
}

/// kube-state-metrics' owner links of pods, ReplicaSets and Jobs in the range.
async fn find_owners(
    client: &PromClient,
    cfg: &HistoryConfig,
    start_ms: i64,
    end_ms: i64,
) -> Result<Owners, HistoryError> {
    let f = cfg.ksm_filter();
    let q = vec![
        format!("kube_pod_owner{{{f}}}"),
        format!("kube_replicaset_owner{{{f}}}"),
        format!("kube_job_owner{{{f}}}"),
    ];
    let mut owners = Owners::default();
    client
        .series(&q, start_ms, end_ms, &mut |l| {
            owners.record(&l);
            Ok(())
        })
        .await?;
    Ok(owners)
}

impl Plan {
    /// A plan over `[start_ms, end_ms]` with these containers (sorted) grouped into their workloads; no
    /// windows, batches or OOMs yet.
    fn new(start_ms: i64, end_ms: i64, found: Found, owners: &Owners) -> Plan {
        let owner_of: Vec<WorkloadInfo> = found
            .keys()
            .map(|(n, p, _)| owners.workload_of(n, p))
            .collect();
        let workloads: BTreeSet<&WorkloadInfo> = owner_of.iter().collect();
        let index_of: BTreeMap<&WorkloadInfo, usize> =
            workloads.iter().enumerate().map(|(i, &w)| (w, i)).collect();
        let mut plan = Plan {
            start_ms,
            end_ms,
            workloads: workloads.iter().map(|&w| w.clone()).collect(),
            ..Default::default()
        };
        let mut use_of: BTreeMap<Source, usize> = BTreeMap::new();
        for (((namespace, pod, container), sources), w) in found.into_iter().zip(&owner_of) {
            // The preferred source; `found` only holds containers with at least one.
            let Some((source, counts)) = sources.iter().min_by(|a, b| a.0.rank().cmp(&b.0.rank()))
            else {
                continue;
            };
            let u = *use_of.entry(source.clone()).or_insert_with(|| {
                plan.source_uses.push(SourceUse {
                    source: source.clone(),
                    ..SourceUse::default()
                });
                plan.source_uses.len() - 1
            });
            let su = &mut plan.source_uses[u];
            su.containers += 1;
            if sources.len() > 1 {
                su.contested += 1;
                for other in sources.keys().filter(|o| *o != source) {
                    if !su.passed_over.contains(other) {
                        su.passed_over.push(other.clone());
                    }
                }
            }
            let i = plan.containers.len();
            plan.index
                .insert((namespace.clone(), pod.clone(), container.clone()), i);
            plan.containers.push(ContainerInfo {
                namespace,
                pod,
                container,
                workload: index_of.get(w).copied().unwrap_or(0),
                source: u,
                several_series: counts[0] > 1 || counts[1] > 1,
            });
        }
        for su in &mut plan.source_uses {
            su.passed_over.sort();
        }
        plan
    }
}

/// OOM kills: a restart (the restart counter grows) at a step where the last termination reason is
/// `OOMKilled` ([`oom_kills`]). Detected here from plain series, not with `changes()`, whose window servers
/// read differently. Only containers that were ever OOM-killed (one instant query) are read over time.
async fn discover_ooms(
    client: &PromClient,
    plan: &mut Plan,
    cfg: &HistoryConfig,
) -> Result<(), HistoryError> {
    let step = cfg.step;
    let span = (plan.end_ms - plan.start_ms) / 1000 + step.as_secs().max(1) as i64;
    let killed = ever_oom_killed(client, plan, &cfg.ksm_filter(), span).await?;
    if killed.is_empty() {
        return Ok(());
    }
    let only = with_cluster(cfg, &containers_matcher(plan, &killed));
    let (restarts, reasons) = restarts_and_reasons(client, plan, &only, step).await?;
    for (i, pts) in restarts {
        if let Some(reasons) = reasons.get(&i) {
            for t in oom_kills(&pts, reasons) {
                plan.ooms.entry(i).or_default().push((t, None));
            }
        }
    }
    if !plan.ooms.is_empty() {
        add_memory_requests(client, plan, &only, span).await?;
    }
    Ok(())
}

const OOM_BY: &str = "namespace, pod, container";

/// The containers whose last termination reason was `OOMKilled` at some time in the last `span_s` seconds.
async fn ever_oom_killed(
    client: &PromClient,
    plan: &Plan,
    ns_filter: &str,
    span_s: i64,
) -> Result<BTreeSet<usize>, HistoryError> {
    let reason = if ns_filter.is_empty() {
        "reason=\"OOMKilled\"".to_string()
    } else {
        format!("reason=\"OOMKilled\", {ns_filter}")
    };
    let q = format!(
        "max by ({OOM_BY}) (max_over_time(kube_pod_container_status_last_terminated_reason{{{reason}}}[{span_s}s]))"
    );
    let mut killed = BTreeSet::new();
    for s in client.query(&q, plan.end_ms).await? {
        let l = &s.labels;
        if let Some(i) = plan.find(get(l, "namespace"), get(l, "pod"), get(l, "container"))
            && s.points.last().is_some_and(|p| p.1 > 0.0)
        {
            killed.insert(i);
        }
    }
    Ok(killed)
}

/// Matchers selecting the namespaces and pods of these containers.
fn containers_matcher(plan: &Plan, containers: &BTreeSet<usize>) -> String {
    let mut nss: Vec<&str> = Vec::new();
    let mut pods: Vec<&str> = Vec::new();
    for c in containers.iter().filter_map(|&i| plan.containers.get(i)) {
        nss.push(&c.namespace);
        pods.push(&c.pod);
    }
    for v in [&mut nss, &mut pods] {
        v.sort();
        v.dedup();
    }
    format!(
        "namespace=~\"{}\", pod=~\"{}\"",
        alternation(&nss),
        alternation(&pods)
    )
}

/// `only` with the cluster matcher, if any.
fn with_cluster(cfg: &HistoryConfig, only: &str) -> String {
    match cfg.cluster_matcher() {
        Some(c) => format!("{only}, {c}"),
        None => only.to_string(),
    }
}

/// Per container: the restart counter over the plan's windows, and the steps where its last termination
/// reason was `OOMKilled`.
async fn restarts_and_reasons(
    client: &PromClient,
    plan: &Plan,
    only: &str,
    step: Duration,
) -> Result<OomSeries, HistoryError> {
    let restarts_q =
        format!("max by ({OOM_BY}) (kube_pod_container_status_restarts_total{{{only}}})");
    let reason_q = format!(
        "max by ({OOM_BY}) (kube_pod_container_status_last_terminated_reason{{reason=\"OOMKilled\", {only}}})"
    );
    let mut restarts: HashMap<usize, Vec<(i64, f64)>> = HashMap::new();
    let mut oom_reason: HashMap<usize, BTreeSet<i64>> = HashMap::new();
    for &(ws, we) in &plan.windows {
        for (q, is_reason) in [(&restarts_q, false), (&reason_q, true)] {
            let mut got = Vec::new();
            client
                .query_range(q, ws, we, step, &mut |s| {
                    got.push(s);
                    Ok(())
                })
                .await?;
            for s in got {
                let l = &s.labels;
                let Some(i) = plan.find(get(l, "namespace"), get(l, "pod"), get(l, "container"))
                else {
                    continue;
                };
                if is_reason {
                    oom_reason
                        .entry(i)
                        .or_default()
                        .extend(s.points.iter().filter(|p| p.1 > 0.0).map(|p| p.0));
                } else {
                    restarts.entry(i).or_default().extend(s.points);
                }
            }
        }
    }
    Ok((restarts, oom_reason))
}

/// Restart counters and `OOMKilled` steps per container.
type OomSeries = (
    HashMap<usize, Vec<(i64, f64)>>,
    HashMap<usize, BTreeSet<i64>>,
);

/// Sets the memory request (the largest in the last `span_s` seconds) of every OOM kill found.
async fn add_memory_requests(
    client: &PromClient,
    plan: &mut Plan,
    only: &str,
    span_s: i64,
) -> Result<(), HistoryError> {
    let q = format!(
        "max by ({OOM_BY}) (max_over_time(kube_pod_container_resource_requests{{resource=\"memory\", {only}}}[{span_s}s]))"
    );
    for s in client.query(&q, plan.end_ms).await? {
        let l = &s.labels;
        if let (Some(i), Some(v)) = (
            plan.find(get(l, "namespace"), get(l, "pod"), get(l, "container")),
            s.points.last(),
        ) && let Some(list) = plan.ooms.get_mut(&i)
        {
            for o in list.iter_mut() {
                o.1 = Some(v.1);
            }
        }
    }
    Ok(())
}

/// Cuts containers into batches, per source: whole namespaces packed together while they fit, a namespace
/// larger than a batch split by pods.
fn batches(cfg: &HistoryConfig, plan: &Plan) -> Vec<Batch> {
    let mut out = Vec::new();
    for (u, su) in plan.source_uses.iter().enumerate() {
        let members: Vec<usize> = (0..plan.containers.len())
            .filter(|&i| plan.containers[i].source == u)
            .collect();
        let mut base = cfg.base_matchers();
        base.push(su.source.matchers());
        source_batches(cfg, &base.join(", "), &plan.containers, &members, &mut out);
    }
    out
}

/// The batches of one source's containers (`members`, sorted by namespace, pod), each selected by `base` and
/// its namespaces or pods.
fn source_batches(
    cfg: &HistoryConfig,
    base: &str,
    containers: &[ContainerInfo],
    members: &[usize],
    out: &mut Vec<Batch>,
) {
    let max = cfg.max_series_per_query.max(1);
    let nl = &cfg.namespace_label;
    let pl = &cfg.pod_label;
    // namespace -> pod -> containers
    let mut by_ns: BTreeMap<&str, BTreeMap<&str, Vec<usize>>> = BTreeMap::new();
    for &i in members {
        let c = &containers[i];
        by_ns
            .entry(&c.namespace)
            .or_default()
            .entry(&c.pod)
            .or_default()
            .push(i);
    }
    let mut group: Vec<&str> = Vec::new();
    let mut group_members: Vec<usize> = Vec::new();
    let flush = |group: &mut Vec<&str>, m: &mut Vec<usize>, out: &mut Vec<Batch>| {
        if group.is_empty() {
            return;
        }
        out.push(Batch {
            matchers: format!("{base}, {nl}=~\"{}\"", alternation(group)),
            containers: m.len(),
            members: std::mem::take(m),
        });
        group.clear();
    };
    for (ns, pods) in &by_ns {
        let n: usize = pods.values().map(Vec::len).sum();
        if n <= max {
            if group_members.len() + n > max {
                flush(&mut group, &mut group_members, out);
            }
            group.push(ns);
            group_members.extend(pods.values().flatten());
            continue;
        }
        let mut chunk: Vec<&str> = Vec::new();
        let mut cm: Vec<usize> = Vec::new();
        let mut emit = |chunk: &mut Vec<&str>, cm: &mut Vec<usize>| {
            if chunk.is_empty() {
                return;
            }
            out.push(Batch {
                matchers: format!(
                    "{base}, {nl}=\"{}\", {pl}=~\"{}\"",
                    promql_str(ns),
                    alternation(chunk)
                ),
                containers: cm.len(),
                members: std::mem::take(cm),
            });
            chunk.clear();
        };
        for (pod, k) in pods {
            if cm.len() + k.len() > max {
                emit(&mut chunk, &mut cm);
            }
            chunk.push(pod);
            cm.extend(k);
        }
        emit(&mut chunk, &mut cm);
    }
    flush(&mut group, &mut group_members, out);
}

/// Progress of a load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Range queries finished.
    pub queries_done: usize,
    /// Range queries in the plan.
    pub queries_total: usize,
    /// Points fed to the sink.
    pub samples: u64,
}

/// What a load has fed so far; pass the same state again to resume after a failure.
#[derive(Debug, Clone, Default)]
pub struct LoadState {
    /// First window not completely fed.
    pub next_window: usize,
    /// Watermarks and counter bases per container.
    feeder: Feeder,
    /// Next window of each chain (batch × resource).
    chain_next: Vec<usize>,
    /// Points fed.
    pub samples: u64,
    /// Series the plan does not know (created after discovery), ignored.
    pub unknown_series: u64,
}

impl LoadState {
    /// Whether every window has been fed.
    pub fn complete(&self, plan: &Plan) -> bool {
        self.next_window >= plan.windows.len()
    }

    /// Sized for the plan on the first load; kept as is when resuming.
    fn prepare(&mut self, cfg: &HistoryConfig, plan: &Plan) {
        if self.feeder.len() < plan.containers.len() {
            let cpu = match cfg.rate_window {
                None => CpuSeries::Counter,
                Some(_) => CpuSeries::Rate,
            };
            self.feeder = Feeder::new(plan.containers.len(), cpu, cfg.step_ms());
            // The first point of the history is its start; a raw read's samples before it are only bases.
            self.feeder.skip_until(plan.start_ms - cfg.step_ms());
            for (i, c) in plan.containers.iter().enumerate() {
                if c.several_series {
                    self.feeder.set_several_series(i);
                }
            }
        }
        let chains = plan.batches.len() * 2;
        if self.chain_next.len() != chains {
            self.chain_next = vec![self.next_window; chains];
        }
    }

    fn progress(&self, plan: &Plan) -> Progress {
        let nw = plan.windows.len();
        Progress {
            queries_done: self.chain_next.iter().map(|&n| n.min(nw)).sum(),
            queries_total: plan.load_queries(),
            samples: self.samples,
        }
    }

    /// One series of a chain: through the feeder into the sink.
    fn feed(
        &mut self,
        labels: (&str, &str, &str),
        plan: &Plan,
        resource: Resource,
        s: &Series,
        sink: &mut dyn HistorySink,
    ) {
        let Some(i) = plan.find(
            get(&s.labels, labels.0),
            get(&s.labels, labels.1),
            get(&s.labels, labels.2),
        ) else {
            self.unknown_series += 1;
            return;
        };
        let key = series_key(&s.labels);
        let fed = match resource {
            Resource::Cpu => self.feeder.cpu(i, key, &s.points, sink),
            Resource::Memory => {
                let ooms = plan.ooms.get(&i).map_or(&[][..], Vec::as_slice);
                self.feeder.memory(i, key, &s.points, ooms, sink)
            }
        };
        self.samples += fed as u64;
    }

    /// A chain finished window `w`: windows every chain has passed get their remaining OOM kills, then
    /// the sink's `window_done` (its garbage collection).
    fn window_done(&mut self, plan: &Plan, chain: usize, w: usize, sink: &mut dyn HistorySink) {
        if let Some(next) = self.chain_next.get_mut(chain) {
            *next = w + 1;
        }
        if let Some(b) = plan.batches.get(chain / 2) {
            self.feeder
                .flush_held(&b.members, chain.is_multiple_of(2), &plan.ooms, sink);
        }
        let nw = plan.windows.len();
        let done = self.chain_next.iter().copied().min().unwrap_or(nw).min(nw);
        while self.next_window < done {
            let we = plan.windows[self.next_window].1;
            self.feeder.ooms_until(we, &plan.ooms, sink);
            sink.window_done(we);
            self.next_window += 1;
        }
    }
}

/// Identity of a series: a hash of its full label set.
fn series_key(labels: &BTreeMap<String, String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Cpu,
    Memory,
}

enum Msg {
    Series(Resource, Series),
    /// A chain finished a window.
    WindowDone(usize, usize),
    /// A chain gave up on a window.
    Failed(PromError),
}

/// How a chain reads a window.
#[derive(Debug, Clone)]
enum Read {
    /// Raw samples: an instant query of `metric{matchers}[span]` at the window's end.
    Raw {
        /// Metric name.
        metric: String,
        /// Label matchers.
        matchers: String,
    },
    /// A range query at every step (CPU with a server-side `rate()`).
    Range,
}

/// The queries of one batch and one resource, window after window.
struct Chain {
    query: String,
    read: Read,
    resource: Resource,
    /// Index in [`LoadState::chain_next`].
    index: usize,
    /// (window index, start, end) still to read.
    windows: Vec<(usize, i64, i64)>,
}

/// A query being opened in the background.
type Opened = tokio::task::JoinHandle<Result<crate::client::ResponseStream, PromError>>;

/// Reads the windows of one chain and sends their series.
struct ChainReader {
    client: PromClient,
    query: String,
    read: Read,
    resource: Resource,
    step: Duration,
    tx: tokio::sync::mpsc::Sender<Msg>,
}

impl ChainReader {
    fn open(&self, ws: i64, we: i64) -> Opened {
        let (c, step) = (self.client.clone(), self.step);
        match &self.read {
            Read::Range => {
                let q = self.query.clone();
                tokio::spawn(async move { c.open_range(&q, ws, we, step).await })
            }
            Read::Raw { metric, matchers } => {
                let span = Duration::from_millis(u64::try_from(we - ws).unwrap_or(0));
                let q = raw_query(metric, matchers, span);
                tokio::spawn(async move { c.open_instant(&q, we).await })
            }
        }
    }

    /// Reads window `k` of `windows` (with the client's retries) and sends its series; once its query
    /// answers, the next window's is opened into `pre`.
    async fn window(
        &self,
        windows: &[(usize, i64, i64)],
        k: usize,
        pre: &mut Option<(usize, Opened)>,
    ) -> Result<(), PromError> {
        let (_, ws, we) = windows[k];
        let mut retry = crate::client::Retry::new(&self.client, &self.query);
        loop {
            let handle = match pre.take() {
                Some((pk, h)) if pk == k => h,
                other => {
                    *pre = other;
                    self.open(ws, we)
                }
            };
            let r = self
                .client
                .timed(&self.query, async {
                    let mut st = handle
                        .await
                        .map_err(|e| PromError::Consumer(format!("query task: {e}")))??;
                    if pre.is_none()
                        && let Some(&(_, nws, nwe)) = windows.get(k + 1)
                    {
                        *pre = Some((k + 1, self.open(nws, nwe)));
                    }
                    while let Some(s) = st.next_series().await? {
                        self.tx
                            .send(Msg::Series(self.resource, s))
                            .await
                            .map_err(|_| {
                                PromError::Consumer("the history load was stopped".into())
                            })?;
                    }
                    Ok(())
                })
                .await;
            let Err(e) = r else { return Ok(()) };
            retry.wait(e).await?;
        }
    }
}

/// One chain's run. The next window's query is sent while the current one is read, so the server computes
/// it meanwhile (the client only buffers what the socket holds).
async fn run_chain(
    client: PromClient,
    chain: Chain,
    step: Duration,
    tx: tokio::sync::mpsc::Sender<Msg>,
    sem: Arc<tokio::sync::Semaphore>,
) {
    let Ok(_permit) = sem.acquire_owned().await else {
        return;
    };
    let reader = ChainReader {
        client,
        query: chain.query,
        read: chain.read,
        resource: chain.resource,
        step,
        tx,
    };
    // The prefetched query and the position of its window.
    let mut pre: Option<(usize, Opened)> = None;
    for (k, &(w, _, _)) in chain.windows.iter().enumerate() {
        if let Err(e) = reader.window(&chain.windows, k, &mut pre).await {
            if let Some((_, p)) = pre.take() {
                p.abort();
            }
            let _ = reader.tx.send(Msg::Failed(e)).await;
            return;
        }
        if reader
            .tx
            .send(Msg::WindowDone(chain.index, w))
            .await
            .is_err()
        {
            break;
        }
    }
    if let Some((_, p)) = pre.take() {
        p.abort();
    }
}

/// The chains still to run: per batch, CPU and memory, each from its first unfinished window.
fn chains(cfg: &HistoryConfig, plan: &Plan, chain_next: &[usize]) -> Vec<Chain> {
    let mut out = Vec::new();
    for (bi, b) in plan.batches.iter().enumerate() {
        for (ri, resource) in [Resource::Cpu, Resource::Memory].into_iter().enumerate() {
            let index = bi * 2 + ri;
            let range = resource == Resource::Cpu && cfg.rate_window.is_some();
            // Raw reads cover `(end of the previous window, end]` (a closed range on Prometheus 2, which
            // repeats the boundary sample: read once); a counter's first window then also holds the
            // sample before the history, the base of its first difference.
            let lead = if range { 0 } else { cfg.step_ms() };
            let windows: Vec<(usize, i64, i64)> = plan
                .windows
                .iter()
                .enumerate()
                .skip(chain_next.get(index).copied().unwrap_or(0))
                .map(|(w, &(ws, we))| {
                    // The first raw CPU read reaches one more step back: the base of the first point even
                    // where a range is open on the left (VictoriaMetrics, Prometheus 3).
                    let extra = if w == 0 && !range && resource == Resource::Cpu {
                        cfg.step_ms()
                    } else {
                        0
                    };
                    (w, ws - lead - extra, we)
                })
                .collect();
            if windows.is_empty() {
                continue;
            }
            // A raw read's span is its window's; messages name the selector.
            let (query, metric) = match resource {
                Resource::Cpu if range => (cfg.cpu_query(b, cfg.step), &cfg.cpu_metric),
                Resource::Cpu => (
                    format!("{}{{{}}}[window]", cfg.cpu_metric, b.matchers),
                    &cfg.cpu_metric,
                ),
                Resource::Memory => (
                    format!("{}{{{}}}[window]", cfg.memory_metric, b.matchers),
                    &cfg.memory_metric,
                ),
            };
            let read = if range {
                Read::Range
            } else {
                Read::Raw {
                    metric: metric.clone(),
                    matchers: b.matchers.clone(),
                }
            };
            out.push(Chain {
                query,
                read,
                resource,
                index,
                windows,
            });
        }
    }
    out
}

/// Feeds the planned history into `sink` (see the module docs): one chain of windows per batch and resource,
/// `concurrency` chains at a time, each window's query sent while the previous one is read. On failure the
/// state says where to resume; everything fed before the failure stays fed.
pub async fn load(
    client: &PromClient,
    cfg: &HistoryConfig,
    plan: &Plan,
    state: &mut LoadState,
    sink: &mut (dyn HistorySink + Send),
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<(), HistoryError> {
    state.prepare(cfg, plan);
    let mut prog = state.progress(plan);
    progress(&prog);
    let sem = Arc::new(tokio::sync::Semaphore::new(cfg.concurrency.max(1)));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Msg>(4 * cfg.concurrency.max(1));
    let mut tasks = tokio::task::JoinSet::new();
    for chain in chains(cfg, plan, &state.chain_next) {
        let run = run_chain(client.clone(), chain, cfg.step, tx.clone(), sem.clone());
        tasks.spawn(run);
    }
    drop(tx);
    let labels = (
        cfg.namespace_label.as_str(),
        cfg.pod_label.as_str(),
        cfg.container_label.as_str(),
    );
    let mut first_err: Option<PromError> = None;
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Failed(e) => {
                if first_err.is_none() {
                    first_err = Some(e);
                    tasks.abort_all();
                }
            }
            Msg::WindowDone(chain, w) => {
                state.window_done(plan, chain, w, sink);
                prog.queries_done += 1;
                prog.samples = state.samples;
                progress(&prog);
            }
            Msg::Series(resource, s) => state.feed(labels, plan, resource, &s, sink),
        }
    }
    while tasks.join_next().await.is_some() {}
    prog.samples = state.samples;
    progress(&prog);
    match first_err {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (namespace, pod, container, its sources as (job, metrics_path)).
    type Spec<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn found(cs: &[Spec<'_>]) -> Found {
        cs.iter()
            .map(|&(n, p, c, sources)| {
                let s = sources
                    .iter()
                    .map(|&(job, path)| {
                        let src = Source {
                            job: job.into(),
                            metrics_path: path.into(),
                        };
                        (src, [1, 1])
                    })
                    .collect();
                ((n.into(), p.into(), c.into()), s)
            })
            .collect()
    }

    #[test]
    fn window_cutting() {
        // 14 days at 1 minute: 20,160 points -> two even windows.
        let step = 60_000;
        let end = 14 * 86_400_000 - step;
        let w = windows(0, end, step, 11_000);
        assert_eq!(w, vec![(0, 10_079 * step), (10_080 * step, end)]);
        assert_eq!(windows(0, end, step, 10_000).len(), 3);
        assert_eq!(windows(0, 0, step, 10), vec![(0, 0)]);
        let w = windows(0, 24 * step, step, 10);
        assert_eq!(w.len(), 3);
        assert!(w.windows(2).all(|p| p[1].0 == p[0].1 + step));
        assert_eq!(w.last().unwrap().1, 24 * step);
    }

    #[test]
    fn batching() {
        let cfg = HistoryConfig {
            max_series_per_query: 3,
            ..Default::default()
        };
        let k: &[(&str, &str)] = &[("kubelet", "/metrics/cadvisor")];
        let cs = found(&[
            ("a", "p1", "x", k),
            ("b", "p1", "x", k),
            ("b", "p1", "y", k),
            ("big", "p1", "x", k),
            ("big", "p2", "x", k),
            ("big", "p3", "x", k),
            ("big", "p3", "y", k),
        ]);
        let plan = Plan::new(0, 0, cs, &Owners::default());
        let b = batches(&cfg, &plan);
        assert_eq!(b.len(), 3, "{b:?}");
        assert!(b.iter().all(|b| {
            b.matchers
                .contains("job=\"kubelet\", metrics_path=\"/metrics/cadvisor\"")
        }));
        assert_eq!(b.iter().map(|b| b.members.len()).sum::<usize>(), 7);
        let has = |s: &str| b.iter().any(|b| b.matchers.ends_with(s));
        assert!(has("namespace=~\"a|b\""), "{b:?}");
        assert!(has("namespace=\"big\", pod=~\"p1|p2\""), "{b:?}");
        assert!(has("namespace=\"big\", pod=~\"p3\""), "{b:?}");
        assert_eq!(b.iter().map(|b| b.containers).sum::<usize>(), 7);
    }

    #[test]
    fn the_cadvisor_source_is_preferred_and_reported() {
        // kube-prometheus-stack: the kubelet's cAdvisor and resource endpoints both carry the metrics.
        let both: &[(&str, &str)] = &[
            ("kubelet", "/metrics/resource"),
            ("kubelet", "/metrics/cadvisor"),
        ];
        let vm: &[(&str, &str)] = &[("kubernetes-nodes-cadvisor", ""), ("kubelet", "")];
        let plan = Plan::new(
            0,
            0,
            found(&[("a", "p", "c", both), ("b", "p", "c", vm)]),
            &Owners::default(),
        );
        let chosen: Vec<String> = plan
            .containers
            .iter()
            .map(|c| plan.source_uses[c.source].source.to_string())
            .collect();
        assert_eq!(
            chosen,
            [
                "job \"kubelet\" metrics_path \"/metrics/cadvisor\"",
                "job \"kubernetes-nodes-cadvisor\""
            ]
        );
        assert!(plan.source_uses.iter().all(|u| u.contested == 1));
        assert_eq!(
            plan.source_uses[0].passed_over[0].metrics_path,
            "/metrics/resource"
        );
        // No cAdvisor among them: the first by name, whatever order the series came in.
        let s = |j: &str| Source {
            job: j.into(),
            metrics_path: String::new(),
        };
        assert!(s("a-job").rank() < s("b-job").rank());
        assert!(s("z-cadvisor").rank() < s("a-job").rank());
    }

    #[test]
    fn selectors_and_escaping() {
        assert_eq!(promql_regex_literal("a.b"), "a\\\\.b");
        assert_eq!(
            selector_matchers("app=web,tier in (a,b),!canary,app.kubernetes.io/name").unwrap(),
            vec![
                "label_app=\"web\"",
                "label_tier=~\"a|b\"",
                "label_canary=\"\"",
                "label_app_kubernetes_io_name!=\"\""
            ]
        );
        assert!(selector_matchers("a b c").is_err());
        let cfg = HistoryConfig::default();
        let b = Batch {
            matchers: "x=\"1\"".into(),
            containers: 1,
            members: vec![0],
        };
        let span = Duration::from_secs(3600);
        assert_eq!(
            cfg.cpu_query(&b, span),
            "container_cpu_usage_seconds_total{x=\"1\"}[3600000ms]"
        );
        let cfg = HistoryConfig {
            rate_window: Some(Duration::from_secs(300)),
            ..cfg
        };
        assert_eq!(
            cfg.cpu_query(&b, span),
            "max by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{x=\"1\"}[300s]))"
        );
    }
}
