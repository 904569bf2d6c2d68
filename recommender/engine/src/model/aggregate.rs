//! Aggregated usage of every container sharing one key: two decaying histograms and CPU sample statistics.

use super::time_of_day::HourlyCpu;
use crate::histogram::{
    DecayingHistogram, HistogramCheckpoint, HistogramError, HistogramOptions, MIN_SAMPLE_WEIGHT,
    ZERO_TIME,
};
use crate::units::{Nanos, ResourceAmount, cores_from_cpu_amount, sat_sub};

/// Checkpoint format version this implementation reads and writes.
pub const CHECKPOINT_VERSION: &str = "v3";

/// Parameters of aggregation that come from the recommender flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AggregationsConfig {
    /// Memory peak window length (ns), `--memory-aggregation-interval`.
    pub memory_aggregation_interval: i64,
    /// Number of windows kept, `--memory-aggregation-interval-count`.
    pub memory_aggregation_interval_count: i64,
    /// `--memory-histogram-decay-half-life` (ns).
    pub memory_histogram_decay_half_life: i64,
    /// `--cpu-histogram-decay-half-life` (ns).
    pub cpu_histogram_decay_half_life: i64,
    /// `--oom-bump-up-ratio`.
    pub oom_bump_up_ratio: f64,
    /// `--oom-min-bump-up-bytes`.
    pub oom_min_bump_up_bytes: f64,
    /// Judge OOM staleness against the window end (upstream ≤ 1.2.x) instead of the last memory sample.
    pub legacy_oom_staleness: bool,
    /// Also keep CPU histograms per hour of the day ([`HourlyCpu`]) for profiles that follow the daily curve.
    pub cpu_time_of_day: bool,
}

impl Default for AggregationsConfig {
    fn default() -> Self {
        const DAY: i64 = 86_400 * 1_000_000_000;
        AggregationsConfig {
            memory_aggregation_interval: DAY,
            memory_aggregation_interval_count: 8,
            memory_histogram_decay_half_life: DAY,
            cpu_histogram_decay_half_life: DAY,
            oom_bump_up_ratio: 1.2,
            oom_min_bump_up_bytes: 104_857_600.0,
            legacy_oom_staleness: false,
            cpu_time_of_day: false,
        }
    }
}

impl AggregationsConfig {
    /// How long history is kept: interval × count.
    pub fn history_length(&self) -> i64 {
        self.memory_aggregation_interval
            .saturating_mul(self.memory_aggregation_interval_count)
    }
}

/// Where container-level logic sends histogram updates. Implemented by [`AggregateContainerState`];
/// tests implement it to record calls.
pub trait SampleSink {
    /// A CPU sample in millicores, weight 0.1.
    fn add_cpu(&mut self, millicores: ResourceAmount, t: Nanos);
    /// A memory peak (bytes) with weight 1.0 at `t`.
    fn add_memory(&mut self, bytes: ResourceAmount, t: Nanos);
    /// Removes a memory peak.
    fn subtract_memory(&mut self, bytes: ResourceAmount, t: Nanos);
}

/// Aggregated state of one (namespace, container name, label set) key.
#[derive(Debug, Clone)]
pub struct AggregateContainerState {
    /// CPU usage in cores.
    pub cpu: DecayingHistogram,
    /// Memory peaks in bytes.
    pub memory: DecayingHistogram,
    /// Earliest CPU sample time (`ZERO_TIME` if none).
    pub first_sample_start: Nanos,
    /// Latest CPU sample time (`ZERO_TIME` if none).
    pub last_sample_start: Nanos,
    /// Number of CPU samples.
    pub total_samples_count: u64,
    /// When the aggregate was created.
    pub creation_time: Nanos,
    /// CPU by hour of the day, when the model keeps it.
    pub hourly: Option<Box<HourlyCpu>>,
}

/// An aggregate's checkpoint (`VerticalPodAutoscalerCheckpoint.status`).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateCheckpoint {
    /// Format version (`v3`).
    pub version: String,
    /// First CPU sample (ns since epoch), if any.
    #[serde(default)]
    pub first_sample_start: Option<Nanos>,
    /// Last CPU sample (ns since epoch), if any.
    #[serde(default)]
    pub last_sample_start: Option<Nanos>,
    /// CPU sample count.
    #[serde(default)]
    pub total_samples_count: u64,
    /// CPU histogram.
    #[serde(default)]
    pub cpu_histogram: HistogramCheckpoint,
    /// Memory histogram.
    #[serde(default)]
    pub memory_histogram: HistogramCheckpoint,
}

/// Error loading an aggregate checkpoint.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CheckpointError {
    /// Version other than v3.
    #[error("unsupported checkpoint version {0:?} (want {CHECKPOINT_VERSION})")]
    Version(String),
    /// A histogram that cannot be loaded.
    #[error("{which} histogram: {source}")]
    Histogram {
        /// `cpu` or `memory`.
        which: &'static str,
        /// Cause.
        source: HistogramError,
    },
}

