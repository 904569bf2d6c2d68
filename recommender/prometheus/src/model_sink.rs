//! A [`HistorySink`] that feeds history into a fresh model, one VPA per workload, and turns it into
//! recommendations in the shape `tailor recommend` prints for traces (docs/design/trace-format.md §1.4).

use std::collections::BTreeMap;

use super::history::{HistorySink, Plan};
use tailor_engine::estimate::{VpaInput, recommend};
use tailor_engine::model::{
    ClusterState, ContainerId, Labels, PodPhase, Sample, Selector, VpaState,
};
use tailor_engine::replay::{Discarded, GC_INTERVAL, ReplayConfig, ReplayOutput, TraceExplain};
use tailor_engine::units::{Nanos, Resource, cpu_amount_from_cores, memory_amount_from_bytes};

/// Pod label that ties a pod to its workload's VPA in the model.
const WORKLOAD_LABEL: &str = "tailor.dev/workload";

fn nanos(ms: i64) -> Nanos {
    ms.saturating_mul(1_000_000)
}

/// One workload's recommendation from [`ModelSink::finish`].
#[derive(Debug, Clone)]
pub struct WorkloadOutput {
    /// Index in [`Plan::workloads`] (its kind and name).
    pub workload: usize,
    /// The recommendation, id `namespace/name`.
    pub output: ReplayOutput,
}

/// Model fed from a [`Plan`]'s history.
#[derive(Debug)]
pub struct ModelSink<'p> {
    plan: &'p Plan,
    config: ReplayConfig,
    cluster: ClusterState,
    vpas: Vec<usize>,
    discarded: Vec<Discarded>,
    memory_samples: Vec<u64>,
    oom_bumps: Vec<Vec<i64>>,
    last_memory: Vec<f64>,
}

impl<'p> ModelSink<'p> {
    /// A model with every pod and container of the plan and one VPA per workload.
    pub fn new(plan: &'p Plan, config: &ReplayConfig) -> Self {
        let mut cluster = ClusterState::new(config.aggregations, GC_INTERVAL);
        // Aggregates are created at the time of the run, after every history point.
        cluster.set_now(nanos(plan.end_ms).saturating_add(1_000_000_000));
        let mut vpas = Vec::with_capacity(plan.workloads.len());
        for (i, w) in plan.workloads.iter().enumerate() {
            let sel =
                Selector::Requirements(vec![tailor_engine::model::selector::Requirement::In(
                    WORKLOAD_LABEL.into(),
                    vec![i.to_string()],
                )]);
            vpas.push(cluster.add_vpa(VpaState::new(&w.namespace, &w.name, sel)));
        }
        let n = plan.containers.len();
        let mut sink = ModelSink {
            plan,
            config: config.clone(),
            cluster,
            vpas,
            discarded: vec![Discarded::default(); plan.workloads.len()],
            memory_samples: vec![0; n],
            oom_bumps: vec![Vec::new(); n],
            last_memory: vec![f64::NAN; n],
        };
        let mut last_pod: Option<(&str, &str)> = None;
        for c in &plan.containers {
            if last_pod != Some((&c.namespace, &c.pod)) {
                let labels: Labels = [(WORKLOAD_LABEL.to_string(), c.workload.to_string())]
                    .into_iter()
                    .collect();
                sink.cluster
                    .add_or_update_pod(&c.namespace, &c.pod, &labels, PodPhase::Running);
                last_pod = Some((&c.namespace, &c.pod));
            }
            let _ = sink.cluster.add_or_update_container(ContainerId {
                namespace: &c.namespace,
                pod: &c.pod,
                container: &c.container,
            });
        }
        sink
    }

    /// The per-container-name aggregates of a workload (index in [`Plan::workloads`]).
    pub fn aggregates(
        &self,
        workload: usize,
    ) -> BTreeMap<String, tailor_engine::model::AggregateContainerState> {
        self.vpas
            .get(workload)
            .map(|&v| self.cluster.aggregate_state_by_container_name(v))
            .unwrap_or_default()
    }

    /// The model.
    pub fn cluster(&self) -> &ClusterState {
        &self.cluster
    }

