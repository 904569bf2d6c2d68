//! Usage into the model: one PodMetrics poll, and the OOMs the observer queued.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::run_loop::{LoopReport, Recommender};
use crate::tracked::PodEntry;
use crate::views::metrics_api::PodMetrics;
use tailor_core::sizing::POD_ROW;
use tailor_engine::model::{
    ClusterState, ContainerId, ContainerRef, FEED_SAMPLES, ModelError, OomBump, Sample,
};
use tailor_engine::units::Resource;

impl Recommender {
    /// Feeds one PodMetrics poll into the model: each pod's samples are queued as soon as its object is
    /// decoded, and fed in batches ([`Feed`]).
    pub(crate) async fn load_metrics(&mut self, report: &mut LoopReport) -> Result<(), Error> {
        self.limiter.acquire().await;
        let t = tokio::time::Instant::now();
        let mut feed = Feed::new(&mut self.model, &self.pods, self.newest_sample);
        let polled = self.source.poll(&mut |pm| feed.pod(pm)).await;
        feed.finish();
        let (counts, newest) = (feed.counts, feed.newest);
        self.newest_sample = newest;
        report.phases.list_seconds = t.elapsed().as_secs_f64();
        report.phases.rss_after_list = crate::process::metrics::resident_bytes();
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

/// One poll's samples on their way into the model: pod by pod, each container looked up by its names once,
/// then fed in batches. Init containers and pods the loop does not track are skipped.
pub(crate) struct Feed<'a> {
    model: &'a mut ClusterState,
    pods: &'a HashMap<Arc<str>, HashMap<Box<str>, PodEntry>>,
    batch: Vec<(ContainerRef, Sample)>,
    /// Per sample of `batch`: whether it counts (a pod row's sum repeats its containers' samples).
    counted: Vec<bool>,
    /// Accepted CPU, accepted memory, rejected CPU and rejected memory samples.
    pub(crate) counts: [u64; 4],
    /// The latest time of an accepted sample.
    pub(crate) newest: i64,
}

impl<'a> Feed<'a> {
    pub(crate) fn new(
        model: &'a mut ClusterState,
        pods: &'a HashMap<Arc<str>, HashMap<Box<str>, PodEntry>>,
        newest: i64,
    ) -> Self {
        Feed {
            model,
            pods,
            batch: Vec::with_capacity(FEED_SAMPLES),
            counted: Vec::with_capacity(FEED_SAMPLES),
            counts: [0; 4],
            newest,
        }
    }

    /// One pod's usage.
    pub(crate) fn pod(&mut self, pm: PodMetrics) {
        let Some(entry) =
            (self.pods.get(pm.namespace.as_str())).and_then(|m| m.get(pm.name.as_str()))
        else {
            return;
        };
        let pod_level = entry.pod.pod_level;
        let mut summed: [Option<i64>; 2] = [None, None];
        for c in &pm.containers {
            if entry.pod.init_containers.iter().any(|n| **n == *c.name) {
                continue;
            }
            for (slot, usage) in summed.iter_mut().zip([c.cpu_millicores, c.memory_bytes]) {
                if let Some(u) = usage {
                    *slot = Some(slot.unwrap_or(0).saturating_add(u));
                }
            }
            let id = ContainerId {
                namespace: &pm.namespace,
                pod: &pm.name,
                container: &c.name,
            };
            // The names are looked up once for both samples.
            let target = self.model.container_ref(id).ok();
            self.push(
                target,
                pm.timestamp,
                [c.cpu_millicores, c.memory_bytes],
                true,
            );
        }
        if pod_level {
            // The pod's summed usage at one sample time (CPU millicores, memory bytes of its regular
            // containers) into its pod-level aggregate, which the model has only with `--pod-level-resources`
            // (docs/pod-level-resources.md). A rejected sum (out of order, say) is rejected for the containers
            // as well.
            let id = ContainerId {
                namespace: &pm.namespace,
                pod: &pm.name,
                container: POD_ROW,
            };
            if let Ok(target) = self.model.container_ref(id) {
                self.push(Some(target), pm.timestamp, summed, false);
            }
        }
    }

