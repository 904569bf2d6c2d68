//! Samples fed in batches ([`ClusterState::add_samples_to`]).
//!
//! Past a few tens of thousands of containers the model no longer fits the CPU's caches, and feeding a sample
//! waits on memory: the pod entry, the aggregate and the histogram's buckets. Fed one at a time, those waits
//! follow one another. Here each group of [`SAMPLE_BATCH`] samples is first only read — a few loads per sample,
//! independent of each other, so the CPU keeps their cache misses in flight together — and then applied in
//! order, from cache; the next group is read just before a group is applied, so that its misses also overlap
//! that work. The result is the same as feeding them one by one (docs/decisions/batched-samples.md).

use super::{ClusterState, ContainerRef, ModelError, Sample};
use crate::units::Resource;

/// How many samples are read before they are applied. 16 and 32 gave the most on a 2-vCPU EPYC (8 and 64
/// less).
pub const SAMPLE_BATCH: usize = 16;

/// How many samples a caller hands [`ClusterState::add_samples_to`] at once: several groups, so that each
/// group's reads overlap the one before it being applied. The recommender's poll and W1 both feed this many.
pub const FEED_SAMPLES: usize = 16 * SAMPLE_BATCH;

/// From this many aggregates on, a batch is read before it is applied. Below it the model fits the caches
/// of a server CPU, and reading ahead costs about a tenth more time (W1 at 10,000 containers); at 30,000 the
/// samples already wait on memory.
pub const READ_AHEAD_MIN_AGGREGATES: usize = 16_384;

impl ClusterState {
    /// Feeds `samples` in order, as [`Self::add_sample_to`] would one by one, and reports each one's result to
    /// `done` with its index in `samples`.
    pub fn add_samples_to(
        &mut self,
        samples: &[(ContainerRef, Sample)],
        done: impl FnMut(usize, Result<(), ModelError>),
    ) {
        let read_ahead = self.slots.len() >= READ_AHEAD_MIN_AGGREGATES;
        self.feed_batch(samples, read_ahead, done);
    }

    fn feed_batch(
        &mut self,
        samples: &[(ContainerRef, Sample)],
        read_ahead: bool,
        mut done: impl FnMut(usize, Result<(), ModelError>),
    ) {
        let mut groups = samples.chunks(SAMPLE_BATCH).enumerate().peekable();
        if read_ahead && let Some((_, first)) = groups.peek() {
            self.read_group(first);
        }
        while let Some((k, group)) = groups.next() {
            // The next group is read before this one is applied, so that its misses are in flight while
            // this group's samples are applied.
            if read_ahead && let Some((_, next)) = groups.peek() {
                self.read_group(next);
            }
            for (j, &(c, s)) in group.iter().enumerate() {
                done(k * SAMPLE_BATCH + j, self.add_sample_to(c, s));
            }
        }
    }

    /// Reads ahead what applying `group` will touch ([`Self::read_ahead`]).
    fn read_group(&self, group: &[(ContainerRef, Sample)]) {
        let touched: f64 = (group.iter())
            .map(|&(c, s)| self.read_ahead(c, s.resource))
            .sum();
        // The sum is unused: it only keeps the reads from being optimised away.
        std::hint::black_box(touched);
    }

