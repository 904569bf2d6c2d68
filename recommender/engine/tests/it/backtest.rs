//! Backtest: scoring on a hand-computed trace, `upstream` equal to a plain replay at every decision point,
//! determinism, and profile selection.

use std::collections::BTreeMap;

use tailor_engine::backtest::{self, Actuation, BacktestConfig, Score, Strategy};
use tailor_engine::backtest_workloads::SUITE;
use tailor_engine::profile::{self, PROFILE_ANNOTATION};
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer, replay};
use tailor_engine::units::nanos_from_unix_seconds;

const T: f64 = 1_700_000_000.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn tiny() -> Trace {
    let cpu = [0.1, 0.2, 0.3, 0.5, 0.1];
    let mem = [100e6, 150e6, 120e6, 300e6, 110e6];
    Trace {
        id: "tiny".into(),
        containers: vec![TraceContainer {
            name: "c".into(),
            pod: Some("p".into()),
            cpu_request_cores: Some(1.0),
            memory_request_bytes: Some(200e6),
            cpu_samples: cpu
                .iter()
                .enumerate()
                .map(|(i, v)| [T + 60.0 * i as f64, *v])
                .collect(),
            memory_samples: mem
                .iter()
                .enumerate()
                .map(|(i, v)| [T + 60.0 * i as f64, *v])
                .collect(),
            ooms: vec![vec![Some(T + 200.0), Some(250e6)]],
        }],
        ..Default::default()
    }
}

