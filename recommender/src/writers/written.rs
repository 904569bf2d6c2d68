//! What the loop remembers of its writes, per VPA: the histogram shapes its last checkpoint write stored and
//! digests of its last status write (kept in `crate::tracked::VpaEntry`, read by the two writers).

use std::collections::BTreeMap;

use tailor_crds::VerticalPodAutoscalerStatus;
use tailor_engine::histogram::HistogramCheckpoint;
use tailor_engine::model::AggregateContainerState;

/// The shape of one histogram as a checkpoint stores it: the non-zero bucket weights (scaled to a maximum
/// of 10,000), in bucket order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramShape(pub(crate) Box<[(i64, u32)]>);

impl HistogramShape {
    /// The shape of a checkpointed histogram.
    pub fn of(cp: &HistogramCheckpoint) -> Self {
        HistogramShape(
            cp.bucket_weights
                .iter()
                .filter(|(_, w)| **w > 0)
                .map(|(b, w)| (*b, *w))
                .collect(),
        )
    }

    /// How much of the mass moved between the two shapes: half the L1 distance of the normalised
    /// distributions, from 0 (same shape) to 1 (disjoint; also when exactly one is empty).
    pub fn distance(&self, other: &HistogramShape) -> f64 {
        let total = |s: &HistogramShape| s.0.iter().map(|(_, w)| f64::from(*w)).sum::<f64>();
        let (ta, tb) = (total(self), total(other));
        if ta == 0.0 || tb == 0.0 {
            return if ta == tb { 0.0 } else { 1.0 };
        }
        let (mut i, mut j, mut sum) = (0, 0, 0.0);
        let (a, b) = (&self.0, &other.0);
        while i < a.len() || j < b.len() {
            let (pa, pb) = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    i += 1;
                    j += 1;
                    (f64::from(x.1), f64::from(y.1))
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    i += 1;
                    (f64::from(x.1), 0.0)
                }
                (Some(x), None) => {
                    i += 1;
                    (f64::from(x.1), 0.0)
                }
                (_, Some(y)) => {
                    j += 1;
                    (0.0, f64::from(y.1))
                }
                (None, None) => break,
            };
            sum += (pa / ta - pb / tb).abs();
        }
        sum / 2.0
    }
}

/// What one VPA's checkpoint write stored: per container (in name order), the CPU and memory shapes.
pub type WrittenShapes = Vec<(String, HistogramShape, HistogramShape)>;

/// A 64-bit digest of a status (SipHash of its JSON form, fields in a fixed order): what the loop keeps of
/// each write instead of two whole statuses per VPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusDigest(u64);

struct HashWriter<'a>(&'a mut std::collections::hash_map::DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::hash::Hasher::write(self.0, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl StatusDigest {
    /// The digest of `status` (`None` and every status digest differently).
    pub fn of(status: Option<&VerticalPodAutoscalerStatus>) -> StatusDigest {
        use std::hash::Hasher as _;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match status {
            None => h.write_u8(0),
            Some(s) => {
                h.write_u8(1);
                // Writing into a hasher cannot fail, and a status always serialises.
                let _ = serde_json::to_writer(HashWriter(&mut h), s);
            }
        }
        StatusDigest(h.finish())
    }
}

/// What the last status write of a VPA sent: the digests of the stored status it was based on and of the
/// status written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastWrite {
    /// The stored status the write was based on.
    pub base: StatusDigest,
    /// The status written.
    pub written: StatusDigest,
}

/// The shapes of a VPA's merged aggregates by container name
/// ([`ClusterState::aggregate_state_by_container_name`](tailor_engine::model::ClusterState::aggregate_state_by_container_name):
/// read from the VPA's own aggregates, without scanning the pods of its namespace for open windows, so that
/// checking every VPA every loop stays cheap).
pub fn shapes_of(states: &BTreeMap<String, AggregateContainerState>) -> WrittenShapes {
    states
        .iter()
        .map(|(name, agg)| {
            let cp = agg.save_to_checkpoint();
            (
                name.clone(),
                HistogramShape::of(&cp.cpu_histogram),
                HistogramShape::of(&cp.memory_histogram),
            )
        })
        .collect()
}