    /// Runs the final GC at the end of the history and computes one output per workload (id
    /// `namespace/name`), sorted by id.
    pub fn finish(mut self, explain: bool) -> Vec<WorkloadOutput> {
        self.cluster
            .rate_limited_garbage_collect(nanos(self.plan.end_ms));
        let mut outs = Vec::new();
        let no_annotations = BTreeMap::new();
        for (wi, w) in self.plan.workloads.iter().enumerate() {
            let id = format!("{}/{}", w.namespace, w.name);
            let vi = self.vpas[wi];
            let aggs = self.cluster.aggregate_state_by_container_name(vi);
            let rec = match recommend(
                &self.config.recommender,
                &aggs,
                VpaInput {
                    policy: None,
                    annotations: &no_annotations,
                    explain,
                },
            ) {
                Ok(r) => r,
                Err(e) => {
                    outs.push(WorkloadOutput {
                        workload: wi,
                        output: ReplayOutput {
                            id,
                            error: Some(e.to_string()),
                            ..Default::default()
                        },
                    });
                    continue;
                }
            };
            let mut mem: BTreeMap<&str, u64> = BTreeMap::new();
            let mut bumps: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
            for (ci, c) in self.plan.containers.iter().enumerate() {
                if c.workload == wi {
                    *mem.entry(&c.container).or_default() += self.memory_samples[ci];
                    bumps
                        .entry(&c.container)
                        .or_default()
                        .extend(&self.oom_bumps[ci]);
                }
            }
            let explain = explain.then(|| {
                rec.explain
                    .iter()
                    .map(|d| TraceExplain {
                        memory_samples: mem.get(d.container.as_str()).copied().unwrap_or(0),
                        oom_bumps: bumps.get(d.container.as_str()).cloned().unwrap_or_default(),
                        detail: d.clone(),
                    })
                    .collect()
            });
            let output = ReplayOutput {
                id,
                recommendations: rec.containers.iter().map(Into::into).collect(),
                discarded: Some(self.discarded[wi]),
                error: None,
                explain,
            };
            outs.push(WorkloadOutput {
                workload: wi,
                output,
            });
        }
        outs.sort_by(|a, b| a.output.id.cmp(&b.output.id));
        outs
    }
}

impl HistorySink for ModelSink<'_> {
    fn cpu(&mut self, container: usize, points: &[(i64, f64)]) {
        let Some(c) = self.plan.containers.get(container) else {
            return;
        };
        let id = ContainerId {
            namespace: &c.namespace,
            pod: &c.pod,
            container: &c.container,
        };
        for &(t, v) in points {
            let s = Sample {
                time: nanos(t),
                resource: Resource::Cpu,
                usage: cpu_amount_from_cores(v),
            };
            if self.cluster.add_sample(id, s).is_err() {
                self.discarded[c.workload].cpu += 1;
            }
        }
    }

    fn memory(&mut self, container: usize, points: &[(i64, f64)], ooms: &[(i64, Option<f64>)]) {
        let Some(c) = self.plan.containers.get(container) else {
            return;
        };
        let id = ContainerId {
            namespace: &c.namespace,
            pod: &c.pod,
            container: &c.container,
        };
        let (mut pi, mut oi) = (0, 0);
        while pi < points.len() || oi < ooms.len() {
            // An OOM at the same time as a sample comes after it (the sample shows the usage before the kill).
            let take_oom = oi < ooms.len() && (pi >= points.len() || ooms[oi].0 < points[pi].0);
            if take_oom {
                let (t, req) = ooms[oi];
                oi += 1;
                let bytes = req.unwrap_or(self.last_memory[container]);
                if !bytes.is_finite() {
                    self.discarded[c.workload].oom += 1;
                    continue;
                }
                match self
                    .cluster
                    .record_oom(id, nanos(t), memory_amount_from_bytes(bytes))
                {
                    Ok(v) => self.oom_bumps[container].push(v),
                    Err(_) => self.discarded[c.workload].oom += 1,
                }
            } else {
                let (t, v) = points[pi];
                pi += 1;
                self.last_memory[container] = v;
                let s = Sample {
                    time: nanos(t),
                    resource: Resource::Memory,
                    usage: memory_amount_from_bytes(v),
                };
                match self.cluster.add_sample(id, s) {
                    Ok(()) => self.memory_samples[container] += 1,
                    Err(_) => self.discarded[c.workload].memory += 1,
                }
            }
        }
    }

    fn window_done(&mut self, end_ms: i64) {
        self.cluster.rate_limited_garbage_collect(nanos(end_ms));
    }
}