fn cfg(actuation: Actuation) -> BacktestConfig {
    BacktestConfig {
        every: 120_000_000_000,
        warmup: 120_000_000_000,
        actuation,
        memory_limit_ratio: 1.0,
        keep_series: false,
        keep_decisions: true,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// KRR's simple strategy is computable by hand: decisions at T+120 (samples at T, T+60) and T+240 (four
/// samples); scoring from T+120.
#[test]
fn krr_scores_by_hand() {
    let r = backtest::run(
        &tiny(),
        &ReplayConfig::default(),
        &[Strategy::KrrSimple],
        &cfg(Actuation::Ideal),
    )
    .unwrap();
    let r = &r[0];
    // T+120: p95 of {100m, 200m} by nearest rank = 200m; max memory 150 MB × 1.15.
    // T+240: p95 of {100, 200, 300, 500}m = 500m; 300 MB × 1.15.
    let targets: Vec<_> = r
        .decisions
        .iter()
        .map(|d| {
            (
                d.recommendations[0].target.cpu,
                d.recommendations[0].target.memory,
            )
        })
        .collect();
    assert_eq!(
        targets,
        vec![
            (Some(200), Some(172_500_000)),
            (Some(500), Some(345_000_000))
        ]
    );
    let s: Score = r.containers[0].score;
    // T+120: cpu 0.3 > 0.2 (risk), memory 120 MB under 172.5 MB. T+180: cpu 0.5 > 0.2, memory 300 MB above
    // the 172.5 MB request and limit. T+200: the OOM (250 MB) is above the limit. T+240: 0.1 under 0.5 cores,
    // 110 MB under 345 MB.
    assert!(close(s.cpu_waste_core_hours, 0.4 / 60.0), "{s:?}");
    assert!(
        close(s.memory_waste_gib_hours, (52.5e6 + 235e6) / GIB / 60.0),
        "{s:?}"
    );
    assert!(close(s.cpu_usage_core_hours, 0.9 / 60.0), "{s:?}");
    assert!(close(s.memory_usage_gib_hours, 530e6 / GIB / 60.0), "{s:?}");
    assert_eq!(s.cpu_risk_minutes, 2.0);
    assert_eq!(s.memory_risk_minutes, 1.0);
    assert_eq!(s.oom_risk_samples, 1);
    assert_eq!(s.uncovered_ooms, 1);
    assert_eq!(s.changes, 2);
    assert!(close(s.pod_days, 180.0 / 86_400.0));
    assert!(close(s.changes_per_pod_day(), 2.0 * 86_400.0 / 180.0));
    assert!(close(s.cost(), 0.4 / 60.0 + (287.5e6 / GIB / 60.0) / 9.0));
}

/// Admission never changes a running pod: the data's requests (1 core, 200 MB) stay.
#[test]
fn admission_keeps_running_pods() {
    let r = backtest::run(
        &tiny(),
        &ReplayConfig::default(),
        &[Strategy::KrrSimple],
        &cfg(Actuation::Admission),
    )
    .unwrap();
    let s = r[0].containers[0].score;
    assert_eq!(s.changes, 0);
    assert!(
        close(s.cpu_waste_core_hours, (0.7 + 0.5 + 0.9) / 60.0),
        "{s:?}"
    );
    assert_eq!(
        (
            s.cpu_risk_minutes,
            s.memory_risk_minutes,
            s.oom_risk_samples
        ),
        (0.0, 1.0, 1)
    );
    // With a limit twice the request, 300 MB stays under the 400 MB limit and the 250 MB OOM is covered.
    let mut c = cfg(Actuation::Admission);
    c.memory_limit_ratio = 2.0;
    let s = backtest::run(
        &tiny(),
        &ReplayConfig::default(),
        &[Strategy::KrrSimple],
        &c,
    )
    .unwrap()[0]
        .containers[0]
        .score;
    assert_eq!((s.oom_risk_samples, s.uncovered_ooms), (0, 0));
}

/// The trace cut before `at`: what `tailor recommend` would see at that decision.
fn cut(t: &Trace, at: i64) -> Trace {
    let before = |s: f64| nanos_from_unix_seconds(s).unwrap() < at;
    let mut t = t.clone();
    for c in &mut t.containers {
        c.cpu_samples.retain(|s| before(s[0]));
        c.memory_samples.retain(|s| before(s[0]));
        c.ooms
            .retain(|o| before(o.get(2).copied().flatten().or(o[0]).unwrap()));
    }
    t
}

fn shortened(name: &str, days: f64) -> Trace {
    let mut t = SUITE.iter().find(|w| w.name == name).unwrap().trace();
    let end = tailor_engine::backtest_workloads::START + days * 86_400.0;
    for c in &mut t.containers {
        c.cpu_samples.retain(|s| s[0] < end);
        c.memory_samples.retain(|s| s[0] < end);
        c.ooms.retain(|o| o[0].unwrap() < end);
    }
    t.containers.retain(|c| !c.cpu_samples.is_empty());
    t
}

#[test]
fn upstream_equals_recommend_at_every_decision() {
    let base = ReplayConfig::default();
    let mut c = cfg(Actuation::Inplace);
    c.every = 4 * 3600 * 1_000_000_000;
    for (name, days) in [
        ("oom-spikes", 3.0),
        ("memory-leak", 3.0),
        ("idle-sidecar", 1.5),
    ] {
        let t = shortened(name, days);
        let r = backtest::run(&t, &base, &[Strategy::Upstream], &c).unwrap();
        assert!(r[0].decisions.len() >= 8, "{name}");
        for d in &r[0].decisions {
            let plain = replay(&cut(&t, d.at), &base, false);
            assert_eq!(plain.error, None);
            assert_eq!(plain.recommendations.len(), d.recommendations.len());
            for (p, b) in plain.recommendations.iter().zip(&d.recommendations) {
                assert_eq!(
                    (&p.container_name, p.target, p.lower_bound, p.upper_bound),
                    (&b.container_name, b.target, b.lower_bound, b.upper_bound),
                    "{name} at {}",
                    d.at
                );
            }
        }
    }
}

#[test]
fn deterministic() {
    let t = shortened("batch-cron", 3.0);
    let c = cfg(Actuation::Inplace);
    let run = || {
        format!(
            "{:?}",
            backtest::run(&t, &ReplayConfig::default(), &Strategy::all(), &c).unwrap()
        )
    };
    assert_eq!(run(), run());
    assert_eq!(
        format!("{:?}", SUITE[0].trace()),
        format!("{:?}", SUITE[0].trace())
    );
}

#[test]
fn profiles_by_annotation() {
    let base = ReplayConfig::default().recommender;
    let none = BTreeMap::new();
    assert_eq!(*profile::config_for(&base, None, &none).unwrap(), base);
    let balanced = profile::by_name("balanced").unwrap().unwrap();
    let global = profile::config_for(&base, Some(balanced), &none)
        .unwrap()
        .into_owned();
    assert_eq!(global, balanced.apply(&base));
    assert_ne!(global, base);
    let up: BTreeMap<_, _> = [(PROFILE_ANNOTATION.to_string(), "upstream".to_string())].into();
    assert_eq!(
        *profile::config_for(&base, Some(balanced), &up).unwrap(),
        base
    );
    let bad: BTreeMap<_, _> = [(PROFILE_ANNOTATION.to_string(), "fastest".to_string())].into();
    let e = profile::config_for(&base, None, &bad).unwrap_err();
    assert!(e.to_string().contains("unknown profile \"fastest\""), "{e}");
    assert_eq!(Strategy::parse("cautious").unwrap().name(), "cautious");
    // The former name still selects the profile.
    assert_eq!(Strategy::parse("balanced").unwrap().name(), "cautious");
    assert_eq!(balanced.name, "cautious");
    assert!(Strategy::parse("nope").is_err());
}

/// A pod that has ended takes no more changes: pod `a` (1 core, 200 MB requested) runs from T to T+120 and
/// takes KRR's first recommendation at T+120; the recommendation moves at T+240 (its 0.3-core sample), after
/// `a` ended. Pod `b` starts at T+600 with the latest recommendation and its own samples do not move it.
#[test]
fn ended_pods_take_no_changes() {
    let samples = |start: f64, values: &[f64]| -> Vec<[f64; 2]> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| [T + start + 60.0 * i as f64, *v])
            .collect()
    };
    let pod = |name: &str, start: f64, cpu: &[f64], mem: &[f64]| TraceContainer {
        name: "c".into(),
        pod: Some(name.into()),
        cpu_request_cores: Some(1.0),
        memory_request_bytes: Some(200e6),
        cpu_samples: samples(start, cpu),
        memory_samples: samples(start, mem),
        ooms: vec![],
    };
    let t = Trace {
        id: "two-pods".into(),
        containers: vec![
            pod("a", 0.0, &[0.1, 0.2, 0.3], &[100e6, 150e6, 120e6]),
            pod("b", 600.0, &[0.1; 6], &[100e6; 6]),
        ],
        ..Default::default()
    };
    let mut c = cfg(Actuation::Ideal);
    c.warmup = 0;
    let r = backtest::run(&t, &ReplayConfig::default(), &[Strategy::KrrSimple], &c).unwrap();
    let d = &r[0].decisions;
    assert_ne!(
        d[0].recommendations[0].target, d[1].recommendations[0].target,
        "the recommendation moves after pod a ended"
    );
    assert_eq!(r[0].containers[0].score.changes, 1);
}