impl AggregateContainerState {
    /// An empty aggregate created at `creation_time`.
    pub fn new(config: &AggregationsConfig, creation_time: Nanos) -> Self {
        AggregateContainerState {
            cpu: DecayingHistogram::new(
                HistogramOptions::vpa_cpu(),
                config.cpu_histogram_decay_half_life,
            ),
            memory: DecayingHistogram::new(
                HistogramOptions::vpa_memory(),
                config.memory_histogram_decay_half_life,
            ),
            first_sample_start: ZERO_TIME,
            last_sample_start: ZERO_TIME,
            total_samples_count: 0,
            creation_time,
            hourly: config
                .cpu_time_of_day
                .then(|| Box::new(HourlyCpu::new(config.cpu_histogram_decay_half_life))),
        }
    }

    /// Adds raw CPU usage (cores) with an explicit weight, updating sample statistics.
    pub fn add_cpu_cores(&mut self, cores: f64, weight: f64, t: Nanos) {
        self.cpu.add_sample(cores, weight, t);
        if let Some(h) = &mut self.hourly {
            h.add(cores, weight, t);
        }
        if t > self.last_sample_start {
            self.last_sample_start = t;
        }
        if self.first_sample_start == ZERO_TIME || t < self.first_sample_start {
            self.first_sample_start = t;
        }
        self.total_samples_count += 1;
    }

    /// True when no CPU sample was ever added.
    pub fn is_empty(&self) -> bool {
        self.total_samples_count == 0
    }

    /// Expired at `now`: no sample (or, if empty, no creation) within interval × count; boundary included.
    pub fn is_expired(&self, now: Nanos, config: &AggregationsConfig) -> bool {
        let since = if self.is_empty() {
            self.creation_time
        } else {
            self.last_sample_start
        };
        sat_sub(now as i128, since as i128) >= config.history_length()
    }

    /// Merges `other` (histograms, earliest first sample, latest last sample, summed count).
    pub fn merge(&mut self, other: &AggregateContainerState) {
        self.cpu.merge(&other.cpu);
        self.memory.merge(&other.memory);
        if let Some(o) = &other.hourly {
            match &mut self.hourly {
                Some(h) => h.merge(o),
                None => self.hourly = Some(o.clone()),
            }
        }
        if other.first_sample_start != ZERO_TIME
            && (self.first_sample_start == ZERO_TIME
                || other.first_sample_start < self.first_sample_start)
        {
            self.first_sample_start = other.first_sample_start;
        }
        if other.last_sample_start > self.last_sample_start {
            self.last_sample_start = other.last_sample_start;
        }
        self.total_samples_count += other.total_samples_count;
    }

    /// Serialises the aggregate (the caller removes open memory windows first).
    pub fn save_to_checkpoint(&self) -> AggregateCheckpoint {
        AggregateCheckpoint {
            version: CHECKPOINT_VERSION.into(),
            first_sample_start: (self.first_sample_start != ZERO_TIME)
                .then_some(self.first_sample_start),
            last_sample_start: (self.last_sample_start != ZERO_TIME)
                .then_some(self.last_sample_start),
            total_samples_count: self.total_samples_count,
            cpu_histogram: self.cpu.save_to_checkpoint(),
            memory_histogram: self.memory.save_to_checkpoint(),
        }
    }

    /// Loads a checkpoint into this (fresh) aggregate.
    pub fn load_from_checkpoint(
        &mut self,
        cp: &AggregateCheckpoint,
    ) -> Result<(), CheckpointError> {
        if cp.version != CHECKPOINT_VERSION {
            return Err(CheckpointError::Version(cp.version.clone()));
        }
        self.total_samples_count = cp.total_samples_count;
        self.first_sample_start = cp.first_sample_start.unwrap_or(ZERO_TIME);
        self.last_sample_start = cp.last_sample_start.unwrap_or(ZERO_TIME);
        self.memory
            .load_from_checkpoint(Some(&cp.memory_histogram))
            .map_err(|source| CheckpointError::Histogram {
                which: "memory",
                source,
            })?;
        self.cpu
            .load_from_checkpoint(Some(&cp.cpu_histogram))
            .map_err(|source| CheckpointError::Histogram {
                which: "cpu",
                source,
            })?;
        Ok(())
    }

    /// Heap bytes held by the histograms (the hourly ones included).
    pub fn heap_bytes(&self) -> usize {
        self.cpu.heap_bytes()
            + self.memory.heap_bytes()
            + self
                .hourly
                .as_ref()
                .map_or(0, |h| std::mem::size_of::<HourlyCpu>() + h.heap_bytes())
    }
}

impl SampleSink for AggregateContainerState {
    #[inline]
    fn add_cpu(&mut self, millicores: ResourceAmount, t: Nanos) {
        self.add_cpu_cores(cores_from_cpu_amount(millicores), MIN_SAMPLE_WEIGHT, t);
    }

    #[inline]
    fn add_memory(&mut self, bytes: ResourceAmount, t: Nanos) {
        self.memory.add_sample(bytes as f64, 1.0, t);
    }

    #[inline]
    fn subtract_memory(&mut self, bytes: ResourceAmount, t: Nanos) {
        self.memory.subtract_sample(bytes as f64, 1.0, t);
    }
}
