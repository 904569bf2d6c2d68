//! The backtest workload suite: eight synthetic workloads at one-minute resolution, each from a fixed seed, so
//! every run (and every machine) sees the same usage. `tailor backtest --suite` runs them;
//! `examples/workloads/` describes them.

use std::f64::consts::PI;

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;

use crate::replay::{Trace, TraceContainer, TracePod};

/// Unix seconds of the suite's first minute (a Monday, 00:00 UTC).
pub const START: f64 = 1_717_977_600.0;
const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
const DAY: usize = 1440;

/// A workload generator: name, one-line description, and the function building its trace.
pub struct Workload {
    /// Trace id.
    pub name: &'static str,
    /// What it models.
    pub description: &'static str,
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
    /// The workload's trace (same bytes every call).
    pub fn trace(&self) -> Trace {
        self.trace_with_draw(0)
    }

    /// The workload with another draw of its noise (and spikes, runs, sizes): `draw` 0 is [`Workload::trace`];
    /// others check that a result does not hang on one draw.
    pub fn trace_with_draw(&self, draw: u64) -> Trace {
        let seed = self
            .seed
            .wrapping_add(draw.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut rng = XorShiftRng::seed_from_u64(seed);
        (self.build)(&mut rng)
    }
}

/// The suite.
pub const SUITE: &[Workload] = &[
    Workload {
        name: "web-diurnal",
        description: "web service, two replicas, daily peak at 14:00, 14 days",
        build: web_diurnal,
        seed: 1,
    },
    Workload {
        name: "weekly",
        description: "API busy on weekdays, quiet at weekends, 14 days",
        build: weekly,
        seed: 2,
    },
    Workload {
        name: "batch-cron",
        description: "cron job every 4 h, 40 min at 1.5 cores and up to 1.2 GiB, a new pod per run, 10 days",
        build: batch_cron,
        seed: 3,
    },
    Workload {
        name: "memory-leak",
        description: "memory grows 15 MiB/h from 300 MiB until a restart every 2.5 days, 12 days",
        build: memory_leak,
        seed: 4,
    },
    Workload {
        name: "jvm-heap",
        description: "JVM heap grows to -Xmx 2 GiB within 8 h and stays; GC CPU bursts, 10 days",
        build: jvm_heap,
        seed: 5,
    },
    Workload {
        name: "step-change",
        description: "release on day 6 doubles CPU and adds 60 % memory, 12 days",
        build: step_change,
        seed: 6,
    },
    Workload {
        name: "idle-sidecar",
        description: "mostly idle proxy sidecar next to a small app, 14 days",
        build: idle_sidecar,
        seed: 7,
    },
    Workload {
        name: "oom-spikes",
        description: "500 MiB baseline with spikes to 1.4 GiB a few times a day; OOM-killed at its 1.25 GiB limit, 8 days",
        build: oom_spikes,
        seed: 8,
    },
];

fn t(k: usize) -> f64 {
    START + 60.0 * k as f64
}

/// Daily shape in [0, 1] peaking at 14:00.
fn daily(k: usize) -> f64 {
    let h = (k % DAY) as f64 / 60.0;
    0.5 + 0.5 * (2.0 * PI * (h - 8.0) / 24.0).sin()
}

fn noise(rng: &mut XorShiftRng, spread: f64) -> f64 {
    1.0 + spread * (rng.random::<f64>() * 2.0 - 1.0)
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

fn web_diurnal(rng: &mut XorShiftRng) -> Trace {
    let mut cs = vec![
        container("web", "web-0", 1.0, GIB),
        container("web", "web-1", 1.0, GIB),
    ];
    for k in 0..14 * DAY {
        for c in &mut cs {
            let d = daily(k);
            let cpu = (0.08 + 0.5 * d) * noise(rng, 0.35);
            let mem = (280.0 + 90.0 * d) * MIB * noise(rng, 0.03);
            push(c, k, cpu, mem);
        }
    }
    trace("web-diurnal", cs)
}

fn weekly(rng: &mut XorShiftRng) -> Trace {
    let mut c = container("api", "api-0", 2.0, 2.0 * GIB);
    for k in 0..14 * DAY {
        let weekend = (k / DAY) % 7 >= 5;
        let level = if weekend { 0.25 } else { 1.0 };
        let cpu = (0.05 + 0.9 * level * daily(k)) * noise(rng, 0.3);
        let mem = (500.0 + 300.0 * level * daily(k)) * MIB * noise(rng, 0.02);
        push(&mut c, k, cpu, mem);
    }
    trace("weekly", vec![c])
}

fn batch_cron(rng: &mut XorShiftRng) -> Trace {
    let mut cs = Vec::new();
    for run in 0..10 * 6 {
        let mut c = container("job", &format!("batch-{run}"), 2.0, 2.0 * GIB);
        let begin = run * 240;
        let size = noise(rng, 0.15);
        for m in 0..40 {
            let ramp = ((m as f64 + 1.0) / 10.0).min(1.0);
            let cpu = 1.5 * size * noise(rng, 0.2) * ramp;
            let mem = (200.0 + 1000.0 * size * (m as f64 / 40.0)) * MIB;
            push(&mut c, begin + m, cpu, mem);
        }
        cs.push(c);
    }
    trace("batch-cron", cs)
}

fn memory_leak(rng: &mut XorShiftRng) -> Trace {
    let mut cs = Vec::new();
    let life = DAY * 5 / 2;
    for (i, begin) in (0..12 * DAY).step_by(life).enumerate() {
        let mut c = container("app", &format!("leaky-{i}"), 0.5, GIB);
        for k in begin..(begin + life).min(12 * DAY) {
            let age_h = (k - begin) as f64 / 60.0;
            let cpu = (0.1 + 0.15 * daily(k)) * noise(rng, 0.3);
            let mem = (300.0 + 15.0 * age_h) * MIB * noise(rng, 0.01);
            push(&mut c, k, cpu, mem);
        }
        cs.push(c);
    }
    trace("memory-leak", cs)
}

fn jvm_heap(rng: &mut XorShiftRng) -> Trace {
    let mut c = container("jvm", "jvm-0", 2.0, 3.0 * GIB);
    for k in 0..10 * DAY {
        let heap = (0.4 + 1.6 * (k as f64 / 480.0).min(1.0)) * GIB;
        let gc = if rng.random::<f64>() < 0.02 { 1.2 } else { 0.0 };
        let cpu = (0.2 + 0.3 * daily(k)) * noise(rng, 0.25) + gc;
        let mem = heap + 150.0 * MIB * noise(rng, 0.05);
        push(&mut c, k, cpu, mem);
    }
    trace("jvm-heap", vec![c])
}

fn step_change(rng: &mut XorShiftRng) -> Trace {
    let mut c = container("svc", "svc-0", 1.0, GIB);
    for k in 0..12 * DAY {
        let after = k >= 6 * DAY;
        let (cf, mf) = if after { (2.0, 1.6) } else { (1.0, 1.0) };
        let cpu = cf * (0.1 + 0.2 * daily(k)) * noise(rng, 0.3);
        let mem = mf * (400.0 + 50.0 * daily(k)) * MIB * noise(rng, 0.02);
        push(&mut c, k, cpu, mem);
    }
    trace("step-change", vec![c])
}

fn idle_sidecar(rng: &mut XorShiftRng) -> Trace {
    let mut app = container("app", "shop-0", 0.5, 512.0 * MIB);
    let mut side = container("proxy", "shop-0", 0.1, 128.0 * MIB);
    for k in 0..14 * DAY {
        let cpu = (0.05 + 0.1 * daily(k)) * noise(rng, 0.3);
        let mem = (150.0 + 20.0 * daily(k)) * MIB * noise(rng, 0.02);
        push(&mut app, k, cpu, mem);
        let burst = if rng.random::<f64>() < 0.01 {
            0.02
        } else {
            0.0
        };
        push(
            &mut side,
            k,
            0.002 * noise(rng, 0.5) + burst,
            22.0 * MIB * noise(rng, 0.02),
        );
    }
    trace("idle-sidecar", vec![app, side])
}

fn oom_spikes(rng: &mut XorShiftRng) -> Trace {
    let limit = 1.25 * GIB;
    let mut cs = Vec::new();
    let mut c = container("worker", "worker-0", 0.5, limit);
    let mut pod = 0;
    let mut spike_left = 0usize;
    let mut spike_size = 0.0;
    for k in 0..8 * DAY {
        if spike_left == 0 && rng.random::<f64>() < 3.0 / DAY as f64 {
            spike_left = 20;
            spike_size = (0.5 + 0.45 * rng.random::<f64>()) * GIB;
        }
        let extra = if spike_left > 0 {
            spike_left -= 1;
            spike_size * (1.0 - spike_left as f64 / 20.0)
        } else {
            0.0
        };
        let mem = 500.0 * MIB * noise(rng, 0.03) + extra;
        let cpu = (0.1 + 0.2 * daily(k)) * noise(rng, 0.3) + if extra > 0.0 { 0.3 } else { 0.0 };
        if mem > limit {
            c.ooms.push(vec![Some(t(k)), Some(limit)]);
            cs.push(c);
            pod += 1;
            c = container("worker", &format!("worker-{pod}"), 0.5, limit);
            spike_left = 0;
            continue;
        }
        push(&mut c, k, cpu, mem);
    }
    cs.push(c);
    trace("oom-spikes", cs)
}