fn diurnal() -> &'static profile::Profile {
    profile::by_name("diurnal").unwrap().unwrap()
}

/// `diurnal` without its time-of-day part: what it does before a day of history and without in-place updates.
fn all_day(p: &profile::Profile) -> &'static profile::Profile {
    Box::leak(Box::new(profile::Profile {
        name: "diurnal-all-day",
        cpu_time_of_day: None,
        ..*p
    }))
}

fn decisions(t: &Trace, s: Strategy, actuation: Actuation) -> Vec<backtest::Decision> {
    let mut c = cfg(actuation);
    c.every = 3600 * 1_000_000_000;
    let mut r = backtest::run(t, &ReplayConfig::default(), &[s], &c).unwrap();
    r.remove(0).decisions
}

/// `auto` follows the day only where the day repeats: on `web-diurnal` its CPU target moves with the hour,
/// below its all-day priced request; on `random-bursts` (bursts at a different hour each day) it is the all-day
/// priced request at every decision, which is not upstream's.
#[test]
fn auto_follows_the_day_only_where_it_repeats() {
    let up = |t: &Trace| decisions(t, Strategy::Upstream, Actuation::Inplace);
    let au = |t: &Trace| decisions(t, Strategy::Profile(auto()), Actuation::Inplace);
    let priced = |t: &Trace| decisions(t, Strategy::Profile(all_day(auto())), Actuation::Inplace);
    let bursts = shortened("random-bursts", 5.0);
    assert_eq!(au(&bursts), priced(&bursts));
    assert_ne!(au(&bursts), up(&bursts));
    let web = shortened("web-diurnal", 5.0);
    let late = |d: &[backtest::Decision]| -> Vec<i64> {
        d.iter()
            .filter(|x| {
                x.at > nanos_from_unix_seconds(
                    tailor_engine::backtest_workloads::START + 86_400.0 * 3.0,
                )
                .unwrap()
            })
            .filter_map(|x| x.recommendations[0].target.cpu)
            .collect()
    };
    let (a, p, u) = (late(&au(&web)), late(&priced(&web)), late(&up(&web)));
    assert_ne!(a, p);
    // At night it asks for at most three quarters of upstream's lowest target.
    let low = |v: &[i64]| *v.iter().min().unwrap();
    assert!(low(&a) * 4 <= low(&u) * 3, "auto {a:?}, upstream {u:?}");
    // Never above the all-day priced request: following the day only takes away the hours that need less.
    assert_eq!(a.len(), p.len());
    assert!(
        a.iter().zip(&p).all(|(a, p)| a <= p),
        "auto {a:?}, all-day {p:?}"
    );
    // Memory is never above upstream's: upstream's, or a smaller margin over daily peaks that hold steady.
    let mem = |d: &[backtest::Decision]| -> Vec<i64> {
        d.iter()
            .filter_map(|x| x.recommendations[0].target.memory)
            .collect()
    };
    let (am, um) = (mem(&au(&web)), mem(&up(&web)));
    assert_eq!(am.len(), um.len());
    assert!(
        am.iter().zip(&um).all(|(a, u)| a <= u),
        "auto {am:?}, upstream {um:?}"
    );
}

