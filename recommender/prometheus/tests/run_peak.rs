//! The run-peak query ([`tailor_prometheus::run_peak`]) against a real Prometheus (Debian's `prometheus`,
//! the samples written as a TSDB block by `promtool tsdb create-blocks-from openmetrics`): a 90-second run
//! scraped every 15 seconds, next to another container of the same pod and another run's pod, which must
//! not leak into it. The binaries must be installed (`hack/install-deps.sh`): their absence fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tailor_prometheus::client::{ClientConfig, PromClient};
use tailor_prometheus::history::HistoryConfig;
use tailor_prometheus::run_peak::{Run, run_peak};

/// The run's start (unix seconds).
const START: i64 = 1_717_200_000;
const MIB: f64 = 1_048_576.0;

fn binary(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{name}` not found: install Debian's prometheus (hack/install-deps.sh)")
        })
}

/// Prometheus, killed and its data removed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `(pod, container, memory MiB per scrape, CPU cores per scrape interval)`, scraped every 15 s from START.
type Container<'a> = (&'a str, &'a str, &'a [f64], &'a [f64]);

/// A run scraped once: `(pod, memory MiB, CPU counter in core-seconds, scrape time)`.
type Flash<'a> = (&'a str, f64, f64, i64);

fn openmetrics(containers: &[Container<'_>], flashes: &[Flash<'_>]) -> String {
    let mut mem = String::from("# TYPE container_memory_working_set_bytes gauge\n");
    let mut cpu = String::from("# TYPE container_cpu_usage_seconds counter\n");
    for (pod, c, mib, cores) in containers {
        let l = format!("namespace=\"batch\",pod=\"{pod}\",container=\"{c}\",job=\"kubelet\"");
        let mut counter = 0.0;
        for (i, m) in mib.iter().enumerate() {
            let t = START + 15 * i as i64;
            mem.push_str(&format!(
                "container_memory_working_set_bytes{{{l}}} {} {t}\n",
                m * MIB
            ));
            if i > 0 {
                counter += cores[i - 1] * 15.0;
            }
            cpu.push_str(&format!(
                "container_cpu_usage_seconds_total{{{l}}} {counter} {t}\n"
            ));
        }
    }
    for (pod, mib, counter, t) in flashes {
        let l = format!("namespace=\"batch\",pod=\"{pod}\",container=\"task\",job=\"kubelet\"");
        mem.push_str(&format!(
            "container_memory_working_set_bytes{{{l}}} {} {t}\n",
            mib * MIB
        ));
        cpu.push_str(&format!(
            "container_cpu_usage_seconds_total{{{l}}} {counter} {t}\n"
        ));
    }
    format!("{mem}{cpu}# EOF\n")
}

fn start(containers: &[Container<'_>], flashes: &[Flash<'_>]) -> Server {
    let dir = std::env::temp_dir().join(format!("tailor-run-peak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let om = dir.join("runs.om");
    std::fs::write(&om, openmetrics(containers, flashes)).unwrap();
    let data = dir.join("data");
    let out = Command::new(binary("promtool"))
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        dir.join("prometheus.yml"),
        "global:\n  scrape_interval: 15s\n",
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let child = Command::new(binary("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).unwrap())
        .spawn()
        .unwrap();
    Server {
        child,
        dir,
        url: format!("http://127.0.0.1:{port}"),
    }
}

async fn ready(client: &PromClient, server: &mut Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.query("vector(1)", START * 1000).await.is_err() {
        if let Ok(Some(st)) = server.child.try_wait() {
            let log = std::fs::read_to_string(server.dir.join("log")).unwrap_or_default();
            panic!("prometheus exited ({st}):\n{log}");
        }
        assert!(Instant::now() < deadline, "prometheus not ready after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_run_peak_query_reads_the_runs_largest_memory_and_cpu_rate() {
    // Seven scrapes over 90 s: memory peaks at 80 MiB at 45 s; the CPU runs at 0.5 cores, then 2 cores
    // for 30 s, then 0.5.
    let task_mem = [10.0, 20.0, 40.0, 80.0, 30.0, 25.0, 20.0];
    let task_cpu = [0.5, 0.5, 2.0, 2.0, 0.5, 0.5];
    let busy = [500.0; 7];
    let busy_cpu = [8.0; 6];
    let mut server = start(
        &[
            ("nightly-1-x", "task", &task_mem, &task_cpu),
            ("nightly-1-x", "sidecar", &busy, &busy_cpu),
            ("nightly-2-x", "task", &busy, &busy_cpu),
        ],
        &[("flash-1-x", 64.0, 5.0, START + 105)],
    );
    let client = PromClient::new(ClientConfig {
        url: server.url.clone(),
        retries: 0,
        ..Default::default()
    })
    .unwrap();
    ready(&client, &mut server).await;
    let run = Run {
        namespace: "batch".into(),
        pod: "nightly-1-x".into(),
        container: "task".into(),
        start_ms: START * 1000,
        end_ms: (START + 90) * 1000,
    };
    let cfg = HistoryConfig {
        rate_window: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let peak = run_peak(&client, &cfg, &run).await.unwrap();
    assert_eq!(peak.memory_bytes, Some(80.0 * MIB), "{peak:?}");
    println!("run peak: {peak:?}");
    let cpu = peak.cpu_cores.unwrap();
    // A 30-second rate over the two busy intervals is 2 cores; rate's extrapolation at a window's edge may
    // add up to a half interval either way.
    assert!((1.9..=2.6).contains(&cpu), "largest CPU rate {cpu}");
    // A run the store never saw has no peak.
    let unseen = Run {
        pod: "nightly-3-x".into(),
        ..run
    };
    let peak = run_peak(&client, &cfg, &unseen).await.unwrap();
    assert_eq!(peak, Default::default());
    // A run of 10 s scraped once, 5 s after its start, with 5 core-seconds used: no rate, its mean instead.
    let flash = Run {
        pod: "flash-1-x".into(),
        start_ms: (START + 100) * 1000,
        end_ms: (START + 110) * 1000,
        ..unseen
    };
    let peak = run_peak(&client, &cfg, &flash).await.unwrap();
    assert_eq!(peak.memory_bytes, Some(64.0 * MIB), "{peak:?}");
    assert_eq!(
        peak.cpu_cores,
        Some(1.0),
        "5 core-seconds over the 5 s to its scrape: {peak:?}"
    );
}
