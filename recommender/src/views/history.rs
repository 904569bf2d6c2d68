//! History bootstrap: a new VPA does not wait a week. For every VPA the recommender takes on, a background
//! task reads its workload's usage history from a Prometheus-compatible API (`--prometheus-address`,
//! `--history-length`, `--history-resolution`) through [`tailor_prometheus::history`], builds the
//! per-container aggregates in a private model, and hands them to the loop, which merges them into the VPA's
//! restored state exactly like a checkpoint. While a task runs, the VPA carries `FetchingHistory=True` (and
//! the checkpoint writer skips it); the condition is removed when the history has merged.
//!
//! A failed query is retried (the client's backoff); a load that still fails waits `retry_after` and resumes
//! from the first unfinished window with everything already loaded kept. At most
//! [`HistoryOptions::concurrency`] loads run at once. A VPA whose checkpoints were restored loads no history
//! (the process that wrote them loaded it), so it is checkpointed even while Prometheus is down.

use crate::tracked::VpaKey;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tailor_engine::model::{AggregateContainerState, AggregationsConfig};
use tailor_engine::replay::ReplayConfig;
use tailor_prometheus::client::PromClient;
use tailor_prometheus::history::{HistoryConfig, LoadState, discover, load};
use tailor_prometheus::model_sink::ModelSink;

/// Where and how to read history.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// The API client.
    pub client: PromClient,
    /// Queries (label names, step = `--history-resolution`, batching).
    pub query: HistoryConfig,
    /// `--history-length`.
    pub length: Duration,
    /// Wait before resuming a load that failed.
    pub retry_after: Duration,
    /// Histories loaded at once (`--history-fetch-concurrency`); the other VPAs wait for a slot.
    pub concurrency: usize,
}

/// Default of [`HistoryOptions::concurrency`].
pub const DEFAULT_CONCURRENCY: usize = 4;

struct Task {
    handle: tokio::task::JoinHandle<BTreeMap<String, AggregateContainerState>>,
    status: Arc<Mutex<String>>,
}

/// The background tasks, one per VPA.
pub struct HistoryBootstrap {
    opts: Arc<HistoryOptions>,
    aggregations: AggregationsConfig,
    tasks: HashMap<VpaKey, Task>,
    started: std::collections::HashSet<VpaKey>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for HistoryBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryBootstrap")
            .field("running", &self.tasks.len())
            .field("started", &self.started.len())
            .finish()
    }
}

fn set(status: &Mutex<String>, s: String) {
    if let Ok(mut g) = status.lock() {
        *g = s;
    }
}

impl HistoryBootstrap {
    /// A bootstrap with no task yet.
    pub fn new(opts: HistoryOptions, aggregations: AggregationsConfig) -> Self {
        HistoryBootstrap {
            slots: Arc::new(tokio::sync::Semaphore::new(opts.concurrency.max(1))),
            opts: Arc::new(opts),
            aggregations,
            tasks: HashMap::new(),
            started: Default::default(),
        }
    }

    /// Whether a task was ever started for this VPA.
    pub fn started(&self, key: &VpaKey) -> bool {
        self.started.contains(key)
    }

    /// Whether the VPA's history is merged into its restored state (or it needs none).
    pub fn merged(&self, key: &VpaKey) -> bool {
        self.started.contains(key) && !self.tasks.contains_key(key)
    }

    /// Marks the VPA as needing no history (its checkpoints were restored): no task is started for it.
    pub fn skip(&mut self, key: VpaKey) {
        self.started.insert(key);
    }

    /// Starts reading the history of the workload `target_kind/target_name` in the VPA's namespace, up to
    /// `end_ms` (unix ms). Does nothing if a task was started for this VPA before.
    pub fn start(&mut self, key: VpaKey, target_kind: &str, target_name: &str, end_ms: i64) {
        if !self.started.insert(key.clone()) {
            return;
        }
        let status = Arc::new(Mutex::new(
            "Waiting for a free slot to load the usage history".to_string(),
        ));
        let task = fetch(
            self.opts.clone(),
            self.aggregations,
            key.0.clone(),
            target_kind.to_string(),
            target_name.to_string(),
            end_ms,
            status.clone(),
        );
        let slots = self.slots.clone();
        let handle = tokio::spawn(async move {
            // Held for the whole load; the semaphore is never closed.
            let _slot = slots.acquire_owned().await;
            task.await
        });
        self.tasks.insert(key, Task { handle, status });
    }