/// `auto`'s CPU lower bound is never above its target where it follows the day: a priced target weighs the
/// hours of its window together and falls below the next hour's own on a ramp down or after a quiet weekend,
/// and a lower bound above the target had the updater resize every hour to a target still below it.
#[test]
fn auto_keeps_its_cpu_lower_bound_at_most_the_target() {
    for name in ["weekly", "web-diurnal", "two-peaks"] {
        let t = shortened(name, 8.0);
        for d in decisions(&t, Strategy::Profile(auto()), Actuation::Inplace) {
            for r in &d.recommendations {
                assert!(
                    r.lower_bound.cpu <= r.target.cpu,
                    "{name} at {}: lower {:?} above target {:?}",
                    d.at,
                    r.lower_bound.cpu,
                    r.target.cpu
                );
            }
        }
    }
}

/// Where the day repeats and pays for its resizes, `auto` holds a day request and a night request (its day
/// plan): on `business-hours` the targets of a day take two levels, far apart, the bounds sit at the updater's
/// 10 % around the target (so a pod is resized as the hours turn, and not for a plan that drifts by less), and
/// the pod is resized about twice a day, not every hour.
#[test]
fn auto_holds_a_day_and_a_night_request() {
    let t = shortened("business-hours", 8.0);
    let d = decisions(&t, Strategy::Profile(auto()), Actuation::Inplace);
    let day3 =
        nanos_from_unix_seconds(tailor_engine::backtest_workloads::START + 86_400.0 * 3.0).unwrap();
    let late: Vec<&backtest::Decision> = d.iter().filter(|x| x.at >= day3).collect();
    for x in &late {
        let r = &x.recommendations[0];
        let (t, l, u) = (
            r.target.cpu.unwrap(),
            r.lower_bound.cpu.unwrap(),
            r.upper_bound.cpu.unwrap(),
        );
        assert!(
            l <= t && 10 * l >= 9 * t - 10,
            "at {}: lower {l} target {t}",
            x.at
        );
        assert!(
            u >= t && 10 * u <= 11 * t + 10,
            "at {}: upper {u} target {t}",
            x.at
        );
    }
    // Each day's targets: a low level and a high one at least three times it, nothing in between.
    for day in late.chunks(24).filter(|c| c.len() == 24) {
        let cpu: Vec<i64> = day
            .iter()
            .map(|x| x.recommendations[0].target.cpu.unwrap())
            .collect();
        let (lo, hi) = (*cpu.iter().min().unwrap(), *cpu.iter().max().unwrap());
        assert!(hi >= 3 * lo, "targets {cpu:?}");
        assert!(
            cpu.iter().all(|&c| c * 10 <= lo * 13 || c * 10 >= hi * 7),
            "targets {cpu:?}"
        );
    }
    let mut c = cfg(Actuation::Inplace);
    c.every = 3600 * 1_000_000_000;
    let r = backtest::run(
        &t,
        &ReplayConfig::default(),
        &[Strategy::Profile(auto())],
        &c,
    )
    .unwrap();
    let score = backtest::total(&r[0].containers);
    assert!(
        score.changes_per_pod_day() <= 2.5,
        "{} changes per pod-day",
        score.changes_per_pod_day()
    );
}

