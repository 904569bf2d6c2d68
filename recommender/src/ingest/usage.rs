//! Usage into the model: one PodMetrics poll, and the OOMs the observer queued.

use crate::error::Error;
use crate::run_loop::{LoopReport, Recommender};
use tailor_engine::model::{ContainerId, ModelError, Sample};
use tailor_engine::units::Resource;

impl Recommender {
    /// Feeds one PodMetrics poll into the model.
    pub(crate) async fn load_metrics(&mut self, report: &mut LoopReport) -> Result<(), Error> {
        self.limiter.acquire().await;
        let (items, bad) = self.source.list().await?;
        if bad > 0 {
            self.record_error(&Error::MalformedMetrics { count: bad });
        }
        let (mut acc_cpu, mut acc_mem, mut rej_cpu, mut rej_mem) = (0u64, 0u64, 0u64, 0u64);
        for pm in items {
            let Some(entry) = self.pods.get(&pm.namespace).and_then(|m| m.get(&pm.name)) else {
                continue;
            };
            for c in pm.containers {
                if entry.init.contains(&c.name) {
                    continue;
                }
                let id = ContainerId {
                    namespace: &pm.namespace,
                    pod: &pm.name,
                    container: &c.name,
                };
                let samples = [
                    (Resource::Cpu, c.cpu_millicores),
                    (Resource::Memory, c.memory_bytes),
                ];
                for (resource, usage) in samples {
                    let Some(usage) = usage else { continue };
                    let sample = Sample {
                        time: pm.timestamp,
                        resource,
                        usage,
                    };
                    let ok = self.model.add_sample(id, sample).is_ok();
                    let counter = match (resource, ok) {
                        (Resource::Cpu, true) => &mut acc_cpu,
                        (Resource::Cpu, false) => &mut rej_cpu,
                        (_, true) => &mut acc_mem,
                        (_, false) => &mut rej_mem,
                    };
                    *counter += 1;
                }
            }
        }
        let count = |r: &'static str, res: &'static str, n: u64| {
            self.metrics
                .samples
                .get_or_create(&vec![("resource", r), ("result", res)])
                .inc_by(n);
        };
        count("cpu", "accepted", acc_cpu);
        count("memory", "accepted", acc_mem);
        count("cpu", "rejected", rej_cpu);
        count("memory", "rejected", rej_mem);
        report.samples_accepted += acc_cpu + acc_mem;
        report.samples_rejected += rej_cpu + rej_mem;
        Ok(())
    }

    /// Records every queued OOM with its own timestamp (an OOM older than later samples still counts,
    /// unless it is more than one aggregation interval older than the last memory sample).
    pub(crate) fn record_ooms(&mut self, report: &mut LoopReport) {
        let (records, dropped) = self.ooms.drain();
        if dropped > 0 {
            self.metrics
                .ooms
                .get_or_create(&vec![("source", "any"), ("result", "dropped")])
                .inc_by(dropped);
            report.ooms_rejected += dropped;
        }
        for r in records {
            let id = ContainerId {
                namespace: &r.namespace,
                pod: &r.pod,
                container: &r.container,
            };
            let result = match self.model.record_oom(id, r.time, r.memory_bytes) {
                Ok(bumped) => {
                    tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, memory = bumped, source = r.source.label(), "OOM recorded");
                    "recorded"
                }
                Err(ModelError::PodNotFound(_) | ModelError::ContainerNotFound(_)) => {
                    "unknown_container"
                }
                Err(e) => {
                    tracing::info!(namespace = %r.namespace, pod = %r.pod, container = %r.container, error = %e, "OOM not recorded");
                    "rejected"
                }
            };
            if result == "recorded" {
                report.ooms_recorded += 1;
            } else {
                report.ooms_rejected += 1;
            }
            self.metrics
                .ooms
                .get_or_create(&vec![("source", r.source.label()), ("result", result)])
                .inc();
        }
    }
}
