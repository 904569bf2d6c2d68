//! SigV4 for Amazon Managed Prometheus, checked by an independent implementation: a loopback proxy
//! (`recommender/prometheus/test-support/sigv4_proxy.py`) verifies every request's signature with botocore
//! before forwarding it to a real VictoriaMetrics, answers gzip-compressed, and plays STS (web identity, IRSA)
//! and the EKS Pod Identity agent. Credentials come from each link of the AWS chain in turn; a wrong secret
//! or session token fails with a clear message and exit 1. The proxy needs botocore in `target/venv`
//! (`hack/install-deps.sh` installs it); its absence fails the test with a message, it never skips it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::prometheus::{
    END, assert_close, expected, series, start_victoria_metrics, temp_dir, workload,
};

const REGION: &str = "us-east-1";

/// The proxy process, killed on drop.
struct Proxy {
    child: Child,
    url: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(
        p.exists(),
        "{} missing: run hack/install-deps.sh (it installs botocore for the SigV4 proxy)",
        p.display()
    );
    p
}

fn start_proxy(dir: &Path, upstream: &str) -> Proxy {
    let config = json!({
        "upstream": upstream,
        "region": REGION,
        "service": "aps",
        "keys": {
            "AKIDENV": {"secret": "env-secret", "token": null},
            "AKIDPROFILE": {"secret": "profile-secret", "token": null},
            "ASIASESSION": {"secret": "session-secret", "token": "session-token-1"},
            "ASIAIRSA": {"secret": "irsa-secret", "token": "irsa-session-token"},
            "ASIAPODID": {"secret": "pod-secret", "token": "pod-session-token"},
        },
        "web_identity": {
            "token": "eyJhbGciOiJSUzI1NiJ9.service-account-token",
            "role_arn": "arn:aws:iam::123456789012:role/tailor",
            "issue": "ASIAIRSA",
        },
        "pod_identity": {"authorization": "pod-identity-agent-token", "issue": "ASIAPODID"},
    });
    let cfg = dir.join("proxy.json");
    std::fs::write(&cfg, config.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../recommender/prometheus/test-support/sigv4_proxy.py");
    let mut child = Command::new(python())
        .arg(script)
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the SigV4 proxy");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("proxy did not start: {line:?}"));
    Proxy {
        url: format!("http://127.0.0.1:{port}"),
        child,
    }
}

/// `tailor recommend` through the proxy with only `env` for credentials (no inherited AWS settings, no
/// instance metadata, an empty home).
fn run(proxy: &Proxy, home: &Path, env: &[(&str, String)], extra: &[&str]) -> Output {
    let end = END.to_string();
    let mut args = vec![
        "recommend",
        "--prometheus",
        &proxy.url,
        "--history",
        "3d",
        "--end",
        &end,
        "-o",
        "json",
        "--prometheus-sigv4",
        "--prometheus-retries",
        "0",
        // The proxy is on loopback, where `auto` would not ask for gzip.
        "--prometheus-compression",
        "gzip",
    ];
    args.extend_from_slice(extra);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tailor"));
    cmd.args(&args)
        .env_clear()
        .env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_REGION", REGION);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tailor")
}

fn ok(out: &Output, what: &str, want: &Value) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {err}");
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_close(want, &got, what);
}

