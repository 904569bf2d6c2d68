//! Generates `examples/traces/demo.json`, the bundled usage trace of the README's first command:
//! `cargo run -p tailor-engine --example gen_demo_trace > examples/traces/demo.json`.
//!
//! Deterministic (splitmix64): two days at a two-minute resolution of
//! - `shop/web`: two replicas, each with `app` (diurnal CPU, steady memory) and `istio-proxy` (small sidecar);
//! - `shop/worker`: one `worker` container whose memory creeps up and is OOM-killed once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::fmt::Write;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

const START: i64 = 1_717_200_000;
const STEP: i64 = 120;
const STEPS: i64 = 2 * 86_400 / STEP;
const MI: f64 = 1_048_576.0;

fn series(
    rng: &mut Rng,
    cpu: impl Fn(i64, f64) -> f64,
    mem: impl Fn(i64, f64) -> f64,
) -> (String, String) {
    let (mut c, mut m) = (String::new(), String::new());
    for k in 0..STEPS {
        let t = START + k * STEP;
        let sep = if k == 0 { "" } else { "," };
        let _ = write!(c, "{sep}[{t},{:.4}]", cpu(k, rng.next()));
        let _ = write!(m, "{sep}[{t},{:.0}]", mem(k, rng.next()));
    }
    (c, m)
}

fn container(
    name: &str,
    pod: &str,
    cpu_req: f64,
    mem_req: f64,
    s: (String, String),
    ooms: &str,
) -> String {
    format!(
        "{{\"name\":\"{name}\",\"pod\":\"{pod}\",\"cpu_request_cores\":{cpu_req},\"memory_request_bytes\":{mem_req},\n  \"cpu_samples\":[{}],\n  \"memory_samples\":[{}],\n  \"ooms\":[{ooms}]}}",
        s.0, s.1
    )
}

fn main() {
    let mut rng = Rng(7);
    let day = 86_400.0 / STEP as f64;
    let diurnal = move |k: i64| 1.0 + 0.6 * (2.0 * std::f64::consts::PI * k as f64 / day).sin();
    let mut web = Vec::new();
    for pod in ["web-7d9f8c6b5-abcde", "web-7d9f8c6b5-fghij"] {
        let app = series(
            &mut rng,
            |k, n| 0.35 * diurnal(k) * (0.8 + 0.4 * n) + if n > 0.995 { 0.8 } else { 0.0 },
            |_, n| 420.0 * MI * (0.95 + 0.1 * n),
        );
        web.push(container("app", pod, 0.5, 512.0 * MI, app, ""));
        let proxy = series(
            &mut rng,
            |k, n| 0.02 * diurnal(k) * (0.7 + 0.6 * n),
            |_, n| 60.0 * MI * (0.9 + 0.2 * n),
        );
        web.push(container("istio-proxy", pod, 0.1, 128.0 * MI, proxy, ""));
    }
    let worker = series(
        &mut rng,
        |_, n| 0.9 * (0.5 + n),
        |k, n| (600.0 + 300.0 * k as f64 / STEPS as f64) * MI * (0.97 + 0.06 * n),
    );
    let oom_at = START + 30 * 3600;
    let worker = container(
        "worker",
        "worker-0",
        1.0,
        768.0 * MI,
        worker,
        &format!("[{oom_at},null]"),
    );
    let now = START + STEPS * STEP;
    let labels = |app: &str| format!("{{\"app\":\"{app}\"}}");
    println!(
        "[{{\"id\":\"shop/web\",\"now\":{now},\"pods\":[{{\"name\":\"web-7d9f8c6b5-abcde\",\"labels\":{l}}},{{\"name\":\"web-7d9f8c6b5-fghij\",\"labels\":{l}}}],\n \"policy\":{{\"containerPolicies\":[{{\"containerName\":\"istio-proxy\",\"controlledResources\":[\"cpu\",\"memory\"],\"maxAllowed\":{{\"cpu\":\"200m\"}}}}]}},\n \"containers\":[{}]}},\n{{\"id\":\"shop/worker\",\"now\":{now},\"pods\":[{{\"name\":\"worker-0\",\"labels\":{w}}}],\n \"containers\":[{worker}]}}]",
        web.join(",\n"),
        l = labels("web"),
        w = labels("worker"),
    );
}
