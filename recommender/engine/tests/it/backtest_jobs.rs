//! Backtest of Job runs (`run_jobs`): the Job shapes hold short runs whose peak falls between scrapes, the
//! run-peak handling sees the peak a 60 s scrape misses, and the retry bump grows per retry up to maxAllowed.

use tailor_engine::backtest::{self, BacktestConfig, JobConfig, JobHandling, Score, Strategy};
use tailor_engine::backtest_workloads::{JOB_SAMPLE_SECONDS, JOB_SUITE};
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer};

const MIB: f64 = 1024.0 * 1024.0;
/// A whole hour (a multiple of 60 s): scrapes fall on whole minutes from here.
const T: f64 = 1_700_002_800.0;

/// A run of `secs` one-second samples from `start`: memory `level`, `peak` for 3 s from `peak_at` seconds.
fn run(
    pod: &str,
    start: f64,
    secs: usize,
    level: f64,
    peak: f64,
    peak_at: usize,
) -> TraceContainer {
    let mem = |s: usize| {
        if (peak_at..peak_at + 3).contains(&s) {
            peak
        } else {
            level
        }
    };
    TraceContainer {
        name: "job".into(),
        pod: Some(pod.into()),
        cpu_request_cores: Some(0.5),
        memory_request_bytes: Some(1024.0 * MIB),
        cpu_samples: (0..secs).map(|s| [start + s as f64, 0.2]).collect(),
        memory_samples: (0..secs).map(|s| [start + s as f64, mem(s)]).collect(),
        ..Default::default()
    }
}

fn policy(max_memory: &str) -> Option<tailor_crds::PodResourcePolicy> {
    serde_json::from_value(serde_json::json!({
        "containerPolicies": [{"containerName": "*", "maxAllowed": {"memory": max_memory}}]
    }))
    .ok()
}

fn cfg() -> BacktestConfig {
    BacktestConfig {
        warmup: 0,
        keep_decisions: true,
        ..BacktestConfig::default()
    }
}

fn jobs(trace: &Trace, handling: JobHandling) -> (Score, Vec<backtest::Decision>) {
    with(trace, JobConfig::new(handling))
}

fn with(trace: &Trace, jobs: JobConfig) -> (Score, Vec<backtest::Decision>) {
    let r = backtest::run_jobs(
        trace,
        &ReplayConfig::default(),
        &[Strategy::Upstream],
        &cfg(),
        &jobs,
    )
    .unwrap();
    let r = r.into_iter().next().unwrap();
    (backtest::total(&r.containers), r.decisions)
}

#[test]
fn job_shapes_have_short_runs_whose_peak_a_60s_scrape_mostly_misses() {
    for w in JOB_SUITE {
        for draw in [0, 1000] {
            let t = w.trace_with_draw(draw);
            assert!(
                t.containers.len() > 100,
                "{} has a run every hour or more",
                w.name
            );
            let (mut missed, mut runs) = (0, 0);
            for c in &t.containers {
                let m = &c.memory_samples;
                let (first, last) = (m[0][0], m[m.len() - 1][0]);
                assert!(
                    last - first <= 50.0 && last - first >= 9.0,
                    "{}: run of {}",
                    w.name,
                    last - first
                );
                assert!(
                    m.windows(2)
                        .all(|p| p[1][0] - p[0][0] == JOB_SAMPLE_SECONDS)
                );
                let peak = m.iter().map(|s| s[1]).fold(0.0, f64::max);
                // What a 60 s scrape reads: the latest sample at or before each whole minute in the run.
                let scraped = m
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| {
                        let next = m.get(i + 1).map_or(s[0] + 1.0, |n| n[0]);
                        ((s[0] / 60.0).ceil() * 60.0) < next
                    })
                    .map(|(_, s)| s[1])
                    .fold(0.0, f64::max);
                runs += 1;
                if scraped < peak / 1.2 {
                    missed += 1;
                }
            }
            assert!(
                missed * 10 >= runs * 8,
                "{}#{draw}: a scrape saw the peak of {} of {runs} runs",
                w.name,
                runs - missed
            );
        }
        assert_ne!(
            format!("{:?}", w.trace_with_draw(1).containers[0].memory_samples),
            format!("{:?}", w.trace_with_draw(2).containers[0].memory_samples),
            "draws differ"
        );
    }
}