    /// Queues a container's CPU and memory samples; a container the model does not hold has them rejected.
    fn push(
        &mut self,
        target: Option<ContainerRef>,
        time: i64,
        usage: [Option<i64>; 2],
        counted: bool,
    ) {
        for (resource, usage) in [Resource::Cpu, Resource::Memory].into_iter().zip(usage) {
            let Some(usage) = usage else { continue };
            match target {
                Some(c) => {
                    self.batch.push((
                        c,
                        Sample {
                            time,
                            resource,
                            usage,
                        },
                    ));
                    self.counted.push(counted);
                }
                None if counted => self.counts[count_slot(resource, false)] += 1,
                None => {}
            }
        }
        if self.batch.len() >= FEED_SAMPLES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let (counts, newest, counted, batch) = (
            &mut self.counts,
            &mut self.newest,
            &self.counted,
            &self.batch,
        );
        self.model.add_samples_to(batch, |i, result| {
            if !counted[i] {
                return;
            }
            let (_, sample) = batch[i];
            if result.is_ok() {
                *newest = (*newest).max(sample.time);
            }
            counts[count_slot(sample.resource, result.is_ok())] += 1;
        });
        self.batch.clear();
        self.counted.clear();
    }

    /// Feeds what is still queued; the counts are final after this.
    pub(crate) fn finish(&mut self) {
        self.flush();
    }
}

/// Where a sample is counted in [`Feed::counts`].
fn count_slot(resource: Resource, accepted: bool) -> usize {
    match (resource, accepted) {
        (Resource::Cpu, true) => 0,
        (Resource::Cpu, false) => 2,
        (_, true) => 1,
        (_, false) => 3,
    }
}

#[cfg(test)]
mod pod_level_tests {
    //! The pod-level aggregate (docs/pod-level-resources.md): the pod's summed usage at each sample time, with
    //! the containers' decay and estimators.

    use std::collections::BTreeMap;

    use super::*;
    use crate::views::metrics_list::ContainerUsage;
    use crate::views::pod_store::{Interner, StoredPod};
    use tailor_engine::estimate::{RecommenderConfig, VpaInput, recommend};
    use tailor_engine::model::{AggregationsConfig, PodPhase, Selector, VpaState};

    const MINUTE: i64 = 60_000_000_000;

    /// A model with one VPA over pod `web-0`, whose containers are `containers` (and the pod row when
    /// `pod_level`).
    fn model(containers: &[&str], pod_level: bool) -> (ClusterState, usize) {
        let mut model = ClusterState::new(AggregationsConfig::default(), 0);
        let vpa = model.add_vpa(VpaState::new("ns", "web", Selector::everything()));
        model.add_or_update_pod("ns", "web-0", &Default::default(), PodPhase::Running);
        let rows = containers
            .iter()
            .copied()
            .chain(pod_level.then_some(POD_ROW));
        for container in rows {
            let id = ContainerId {
                namespace: "ns",
                pod: "web-0",
                container,
            };
            model.add_or_update_container(id).unwrap();
        }
        (model, vpa)
    }