    /// Reads what feeding a `resource` sample to `c` will touch: its pod entry, its aggregate, and the lowest,
    /// middle and highest non-empty buckets of the histogram (the sample most likely lands between them). A
    /// reference that is stale or out of range reads nothing.
    #[inline]
    fn read_ahead(&self, c: ContainerRef, resource: Resource) -> f64 {
        let Some(Some(pod)) = self.pods.get(c.pod as usize) else {
            return 0.0;
        };
        let Some(entry) = pod.containers.get(c.container as usize) else {
            return 0.0;
        };
        let Some(agg) = (self.slots.get(entry.slot as usize)).and_then(|s| s.state.as_ref()) else {
            return 0.0;
        };
        let h = match resource {
            Resource::Cpu => agg.cpu.histogram(),
            Resource::Memory => agg.memory.histogram(),
        };
        let (lo, hi) = (h.min_bucket(), h.max_bucket());
        h.bucket_weight(hi) + h.bucket_weight(lo) + h.bucket_weight((lo + hi) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AggregationsConfig, ContainerId, Labels, PodPhase, Selector, VpaState};

    const MINUTE: i64 = 60_000_000_000;

    fn model(pods: usize) -> (ClusterState, Vec<ContainerRef>) {
        let mut m = ClusterState::new(AggregationsConfig::default(), 3_600 * 1_000_000_000);
        m.add_vpa(VpaState::new("ns", "vpa", Selector::everything()));
        let mut refs = Vec::new();
        for i in 0..pods {
            let pod = format!("p{i}");
            let labels: Labels = [("app".to_string(), format!("a{}", i % 3))]
                .into_iter()
                .collect();
            m.add_or_update_pod("ns", &pod, &labels, PodPhase::Running);
            for container in ["app", "sidecar"] {
                let id = ContainerId {
                    namespace: "ns",
                    pod: &pod,
                    container,
                };
                m.add_or_update_container(id).expect("pod exists");
                refs.push(m.container_ref(id).expect("container exists"));
            }
        }
        (m, refs)
    }

    /// A batch that crosses several groups, with rejected samples (out of order, negative) and a stale
    /// reference among them.
    fn samples(refs: &[ContainerRef], stale: ContainerRef) -> Vec<(ContainerRef, Sample)> {
        let mut out = Vec::new();
        for tick in 0..5i64 {
            for (i, &c) in refs.iter().enumerate() {
                let i = i as i64;
                let time = if i % 7 == 3 {
                    MINUTE
                } else {
                    (tick + 1) * MINUTE
                };
                let cpu = if i % 11 == 5 { -1 } else { 10 + 37 * i + tick };
                out.push((
                    c,
                    Sample {
                        time,
                        resource: Resource::Cpu,
                        usage: cpu,
                    },
                ));
                let memory = (50 + i * 3 + tick) << 20;
                out.push((
                    c,
                    Sample {
                        time,
                        resource: Resource::Memory,
                        usage: memory,
                    },
                ));
            }
            out.push((
                stale,
                Sample {
                    time: tick * MINUTE,
                    resource: Resource::Cpu,
                    usage: 1,
                },
            ));
        }
        out
    }

    #[test]
    fn a_batch_gives_the_results_and_the_model_of_one_sample_at_a_time() {
        for read_ahead in [false, true] {
            same_as_one_at_a_time(|m, samples, done| m.feed_batch(samples, read_ahead, done));
        }
        same_as_one_at_a_time(|m, samples, done| m.add_samples_to(samples, done));
    }

    type Done<'a> = &'a mut dyn FnMut(usize, Result<(), ModelError>);

    fn same_as_one_at_a_time(
        feed: impl Fn(&mut ClusterState, &[(ContainerRef, Sample)], Done<'_>),
    ) {
        let (mut batched, refs) = model(20);
        let (mut single, _) = model(20);
        // A reference to a pod deleted since: both ways must reject its samples.
        let stale = refs[refs.len() - 1];
        for m in [&mut batched, &mut single] {
            m.delete_pod("ns", "p19");
        }
        let samples = samples(&refs, stale);
        assert!(samples.len() > 3 * SAMPLE_BATCH);

        let mut results = vec![None; samples.len()];
        feed(&mut batched, &samples, &mut |i, r| results[i] = Some(r));
        let expected: Vec<_> = (samples.iter())
            .map(|&(c, s)| Some(single.add_sample_to(c, s)))
            .collect();
        assert_eq!(results, expected);
        assert!(expected.iter().flatten().any(Result::is_ok));
        assert!(expected.iter().flatten().any(Result::is_err));

        let v = 0;
        let (a, b) = (batched.vpa_aggregates(v), single.vpa_aggregates(v));
        assert_eq!(a.len(), b.len());
        for ((na, la, sa), (nb, lb, sb)) in a.iter().zip(&b) {
            assert_eq!((na, la), (nb, lb));
            assert!(sa.cpu.equals(&sb.cpu) && sa.memory.equals(&sb.memory));
            assert_eq!(sa.total_samples_count, sb.total_samples_count);
            assert_eq!(sa.last_sample_start, sb.last_sample_start);
        }
    }
}
