//! Run peaks (`--job-run-peaks`): a Job's run can end between two scrapes of the metrics API, so the model
//! never sees its usage. With `--prometheus-address`, each finished pod of a Job whose VPA targets that Job
//! or its CronJob gets one query of the history store for each container's peak over its run
//! ([`tailor_prometheus::run_peak`]), fed to the model at the run's end through the same path as every other
//! sample: memory as a sample of the run's peak, CPU as one sample of its largest rate
//! (docs/decisions/job-runs.md).
//!
//! Bounded: at most `max_pending` runs wait (the oldest is dropped and counted), a background worker starts
//! at most `qps` queries a second and `concurrency` at once, each limited by the client's query timeout and
//! never retried. A run whose query fails is skipped (a warning per loop, and a metric); the loop never waits
//! for the store. Each run is queried at most once: a pod is remembered from when its runs are queued until it
//! leaves the store, and after a restart a run that ended before the VPA's restored state's last sample is
//! taken as already counted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tailor_prometheus::client::PromClient;
use tailor_prometheus::history::HistoryConfig;
use tailor_prometheus::run_peak::{Run, RunPeak, run_peak};

use crate::views::pod_store::StoredPod;

/// The labels the Job controller puts on its pods (the legacy name and the `batch.kubernetes.io/` one).
pub const JOB_NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];

/// Defaults of [`JobRunOptions`].
pub const DEFAULT_MAX_PENDING: usize = 10_000;
/// Default of [`JobRunOptions::qps`].
pub const DEFAULT_QPS: f64 = 5.0;

/// Where and how fast to read run peaks.
#[derive(Debug, Clone)]
pub struct JobRunOptions {
    /// The API client (its query timeout applies to each run; no retries).
    pub client: PromClient,
    /// Label names, metrics and matchers (the history's flags).
    pub query: HistoryConfig,
    /// Runs waiting at most (`--job-run-peaks-queue`).
    pub max_pending: usize,
    /// Queries started per second at most (`--job-run-peaks-qps`).
    pub qps: f64,
    /// Queries in flight at most (`--prometheus-concurrency`).
    pub concurrency: usize,
}

/// What the worker hands back to the loop.
#[derive(Debug, Default)]
pub struct Drained {
    /// Runs read, with what the store held.
    pub peaks: Vec<(Run, RunPeak)>,
    /// Runs whose query failed, and the last error.
    pub failed: u64,
    /// The last query error.
    pub last_error: Option<String>,
    /// Runs dropped from a full queue (or a full result list) since the last drain.
    pub dropped: u64,
    /// Runs waiting.
    pub pending: usize,
}

#[derive(Debug, Default)]
struct Queues {
    pending: VecDeque<Run>,
    done: Drained,
}

#[derive(Debug)]
struct Shared {
    queues: Mutex<Queues>,
    wake: tokio::sync::Notify,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues runs; a full queue drops its oldest run (counted).
    fn push(&self, runs: Vec<Run>) {
        let mut q = self.lock();
        for run in runs {
            if q.pending.len() >= self.capacity {
                q.pending.pop_front();
                q.done.dropped += 1;
            }
            q.pending.push_back(run);
        }
    }

    fn finish(&self, run: Run, r: Result<RunPeak, String>) {
        let mut q = self.lock();
        match r {
            Ok(_) if q.done.peaks.len() >= self.capacity => q.done.dropped += 1,
            Ok(peak) => q.done.peaks.push((run, peak)),
            Err(e) => {
                q.done.failed += 1;
                q.done.last_error = Some(e);
            }
        }
    }
}

/// The queue of finished runs, its worker, and the pods already queued.
#[derive(Debug)]
pub struct JobRunPeaks {
    shared: Arc<Shared>,
    /// Pods whose runs were queued, by namespace (looked up without allocating).
    queued_pods: HashMap<Arc<str>, HashSet<Box<str>>>,
    worker: tokio::task::JoinHandle<()>,
}

impl Drop for JobRunPeaks {
    fn drop(&mut self) {
        self.worker.abort();
    }
}

