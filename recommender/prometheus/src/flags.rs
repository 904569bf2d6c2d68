//! [`PrometheusFlags`]: the Prometheus connection and query flags both front ends flatten (`tailor recommend`
//! and `tailor-recommender`), and the one place they become a [`ClientConfig`] and a [`HistoryConfig`].
//! Names follow upstream's recommender where the meaning is the same. The address, the history length and
//! the step stay with each front end: their names and defaults differ (`--prometheus`/`--history`/`--step`
//! for the CLI, upstream's `--prometheus-address`/`--history-length`/`--history-resolution` for the controller).

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{Auth, ClientConfig, Compression};
use crate::history::HistoryConfig;
use crate::sigv4::SigV4Config;

/// A duration greater than zero (`30s`, `5m`, `1h30m`).
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// A Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`, at most 128 bytes): it goes into PromQL unquoted.
pub fn label_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
        ))
    }
}

/// Why the flags do not make a client configuration.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    /// The bearer token file cannot be read.
    #[error("--prometheus-bearer-token-file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `--prometheus-header` is not `Name: value`.
    #[error("--prometheus-header {0:?}: expected `Name: value`")]
    Header(String),
}

/// Prometheus connection and query flags shared by every front end.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "History from Prometheus")]
pub struct PrometheusFlags {
    /// Read CPU through a server-side `rate()` over this window at every step, instead of differencing the
    /// counter's raw samples (which is exact at any scrape interval).
    #[arg(long, value_parser = duration)]
    pub prometheus_rate_window: Option<Duration>,
    /// Only cAdvisor series with this `job` label. Default: any job; when several jobs or paths scrape one
    /// container, the cAdvisor one is chosen (and named in the progress output).
    #[arg(long, default_value = "")]
    pub prometheus_cadvisor_job_name: String,
    /// Label that tells clusters apart in a store shared by several (with --cluster).
    #[arg(long, requires = "cluster", value_name = "LABEL", value_parser = label_name)]
    pub cluster_label: Option<String>,
    /// Only series whose --cluster-label has this value.
    #[arg(long, requires = "cluster_label", value_name = "VALUE")]
    pub cluster: Option<String>,
    /// CPU usage counter (queried with `rate`).
    #[arg(long, default_value = "container_cpu_usage_seconds_total")]
    pub history_cpu_metric: String,
    /// Memory usage gauge.
    #[arg(long, default_value = "container_memory_working_set_bytes")]
    pub history_memory_metric: String,
    /// Namespace label of the container series.
    #[arg(long, default_value = "namespace", value_parser = label_name)]
    pub container_namespace_label: String,
    /// Pod label of the container series (upstream's default `pod_name` predates Kubernetes 1.16).
    #[arg(long, default_value = "pod", value_parser = label_name)]
    pub container_pod_name_label: String,
    /// Container label of the container series (upstream's default `name` predates Kubernetes 1.16).
    #[arg(long, default_value = "container", value_parser = label_name)]
    pub container_name_label: String,
    /// Bearer token sent with every query.
    #[arg(long, env = "PROMETHEUS_BEARER_TOKEN", hide_env_values = true)]
    pub prometheus_bearer_token: Option<String>,
    /// File holding the bearer token.
    #[arg(long)]
    pub prometheus_bearer_token_file: Option<PathBuf>,
    /// Basic-auth user name.
    #[arg(long, env = "PROMETHEUS_USERNAME")]
    pub username: Option<String>,
    /// Basic-auth password.
    #[arg(long, env = "PROMETHEUS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Extra header for every query, `Name: value` (repeatable), e.g. `X-Scope-OrgID: team-a`.
    #[arg(long = "prometheus-header", value_name = "NAME: VALUE")]
    pub prometheus_headers: Vec<String>,
    /// Sign every query with AWS SigV4 (Amazon Managed Prometheus), credentials from the standard AWS chain:
    /// environment, shared profile (AWS_PROFILE), web identity (IRSA), ECS / EKS Pod Identity, instance role.
    #[arg(long, conflicts_with_all = ["prometheus_bearer_token", "prometheus_bearer_token_file", "username"])]
    pub prometheus_sigv4: bool,
    /// AWS region to sign for; default the chain's (AWS_REGION, profile).
    #[arg(long, requires = "prometheus_sigv4", value_name = "REGION")]
    pub prometheus_sigv4_region: Option<String>,
    /// Signing name of the service.
    #[arg(
        long,
        requires = "prometheus_sigv4",
        default_value = "aps",
        value_name = "NAME"
    )]
    pub prometheus_sigv4_service: String,
    /// Skip TLS certificate verification.
    #[arg(long)]
    pub prometheus_insecure: bool,
    /// Response compression: `auto` asks for gzip unless the server is on a loopback address.
    #[arg(long, value_enum, default_value_t = Compression::Auto)]
    pub prometheus_compression: Compression,
    /// Time limit of one query, response included.
    #[arg(long, value_parser = duration, default_value = "5m")]
    pub prometheus_query_timeout: Duration,
    /// Time limit for connecting and for each wait on response bytes.
    #[arg(long, value_parser = duration, default_value = "1m")]
    pub prometheus_read_timeout: Duration,
    /// Retries of a failed query (with exponential backoff).
    #[arg(long, default_value_t = 3)]
    pub prometheus_retries: u32,
    /// Containers per query at most.
    #[arg(long, default_value_t = 1000)]
    pub prometheus_max_series_per_query: usize,
    /// Points per series and query at most (Prometheus refuses more than 11,000).
    #[arg(long, default_value_t = 11_000)]
    pub prometheus_max_points_per_query: usize,
    /// Queries in flight at most.
    #[arg(long, default_value_t = 2)]
    pub prometheus_concurrency: usize,
}

