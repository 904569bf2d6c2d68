//! Usage history from a Prometheus-compatible API, loaded in bounded pieces.
//!
//! [`discover`] finds the containers (cAdvisor series), their workloads (kube-state-metrics owners, else
//! the pod name's stem) and their OOM kills, and cuts the work into **batches** of at most
//! `max_series_per_query` containers (whole namespaces when they fit, else pods of one namespace) and
//! **windows** of at most `max_points_per_series` steps. [`load`] then runs, window after window, one CPU
//! and one memory range query per batch, `concurrency` at a time, and streams every series into a
//! [`HistorySink`] as soon as it has been parsed: memory use is bounded by the queries in flight, not by the
//! length of the history.
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
    /// `job` of the cAdvisor series; empty = no job matcher (`--prometheus-cadvisor-job-name`).
    pub cadvisor_job: String,
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
    /// Window of a server-side `rate()`. None (the default): the counter itself is read at every step and
    /// differenced here, so each CPU point is the exact average over its step on every server (servers
    /// disagree on which samples `rate` over one step sees: Prometheus 2 takes `[t−w, t]`, VictoriaMetrics
    /// also the sample before).
    pub rate_window: Option<Duration>,
    /// Containers per query at most (`--prometheus-max-series-per-query`).
    pub max_series_per_query: usize,
    /// Points per series and query at most (Prometheus refuses more than 11,000).
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
            cadvisor_job: "kubernetes-cadvisor".into(),
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
}

