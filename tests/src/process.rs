//! Running the real binaries against the stand-in: finding them in the target directory, a kubeconfig per
//! process, a guard that kills the process when the test ends, its JSON logs, and a TLS client for the
//! webhook.
//!
//! The binaries belong to other packages, so `CARGO_BIN_EXE_*` is not available here: they are looked up
//! next to the test executable (`target/<profile>/`), or in `$TAILOR_BIN_DIR`. `hack/test.sh` builds them
//! first (`cargo test --workspace` builds them too); a missing or stale binary is a clear panic that says
//! how to build it.

// A test fixture: a panic is the failure report, with the message saying what went wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::standin::ApiServer;
use crate::standin::tls::Issued;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn newest_source(dir: &Path, newest: &mut SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            newest_source(&p, newest);
        } else if p.extension().is_some_and(|x| x == "rs")
            && let Ok(m) = e.metadata().and_then(|m| m.modified())
            && m > *newest
        {
            *newest = m;
        }
    }
}

/// The sources cargo built `binary` from, as its dep-info file beside it lists them (`<binary>.d`, one line
/// `<binary>: <source> <source> …`, a space inside a path escaped as `\ `). Only the files compiled into the
/// binary: a unit-test module under `src/` is not one, so editing it does not make the binary stale. `None`
/// without the file (a binary built elsewhere).
fn dep_info_sources(binary: &Path) -> Option<Vec<PathBuf>> {
    let text = std::fs::read_to_string(binary.with_extension("d")).ok()?;
    let (_, sources) = text.lines().next()?.split_once(": ")?;
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = sources.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' if !current.is_empty() => out.push(PathBuf::from(std::mem::take(&mut current))),
            ' ' => {}
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    Some(out)
}

/// The source directories each binary is built from, for a binary without a dep-info file.
fn sources_of(name: &str) -> &'static [&'static str] {
    match name {
        "tailor-recommender" => &[
            "crds/src",
            "core/src",
            "kube/src",
            "recommender/src",
            "recommender/engine/src",
            "recommender/prometheus/src",
        ],
        "tailor-admission" => &["crds/src", "core/src", "kube/src", "admission/src"],
        "tailor-updater" => &["crds/src", "core/src", "kube/src", "updater/src"],
        _ => &[],
    }
}

/// The path of the built binary `name` (`tailor-recommender`, `tailor-admission`, `tailor-updater`). Panics, saying how to
/// build it, when it is missing or older than the sources it is built from.
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("TAILOR_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            // target/<profile>/deps/<test executable>
            let exe = std::env::current_exe().expect("the test executable's path");
            exe.parent()
                .and_then(Path::parent)
                .expect("the test executable lives in target/<profile>/deps")
                .to_path_buf()
        }
    };
    let path = dir.join(name);
    let build = "cargo build -p tailor-recommender -p tailor-admission -p tailor-updater";
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: these tests run the real binaries; build them first with `{build}` \
                 (hack/test.sh does), or point TAILOR_BIN_DIR at them",
                path.display()
            )
        });
    if std::env::var_os("TAILOR_BIN_DIR").is_none() {
        let mut newest = SystemTime::UNIX_EPOCH;
        match dep_info_sources(&path) {
            Some(sources) => {
                for m in sources
                    .iter()
                    .filter_map(|s| s.metadata().and_then(|m| m.modified()).ok())
                {
                    newest = newest.max(m);
                }
            }
            None => {
                let root = workspace_root();
                for d in sources_of(name) {
                    newest_source(&root.join(d), &mut newest);
                }
            }
        }
        assert!(
            built >= newest,
            "{} is older than its sources: rebuild it with `{build}`",
            path.display()
        );
    }
    path
}

/// A free loopback port (bound, then released: good enough for a test).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Writes `server`'s kubeconfig for `user` into `dir`, returning its path.
pub fn write_kubeconfig(server: &ApiServer, dir: &Path, user: &str) -> PathBuf {
    let path = dir.join(format!("kubeconfig-{user}"));
    std::fs::write(&path, server.kubeconfig(user)).expect("writing the kubeconfig");
    path
}

/// Writes a serving certificate as `tls.crt` / `tls.key` into `dir`; returns (cert, key) paths.
pub fn write_cert(issued: &Issued, dir: &Path) -> (PathBuf, PathBuf) {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&crt, &issued.cert_pem).expect("writing tls.crt");
    std::fs::write(&key, &issued.key_pem).expect("writing tls.key");
    (crt, key)
}

/// A child process that is killed when the guard drops (and whose logs are printed if the test panics).
pub struct Process {
    name: String,
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    stdout: Arc<Mutex<Vec<String>>>,
}

/// Collects the lines of `from` into `sink` on a thread of its own until the pipe closes.
fn collect_lines(from: impl std::io::Read + Send + 'static, sink: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
}

impl Process {
    /// Starts `binary` with `args` (stderr and stdout captured; `RUST_LOG`, `NAMESPACE` and `POD_NAME` cleared so
    /// the flags decide; the allocator settings the image and the chart set).
    pub fn spawn(name: &str, binary: &Path, args: &[String]) -> Process {
        let mut child = Command::new(binary)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("NAMESPACE")
            .env_remove("POD_NAME")
            .env("MIMALLOC_ARENA_EAGER_COMMIT", "0")
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let (logs, stdout) = Default::default();
        collect_lines(
            child.stderr.take().expect("stderr is piped"),
            Arc::clone(&logs),
        );
        collect_lines(
            child.stdout.take().expect("stdout is piped"),
            Arc::clone(&stdout),
        );
        Process {
            name: name.into(),
            child,
            logs,
            stdout,
        }
    }