#[test]
fn the_run_peak_is_seen_where_the_scrape_sees_only_the_level() {
    // A run every 10 min starting 40 s past the minute, 40 s long: the scrape at the next whole minute
    // reads its 20th second (level 200 Mi); its 3 s peak of 400 Mi is at seconds 30-32.
    let runs = (0..36)
        .map(|i| {
            run(
                &format!("r{i}"),
                T + 600.0 * i as f64 + 40.0,
                40,
                200.0 * MIB,
                400.0 * MIB,
                30,
            )
        })
        .collect();
    let trace = Trace {
        id: "cron".into(),
        containers: runs,
        ..Default::default()
    };
    let memory = |d: &backtest::Decision| d.recommendations[0].target.memory.unwrap() as f64;
    let (up, up_decisions) = jobs(&trace, JobHandling::Upstream);
    // A history source holding every second of the run.
    let exact = JobConfig {
        history_step: 0,
        ..JobConfig::new(JobHandling::Tailor)
    };
    let (tailor, tailor_decisions) = with(&trace, exact);
    // The first decision (after 6 runs, before any OOM): upstream sized from the level, Tailor from the peak.
    assert!(
        memory(&up_decisions[0]) < 400.0 * MIB,
        "{}",
        memory(&up_decisions[0])
    );
    assert!(memory(&tailor_decisions[0]) >= 400.0 * MIB);
    // Upstream's runs are then killed until its OOM samples lift the target; Tailor's never are.
    assert!(up.oom_kills > 0 && up.oom_risk_samples > 0, "{up:?}");
    assert_eq!((tailor.oom_kills, tailor.oom_risk_samples), (0, 0));
    assert_eq!((up.runs, tailor.runs), (36, 36));
    // A store scraping every 15 s (at 45, 60 and 75 s past each run's minute) misses the peak as well: the
    // run-peak sample is only as good as the store's resolution.
    let (_, coarse) = jobs(&trace, JobHandling::Tailor);
    assert!(memory(&coarse[0]) < 400.0 * MIB, "{}", memory(&coarse[0]));
}

#[test]
fn a_retry_gets_memory_bumped_per_retry_up_to_max_allowed() {
    // One run peaking at 450 Mi under a 200 Mi request, recommended nothing yet (the first decision comes
    // after it): upstream's retries keep 200 Mi, all seven attempts die; Tailor's get 300, 400, 500 Mi.
    let one = |max: &str| Trace {
        id: "job".into(),
        containers: vec![TraceContainer {
            memory_request_bytes: Some(200.0 * MIB),
            ..run("r0", T + 5.0, 30, 150.0 * MIB, 450.0 * MIB, 10)
        }],
        policy: policy(max),
        ..Default::default()
    };
    let (up, _) = jobs(&one("2Gi"), JobHandling::Upstream);
    assert_eq!((up.oom_kills, up.failed_runs), (7, 1));
    let (tailor, _) = jobs(&one("2Gi"), JobHandling::Tailor);
    assert_eq!((tailor.oom_kills, tailor.failed_runs), (3, 0));
    // Capped at 350 Mi, the bump stops there and every retry dies.
    let (capped, _) = jobs(&one("350Mi"), JobHandling::Tailor);
    assert_eq!((capped.oom_kills, capped.failed_runs), (7, 1));
    // The attempt that lived ran at 500 Mi: its request-hours are 500 Mi over its 30 s.
    let gib_hours = 500.0 * MIB / (1024.0 * MIB) * 30.0 / 3600.0;
    assert!(tailor.memory_request_gib_hours > gib_hours, "{tailor:?}");
}