fn refused(out: &Output, what: &str, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert!(err.contains(needle), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn sigv4_signatures_are_checked_by_botocore_for_every_credential_source() {
    let cs = workload();
    let want = expected(&cs);
    let vm = start_victoria_metrics(&series(&cs));
    let dir = temp_dir("sigv4");
    let proxy = start_proxy(&dir, &vm.url);
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let s = |v: &str| v.to_string();

    // Environment credentials.
    let env_creds = [
        ("AWS_ACCESS_KEY_ID", s("AKIDENV")),
        ("AWS_SECRET_ACCESS_KEY", s("env-secret")),
    ];
    ok(&run(&proxy, &home, &env_creds, &[]), "environment", &want);
    // Without the flag the proxy refuses the unsigned queries.
    let end = END.to_string();
    let unsigned = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args([
            "recommend",
            "--prometheus",
            &proxy.url,
            "--history",
            "3d",
            "--end",
            &end,
        ])
        .output()
        .unwrap();
    refused(&unsigned, "unsigned", "HTTP 403");

    // A wrong secret: AWS's words, the hint, exit 1.
    let wrong = [
        ("AWS_ACCESS_KEY_ID", s("AKIDENV")),
        ("AWS_SECRET_ACCESS_KEY", s("not-the-secret")),
    ];
    let out = run(&proxy, &home, &wrong, &[]);
    refused(&out, "wrong secret", "HTTP 403");
    refused(
        &out,
        "wrong secret",
        "signature we calculated does not match",
    );
    refused(&out, "wrong secret", "SigV4: check the AWS credentials");
    // The wrong region signs a scope the service refuses.
    let out = run(
        &proxy,
        &home,
        &env_creds,
        &["--prometheus-sigv4-region", "eu-west-1"],
    );
    refused(&out, "wrong region", "scoped to us-east-1/aps");

    // Session credentials: the token is sent and signed; a wrong one is refused.
    let mut session = vec![
        ("AWS_ACCESS_KEY_ID", s("ASIASESSION")),
        ("AWS_SECRET_ACCESS_KEY", s("session-secret")),
        ("AWS_SESSION_TOKEN", s("session-token-1")),
    ];
    ok(&run(&proxy, &home, &session, &[]), "session token", &want);
    session[2].1 = s("stale-token");
    refused(
        &run(&proxy, &home, &session, &[]),
        "wrong session token",
        "security token",
    );

    // A named profile in the shared credentials file.
    let creds = dir.join("credentials");
    std::fs::write(
        &creds,
        "[tailor]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret\n",
    )
    .unwrap();
    let profile = [
        ("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string()),
        ("AWS_CONFIG_FILE", dir.join("none").display().to_string()),
        ("AWS_PROFILE", s("tailor")),
    ];
    ok(&run(&proxy, &home, &profile, &[]), "profile", &want);

    // Web identity (IRSA): the service account token is exchanged at STS for session credentials.
    let token = dir.join("sa-token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.service-account-token").unwrap();
    let mut irsa = vec![
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        ("AWS_ROLE_ARN", s("arn:aws:iam::123456789012:role/tailor")),
        ("AWS_ROLE_SESSION_NAME", s("tailor")),
        ("AWS_ENDPOINT_URL_STS", proxy.url.clone()),
    ];
    ok(&run(&proxy, &home, &irsa, &[]), "web identity", &want);
    irsa[1].1 = s("arn:aws:iam::123456789012:role/other");
    refused(
        &run(&proxy, &home, &irsa, &[]),
        "web identity, wrong role",
        "no AWS credentials",
    );

    // EKS Pod Identity: the agent's endpoint with its authorization token file.
    let agent_token = dir.join("eks-pod-identity-token");
    std::fs::write(&agent_token, "pod-identity-agent-token").unwrap();
    let pod_identity = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/pod-identity", proxy.url),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            agent_token.display().to_string(),
        ),
    ];
    ok(
        &run(&proxy, &home, &pod_identity, &[]),
        "EKS Pod Identity",
        &want,
    );

    // Every signed answer came gzip-compressed and was read.
    let (_, stats) = crate::prometheus::http(
        proxy.url.rsplit(':').next().unwrap().parse().unwrap(),
        "GET",
        "/stats",
        b"",
    )
    .unwrap();
    let stats: Value = serde_json::from_slice(&stats).unwrap();
    assert!(stats["gzip"].as_u64().unwrap() > 20, "{stats}");

    // No credentials anywhere: said before any query, exit 1.
    refused(
        &run(&proxy, &home, &[], &[]),
        "no credentials",
        "no AWS credentials",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
