//! The backtest workload suite: nineteen shapes of container usage at one-minute resolution, each a generator
//! that draws its own parameters (peak hour, amplitude, sizes, burst timing, …) and its noise from a seed. A
//! *draw* of a shape is one seed; the suite is judged on two disjoint sets of draws, [`TUNING_DRAWS`] (what
//! profiles may be tuned on) and [`VALIDATION_DRAWS`] (what they are judged on). `tailor backtest --suite`
//! runs them; `examples/workloads/README.md` says what each shape models and where it comes from.
//! [`JOB_SUITE`] holds the Job/CronJob shapes, sampled every second inside their short runs, run apart
//! (`--suite-shapes jobs`).
//!
//! The shapes follow published characterisations of production container usage — the Google 2019 Borg trace
//! (Tirmazi et al., EuroSys 2020; Rzadca et al., "Autopilot", EuroSys 2020), the Alibaba 2017/2018 cluster
//! traces (Lu et al., IEEE BigData 2017; Guo et al., IWQoS 2019) and Azure's VM traces (Cortez et al.,
//! "Resource Central", SOSP 2017): daily periodic serving load, weekly cycles, bursts at varying hours,
//! heavy-tailed spikes, batch windows and short-lived batch tasks, memory growth and restarts, step changes at
//! deploys. The parameter ranges are ours, chosen before any profile was measured on them.

use std::f64::consts::PI;

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;

use crate::replay::{Trace, TraceContainer, TracePod};

/// Unix seconds of the suite's first minute (a Monday, 00:00 UTC).
pub const START: f64 = 1_717_977_600.0;
const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
const DAY: usize = 1440;
/// Days every shape runs (the first is the backtest's default warm-up).
pub const DAYS: usize = 9;

/// Draws profiles may be tuned on (`tailor backtest --suite --suite-set tuning`).
pub const TUNING_DRAWS: [u64; 3] = [0, 1, 2];
/// Draws profiles are judged on; never used for tuning (`--suite-set validation`).
pub const VALIDATION_DRAWS: [u64; 3] = [1000, 1001, 1002];

/// What a shape's CPU does over a day, for reading the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A daily (or weekly) pattern that repeats.
    Periodic,
    /// No daily repetition: bursts, tails, steady load, trends.
    Aperiodic,
    /// Dominated by memory behaviour or pod turnover.
    Lifecycle,
    /// Short Job runs, a new pod each, sampled every second ([`JOB_SUITE`]).
    Jobs,
}

/// A workload shape: name, one-line description, its family, and the function building a trace from a seed.
pub struct Workload {
    /// Trace id.
    pub name: &'static str,
    /// What it models.
    pub description: &'static str,
    /// Its family.
    pub family: Family,
    build: fn(&mut XorShiftRng) -> Trace,
    seed: u64,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("name", &self.name)
            .finish()
    }
}

impl Workload {
    /// The shape's first tuning draw (same bytes every call).
    pub fn trace(&self) -> Trace {
        self.trace_with_draw(0)
    }

