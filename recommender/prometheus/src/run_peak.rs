//! The peak of one finished run of a container (a Job's pod), read from the history store with one instant
//! query at the run's end: the largest working-set sample over the run, and the largest CPU usage rate over
//! it (a subquery). Short runs fall between the metrics API's scrapes; the store may have caught them
//! (docs/decisions/job-runs.md).

use std::time::Duration;

use crate::client::{PromClient, PromError};
use crate::history::{HistoryConfig, promql_str};

/// Window of the CPU `rate` when `--prometheus-rate-window` is not set.
pub const DEFAULT_RUN_RATE_WINDOW: Duration = Duration::from_secs(60);

/// One container's finished run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Run {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// When the container started (unix milliseconds).
    pub start_ms: i64,
    /// When it finished (unix milliseconds).
    pub end_ms: i64,
}

/// What the store holds about a run; `None` where it has no sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunPeak {
    /// Largest working set (bytes).
    pub memory_bytes: Option<f64>,
    /// Largest CPU usage rate (cores).
    pub cpu_cores: Option<f64>,
}

impl Run {
    /// The run's length in whole seconds, at least one.
    pub fn length_secs(&self) -> i64 {
        (self.end_ms.saturating_sub(self.start_ms) + 999)
            .div_euclid(1000)
            .max(1)
    }
}

/// The resolution of the CPU subquery over a run of `len` seconds: 15 s, or the run's length when shorter (so
/// that one evaluation falls inside it), coarser for runs over four hours (at most about 1,000 evaluations).
fn subquery_step(len: i64) -> i64 {
    len.min(15).max((len + 999) / 1000).max(1)
}

/// The run's query, evaluated at its end: one series labelled `resource="memory"` and one `resource="cpu"`,
/// each the largest over every source that scraped the container. A run with too few scrapes for a rate
/// (one inside the rate window) gets its mean CPU instead: the counter, which starts at zero with the
/// container, at its last scrape, over the time from the container's start to that scrape. Without it a
/// run shorter than two scrapes would give memory alone, and a VPA whose runs are all that short a CPU
/// target at the minimum.
pub fn run_peak_query(cfg: &HistoryConfig, run: &Run) -> String {
    let mut m = cfg.base_matchers();
    m.push(format!(
        "{}=\"{}\"",
        cfg.namespace_label,
        promql_str(&run.namespace)
    ));
    m.push(format!("{}=\"{}\"", cfg.pod_label, promql_str(&run.pod)));
    m.push(format!(
        "{}=\"{}\"",
        cfg.container_label,
        promql_str(&run.container)
    ));
    let sel = m.join(", ");
    let len = run.length_secs();
    let window = cfg
        .rate_window
        .unwrap_or(DEFAULT_RUN_RATE_WINDOW)
        .as_secs()
        .max(1);
    let step = subquery_step(len);
    let start = run.start_ms.div_euclid(1000);
    format!(
        "label_replace(max(max_over_time({mem}{{{sel}}}[{len}s])), \"resource\", \"memory\", \"\", \"\") or \
         label_replace(max(max_over_time(rate({cpu}{{{sel}}}[{window}s])[{len}s:{step}s])) or \
         (max({cpu}{{{sel}}}) / clamp_min(max(timestamp({cpu}{{{sel}}})) - {start}, 1)), \"resource\", \"cpu\", \"\", \"\")",
        mem = cfg.memory_metric,
        cpu = cfg.cpu_metric,
    )
}

/// Reads the run's peak with one instant query at its end (the client's timeout and retries apply).
pub async fn run_peak(
    client: &PromClient,
    cfg: &HistoryConfig,
    run: &Run,
) -> Result<RunPeak, PromError> {
    let series = client.query(&run_peak_query(cfg, run), run.end_ms).await?;
    let mut peak = RunPeak::default();
    for s in series {
        let Some(&(_, v)) = s.points.last() else {
            continue;
        };
        if !v.is_finite() || v < 0.0 {
            continue;
        }
        match s.labels.get("resource").map(String::as_str) {
            Some("memory") => peak.memory_bytes = Some(v),
            Some("cpu") => peak.cpu_cores = Some(v),
            _ => {}
        }
    }
    Ok(peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(len_ms: i64) -> Run {
        Run {
            namespace: "batch".into(),
            pod: "nightly-29001-x\"y".into(),
            container: "task".into(),
            start_ms: 1_000_000,
            end_ms: 1_000_000 + len_ms,
        }
    }

    #[test]
    fn the_query_reads_both_peaks_over_the_run_with_the_label_flags() {
        let cfg = HistoryConfig {
            pod_label: "pod_name".into(),
            cluster: Some(("cluster".into(), "eu".into())),
            ..Default::default()
        };
        let sel = "cluster=\"eu\", pod_name!=\"\", container!=\"\", container!=\"POD\", namespace=\"batch\", \
                   pod_name=\"nightly-29001-x\\\"y\", container=\"task\"";
        let cpu = format!("container_cpu_usage_seconds_total{{{sel}}}");
        assert_eq!(
            run_peak_query(&cfg, &run(89_500)),
            format!(
                "label_replace(max(max_over_time(container_memory_working_set_bytes{{{sel}}}[90s])), \"resource\", \
                 \"memory\", \"\", \"\") or label_replace(max(max_over_time(rate({cpu}[60s])[90s:15s])) or \
                 (max({cpu}) / clamp_min(max(timestamp({cpu})) - 1000, 1)), \"resource\", \"cpu\", \"\", \"\")"
            )
        );
    }

    #[test]
    fn the_subquery_step_puts_an_evaluation_inside_every_run() {
        assert_eq!(subquery_step(1), 1);
        assert_eq!(subquery_step(9), 9);
        assert_eq!(subquery_step(15), 15);
        assert_eq!(subquery_step(3600), 15);
        assert_eq!(subquery_step(86_400), 87);
        assert_eq!(run(0).length_secs(), 1);
        assert_eq!(run(-5).length_secs(), 1);
    }
}
