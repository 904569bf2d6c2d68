//! Finished Job runs into the run-peak queue, and the peaks read since the last loop into the model
//! ([`crate::views::job_runs`]).

use std::sync::Arc;

use tailor_engine::model::{ContainerId, Sample};
use tailor_engine::units::{Nanos, Resource};

use crate::run_loop::{LoopReport, Recommender};
use crate::tracked::key_of;
use crate::views::job_runs::{Drained, is_job_pod};
use crate::views::watched_vpa::WatchedVpa;

/// Target kinds whose pods are a Job's runs.
const JOB_KINDS: [&str; 2] = ["Job", "CronJob"];

impl Recommender {
    /// Queues the runs of finished Job pods selected by a VPA that targets a Job or a CronJob (once its
    /// checkpoints are restored and its history loaded), then feeds the peaks the worker read. Does nothing
    /// without `--job-run-peaks` and a store.
    pub(crate) fn job_run_peaks(&mut self, owned: &[Arc<WatchedVpa>], report: &mut LoopReport) {
        if self.job_runs.is_none() {
            return;
        }
        let mut queued = 0u64;
        for v in owned {
            let is_job =
                (v.spec.target_ref.as_ref()).is_some_and(|t| JOB_KINDS.contains(&t.kind.as_str()));
            let key = key_of(v);
            let Some(e) = self.vpas.get(&key).filter(|_| is_job) else {
                continue;
            };
            // The watermark is the restored state's: wait for the checkpoints, and for a history load,
            // which holds the runs it covers already.
            let restoring = e.restore_pending && self.cfg.checkpoints_enabled;
            let loading = (self.history.as_ref()).is_some_and(|h| !h.merged(&key));
            if !restoring && !loading {
                queued += self.queue_runs_of(e.index);
            }
        }
        self.metrics
            .job_run_peaks
            .get_or_create(&vec![("result", "queued")])
            .inc_by(queued);
        let Some(drained) = self.job_runs.as_ref().map(|j| j.drain()) else {
            return;
        };
        self.feed_run_peaks(drained, report);
    }

    /// Queues the runs of the VPA's finished Job pods not queued before; returns how many.
    fn queue_runs_of(&mut self, vpa: usize) -> u64 {
        let Some(jobs) = self.job_runs.as_mut() else {
            return 0;
        };
        let Some(v) = self.model.vpas().get(vpa) else {
            return 0;
        };
        // Runs that ended before the restored state's last sample were counted by the process that wrote it.
        let watermark = |container: &str| -> Nanos {
            v.initial_states
                .get(container)
                .map_or(Nanos::MIN, |a| a.last_sample_start)
        };
        let mut queued = 0;
        for (ns, name) in self.model.matching_pods(vpa) {
            if jobs.queued(ns, name) {
                continue;
            }
            let Some(e) = self.pods.get(ns).and_then(|m| m.get(name)) else {
                continue;
            };
            if e.pod.phase.is_active() || !is_job_pod(&e.pod) {
                continue;
            }
            queued += jobs.queue_pod(&e.pod, watermark) as u64;
        }
        queued
    }

    /// Feeds each run's peaks at its end: memory and CPU as one sample each.
    fn feed_run_peaks(&mut self, d: Drained, report: &mut LoopReport) {
        let m = &self.metrics;
        m.job_run_peaks_pending
            .set(i64::try_from(d.pending).unwrap_or(i64::MAX));
        let count = |result: &'static str, n: u64| {
            m.job_run_peaks
                .get_or_create(&vec![("result", result)])
                .inc_by(n);
        };
        count("dropped", d.dropped);
        count("failed", d.failed);
        if let Some(e) = &d.last_error {
            tracing::warn!(failed = d.failed, error = %e, "run peaks skipped: the history store did not answer");
        }
        if d.dropped > 0 {
            tracing::warn!(
                dropped = d.dropped,
                "run peaks skipped: the queue of finished runs is full (--job-run-peaks-queue)"
            );
        }
        let (mut fed, mut empty, mut rejected) = (0, 0, 0);
        for (run, peak) in d.peaks {
            let id = ContainerId {
                namespace: &run.namespace,
                pod: &run.pod,
                container: &run.container,
            };
            let time = run.end_ms.saturating_mul(1_000_000);
            let samples = [
                peak.memory_bytes.map(|b| (Resource::Memory, b)),
                peak.cpu_cores.map(|c| (Resource::Cpu, c * 1000.0)),
            ];
            if samples.iter().all(Option::is_none) {
                empty += 1;
                continue;
            }
            for (resource, usage) in samples.into_iter().flatten() {
                let sample = Sample {
                    time,
                    resource,
                    usage: usage.round() as i64,
                };
                match self.model.add_sample(id, sample) {
                    Ok(()) => {
                        fed += 1;
                        report.samples_accepted += 1;
                    }
                    Err(e) => {
                        rejected += 1;
                        tracing::debug!(pod = %run.pod, container = %run.container, error = %e, "run peak not fed");
                    }
                }
            }
        }
        count("fed", fed);
        count("empty", empty);
        count("rejected", rejected);
    }
}