    /// One draw of the shape: its parameters and noise from the seed `draw`.
    pub fn trace_with_draw(&self, draw: u64) -> Trace {
        let seed = self
            .seed
            .wrapping_mul(0xD1B5_4A32_D192_ED03)
            .wrapping_add(draw.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut rng = XorShiftRng::seed_from_u64(seed);
        // The first values of a freshly seeded xorshift stream are poorly mixed for nearby seeds.
        for _ in 0..16 {
            let _: u64 = rng.random();
        }
        (self.build)(&mut rng)
    }
}

macro_rules! shape {
    ($name:literal, $family:ident, $build:ident, $seed:literal, $desc:literal) => {
        Workload {
            name: $name,
            description: $desc,
            family: Family::$family,
            build: $build,
            seed: $seed,
        }
    };
}

/// The suite's shapes.
pub const SUITE: &[Workload] = &[
    shape!(
        "web-diurnal",
        Periodic,
        web_diurnal,
        1,
        "web service, 2-3 replicas, one daily peak at 10:00-20:00, night at 10-35 % of the peak"
    ),
    shape!(
        "two-peaks",
        Periodic,
        two_peaks,
        2,
        "consumer app with a morning and an evening peak, quiet between and at night"
    ),
    shape!(
        "weekly",
        Periodic,
        weekly,
        3,
        "API busy on weekdays with a daily peak, 20-50 % of that at weekends"
    ),
    shape!(
        "business-hours",
        Periodic,
        business_hours,
        4,
        "internal tool: a plateau from about 08:00 to 18:00, near idle outside"
    ),
    shape!(
        "nightly-batch",
        Periodic,
        nightly_batch,
        5,
        "long-running service with a 45-90 min batch window at the same night hour, 4-10x its base"
    ),
    shape!(
        "diurnal-weak",
        Periodic,
        diurnal_weak,
        6,
        "service whose daily swing (10-25 %) is smaller than its noise (30-50 %)"
    ),
    shape!(
        "hourly-cron",
        Periodic,
        hourly_cron,
        7,
        "service with an in-process job at the top of every hour: 3-8 min at 3-6x"
    ),
    shape!(
        "random-bursts",
        Aperiodic,
        random_bursts,
        8,
        "1-3 bursts a day at random hours, 30-120 min at 3-8x the base"
    ),
    shape!(
        "heavy-tail",
        Aperiodic,
        heavy_tail,
        9,
        "short CPU spikes of Pareto-distributed size (tail index 1.2-2) on a steady base"
    ),
    shape!(
        "flat-noisy",
        Aperiodic,
        flat_noisy,
        10,
        "steady load, 1-2 replicas, 10-40 % noise, no daily pattern"
    ),
    shape!(
        "queue-worker",
        Aperiodic,
        queue_worker,
        11,
        "consumer busy for random stretches (mean 1-4 h) and idle between (mean 2-8 h)"
    ),
    shape!(
        "growth",
        Aperiodic,
        growth,
        12,
        "organic growth: load and memory up 3-10 % a day, weak daily pattern"
    ),
    shape!(
        "deploy-step-up",
        Aperiodic,
        deploy_step_up,
        13,
        "a release on day 3-6 (new pods) multiplies CPU by 1.5-2.5 and memory by 1.2-1.8"
    ),
    shape!(
        "deploy-step-down",
        Aperiodic,
        deploy_step_down,
        14,
        "a release on day 3-6 (new pods) cuts CPU and memory to 40-70 %"
    ),
    shape!(
        "batch-cron",
        Lifecycle,
        batch_cron,
        15,
        "cron job every 2-6 h, a new pod per run of 20-60 min at 0.5-3 cores"
    ),
    shape!(
        "memory-leak",
        Lifecycle,
        memory_leak,
        16,
        "memory grows 5-25 MiB/h until a restart (new pod) every 1.5-3 days"
    ),
    shape!(
        "jvm-heap",
        Lifecycle,
        jvm_heap,
        17,
        "JVM heap grows to -Xmx 1-4 GiB within 2-10 h and stays; GC CPU bursts"
    ),
    shape!(
        "idle-sidecar",
        Lifecycle,
        idle_sidecar,
        18,
        "mostly idle proxy sidecar next to a small app with a daily pattern"
    ),
    shape!(
        "oom-spikes",
        Lifecycle,
        oom_spikes,
        19,
        "memory spikes 2-5 times a day, OOM-killed above its limit (recorded OOMs, new pod)"
    ),
];

/// The Job/CronJob shapes (`tailor backtest --suite --suite-shapes jobs`): runs shorter than a metrics
/// scrape, sampled every [`JOB_SAMPLE_SECONDS`] so that a run's true peak is in the trace. Not part of
/// [`SUITE`]: its tables stay as they were.
pub const JOB_SUITE: &[Workload] = &[
    shape!(
        "cron-short",
        Jobs,
        cron_short,
        101,
        "CronJob every 2-60 min, a new pod per run of 10-50 s, a memory peak of 2-6 s at 1.3-2x its level"
    ),
    shape!(
        "cron-spiky",
        Jobs,
        cron_spiky,
        102,
        "CronJob every 5-60 min, runs of 20-50 s whose 1-3 s peak is 3-6x their mean memory and CPU"
    ),
];

/// Seconds between two samples of a Job run (the trace's own resolution inside runs).
pub const JOB_SAMPLE_SECONDS: f64 = 1.0;

/// One CronJob shape's drawn parameters; sizes vary per run by `size_noise`.
struct Cron {
    id: &'static str,
    /// Minutes between scheduled runs.
    every: usize,
    /// Seconds after the scheduled minute a run starts (before its own 0-3 s of jitter).
    phase: f64,
    /// Run length range (seconds).
    length: (f64, f64),
    cores: f64,
    memory: f64,
    /// Peak memory as a multiple of the run's level, and its length in seconds.
    peak: (f64, f64),
    peak_seconds: (f64, f64),
    /// CPU during the peak as a multiple of the run's level.
    cpu_peak: f64,
    size_noise: f64,
}

/// A `*` container policy capping memory at `bytes` (the VPA's `maxAllowed`).
fn max_allowed_memory(bytes: f64) -> Option<tailor_crds::PodResourcePolicy> {
    let mib = (bytes / MIB).ceil();
    serde_json::from_value(serde_json::json!({
        "containerPolicies": [{"containerName": "*", "maxAllowed": {"memory": format!("{mib}Mi")}}]
    }))
    .ok()
}

/// One CronJob's runs: a pod per scheduled run, sampled every [`JOB_SAMPLE_SECONDS`]; memory ramps to its
/// level in the first fifth of the run and holds, with one peak at a random moment.
fn cron_runs(rng: &mut XorShiftRng, p: &Cron) -> Trace {
    let top = p.memory * p.peak.1 * (1.0 + p.size_noise);
    let mut cs = Vec::new();
    for (run, minute) in (0..DAYS * DAY).step_by(p.every.max(1)).enumerate() {
        let begin = 60.0 * minute as f64 + p.phase + uni(rng, 0.0, 3.0);
        let length = uni(rng, p.length.0, p.length.1);
        let size = noise(rng, p.size_noise);
        let factor = uni(rng, p.peak.0, p.peak.1);
        let peak_len = uni(rng, p.peak_seconds.0, p.peak_seconds.1);
        let peak_at = uni(rng, 0.2 * length, (length - peak_len).max(0.2 * length));
        // A human-set request that holds every run: what the pods had before any recommendation.
        let mut c = container("job", &format!("{}-{run}", p.id), p.cores * 2.0, top * 1.2);
        let mut s = 0.0;
        while s < length {
            let level = (0.3 + 0.7 * s / (0.2 * length)).min(1.0);
            let in_peak = s >= peak_at && s < peak_at + peak_len;
            let (cpu_f, mem_f) = if in_peak {
                (p.cpu_peak, factor)
            } else {
                (1.0, level)
            };
            let at = START + begin + s;
            let cpu = p.cores * size * cpu_f * noise(rng, 0.2);
            let mem = p.memory * size * mem_f * noise(rng, 0.02);
            c.cpu_samples.push([at, (cpu.max(0.0) * 1e4).round() / 1e4]);
            c.memory_samples.push([at, mem.max(0.0).round()]);
            s += JOB_SAMPLE_SECONDS;
        }
        cs.push(c);
    }
    let mut t = trace(p.id, cs);
    t.policy = max_allowed_memory(top * uni(rng, 1.5, 3.0));
    t
}

fn cron_short(rng: &mut XorShiftRng) -> Trace {
    let every = [2, 3, 5, 10, 15, 20, 30, 60][(rng.random::<f64>() * 8.0) as usize % 8];
    let lo = uni(rng, 10.0, 40.0);
    let p = Cron {
        id: "cron-short",
        every,
        phase: uni(rng, 0.0, 60.0),
        length: (lo, (lo + 10.0).min(50.0)),
        cores: log_uni(rng, 0.1, 1.0),
        memory: log_uni(rng, 64.0, 512.0) * MIB,
        peak: (1.3, uni(rng, 1.4, 2.0)),
        peak_seconds: (2.0, 6.0),
        cpu_peak: 1.5,
        size_noise: 0.1,
    };
    cron_runs(rng, &p)
}

fn cron_spiky(rng: &mut XorShiftRng) -> Trace {
    let every = [5, 10, 15, 20, 30, 60][(rng.random::<f64>() * 6.0) as usize % 6];
    let lo = uni(rng, 20.0, 40.0);
    let high = uni(rng, 3.0, 6.0);
    let p = Cron {
        id: "cron-spiky",
        every,
        phase: uni(rng, 0.0, 60.0),
        length: (lo, (lo + 10.0).min(50.0)),
        cores: log_uni(rng, 0.05, 0.5),
        memory: log_uni(rng, 32.0, 256.0) * MIB,
        peak: (high * 0.8, high),
        peak_seconds: (1.0, 3.0),
        cpu_peak: uni(rng, 3.0, 5.0),
        size_noise: 0.1,
    };
    cron_runs(rng, &p)
}

fn t(k: usize) -> f64 {
    START + 60.0 * k as f64
}

/// Hour of the day (fractional) of minute `k`.
fn hour(k: usize) -> f64 {
    (k % DAY) as f64 / 60.0
}

/// Circular distance in hours between two hours of the day.
fn hour_distance(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(24.0);
    d.min(24.0 - d)
}

/// Smooth daily shape in [0, 1] peaking at `peak` (hours).
fn daily_at(k: usize, peak: f64) -> f64 {
    0.5 + 0.5 * (2.0 * PI * (hour(k) - peak) / 24.0).cos()
}

/// A Gaussian bump in [0, 1] around `center` (hours) of `width` (hours).
fn bump(k: usize, center: f64, width: f64) -> f64 {
    let d = hour_distance(hour(k), center) / width;
    (-0.5 * d * d).exp()
}

fn uni(rng: &mut XorShiftRng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

/// Log-uniform in [lo, hi]: sizes spread over orders of magnitude.
fn log_uni(rng: &mut XorShiftRng, lo: f64, hi: f64) -> f64 {
    lo * (hi / lo).powf(rng.random::<f64>())
}

fn noise(rng: &mut XorShiftRng, spread: f64) -> f64 {
    1.0 + spread * (rng.random::<f64>() * 2.0 - 1.0)
}

/// Exponentially distributed with `mean`.
fn exp(rng: &mut XorShiftRng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

fn container(name: &str, pod: &str, cpu_req: f64, mem_req: f64) -> TraceContainer {
    TraceContainer {
        name: name.into(),
        pod: Some(pod.into()),
        cpu_request_cores: Some(cpu_req),
        memory_request_bytes: Some(mem_req),
        ..Default::default()
    }
}

fn trace(id: &str, containers: Vec<TraceContainer>) -> Trace {
    let mut pods: Vec<String> = containers.iter().filter_map(|c| c.pod.clone()).collect();
    pods.dedup();
    let labels: crate::model::Labels = [("app".to_string(), id.to_string())].into_iter().collect();
    Trace {
        id: id.into(),
        pods: Some(
            pods.into_iter()
                .map(|name| TracePod {
                    name,
                    labels: Some(labels.clone()),
                })
                .collect(),
        ),
        containers,
        ..Default::default()
    }
}

fn push(c: &mut TraceContainer, k: usize, cpu: f64, mem: f64) {
    c.cpu_samples
        .push([t(k), (cpu.max(0.0) * 1e4).round() / 1e4]);
    c.memory_samples.push([t(k), mem.max(0.0).round()]);
}

/// `n` replicas of one long-running container, each sample from `f(rng, k)` = (cores, bytes).
fn replicas(
    rng: &mut XorShiftRng,
    id: &str,
    name: &str,
    n: usize,
    req: (f64, f64),
    mut f: impl FnMut(&mut XorShiftRng, usize) -> (f64, f64),
) -> Trace {
    let mut cs: Vec<TraceContainer> = (0..n)
        .map(|i| container(name, &format!("{id}-{i}"), req.0, req.1))
        .collect();
    for k in 0..DAYS * DAY {
        for c in &mut cs {
            let (cpu, mem) = f(rng, k);
            push(c, k, cpu, mem);
        }
    }
    trace(id, cs)
}

fn web_diurnal(rng: &mut XorShiftRng) -> Trace {
    let n = 2 + usize::from(rng.random::<f64>() < 0.5);
    let peak_h = uni(rng, 10.0, 20.0);
    let night = uni(rng, 0.1, 0.35);
    let peak = log_uni(rng, 0.3, 2.0);
    let spread = uni(rng, 0.15, 0.35);
    let mem = log_uni(rng, 200.0, 1500.0) * MIB;
    replicas(
        rng,
        "web-diurnal",
        "web",
        n,
        (2.0 * peak, 2.0 * mem),
        |rng, k| {
            let d = daily_at(k, peak_h);
            (
                peak * (night + (1.0 - night) * d) * noise(rng, spread),
                mem * (0.8 + 0.2 * d) * noise(rng, 0.03),
            )
        },
    )
}

fn two_peaks(rng: &mut XorShiftRng) -> Trace {
    let (m, e) = (uni(rng, 8.0, 11.0), uni(rng, 18.0, 22.0));
    let (wm, we) = (uni(rng, 1.0, 2.5), uni(rng, 1.0, 2.5));
    let evening = uni(rng, 0.6, 1.0);
    let base = uni(rng, 0.1, 0.3);
    let peak = log_uni(rng, 0.2, 1.5);
    let spread = uni(rng, 0.15, 0.3);
    let mem = log_uni(rng, 150.0, 1000.0) * MIB;
    replicas(rng, "two-peaks", "app", 2, (peak, mem * 2.0), |rng, k| {
        let d = bump(k, m, wm).max(evening * bump(k, e, we));
        (
            peak * (base + (1.0 - base) * d) * noise(rng, spread),
            mem * (0.85 + 0.15 * d) * noise(rng, 0.03),
        )
    })
}

fn weekly(rng: &mut XorShiftRng) -> Trace {
    let peak_h = uni(rng, 11.0, 17.0);
    let weekend = uni(rng, 0.2, 0.5);
    let night = uni(rng, 0.05, 0.25);
    let peak = log_uni(rng, 0.4, 2.0);
    let spread = uni(rng, 0.15, 0.3);
    let mem = log_uni(rng, 300.0, 2000.0) * MIB;
    replicas(
        rng,
        "weekly",
        "api",
        1,
        (2.0 * peak, 2.0 * mem),
        |rng, k| {
            let level = if (k / DAY) % 7 >= 5 { weekend } else { 1.0 };
            let d = level * daily_at(k, peak_h);
            (
                peak * (night + (1.0 - night) * d) * noise(rng, spread),
                mem * (0.6 + 0.4 * d) * noise(rng, 0.02),
            )
        },
    )
}

fn business_hours(rng: &mut XorShiftRng) -> Trace {
    let (from, to) = (uni(rng, 7.0, 9.0), uni(rng, 17.0, 19.0));
    let idle = uni(rng, 0.05, 0.2);
    let peak = log_uni(rng, 0.2, 1.5);
    let spread = uni(rng, 0.2, 0.4);
    let mem = log_uni(rng, 200.0, 1200.0) * MIB;
    replicas(
        rng,
        "business-hours",
        "tool",
        1,
        (peak, mem * 1.5),
        |rng, k| {
            let h = hour(k);
            let on = ((h - from) * 2.0).clamp(0.0, 1.0) * ((to - h) * 2.0).clamp(0.0, 1.0);
            (
                peak * (idle + (1.0 - idle) * on) * noise(rng, spread),
                mem * (0.85 + 0.15 * on) * noise(rng, 0.03),
            )
        },
    )
}

fn nightly_batch(rng: &mut XorShiftRng) -> Trace {
    let at = uni(rng, 0.0, 5.0);
    let minutes = uni(rng, 45.0, 90.0);
    let base = log_uni(rng, 0.05, 0.3);
    let factor = uni(rng, 4.0, 10.0);
    let mem = log_uni(rng, 200.0, 800.0) * MIB;
    replicas(
        rng,
        "nightly-batch",
        "svc",
        1,
        (base * 4.0, mem * 2.0),
        |rng, k| {
            let since = (hour(k) - at).rem_euclid(24.0) * 60.0;
            let busy = since < minutes;
            let (c, m) = if busy {
                (base * factor, mem * 1.5)
            } else {
                (base, mem)
            };
            (c * noise(rng, 0.25), m * noise(rng, 0.03))
        },
    )
}

fn diurnal_weak(rng: &mut XorShiftRng) -> Trace {
    let peak_h = uni(rng, 10.0, 20.0);
    let swing = uni(rng, 0.1, 0.25);
    let mean = log_uni(rng, 0.2, 1.5);
    let spread = uni(rng, 0.3, 0.5);
    let mem = log_uni(rng, 200.0, 1000.0) * MIB;
    replicas(
        rng,
        "diurnal-weak",
        "svc",
        2,
        (2.0 * mean, 1.5 * mem),
        |rng, k| {
            let d = daily_at(k, peak_h) - 0.5;
            (
                mean * (1.0 + 2.0 * swing * d) * noise(rng, spread),
                mem * noise(rng, 0.03),
            )
        },
    )
}

fn hourly_cron(rng: &mut XorShiftRng) -> Trace {
    let minutes = uni(rng, 3.0, 8.0) as usize;
    let factor = uni(rng, 3.0, 6.0);
    let base = log_uni(rng, 0.05, 0.5);
    let mem = log_uni(rng, 200.0, 1000.0) * MIB;
    replicas(
        rng,
        "hourly-cron",
        "svc",
        1,
        (base * 3.0, mem * 1.5),
        |rng, k| {
            let job = k % 60 < minutes;
            let (c, m) = if job {
                (base * factor, mem * 1.2)
            } else {
                (base, mem)
            };
            (c * noise(rng, 0.25), m * noise(rng, 0.02))
        },
    )
}

fn random_bursts(rng: &mut XorShiftRng) -> Trace {
    let base = log_uni(rng, 0.05, 0.4);
    let mem = log_uni(rng, 200.0, 1000.0) * MIB;
    let spread = uni(rng, 0.15, 0.3);
    // Per day 1-3 bursts, each at a random minute, of random length and height.
    let mut bursts: Vec<(usize, usize, f64)> = Vec::new();
    for d in 0..DAYS {
        let n = 1 + (rng.random::<f64>() * 3.0) as usize;
        for _ in 0..n {
            let start = d * DAY + (rng.random::<f64>() * DAY as f64) as usize;
            let len = uni(rng, 30.0, 120.0) as usize;
            bursts.push((start, start + len, uni(rng, 3.0, 8.0)));
        }
    }
    replicas(
        rng,
        "random-bursts",
        "svc",
        1,
        (base * 3.0, mem * 1.5),
        |rng, k| {
            let f = bursts
                .iter()
                .filter(|(a, b, _)| (*a..*b).contains(&k))
                .map(|x| x.2)
                .fold(1.0, f64::max);
            (
                base * f * noise(rng, spread),
                mem * (1.0 + 0.1 * (f - 1.0).min(3.0)) * noise(rng, 0.02),
            )
        },
    )
}

fn heavy_tail(rng: &mut XorShiftRng) -> Trace {
    let base = log_uni(rng, 0.1, 1.0);
    let alpha = uni(rng, 1.2, 2.0);
    let rate = uni(rng, 0.005, 0.03);
    let mem = log_uni(rng, 200.0, 1500.0) * MIB;
    let (mut left, mut size) = (0usize, 1.0);
    replicas(
        rng,
        "heavy-tail",
        "svc",
        1,
        (base * 3.0, mem * 1.5),
        move |rng, k| {
            let _ = k;
            if left == 0 && rng.random::<f64>() < rate {
                left = 1 + (rng.random::<f64>() * 5.0) as usize;
                // Pareto with minimum 1.5x the base, capped at 20x.
                size = (1.5 * (1.0 - rng.random::<f64>()).powf(-1.0 / alpha)).min(20.0);
            }
            let f = if left > 0 {
                left -= 1;
                size
            } else {
                1.0
            };
            (base * f * noise(rng, 0.2), mem * noise(rng, 0.03))
        },
    )
}

fn flat_noisy(rng: &mut XorShiftRng) -> Trace {
    let n = 1 + usize::from(rng.random::<f64>() < 0.5);
    let mean = log_uni(rng, 0.1, 2.0);
    let spread = uni(rng, 0.1, 0.4);
    let mem = log_uni(rng, 150.0, 2000.0) * MIB;
    replicas(
        rng,
        "flat-noisy",
        "svc",
        n,
        (mean * 2.0, mem * 1.5),
        |rng, _| (mean * noise(rng, spread), mem * noise(rng, 0.03)),
    )
}

fn queue_worker(rng: &mut XorShiftRng) -> Trace {
    let (busy_mean, idle_mean) = (uni(rng, 60.0, 240.0), uni(rng, 120.0, 480.0));
    let idle = log_uni(rng, 0.02, 0.1);
    let busy = idle * uni(rng, 5.0, 15.0);
    let mem = log_uni(rng, 200.0, 1000.0) * MIB;
    // Alternating stretches, drawn up front.
    let mut on = vec![false; DAYS * DAY];
    let (mut k, mut state) = (0usize, false);
    while k < on.len() {
        let len = exp(rng, if state { busy_mean } else { idle_mean }).max(10.0) as usize;
        for x in on.iter_mut().skip(k).take(len) {
            *x = state;
        }
        k += len;
        state = !state;
    }
    replicas(
        rng,
        "queue-worker",
        "worker",
        1,
        (busy, mem * 2.0),
        |rng, k| {
            let b = on.get(k).copied().unwrap_or(false);
            let (c, m) = if b { (busy, mem * 1.4) } else { (idle, mem) };
            (c * noise(rng, 0.25), m * noise(rng, 0.03))
        },
    )
}

fn growth(rng: &mut XorShiftRng) -> Trace {
    let rate = uni(rng, 0.03, 0.10);
    let peak_h = uni(rng, 10.0, 20.0);
    let base = log_uni(rng, 0.1, 1.0);
    let mem = log_uni(rng, 200.0, 1000.0) * MIB;
    replicas(
        rng,
        "growth",
        "svc",
        1,
        (base * 2.0, mem * 2.0),
        |rng, k| {
            let g = (1.0 + rate).powf(k as f64 / DAY as f64);
            let d = 0.85 + 0.3 * daily_at(k, peak_h);
            (
                base * g * d * noise(rng, 0.25),
                mem * g.sqrt() * noise(rng, 0.02),
            )
        },
    )
}

/// A release at a random minute of day 3-6 that replaces the pods and scales usage by (cpu, memory).
fn deploy(rng: &mut XorShiftRng, id: &str, cpu_f: (f64, f64), mem_f: (f64, f64)) -> Trace {
    let at = (uni(rng, 3.0, 6.0) * DAY as f64) as usize;
    let (cf, mf) = (uni(rng, cpu_f.0, cpu_f.1), uni(rng, mem_f.0, mem_f.1));
    let peak_h = uni(rng, 10.0, 20.0);
    let swing = uni(rng, 0.0, 0.5);
    let base = log_uni(rng, 0.1, 1.0);
    let mem = log_uni(rng, 200.0, 1200.0) * MIB;
    let spread = uni(rng, 0.15, 0.3);
    let mut before = container("svc", &format!("{id}-a"), base * 2.0, mem * 2.0);
    let mut after = container("svc", &format!("{id}-b"), base * 2.0, mem * 2.0);
    for k in 0..DAYS * DAY {
        let (c, pod) = if k < at {
            ((1.0, 1.0), &mut before)
        } else {
            ((cf, mf), &mut after)
        };
        let d = 1.0 - swing + 2.0 * swing * daily_at(k, peak_h);
        push(
            pod,
            k,
            base * c.0 * d * noise(rng, spread),
            mem * c.1 * noise(rng, 0.02),
        );
    }
    trace(id, vec![before, after])
}

fn deploy_step_up(rng: &mut XorShiftRng) -> Trace {
    deploy(rng, "deploy-step-up", (1.5, 2.5), (1.2, 1.8))
}

fn deploy_step_down(rng: &mut XorShiftRng) -> Trace {
    deploy(rng, "deploy-step-down", (0.4, 0.7), (0.4, 0.7))
}

fn batch_cron(rng: &mut XorShiftRng) -> Trace {
    let every = (uni(rng, 2.0, 6.0) * 60.0) as usize;
    let length = uni(rng, 20.0, 60.0) as usize;
    let cores = log_uni(rng, 0.5, 3.0);
    let mem = log_uni(rng, 400.0, 2000.0) * MIB;
    let mut cs = Vec::new();
    for (run, begin) in (0..DAYS * DAY - length).step_by(every).enumerate() {
        let mut c = container("job", &format!("batch-{run}"), cores * 1.5, mem * 1.5);
        let size = noise(rng, 0.15);
        for m in 0..length {
            let ramp = ((m as f64 + 1.0) / 10.0).min(1.0);
            let cpu = cores * size * noise(rng, 0.2) * ramp;
            let used = (0.2 + 0.8 * size * (m as f64 / length as f64)) * mem;
            push(&mut c, begin + m, cpu, used);
        }
        cs.push(c);
    }
    trace("batch-cron", cs)
}

fn memory_leak(rng: &mut XorShiftRng) -> Trace {
    let leak = uni(rng, 5.0, 25.0) * MIB;
    let life = (uni(rng, 1.5, 3.0) * DAY as f64) as usize;
    let start = log_uni(rng, 200.0, 600.0) * MIB;
    let cpu = log_uni(rng, 0.1, 0.5);
    let peak_h = uni(rng, 10.0, 20.0);
    let mut cs = Vec::new();
    for (i, begin) in (0..DAYS * DAY).step_by(life).enumerate() {
        let mut c = container("app", &format!("leaky-{i}"), cpu * 2.0, 2.0 * GIB);
        for k in begin..(begin + life).min(DAYS * DAY) {
            let age_h = (k - begin) as f64 / 60.0;
            let used = cpu * (0.6 + 0.6 * daily_at(k, peak_h)) * noise(rng, 0.3);
            push(&mut c, k, used, (start + leak * age_h) * noise(rng, 0.01));
        }
        cs.push(c);
    }
    trace("memory-leak", cs)
}

fn jvm_heap(rng: &mut XorShiftRng) -> Trace {
    let xmx = uni(rng, 1.0, 4.0) * GIB;
    let fill = uni(rng, 120.0, 600.0);
    let gc_rate = uni(rng, 0.01, 0.04);
    let cpu = log_uni(rng, 0.2, 1.0);
    let peak_h = uni(rng, 10.0, 20.0);
    replicas(
        rng,
        "jvm-heap",
        "jvm",
        1,
        (cpu * 3.0, xmx * 1.5),
        |rng, k| {
            let heap = xmx * (0.2 + 0.8 * (k as f64 / fill).min(1.0));
            let gc = if rng.random::<f64>() < gc_rate {
                cpu * 3.0
            } else {
                0.0
            };
            (
                cpu * (0.6 + 0.6 * daily_at(k, peak_h)) * noise(rng, 0.25) + gc,
                heap + 150.0 * MIB * noise(rng, 0.05),
            )
        },
    )
}

fn idle_sidecar(rng: &mut XorShiftRng) -> Trace {
    let app_cpu = log_uni(rng, 0.05, 0.3);
    let peak_h = uni(rng, 10.0, 20.0);
    let app_mem = log_uni(rng, 100.0, 400.0) * MIB;
    let side_mem = log_uni(rng, 15.0, 40.0) * MIB;
    let mut app = container("app", "shop-0", app_cpu * 3.0, app_mem * 2.0);
    let mut side = container("proxy", "shop-0", 0.1, 128.0 * MIB);
    for k in 0..DAYS * DAY {
        let d = daily_at(k, peak_h);
        push(
            &mut app,
            k,
            app_cpu * (0.3 + 0.7 * d) * noise(rng, 0.3),
            app_mem * (0.9 + 0.1 * d) * noise(rng, 0.02),
        );
        let burst = if rng.random::<f64>() < 0.01 {
            0.02
        } else {
            0.0
        };
        push(
            &mut side,
            k,
            0.002 * noise(rng, 0.5) + burst,
            side_mem * noise(rng, 0.02),
        );
    }
    trace("idle-sidecar", vec![app, side])
}

fn oom_spikes(rng: &mut XorShiftRng) -> Trace {
    let base = log_uni(rng, 300.0, 800.0) * MIB;
    let limit = base * 2.5;
    let per_day = uni(rng, 2.0, 5.0);
    let cpu = log_uni(rng, 0.1, 0.5);
    let peak_h = uni(rng, 10.0, 20.0);
    let mut cs = Vec::new();
    let mut c = container("worker", "worker-0", cpu * 2.0, limit);
    let mut pod = 0;
    let mut spike_left = 0usize;
    let mut spike_size = 0.0;
    for k in 0..DAYS * DAY {
        if spike_left == 0 && rng.random::<f64>() < per_day / DAY as f64 {
            spike_left = 20;
            spike_size = base * uni(rng, 0.8, 1.9);
        }
        let extra = if spike_left > 0 {
            spike_left -= 1;
            spike_size * (1.0 - spike_left as f64 / 20.0)
        } else {
            0.0
        };
        let mem = base * noise(rng, 0.03) + extra;
        let used = cpu * (0.6 + 0.6 * daily_at(k, peak_h)) * noise(rng, 0.3)
            + if extra > 0.0 { cpu } else { 0.0 };
        if mem > limit {
            c.ooms.push(vec![Some(t(k)), Some(limit)]);
            cs.push(c);
            pod += 1;
            c = container("worker", &format!("worker-{pod}"), cpu * 2.0, limit);
            spike_left = 0;
            continue;
        }
        push(&mut c, k, used, mem);
    }
    cs.push(c);
    trace("oom-spikes", cs)
}