    /// The `FetchingHistory` message of a VPA whose task is still running.
    pub fn fetching(&self, key: &VpaKey) -> Option<String> {
        let t = self.tasks.get(key)?;
        (!t.handle.is_finished()).then(|| t.status.lock().map(|s| s.clone()).unwrap_or_default())
    }

    /// Finished tasks and their per-container aggregates.
    pub async fn poll(&mut self) -> Vec<(VpaKey, BTreeMap<String, AggregateContainerState>)> {
        let done: Vec<VpaKey> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.handle.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in done {
            if let Some(t) = self.tasks.remove(&k) {
                match t.handle.await {
                    Ok(aggs) => out.push((k, aggs)),
                    Err(e) => tracing::error!(vpa = ?k, error = %e, "history task failed"),
                }
            }
        }
        out
    }

    /// Stops the task of a VPA that is gone; a VPA that comes back starts over.
    pub fn forget(&mut self, key: &VpaKey) {
        if let Some(t) = self.tasks.remove(key) {
            t.handle.abort();
        }
        self.started.remove(key);
    }
}

async fn fetch(
    opts: Arc<HistoryOptions>,
    aggregations: AggregationsConfig,
    namespace: String,
    kind: String,
    name: String,
    end_ms: i64,
    status: Arc<Mutex<String>>,
) -> BTreeMap<String, AggregateContainerState> {
    set(&status, "Loading usage history".to_string());
    let mut q = opts.query.clone();
    q.namespaces = vec![namespace.clone()];
    // A workload's pods are named after it (Deployment `x-<hash>-<id>`, StatefulSet `x-0`, …); the owner
    // lookup below decides which of them really belong to it.
    q.pod_regex = Some(format!("{}-.+", name.replace('.', "\\.")));
    let plan = loop {
        match discover(&opts.client, &q, end_ms, opts.length).await {
            Ok(p) => break p,
            Err(e) => {
                tracing::warn!(namespace, name, error = %e, "history discovery failed; will retry");
                set(&status, format!("Retrying the history query: {e}"));
                tokio::time::sleep(opts.retry_after).await;
            }
        }
    };
    let workload = plan
        .workloads
        .iter()
        .position(|w| w.kind == kind && w.name == name)
        .or_else(|| {
            plan.workloads
                .iter()
                .position(|w| w.kind.is_empty() && w.name == name)
        });
    let Some(workload) = workload else {
        tracing::info!(namespace, kind, name, "no usage history found");
        return BTreeMap::new();
    };
    let cfg = ReplayConfig {
        aggregations,
        ..Default::default()
    };
    let mut sink = ModelSink::new(&plan, &cfg);
    let mut state = LoadState::default();
    let total = plan.load_queries();
    loop {
        let r = load(&opts.client, &q, &plan, &mut state, &mut sink, &mut |p| {
            set(
                &status,
                format!(
                    "Loading usage history: {} of {} queries, {} samples",
                    p.queries_done, p.queries_total, p.samples
                ),
            );
        })
        .await;
        match r {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(namespace, name, error = %e, windows_loaded = state.next_window, "history load failed; will resume");
                set(
                    &status,
                    format!(
                        "Resuming the history load ({} of {} windows loaded, {total} queries planned): {e}",
                        state.next_window,
                        plan.windows.len()
                    ),
                );
                tokio::time::sleep(opts.retry_after).await;
            }
        }
    }
    tracing::info!(
        namespace,
        name,
        samples = state.samples,
        "usage history loaded"
    );
    sink.aggregates(workload)
}

/// Merges history into a VPA's restored state (history is older than anything restored, see the module docs).
pub fn merge_into(
    initial: &mut BTreeMap<String, AggregateContainerState>,
    history: BTreeMap<String, AggregateContainerState>,
) {
    for (name, agg) in history {
        match initial.get_mut(&name) {
            Some(e) => e.merge(&agg),
            None => {
                initial.insert(name, agg);
            }
        }
    }
}

/// Where history must end for a VPA: before the earliest sample of its restored state, and not after `now_ms`.
pub fn history_end(initial: &BTreeMap<String, AggregateContainerState>, now_ms: i64) -> i64 {
    initial
        .values()
        .filter(|a| a.total_samples_count > 0 && a.first_sample_start > 0)
        .map(|a| a.first_sample_start.div_euclid(1_000_000) - 1)
        .fold(now_ms, i64::min)
}
