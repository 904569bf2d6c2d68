//! The logging flag group (`--log-format`, `--log-level`) and the subscriber it installs.

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line, event fields at the top level.
    Json,
}

/// How to log.
#[derive(Clone, Debug, clap::Args)]
pub struct LogFlags {
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax); RUST_LOG wins when set.
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

impl LogFlags {
    /// Installs the global subscriber, writing to stderr. An unparsable `--log-level` falls back to `info`.
    pub fn init(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .or_else(|_| tracing_subscriber::EnvFilter::try_new(&self.log_level))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match self.log_format {
            LogFormat::Json => builder.json().flatten_event(true).init(),
            LogFormat::Text => builder.init(),
        }
    }
}
