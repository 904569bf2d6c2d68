//! Cost, risk and churn of the requests a strategy would have set, summed from usage samples.

use serde::Serialize;

/// Bytes in a GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// One core-hour costs as much as this many GiB-hours (public per-vCPU to per-GiB price ratio).
pub const GIB_HOURS_PER_CORE_HOUR: f64 = 9.0;

/// Scores of one container or a total. Waste is request above usage; risk counts samples (in minutes of the
/// sampling interval) with usage above the request or, for OOM-kill risk, memory above the limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Score {
    /// CPU requested above usage (core-hours).
    pub cpu_waste_core_hours: f64,
    /// Memory requested above usage (GiB-hours).
    pub memory_waste_gib_hours: f64,
    /// Minutes with CPU usage above the CPU request.
    pub cpu_risk_minutes: f64,
    /// Minutes with memory usage above the memory request.
    pub memory_risk_minutes: f64,
    /// Memory samples above the limit the webhook would set.
    pub oom_risk_samples: u64,
    /// OOMs in the data at or above the limit the strategy had set.
    pub uncovered_ooms: u64,
    /// Request changes (resizes or evictions).
    pub changes: u64,
    /// CPU used (core-hours), the base of `cpu_waste_fraction`.
    pub cpu_usage_core_hours: f64,
    /// Memory used (GiB-hours), the base of `memory_waste_fraction`.
    pub memory_usage_gib_hours: f64,
    /// Scored pod time (days).
    pub pod_days: f64,
    /// CPU requested (core-hours): what the requests would have been billed for, the base of
    /// [`Score::requested_cost`].
    pub cpu_request_core_hours: f64,
    /// Memory requested (GiB-hours), likewise.
    pub memory_request_gib_hours: f64,
    /// Job runs started in the scored time (only under `--jobs`).
    pub runs: u64,
    /// Job attempts OOM-killed at their limit (only under `--jobs`; each is also an OOM-risk sample).
    pub oom_kills: u64,
    /// Job runs whose every attempt was OOM-killed (only under `--jobs`).
    pub failed_runs: u64,
}

impl Score {
    /// Adds `other` into `self`.
    pub fn add(&mut self, o: &Score) {
        self.cpu_waste_core_hours += o.cpu_waste_core_hours;
        self.memory_waste_gib_hours += o.memory_waste_gib_hours;
        self.cpu_risk_minutes += o.cpu_risk_minutes;
        self.memory_risk_minutes += o.memory_risk_minutes;
        self.oom_risk_samples += o.oom_risk_samples;
        self.uncovered_ooms += o.uncovered_ooms;
        self.changes += o.changes;
        self.cpu_usage_core_hours += o.cpu_usage_core_hours;
        self.memory_usage_gib_hours += o.memory_usage_gib_hours;
        self.pod_days += o.pod_days;
        self.cpu_request_core_hours += o.cpu_request_core_hours;
        self.memory_request_gib_hours += o.memory_request_gib_hours;
        self.runs += o.runs;
        self.oom_kills += o.oom_kills;
        self.failed_runs += o.failed_runs;
    }

    /// Scores one CPU sample of `cores` that stands for `minutes` against a request of `millis` millicores.
    pub fn cpu_sample(&mut self, cores: f64, minutes: f64, millis: i64) {
        let request = millis as f64 / 1000.0;
        let hours = minutes / 60.0;
        self.cpu_usage_core_hours += cores * hours;
        self.cpu_request_core_hours += request * hours;
        self.cpu_waste_core_hours += (request - cores).max(0.0) * hours;
        if cores > request {
            self.cpu_risk_minutes += minutes;
        }
    }

    /// Scores one memory sample of `bytes` that stands for `minutes` against a request and a limit (bytes).
    pub fn memory_sample(&mut self, bytes: f64, minutes: f64, request: i64, limit: f64) {
        let request = request as f64;
        let hours = minutes / 60.0;
        self.memory_usage_gib_hours += bytes / GIB * hours;
        self.memory_request_gib_hours += request / GIB * hours;
        self.memory_waste_gib_hours += (request - bytes).max(0.0) / GIB * hours;
        if bytes > request {
            self.memory_risk_minutes += minutes;
        }
        if bytes > limit {
            self.oom_risk_samples += 1;
        }
    }

    /// Waste in core-hours, a GiB-hour counted as 1/9 core-hour.
    pub fn cost(&self) -> f64 {
        self.cpu_waste_core_hours + self.memory_waste_gib_hours / GIB_HOURS_PER_CORE_HOUR
    }

    /// What the requests cost in money: requested core-hours at `vcpu_hour` plus requested GiB-hours at
    /// `gib_hour` (prices per vCPU-hour and per GiB-hour).
    pub fn requested_cost(&self, vcpu_hour: f64, gib_hour: f64) -> f64 {
        self.cpu_request_core_hours * vcpu_hour + self.memory_request_gib_hours * gib_hour
    }

    /// CPU waste as a fraction of CPU usage (0 without usage).
    pub fn cpu_waste_fraction(&self) -> f64 {
        ratio(self.cpu_waste_core_hours, self.cpu_usage_core_hours)
    }

    /// Memory waste as a fraction of memory usage (0 without usage).
    pub fn memory_waste_fraction(&self) -> f64 {
        ratio(self.memory_waste_gib_hours, self.memory_usage_gib_hours)
    }

    /// Request changes per scored pod-day (0 without scored time).
    pub fn changes_per_pod_day(&self) -> f64 {
        ratio(self.changes as f64, self.pod_days)
    }

    /// CPU and memory risk minutes.
    pub fn risk_minutes(&self) -> f64 {
        self.cpu_risk_minutes + self.memory_risk_minutes
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_hours_are_the_requests_over_time_whatever_the_usage() {
        let mut s = Score::default();
        // Two hours at 500m with usage below, then above the request.
        s.cpu_sample(0.2, 60.0, 500);
        s.cpu_sample(0.9, 60.0, 500);
        // An hour at 2 GiB, half used.
        s.memory_sample(GIB, 60.0, 2 * GIB as i64, 4.0 * GIB);
        assert!((s.cpu_request_core_hours - 1.0).abs() < 1e-12);
        assert!((s.memory_request_gib_hours - 2.0).abs() < 1e-12);
        assert!((s.requested_cost(0.05, 0.01) - (0.05 + 0.02)).abs() < 1e-12);
        // Waste and cost in core-hours are what they were.
        assert!((s.cpu_waste_core_hours - 0.3).abs() < 1e-12);
        assert!((s.cost() - (0.3 + 1.0 / GIB_HOURS_PER_CORE_HOUR)).abs() < 1e-12);
        let mut total = Score::default();
        total.add(&s);
        total.add(&s);
        assert!((total.requested_cost(1.0, 1.0) - 6.0).abs() < 1e-12);
    }
}