impl PrometheusFlags {
    /// The client configuration for the API at `url` (reads the token file). A token wins over basic auth.
    pub fn client_config(&self, url: &str) -> Result<ClientConfig, FlagsError> {
        let token = match (
            &self.prometheus_bearer_token,
            &self.prometheus_bearer_token_file,
        ) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => {
                Some(
                    std::fs::read_to_string(f).map_err(|source| FlagsError::TokenFile {
                        path: f.clone(),
                        source,
                    })?,
                )
            }
            (None, None) => None,
        };
        let auth = match (token, &self.username) {
            (Some(t), _) => Auth::Bearer(t.trim().to_string()),
            (None, Some(u)) if !u.is_empty() => Auth::Basic {
                username: u.clone(),
                password: self.password.clone().unwrap_or_default(),
            },
            _ => Auth::None,
        };
        let headers = self
            .prometheus_headers
            .iter()
            .map(|h| {
                h.split_once(':')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .ok_or_else(|| FlagsError::Header(h.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(ClientConfig {
            url: url.to_string(),
            auth,
            headers,
            query_timeout: self.prometheus_query_timeout,
            read_timeout: self.prometheus_read_timeout,
            retries: self.prometheus_retries,
            insecure: self.prometheus_insecure,
            compression: self.prometheus_compression,
            sigv4: self.prometheus_sigv4.then(|| SigV4Config {
                region: self.prometheus_sigv4_region.clone().unwrap_or_default(),
                service: self.prometheus_sigv4_service.clone(),
            }),
            ..ClientConfig::default()
        })
    }

    /// The query configuration with this step; no namespace, selector or pod filter (the front end adds them).
    pub fn history_config(&self, step: Duration) -> HistoryConfig {
        HistoryConfig {
            cadvisor_job: self.prometheus_cadvisor_job_name.clone(),
            cluster: self.cluster_label.clone().zip(self.cluster.clone()),
            cpu_metric: self.history_cpu_metric.clone(),
            memory_metric: self.history_memory_metric.clone(),
            namespace_label: self.container_namespace_label.clone(),
            pod_label: self.container_pod_name_label.clone(),
            container_label: self.container_name_label.clone(),
            step,
            rate_window: self.prometheus_rate_window,
            max_series_per_query: self.prometheus_max_series_per_query,
            max_points_per_series: self.prometheus_max_points_per_query,
            concurrency: self.prometheus_concurrency,
            ..HistoryConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        flags: PrometheusFlags,
    }

    fn parse(args: &[&str]) -> PrometheusFlags {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).flags
    }

    #[test]
    fn defaults_match_the_library_defaults() {
        let f = parse(&[]);
        let c = f.client_config("http://p").unwrap();
        let d = ClientConfig::default();
        assert_eq!(
            (c.query_timeout, c.read_timeout, c.retries, c.backoff),
            (d.query_timeout, d.read_timeout, d.retries, d.backoff)
        );
        assert!(matches!(c.auth, Auth::None));
        let step = Duration::from_secs(60);
        assert_eq!(
            f.history_config(step),
            HistoryConfig {
                step,
                ..HistoryConfig::default()
            }
        );
    }

    #[test]
    fn sigv4_flags() {
        let c = parse(&[
            "--prometheus-sigv4",
            "--prometheus-sigv4-region",
            "eu-west-1",
        ])
        .client_config("https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1")
        .unwrap();
        assert_eq!(
            c.sigv4,
            Some(SigV4Config {
                region: "eu-west-1".into(),
                service: "aps".into()
            })
        );
        assert_eq!(parse(&[]).client_config("u").unwrap().sigv4, None);
        let bad = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).is_err()
        };
        assert!(bad(&["--prometheus-sigv4-region", "eu-west-1"]));
        assert!(bad(&[
            "--prometheus-sigv4",
            "--prometheus-bearer-token",
            "t"
        ]));
        assert!(bad(&["--prometheus-query-timeout", "0s"]));
        assert!(bad(&["--cluster-label", "a-b", "--cluster", "x"]));
        assert!(bad(&["--cluster", "x"]));
    }

    #[test]
    fn auth_and_headers() {
        let f = parse(&[
            "--username",
            "u",
            "--password",
            "p",
            "--prometheus-header",
            "X-Scope-OrgID: team-a",
        ]);
        let c = f.client_config("http://p").unwrap();
        assert!(
            matches!(c.auth, Auth::Basic { ref username, ref password } if username == "u" && password == "p")
        );
        assert_eq!(c.headers, vec![("X-Scope-OrgID".into(), "team-a".into())]);
        let f = parse(&["--prometheus-bearer-token", " t \n", "--username", "u"]);
        assert!(matches!(f.client_config("u").unwrap().auth, Auth::Bearer(ref t) if t == "t"));
        let f = parse(&["--prometheus-header", "nocolon"]);
        assert!(matches!(f.client_config("u"), Err(FlagsError::Header(_))));
        let f = parse(&["--prometheus-bearer-token-file", "/nonexistent/token"]);
        let e = f.client_config("u").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--prometheus-bearer-token-file /nonexistent/token: ")
        );
    }
}