/// A set of containers queried together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Label matchers (inside `{}`) that select the batch's containers.
    pub matchers: String,
    /// Number of containers.
    pub containers: usize,
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

    /// Matchers every container series query carries.
    fn base_matchers(&self) -> Vec<String> {
        let (p, c) = (&self.pod_label, &self.container_label);
        let mut m = Vec::new();
        if !self.cadvisor_job.is_empty() {
            m.push(format!("job=\"{}\"", promql_str(&self.cadvisor_job)));
        }
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

    /// The CPU query of a batch: the counter (differenced by [`load`]) or, with a rate window, its rate.
    pub fn cpu_query(&self, batch: &Batch) -> String {
        match self.rate_window {
            Some(w) => format!(
                "max by ({}) (rate({}{{{}}}[{}s]))",
                self.by(),
                self.cpu_metric,
                batch.matchers,
                w.as_secs().max(1)
            ),
            None => format!(
                "max by ({}) ({}{{{}}})",
                self.by(),
                self.cpu_metric,
                batch.matchers
            ),
        }
    }

    /// The memory query of a batch.
    pub fn memory_query(&self, batch: &Batch) -> String {
        format!(
            "max by ({}) ({}{{{}}})",
            self.by(),
            self.memory_metric,
            batch.matchers
        )
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
        found.retain(|(n, p, _)| pods.contains(&(n.clone(), p.clone())));
    }
    let owners = if cfg.owners && !found.is_empty() {
        find_owners(client, cfg, start_ms, end_ms).await?
    } else {
        Owners::default()
    };
    let mut plan = Plan::new(start_ms, end_ms, found, &owners);
    plan.windows = windows(start_ms, end_ms, cfg.step_ms(), cfg.max_points_per_series);
    plan.batches = batches(cfg, &plan.containers);
    if cfg.ooms && !plan.containers.is_empty() {
        let ns_filter = cfg.ns_matcher("namespace").unwrap_or_default();
        discover_ooms(client, &mut plan, &ns_filter, cfg.step).await?;
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

/// (namespace, pod, container) of every cAdvisor container series in the range.
async fn find_containers(
    client: &PromClient,
    cfg: &HistoryConfig,
    start_ms: i64,
    end_ms: i64,
) -> Result<BTreeSet<(String, String, String)>, HistoryError> {
    let mut m = cfg.base_matchers();
    m.extend(cfg.ns_matcher(&cfg.namespace_label));
    let sel = m.join(", ");
    let matchers = vec![
        format!("{}{{{sel}}}", cfg.cpu_metric),
        format!("{}{{{sel}}}", cfg.memory_metric),
    ];
    let (nl, pl, cl) = (&cfg.namespace_label, &cfg.pod_label, &cfg.container_label);
    let mut found = BTreeSet::new();
    client
        .series(&matchers, start_ms, end_ms, &mut |l| {
            let (n, p, c) = (get(&l, nl), get(&l, pl), get(&l, cl));
            if !n.is_empty() && !p.is_empty() && !c.is_empty() {
                found.insert((n.into(), p.into(), c.into()));
            }
            Ok(())
        })
        .await?;
    Ok(found)
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
    let f = cfg.ns_matcher("namespace").unwrap_or_default();
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
    fn new(
        start_ms: i64,
        end_ms: i64,
        found: BTreeSet<(String, String, String)>,
        owners: &Owners,
    ) -> Plan {
        let owner_of: Vec<WorkloadInfo> = found
            .iter()
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
        for ((namespace, pod, container), w) in found.into_iter().zip(&owner_of) {
            let i = plan.containers.len();
            plan.index
                .insert((namespace.clone(), pod.clone(), container.clone()), i);
            plan.containers.push(ContainerInfo {
                namespace,
                pod,
                container,
                workload: index_of.get(w).copied().unwrap_or(0),
            });
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
    ns_filter: &str,
    step: Duration,
) -> Result<(), HistoryError> {
    let span = (plan.end_ms - plan.start_ms) / 1000 + step.as_secs().max(1) as i64;
    let killed = ever_oom_killed(client, plan, ns_filter, span).await?;
    if killed.is_empty() {
        return Ok(());
    }
    let only = containers_matcher(plan, &killed);
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

/// Cuts containers (sorted by namespace, pod) into batches: whole namespaces packed together while they fit,
/// a namespace larger than a batch split by pods.
fn batches(cfg: &HistoryConfig, containers: &[ContainerInfo]) -> Vec<Batch> {
    let max = cfg.max_series_per_query.max(1);
    let base = cfg.base_matchers().join(", ");
    let nl = &cfg.namespace_label;
    let pl = &cfg.pod_label;
    // namespace -> pods -> container count
    let mut by_ns: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for c in containers {
        *by_ns
            .entry(&c.namespace)
            .or_default()
            .entry(&c.pod)
            .or_default() += 1;
    }
    let mut out = Vec::new();
    let mut group: Vec<&str> = Vec::new();
    let mut group_n = 0;
    let flush = |group: &mut Vec<&str>, n: &mut usize, out: &mut Vec<Batch>| {
        if group.is_empty() {
            return;
        }
        out.push(Batch {
            matchers: format!("{base}, {nl}=~\"{}\"", alternation(group)),
            containers: *n,
        });
        group.clear();
        *n = 0;
    };
    for (ns, pods) in &by_ns {
        let n: usize = pods.values().sum();
        if n <= max {
            if group_n + n > max {
                flush(&mut group, &mut group_n, &mut out);
            }
            group.push(ns);
            group_n += n;
            continue;
        }
        let mut chunk: Vec<&str> = Vec::new();
        let mut cn = 0;
        let mut emit = |chunk: &mut Vec<&str>, cn: &mut usize| {
            if chunk.is_empty() {
                return;
            }
            out.push(Batch {
                matchers: format!(
                    "{base}, {nl}=\"{}\", {pl}=~\"{}\"",
                    promql_str(ns),
                    alternation(chunk)
                ),
                containers: *cn,
            });
            chunk.clear();
            *cn = 0;
        };
        for (pod, k) in pods {
            if cn + k > max {
                emit(&mut chunk, &mut cn);
            }
            chunk.push(pod);
            cn += k;
        }
        emit(&mut chunk, &mut cn);
    }
    flush(&mut group, &mut group_n, &mut out);
    out
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
            self.feeder = Feeder::new(plan.containers.len(), cpu);
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
        let fed = match resource {
            Resource::Cpu => self.feeder.cpu(i, &s.points, sink),
            Resource::Memory => {
                let ooms = plan.ooms.get(&i).map_or(&[][..], Vec::as_slice);
                self.feeder.memory(i, &s.points, ooms, sink)
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

/// The queries of one batch and one resource, window after window.
struct Chain {
    query: String,
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
    resource: Resource,
    step: Duration,
    tx: tokio::sync::mpsc::Sender<Msg>,
}

impl ChainReader {
    fn open(&self, ws: i64, we: i64) -> Opened {
        let (c, q, step) = (self.client.clone(), self.query.clone(), self.step);
        tokio::spawn(async move { c.open_range(&q, ws, we, step).await })
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
    let counter = cfg.rate_window.is_none();
    let mut out = Vec::new();
    for (bi, b) in plan.batches.iter().enumerate() {
        for (ri, resource) in [Resource::Cpu, Resource::Memory].into_iter().enumerate() {
            let index = bi * 2 + ri;
            // A counter needs the point before the window as the base of its first difference.
            let lead = if resource == Resource::Cpu && counter {
                cfg.step_ms()
            } else {
                0
            };
            let windows: Vec<(usize, i64, i64)> = plan
                .windows
                .iter()
                .enumerate()
                .skip(chain_next.get(index).copied().unwrap_or(0))
                .map(|(w, &(ws, we))| (w, ws - lead, we))
                .collect();
            if windows.is_empty() {
                continue;
            }
            let query = match resource {
                Resource::Cpu => cfg.cpu_query(b),
                Resource::Memory => cfg.memory_query(b),
            };
            out.push(Chain {
                query,
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

    fn c(ns: &str, pod: &str, name: &str) -> ContainerInfo {
        ContainerInfo {
            namespace: ns.into(),
            pod: pod.into(),
            container: name.into(),
            workload: 0,
        }
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
            cadvisor_job: String::new(),
            ..Default::default()
        };
        let cs = vec![
            c("a", "p1", "x"),
            c("b", "p1", "x"),
            c("b", "p1", "y"),
            c("big", "p1", "x"),
            c("big", "p2", "x"),
            c("big", "p3", "x"),
            c("big", "p3", "y"),
        ];
        let b = batches(&cfg, &cs);
        assert_eq!(b.len(), 3, "{b:?}");
        let has = |s: &str| b.iter().any(|b| b.matchers.ends_with(s));
        assert!(has("namespace=~\"a|b\""), "{b:?}");
        assert!(has("namespace=\"big\", pod=~\"p1|p2\""), "{b:?}");
        assert!(has("namespace=\"big\", pod=~\"p3\""), "{b:?}");
        assert_eq!(b.iter().map(|b| b.containers).sum::<usize>(), 7);
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
        };
        assert_eq!(
            cfg.cpu_query(&b),
            "max by (namespace, pod, container) (container_cpu_usage_seconds_total{x=\"1\"})"
        );
        let cfg = HistoryConfig {
            rate_window: Some(Duration::from_secs(300)),
            ..cfg
        };
        assert_eq!(
            cfg.cpu_query(&b),
            "max by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{x=\"1\"}[300s]))"
        );
    }
}