    /// Every line the process wrote on stdout so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every log line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The JSON log lines so far.
    pub fn json_logs(&self) -> Vec<Value> {
        self.log_lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits for a JSON log line satisfying `pred`; panics with the logs after `timeout` or if the process
    /// exits first.
    pub async fn wait_for_log(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.json_logs().into_iter().find(|l| pred(l)) {
                return l;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before the expected log line:\n{}",
                    self.name,
                    self.log_lines().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: no such log line within {timeout:?}:\n{}",
                self.name,
                self.log_lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit; returns whether it exited with status 0.
    pub async fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            if Instant::now() >= deadline {
                self.kill();
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let lines = self.log_lines();
            let start = lines.len().saturating_sub(300);
            eprintln!(
                "---- {} logs (last {}) ----\n{}",
                self.name,
                lines.len() - start,
                lines[start..].join("\n")
            );
        }
    }
}

/// Starts `tailor-recommender` against `server` as `user` (its kubeconfig token), with a 1 s loop and
/// JSON logs; `extra` flags follow. Returns the process and its metrics address.
pub fn start_recommender(
    server: &ApiServer,
    dir: &Path,
    user: &str,
    extra: &[&str],
) -> (Process, SocketAddr) {
    let kubeconfig = write_kubeconfig(server, dir, user);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("a socket address");
    let mut args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--address".into(),
        addr.to_string(),
        "--recommender-interval".into(),
        "1s".into(),
        "--log-format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    (
        Process::spawn(user, &binary("tailor-recommender"), &args),
        addr,
    )
}

/// Starts `tailor-updater` against `server` as `user`, with a 1 s loop and JSON logs; `extra` flags follow.
pub fn start_updater(server: &ApiServer, dir: &Path, user: &str, extra: &[&str]) -> Process {
    let kubeconfig = write_kubeconfig(server, dir, user);
    let mut args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--address".into(),
        format!("127.0.0.1:{}", free_port()),
        "--updater-interval".into(),
        "1s".into(),
        "--log-format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Process::spawn(user, &binary("tailor-updater"), &args)
}

/// The addresses `tailor-admission` serves on.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionAddrs {
    /// The HTTPS webhook.
    pub webhook: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`.
    pub ops: SocketAddr,
}

/// Starts `tailor-admission` in cluster mode against `server` as `user`, serving `cert` on loopback ports;
/// `extra` flags follow. Waits for its "serving" log line.
pub async fn start_admission(
    server: &ApiServer,
    dir: &Path,
    user: &str,
    cert: &Issued,
    extra: &[&str],
) -> (Process, AdmissionAddrs) {
    let kubeconfig = write_kubeconfig(server, dir, user);
    let (crt, key) = write_cert(cert, dir);
    let mut args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--bind-address".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        "--address".into(),
        "127.0.0.1:0".into(),
        "--tls-cert-file".into(),
        crt.display().to_string(),
        "--tls-private-key".into(),
        key.display().to_string(),
        "--shutdown-delay-seconds".into(),
        "0".into(),
        "--log-format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut p = Process::spawn(user, &binary("tailor-admission"), &args);
    let serving = p
        .wait_for_log(Duration::from_secs(20), |l| l["message"] == "serving")
        .await;
    let addr = |k: &str| -> SocketAddr {
        serving[k]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("the serving log line names no {k} address: {serving}"))
    };
    let addrs = AdmissionAddrs {
        webhook: addr("webhook"),
        ops: addr("metrics"),
    };
    (p, addrs)
}

/// Waits until `/readyz` of the webhook `adm` (serving its ops endpoints at `addrs`) answers 200, or panics
/// with its log after `within`.
pub async fn wait_admission_ready(adm: &Process, addrs: &AdmissionAddrs, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while http_get_status(addrs.ops, "/readyz").await != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook never became ready:\n{}",
            adm.log_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`…), 0 when it cannot be read.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A plain HTTP GET on loopback; returns the response body (empty when the connection fails).
pub async fn http_get_body(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// A plain HTTP GET on loopback; returns the status code (0 when the connection fails).
pub async fn http_get_status(addr: SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// POSTs an AdmissionReview to the webhook at `addr` over TLS (trusting only `ca_pem`, server name
/// `localhost`) and returns the answer.
pub async fn post_review(addr: SocketAddr, ca_pem: &str, review: &Value) -> Value {
    use http_body_util::{BodyExt as _, Full};
    let config = crate::standin::tls::client_config(ca_pem).expect("a TLS client configuration");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connecting to the webhook");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a server name");
    let tls = connector
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the webhook");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP handshake with the webhook");
    tokio::spawn(conn);
    let req = hyper::Request::post("/mutate")
        .header("content-type", "application/json")
        .header("host", "localhost")
        .body(Full::new(hyper::body::Bytes::from(review.to_string())))
        .expect("a request");
    let resp = sender.send_request(req).await.expect("the webhook answers");
    assert_eq!(resp.status(), 200, "webhook status");
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("the webhook's body")
        .to_bytes();
    serde_json::from_slice(&body).expect("the webhook answers JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "is missing: these tests run the real binaries")]
    fn a_missing_binary_says_how_to_build_it() {
        binary("tailor-no-such-binary");
    }

    #[test]
    fn each_binary_is_checked_against_its_own_sources() {
        let root = workspace_root();
        for name in ["tailor-recommender", "tailor-admission", "tailor-updater"] {
            for dir in sources_of(name) {
                assert!(root.join(dir).is_dir(), "{name}: {dir}");
            }
        }
    }
}