/// The hourly CPU estimate needs a day of history; before that, and whenever pods are only sized at
/// admission, `diurnal` recommends with its all-day settings.
#[test]
fn time_of_day_waits_for_a_day_and_needs_in_place_updates() {
    let d = diurnal();
    let plain = all_day(d);
    let short = shortened("web-diurnal", 0.95);
    assert_eq!(
        decisions(&short, Strategy::Profile(d), Actuation::Inplace),
        decisions(&short, Strategy::Profile(plain), Actuation::Inplace)
    );
    let long = shortened("web-diurnal", 3.0);
    assert_eq!(
        decisions(&long, Strategy::Profile(d), Actuation::Admission),
        decisions(&long, Strategy::Profile(plain), Actuation::Admission)
    );
    // After a day, CPU follows the curve: the night target is well below the afternoon one.
    let hourly = decisions(&long, Strategy::Profile(d), Actuation::Inplace);
    let cpu_at = |hour_utc: i64| {
        hourly
            .iter()
            .filter(|x| {
                x.at > nanos_from_unix_seconds(
                    tailor_engine::backtest_workloads::START + 86_400.0 * 1.5,
                )
                .unwrap()
            })
            .find(|x| (x.at / 3_600_000_000_000) % 24 == hour_utc)
            .and_then(|x| x.recommendations[0].target.cpu)
            .unwrap()
    };
    let day: Vec<i64> = (0..24).map(cpu_at).collect();
    let (low, high) = (day.iter().min().unwrap(), day.iter().max().unwrap());
    assert!(low * 2 < *high, "hourly targets {day:?}");
}

fn auto() -> &'static profile::Profile {
    profile::by_name("auto").unwrap().unwrap()
}

/// What `auto` holds on the validation draws (never tuned on) and on a draw nobody looked at while tuning:
/// the 20 % less cost-weighted waste than `upstream` (−22.8 % on validation, −25.6 % on draw 5000; on
/// every set of new draws run, −20.6 % to −26.4 %, QUALITY.md), no more risk minutes, at most half upstream's
/// OOM-risk samples (132 vs 1,572 and 34 vs 754: the steady-peaks memory rule), no more uncovered OOMs, on no
/// shape more than 10 % above upstream's cost unless less risky, and at most one request change per pod-day
/// (0.95 on validation, 0.73 on draw 5000).
#[test]
fn auto_beats_upstream_on_validation_and_new_draws() {
    let sets: [&[u64]; 2] = [
        &tailor_engine::backtest_workloads::VALIDATION_DRAWS,
        &[5000],
    ];
    let c = BacktestConfig::default();
    for draws in sets {
        let (mut up, mut au) = (Score::default(), Score::default());
        for w in SUITE {
            let (mut u, mut a) = (Score::default(), Score::default());
            for &d in draws {
                let r = backtest::run(
                    &w.trace_with_draw(d),
                    &ReplayConfig::default(),
                    &[Strategy::Upstream, Strategy::Profile(auto())],
                    &c,
                )
                .unwrap();
                u.add(&backtest::total(&r[0].containers));
                a.add(&backtest::total(&r[1].containers));
            }
            // The 10 %: `deploy-step-down` is the closest (above 10 % at equal risk on single draws of
            // other sets, QUALITY.md and docs/profiles.md).
            assert!(
                a.cost() <= 1.1 * u.cost() || a.risk_minutes() < u.risk_minutes(),
                "{} on draws {draws:?}: {a:?} vs {u:?}",
                w.name
            );
            up.add(&u);
            au.add(&a);
        }
        assert!(
            au.cost() <= 0.8 * up.cost(),
            "draws {draws:?}: cost {} vs {}",
            au.cost(),
            up.cost()
        );
        assert!(
            au.risk_minutes() <= up.risk_minutes(),
            "draws {draws:?}: {au:?} vs {up:?}"
        );
        assert!(
            2 * au.oom_risk_samples <= up.oom_risk_samples,
            "draws {draws:?}: {} vs {} OOM-risk samples",
            au.oom_risk_samples,
            up.oom_risk_samples
        );
        assert!(au.uncovered_ooms <= up.uncovered_ooms, "draws {draws:?}");
        assert!(
            au.changes_per_pod_day() <= 1.0,
            "draws {draws:?}: {} changes per pod-day",
            au.changes_per_pod_day()
        );
    }
}
