//! Usage into the model: one PodMetrics poll, and the OOMs the observer queued.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::metrics_api::PodMetrics;
use crate::run_loop::{LoopReport, Recommender};
use crate::tracked::PodEntry;
use tailor_engine::model::{ClusterState, ContainerId, ModelError, OomBump, Sample};
use tailor_engine::units::Resource;

impl Recommender {
    /// Feeds one PodMetrics poll into the model, each pod's samples as soon as its object is decoded.
    pub(crate) async fn load_metrics(&mut self, report: &mut LoopReport) -> Result<(), Error> {
        self.limiter.acquire().await;
        let t = tokio::time::Instant::now();
        let mut counts = [0u64; 4];
        let mut newest = self.newest_sample;
        let (model, pods) = (&mut self.model, &self.pods);
        let polled = self
            .source
            .poll(&mut |pm| feed(model, pods, pm, &mut counts, &mut newest))
            .await;
        self.newest_sample = newest;
        report.phases.list_seconds = t.elapsed().as_secs_f64();
        report.phases.rss_after_list = crate::metrics::resident_bytes();
        self.metrics
            .step("metrics_list", report.phases.list_seconds);
        // Samples fed before an error (the list is fed as it arrives) are counted as well.
        let [acc_cpu, acc_mem, rej_cpu, rej_mem] = counts;
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
        let bad = polled?;
        if bad > 0 {
            self.record_error(&Error::MalformedMetrics { count: bad });
        }
        Ok(())
    }

    /// The VPAs (namespace order) whose selector takes `namespace/pod` into the model.
    fn vpas_selecting<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
    ) -> impl Iterator<Item = &'a crate::tracked::VpaEntry> + 'a {
        (self.vpas.range((namespace.to_owned(), String::new())..))
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, e)| e)
            .filter(move |e| self.model.matching_pods(e.index).any(|(_, p)| p == pod))
    }

    /// Whether an OOM of `namespace/pod` at `time` happened before the restored checkpoints of a VPA that
    /// selects the pod were written (so they hold it).
    fn already_checkpointed(&self, namespace: &str, pod: &str, time: i64) -> bool {
        self.vpas_selecting(namespace, pod)
            .any(|e| e.restored_at.is_some_and(|t| time <= t))
    }

    /// The OOM bump of the VPA whose pods include `namespace/pod`, from its policy for `container`, with
    /// `--feature-gates=PerVPAConfig=true` (the flags' otherwise, as upstream).
    fn oom_bump(&self, namespace: &str, pod: &str, container: &str) -> OomBump {
        if !self.cfg.per_vpa_config {
            return OomBump::default();
        }
        let vpa = (self.vpas_selecting(namespace, pod).next())
            .and_then(|e| self.model.vpas().get(e.index));
        let Some(policy) =
            vpa.and_then(|v| tailor_core::policy::container_policy(v.policy.as_ref(), container))
        else {
            return OomBump::default();
        };
        let value = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            q.and_then(|q| tailor_core::quantity::milli_value(q).ok())
                .map(|milli| milli as f64 / 1000.0)
        };
        OomBump {
            ratio: value(policy.oom_bump_up_ratio.as_ref()).filter(|r| *r >= 1.0),
            min_bytes: value(policy.oom_min_bump_up.as_ref()).filter(|b| *b >= 0.0),
        }
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
            if self.already_checkpointed(&r.namespace, &r.pod, r.time) {
                // Replayed after a restart (the initial list of pods or of retained `Evicted` events):
                // the restored checkpoint holds it already.
                report.ooms_rejected += 1;
                self.metrics
                    .ooms
                    .get_or_create(&vec![
                        ("source", r.source.label()),
                        ("result", "checkpointed"),
                    ])
                    .inc();
                continue;
            }
            let id = ContainerId {
                namespace: &r.namespace,
                pod: &r.pod,
                container: &r.container,
            };
            let bump = self.oom_bump(&r.namespace, &r.pod, &r.container);
            let result = match self.model.record_oom_with(id, r.time, r.memory_bytes, bump) {
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

/// One pod's usage into the model (pods the loop does not track and init containers are skipped);
/// `counts` are accepted CPU, accepted memory, rejected CPU and rejected memory samples; `newest` the
/// latest time of an accepted sample.
fn feed(
    model: &mut ClusterState,
    pods: &HashMap<Arc<str>, HashMap<Box<str>, PodEntry>>,
    pm: PodMetrics,
    counts: &mut [u64; 4],
    newest: &mut i64,
) {
    let Some(entry) = pods
        .get(pm.namespace.as_str())
        .and_then(|m| m.get(pm.name.as_str()))
    else {
        return;
    };
    for c in pm.containers {
        if entry.pod.init_containers.iter().any(|n| **n == *c.name) {
            continue;
        }
        let id = ContainerId {
            namespace: &pm.namespace,
            pod: &pm.name,
            container: &c.name,
        };
        // The names are looked up once for both samples.
        let target = model.container_ref(id);
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
            let ok = match target {
                Ok(c) => model.add_sample_to(c, sample).is_ok(),
                Err(_) => false,
            };
            if ok {
                *newest = (*newest).max(pm.timestamp);
            }
            let slot = match (resource, ok) {
                (Resource::Cpu, true) => 0,
                (Resource::Cpu, false) => 2,
                (_, true) => 1,
                (_, false) => 3,
            };
            counts[slot] += 1;
        }
    }
}