impl JobRunPeaks {
    /// Starts the worker (on the current tokio runtime).
    pub fn new(opts: JobRunOptions) -> Self {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues::default()),
            wake: tokio::sync::Notify::new(),
            capacity: opts.max_pending.max(1),
        });
        let worker = tokio::spawn(work(shared.clone(), opts));
        JobRunPeaks {
            shared,
            queued_pods: HashMap::new(),
            worker,
        }
    }

    /// Whether the pod's runs were queued already.
    pub fn queued(&self, namespace: &str, pod: &str) -> bool {
        (self.queued_pods.get(namespace)).is_some_and(|pods| pods.contains(pod))
    }

    /// Queues the runs of a finished Job pod's containers that ended after `watermark(container)`, and
    /// remembers the pod. Returns how many runs were queued.
    pub fn queue_pod(&mut self, pod: &StoredPod, watermark: impl Fn(&str) -> i64) -> usize {
        (self.queued_pods.entry(pod.namespace.clone()).or_default()).insert(pod.name.clone());
        let runs: Vec<Run> = finished_runs(pod)
            .filter(|r| r.end_ms.saturating_mul(1_000_000) > watermark(&r.container))
            .collect();
        let n = runs.len();
        if n > 0 {
            self.shared.push(runs);
            self.shared.wake.notify_one();
        }
        n
    }

    /// Forgets a pod that left the store (it cannot be queued again).
    pub fn forget_pod(&mut self, namespace: &str, pod: &str) {
        if let Some(pods) = self.queued_pods.get_mut(namespace) {
            pods.remove(pod);
            if pods.is_empty() {
                self.queued_pods.remove(namespace);
            }
        }
    }

    /// Takes what the worker finished since the last call.
    pub fn drain(&self) -> Drained {
        let mut q = self.shared.lock();
        let pending = q.pending.len();
        Drained {
            pending,
            ..std::mem::take(&mut q.done)
        }
    }
}

/// Whether the pod belongs to a Job (it carries the Job controller's job-name label).
pub fn is_job_pod(pod: &StoredPod) -> bool {
    JOB_NAME_LABELS.iter().any(|l| pod.labels.contains_key(*l))
}

/// The runs of the pod's containers that terminated with both times known.
fn finished_runs(pod: &StoredPod) -> impl Iterator<Item = Run> + '_ {
    pod.statuses.iter().filter_map(move |s| {
        let t = s.terminated?;
        let (start, end) = (s.run_started_at?, t.finished_at?);
        Some(Run {
            namespace: pod.namespace.to_string(),
            pod: pod.name.to_string(),
            container: s.name.to_string(),
            start_ms: start.div_euclid(1_000_000),
            end_ms: end.div_euclid(1_000_000),
        })
    })
}

/// Takes runs from the queue, oldest first, at most `qps` a second and `concurrency` at once.
async fn work(shared: Arc<Shared>, opts: JobRunOptions) {
    let slots = Arc::new(tokio::sync::Semaphore::new(opts.concurrency.max(1)));
    let qps = if opts.qps.is_finite() && opts.qps > 0.0 {
        opts.qps
    } else {
        DEFAULT_QPS
    };
    let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / qps));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let opts = Arc::new(opts);
    loop {
        let next = shared.lock().pending.pop_front();
        let Some(run) = next else {
            shared.wake.notified().await;
            continue;
        };
        pace.tick().await;
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (shared, opts) = (shared.clone(), opts.clone());
        tokio::spawn(async move {
            let r = run_peak(&opts.client, &opts.query, &run).await;
            shared.finish(run, r.map_err(|e| e.to_string()));
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(i: i64) -> Run {
        Run {
            namespace: "batch".into(),
            pod: format!("nightly-{i}-x"),
            container: "task".into(),
            start_ms: i * 1000,
            end_ms: i * 1000 + 500,
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_runs_and_counts_them() {
        let shared = Shared {
            queues: Mutex::new(Queues::default()),
            wake: tokio::sync::Notify::new(),
            capacity: 3,
        };
        shared.push((0..5).map(run).collect());
        let q = shared.lock();
        assert_eq!(q.done.dropped, 2);
        let left: Vec<i64> = q.pending.iter().map(|r| r.start_ms / 1000).collect();
        assert_eq!(left, [2, 3, 4]);
    }

    #[test]
    fn results_past_the_capacity_are_dropped_and_failures_counted() {
        let shared = Shared {
            queues: Mutex::new(Queues::default()),
            wake: tokio::sync::Notify::new(),
            capacity: 1,
        };
        shared.finish(run(0), Ok(RunPeak::default()));
        shared.finish(run(1), Ok(RunPeak::default()));
        shared.finish(run(2), Err("connection refused".into()));
        let q = shared.lock();
        assert_eq!(
            (q.done.peaks.len(), q.done.dropped, q.done.failed),
            (1, 1, 1)
        );
        assert_eq!(q.done.last_error.as_deref(), Some("connection refused"));
    }
}
