//! Per-container state: last CPU sample time and the memory-peak window, including OOM bumps.

use super::aggregate::{AggregationsConfig, SampleSink};
use crate::histogram::ZERO_TIME;
use crate::units::{Nanos, ResourceAmount, memory_amount_from_bytes, scale_resource};

/// Why a sample or OOM was not taken into the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SampleRejected {
    /// Negative usage.
    #[error("negative usage")]
    Negative,
    /// CPU sample not strictly after the last one, or memory sample before the last one.
    #[error("sample out of order")]
    OutOfOrder,
    /// OOM older than the last memory sample minus one interval.
    #[error("OOM event is too old")]
    OomTooOld,
}

/// The memory-window and CPU ordering state of one container instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContainerState {
    /// Last accepted CPU sample time.
    pub last_cpu_sample_start: Nanos,
    /// Usage peak of the current window (0 = none).
    pub memory_peak: ResourceAmount,
    /// OOM peak of the current window (0 = none).
    pub oom_peak: ResourceAmount,
    /// End of the current window (`ZERO_TIME` before the first memory sample).
    pub window_end: Nanos,
    /// Time of the last memory sample (or OOM).
    pub last_memory_sample_start: Nanos,
}

impl Default for ContainerState {
    fn default() -> Self {
        ContainerState {
            last_cpu_sample_start: ZERO_TIME,
            memory_peak: 0,
            oom_peak: 0,
            window_end: ZERO_TIME,
            last_memory_sample_start: ZERO_TIME,
        }
    }
}

impl ContainerState {
    /// Feeds a CPU sample (millicores). Accepted only if non-negative and strictly after the last one.
    #[inline]
    pub fn add_cpu_sample<S: SampleSink>(
        &mut self,
        t: Nanos,
        millicores: ResourceAmount,
        sink: &mut S,
    ) -> Result<(), SampleRejected> {
        if millicores < 0 {
            return Err(SampleRejected::Negative);
        }
        if t <= self.last_cpu_sample_start {
            return Err(SampleRejected::OutOfOrder);
        }
        sink.add_cpu(millicores, t);
        self.last_cpu_sample_start = t;
        Ok(())
    }

    /// Feeds a memory usage sample (bytes) into the peak window.
    #[inline]
    pub fn add_memory_sample<S: SampleSink>(
        &mut self,
        t: Nanos,
        bytes: ResourceAmount,
        config: &AggregationsConfig,
        sink: &mut S,
    ) -> Result<(), SampleRejected> {
        self.add_memory(t, bytes, false, config, sink)
    }

    fn add_memory<S: SampleSink>(
        &mut self,
        t: Nanos,
        usage: ResourceAmount,
        is_oom: bool,
        config: &AggregationsConfig,
        sink: &mut S,
    ) -> Result<(), SampleRejected> {
        if usage < 0 {
            return Err(SampleRejected::Negative);
        }
        if !is_oom && t < self.last_memory_sample_start {
            return Err(SampleRejected::OutOfOrder);
        }
        self.last_memory_sample_start = t;
        if self.window_end == ZERO_TIME {
            self.window_end = t;
        }
        if t < self.window_end {
            let old_max = self.memory_peak.max(self.oom_peak);
            if old_max == 0 || usage <= old_max {
                return Ok(());
            }
            sink.subtract_memory(old_max, self.window_end);
        } else {
            let interval = config.memory_aggregation_interval;
            let d = t.saturating_sub(self.window_end);
            // Saturating: a trace may span more than i64 nanoseconds (centuries); it must not overflow.
            let shift = if interval > 0 {
                (d - d % interval).saturating_add(interval)
            } else {
                d.saturating_add(interval)
            };
            self.window_end = self.window_end.saturating_add(shift);
            self.memory_peak = 0;
            self.oom_peak = 0;
        }
        sink.add_memory(usage, self.window_end);
        if is_oom {
            self.oom_peak = usage;
        } else {
            self.memory_peak = usage;
        }
        Ok(())
    }

    /// Records an OOM at `t` with the container's memory request (or eviction usage) in bytes.
    /// The bump is max(+min bump, ×ratio) over max(request, current-window usage peak).
    pub fn record_oom<S: SampleSink>(
        &mut self,
        t: Nanos,
        requested: ResourceAmount,
        config: &AggregationsConfig,
        sink: &mut S,
    ) -> Result<ResourceAmount, SampleRejected> {
        let reference = if config.legacy_oom_staleness {
            self.window_end
        } else {
            self.last_memory_sample_start
        };
        if reference != ZERO_TIME
            && t < reference.saturating_sub(config.memory_aggregation_interval)
        {
            return Err(SampleRejected::OomTooOld);
        }
        let used = requested.max(self.memory_peak);
        let needed = used
            .saturating_add(memory_amount_from_bytes(config.oom_min_bump_up_bytes))
            .max(scale_resource(used, config.oom_bump_up_ratio));
        self.add_memory(t, needed, true, config, sink)?;
        Ok(needed)
    }

    /// The current window's peak if the window is still open at `now` (what a checkpoint must leave out).
    pub fn open_window_peak(&self, now: Nanos) -> Option<(ResourceAmount, Nanos)> {
        let peak = self.memory_peak.max(self.oom_peak);
        (self.window_end != ZERO_TIME && now < self.window_end).then_some((peak, self.window_end))
    }
}