    fn pods(pod_level: bool) -> HashMap<Arc<str>, HashMap<Box<str>, PodEntry>> {
        let mut spec = serde_json::json!({"containers": [{"name": "app"}, {"name": "side"}]});
        if pod_level {
            spec["resources"] = serde_json::json!({"requests": {"cpu": "1"}});
        }
        let slim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "ns"}, "spec": spec, "status": {}
        }))
        .unwrap();
        let pod = StoredPod::of(slim, &mut Interner::default()).unwrap();
        assert_eq!(pod.pod_level, pod_level);
        let entry = PodEntry {
            pod: Arc::new(pod),
            seen: 0,
        };
        HashMap::from([(
            Arc::from("ns"),
            HashMap::from([(Box::from("web-0"), entry)]),
        )])
    }

    /// Usage at minute `i`: the two containers take turns at peaking (300m+200m CPU and 400Mi+300Mi memory
    /// on average), so the sum of their percentiles is well above the percentile of their sum.
    fn usage(i: i64) -> [(i64, i64); 2] {
        let swing = if i % 2 == 0 { 150 } else { -150 };
        let mi = 1 << 20;
        [
            (300 + swing, (400 + swing) * mi),
            (200 - swing, (300 - swing) * mi),
        ]
    }

    fn targets(model: &ClusterState, vpa: usize) -> BTreeMap<String, (i64, i64)> {
        let empty = BTreeMap::new();
        let input = VpaInput {
            policy: None,
            annotations: &empty,
            explain: false,
        };
        let aggregates = model.aggregate_state_by_container_name(vpa);
        let r = recommend(&RecommenderConfig::default(), &aggregates, input).unwrap();
        r.containers
            .into_iter()
            .map(|c| {
                let t = c.target;
                (
                    c.container_name,
                    (t.cpu.unwrap_or(0), t.memory.unwrap_or(0)),
                )
            })
            .collect()
    }

    #[test]
    fn the_pod_row_is_the_estimator_applied_to_the_summed_usage() {
        let (mut with_row, vpa) = model(&["app", "side"], true);
        let (mut reference, ref_vpa) = model(&["whole"], false);
        let pods = pods(true);
        let mut feed = Feed::new(&mut with_row, &pods, 0);
        for i in 0..600 {
            let t = 1_700_000_000_000_000_000 + i * MINUTE;
            let u = usage(i);
            let containers = ["app", "side"]
                .iter()
                .zip(u)
                .map(|(name, (cpu, mem))| ContainerUsage {
                    name: (*name).into(),
                    cpu_millicores: Some(cpu),
                    memory_bytes: Some(mem),
                })
                .collect();
            let pm = PodMetrics {
                namespace: "ns".into(),
                name: "web-0".into(),
                timestamp: t,
                containers,
            };
            feed.pod(pm);
            let whole = ContainerId {
                namespace: "ns",
                pod: "web-0",
                container: "whole",
            };
            for (resource, amount) in [
                (Resource::Cpu, u[0].0 + u[1].0),
                (Resource::Memory, u[0].1 + u[1].1),
            ] {
                let sample = Sample {
                    time: t,
                    resource,
                    usage: amount,
                };
                reference.add_sample(whole, sample).unwrap();
            }
        }
        feed.finish();
        // The summed samples are not counted: they repeat the containers'.
        assert_eq!(feed.counts, [1200, 1200, 0, 0]);
        assert_eq!(feed.newest, 1_700_000_000_000_000_000 + 599 * MINUTE);
        let got = targets(&with_row, vpa);
        let want = targets(&reference, ref_vpa)["whole"];
        let pod = got[POD_ROW];
        let within = |a: i64, b: i64| (a - b).abs() <= b / 100;
        assert!(
            within(pod.0, want.0) && within(pod.1, want.1),
            "{pod:?} vs {want:?}"
        );
        // Not the sum of the containers' targets: they peak in turn.
        let sum = (got["app"].0 + got["side"].0, got["app"].1 + got["side"].1);
        assert!(pod.0 < sum.0 && pod.1 < sum.1, "{pod:?} vs {sum:?}");
    }

    #[test]
    fn without_the_pod_row_nothing_is_summed() {
        let (mut model, vpa) = model(&["app", "side"], false);
        let pods = pods(true);
        let containers = vec![ContainerUsage {
            name: "app".into(),
            cpu_millicores: Some(100),
            memory_bytes: Some(1 << 20),
        }];
        let pm = PodMetrics {
            namespace: "ns".into(),
            name: "web-0".into(),
            timestamp: MINUTE,
            containers,
        };
        let mut feed = Feed::new(&mut model, &pods, 0);
        feed.pod(pm);
        feed.finish();
        assert_eq!(feed.counts, [1, 1, 0, 0]);
        assert!(!targets(&model, vpa).contains_key(POD_ROW));
    }

    /// Over several buffers' worth of samples, each rejection is counted where one sample at a time counts it:
    /// out-of-order samples, and a container the model does not hold.
    #[test]
    fn a_poll_fed_in_batches_counts_what_one_at_a_time_counts() {
        let (mut model, _) = model(&["app"], false);
        let pods = pods(false);
        let mut feed = Feed::new(&mut model, &pods, 0);
        let polls = 3 * FEED_SAMPLES / 4;
        let mut late = 0;
        for i in 0..polls as i64 {
            // Every tenth poll repeats an earlier time: its CPU sample is out of order, its memory one too.
            let timestamp = if i % 10 == 9 {
                late += 1;
                (i - 5) * MINUTE
            } else {
                (i + 1) * MINUTE
            };
            let containers = ["app", "side"]
                .iter()
                .map(|name| ContainerUsage {
                    name: (*name).into(),
                    cpu_millicores: Some(100 + i),
                    memory_bytes: Some((64 + i) << 20),
                })
                .collect();
            feed.pod(PodMetrics {
                namespace: "ns".into(),
                name: "web-0".into(),
                timestamp,
                containers,
            });
        }
        feed.finish();
        let polls = polls as u64;
        // "side" is not in this model: each of its samples is rejected.
        let accepted = polls - late;
        assert_eq!(
            feed.counts,
            [accepted, accepted, late + polls, late + polls]
        );
        assert_eq!(feed.newest, polls as i64 * MINUTE);
    }
}
