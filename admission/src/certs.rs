//! Serving certificates: PEM loading, a hot-swappable rustls certificate resolver, and reloading from a mounted
//! Secret volume.
//!
//! Kubernetes updates a Secret volume by writing a new timestamped directory and atomically swapping the `..data`
//! symlink; the files the server opened (`tls.crt` → `..data/tls.crt`) never see a write event. The reloader
//! therefore watches the **directories** holding the files (which see the symlink swap) and, as a fallback, polls
//! the file contents periodically. A reload that fails (unreadable, half-written, key not matching the
//! certificate) keeps the certificate being served. Handshakes pick the current certificate per connection, so
//! established connections and in-flight requests are unaffected by a reload.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::ArcSwap;
use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::metrics::Metrics;

/// Errors loading certificates or building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// PEM text that does not parse.
    #[error("{what}: bad PEM: {message}")]
    Pem {
        /// Which input.
        what: String,
        /// Parser message.
        message: String,
    },
    /// No certificate in the certificate PEM.
    #[error("{0}: no CERTIFICATE block")]
    NoCertificate(String),
    /// Key unusable or not matching the certificate.
    #[error("{what}: {source}")]
    Tls {
        /// Which input.
        what: String,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// Watching the certificate directory failed.
    #[error("watching {path}: {source}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: notify::Error,
    },
    /// Generating a self-signed certificate failed.
    #[error("generating certificate: {0}")]
    Generate(String),
}

/// Minimum TLS protocol version (`--min-tls-version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinTlsVersion {
    /// TLS 1.2 and 1.3 (1.3 preferred).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl std::str::FromStr for MinTlsVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "tls1_2" | "VersionTLS12" | "1.2" => Ok(MinTlsVersion::Tls12),
            "tls1_3" | "VersionTLS13" | "1.3" => Ok(MinTlsVersion::Tls13),
            other => Err(format!(
                "unsupported minimum TLS version {other:?}: use tls1_2 or tls1_3"
            )),
        }
    }
}

/// The crypto provider used everywhere (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds a certificate + key pair from PEM text. `what` names the source in errors.
pub fn certified_key_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Pem {
            what: format!("{what} certificate"),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate(format!("{what} certificate")));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| CertError::Pem {
        what: format!("{what} private key"),
        message: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|source| CertError::Tls {
        what: what.to_owned(),
        source,
    })
}

/// A rustls certificate resolver whose certificate can be swapped atomically at any time.
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver").finish_non_exhaustive()
    }
}

impl CertResolver {
    /// A resolver serving `key`.
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(CertResolver {
            current: ArcSwap::from_pointee(key),
        })
    }

    /// Serves `key` for every handshake from now on.
    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }

    /// The pair being served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The rustls server configuration: ring, TLS 1.2+ (or 1.3 only), no client authentication, ALPN h2 and
/// http/1.1, certificates from `resolver`.
pub fn server_config(
    resolver: Arc<CertResolver>,
    min: MinTlsVersion,
) -> Result<ServerConfig, CertError> {
    server_config_with_ciphers(resolver, min, "")
}

/// [`server_config`] with `--tls-ciphers`: TLS 1.2 suite names (IANA/Go spelling, e.g.
/// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`) separated by `,` or `:`. As upstream, unknown names are
/// dropped (and logged here), an empty result means the defaults, and TLS 1.3 suites are always enabled.
pub fn server_config_with_ciphers(
    resolver: Arc<CertResolver>,
    min: MinTlsVersion,
    ciphers: &str,
) -> Result<ServerConfig, CertError> {
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min {
        MinTlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinTlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut provider = rustls::crypto::ring::default_provider();
    let wanted: Vec<&str> = ciphers
        .split([',', ':'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if !wanted.is_empty() {
        let name = |s: &rustls::SupportedCipherSuite| s.suite().as_str().unwrap_or_default();
        for w in &wanted {
            let known = provider.cipher_suites.iter().any(|s| name(s) == *w);
            if !known {
                tracing::warn!(cipher = %w, "--tls-ciphers: unknown or unsupported cipher suite ignored");
            }
        }
        let chosen: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13 || wanted.contains(&name(s)))
            .copied()
            .collect();
        if chosen
            .iter()
            .any(|s| s.version() == &rustls::version::TLS12)
        {
            provider.cipher_suites = chosen;
        }
    }
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .map_err(|source| CertError::Tls {
            what: "TLS configuration".into(),
            source,
        })?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Where the serving certificate and key are read from.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// PEM certificate chain (`--tls-cert-file`).
    pub cert: PathBuf,
    /// PEM private key (`--tls-private-key`).
    pub key: PathBuf,
}

/// What a reload attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The files have the contents already served.
    Unchanged,
    /// A new pair is being served.
    Reloaded,
    /// The files changed but are unusable; the previous pair is still served.
    Failed,
}

/// Reloads a [`CertResolver`] from files when their contents change.
pub struct Reloader {
    files: CertFiles,
    resolver: Arc<CertResolver>,
    metrics: Option<Arc<Metrics>>,
    last: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|source| CertError::Io {
        path: path.to_owned(),
        source,
    })
}

impl Reloader {
    /// Loads the files once (an error here is fatal to the caller) and returns the resolver serving them and the
    /// reloader that keeps it current.
    pub fn load(
        files: CertFiles,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<(Arc<CertResolver>, Arc<Self>), CertError> {
        let cert = read(&files.cert)?;
        let key = read(&files.key)?;
        let pair = certified_key_from_pem(&cert, &key, &files.cert.display().to_string())?;
        let resolver = CertResolver::new(pair);
        let reloader = Arc::new(Reloader {
            files,
            resolver: resolver.clone(),
            metrics,
            last: Mutex::new((cert, key)),
        });
        Ok((resolver, reloader))
    }

    /// Re-reads the files and swaps the served pair if their contents changed and are valid.
    pub fn reload_if_changed(&self) -> ReloadOutcome {
        let (cert, key) = match (read(&self.files.cert), read(&self.files.key)) {
            (Ok(c), Ok(k)) => (c, k),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "certificate reload: files unreadable; keeping the current certificate");
                self.record(false);
                return ReloadOutcome::Failed;
            }
        };
        let Ok(mut last) = self.last.lock() else {
            return ReloadOutcome::Failed;
        };
        if last.0 == cert && last.1 == key {
            return ReloadOutcome::Unchanged;
        }
        match certified_key_from_pem(&cert, &key, &self.files.cert.display().to_string()) {
            Ok(pair) => {
                self.resolver.set(pair);
                *last = (cert, key);
                tracing::info!(cert = %self.files.cert.display(), "serving certificate reloaded");
                self.record(true);
                ReloadOutcome::Reloaded
            }
            Err(e) => {
                tracing::warn!(error = %e, "certificate reload failed; keeping the current certificate");
                self.record(false);
                ReloadOutcome::Failed
            }
        }
    }

    fn record(&self, ok: bool) {
        if let Some(m) = &self.metrics {
            m.cert_reload(ok);
        }
    }

    /// Watches the directories of the files (not the files: a Secret volume swaps a `..data` symlink) and polls
    /// every `poll` as a fallback, reloading on change, until `shutdown` resolves. Must run inside a Tokio
    /// runtime. Returns once the watch is set up; the work continues on a spawned task.
    pub fn spawn(
        self: &Arc<Self>,
        poll: Duration,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<tokio::task::JoinHandle<()>, CertError> {
        use notify::Watcher as _;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reading the files ourselves produces access events; only changes matter.
                if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
                    // A full channel already means "reload pending".
                    let _ = tx.try_send(());
                }
            })
            .map_err(|source| CertError::Watch {
                path: self.files.cert.clone(),
                source,
            })?;
        let mut dirs: Vec<PathBuf> = [&self.files.cert, &self.files.key]
            .iter()
            .map(|p| match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
                _ => PathBuf::from("."),
            })
            .collect();
        dirs.dedup();
        for dir in &dirs {
            watcher
                .watch(dir, notify::RecursiveMode::NonRecursive)
                .map_err(|source| CertError::Watch {
                    path: dir.clone(),
                    source,
                })?;
        }
        let this = self.clone();
        Ok(tokio::spawn(async move {
            let _watcher = watcher; // dropped (and the watch removed) when the task ends
            let mut ticker = tokio::time::interval(poll);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(shutdown);
            loop {
                tokio::select! {
                    _ = &mut shutdown => break,
                    Some(()) = rx.recv() => {
                        // Let a burst of events (new dir, symlink, rename, delete) settle first.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        while rx.try_recv().is_ok() {}
                    }
                    _ = ticker.tick() => {}
                }
                let this = this.clone();
                let _ = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
            }
        }))
    }
}

/// A freshly generated CA and a serving certificate signed by it, all PEM.
#[derive(Clone, Debug)]
pub struct GeneratedCerts {
    /// CA certificate (goes into the webhook's `caBundle`).
    pub ca_cert_pem: String,
    /// Serving certificate, the leaf alone: the API server trusts the CA through the `caBundle`, so sending
    /// the CA too would only give it one more certificate to parse and one more chain to check on every new
    /// connection.
    pub cert_pem: String,
    /// Serving private key (PKCS#8).
    pub key_pem: String,
}

/// DNS names of a Service: `svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Generates an ECDSA P-256 CA and a serving certificate for `names`, valid for `days`.
pub fn generate(names: &[String], days: i64) -> Result<GeneratedCerts, CertError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let err = |e: rcgen::Error| CertError::Generate(e.to_string());
    let now = time_now();
    let not_before = now - time::Duration::hours(1);
    let not_after = now + time::Duration::days(days);

    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "tailor-admission-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);

    let leaf_key = KeyPair::generate().map_err(err)?;
    let mut leaf = CertificateParams::new(names.to_vec()).map_err(err)?;
    leaf.distinguished_name = DistinguishedName::new();
    if let Some(cn) = names.get(2).or(names.first()) {
        leaf.distinguished_name
            .push(DnType::CommonName, cn.as_str());
    }
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    Ok(GeneratedCerts {
        ca_cert_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pair_loads() {
        let g = generate(&service_dns_names("tailor-admission", "tailor"), 30).unwrap();
        let pair = certified_key_from_pem(g.cert_pem.as_bytes(), g.key_pem.as_bytes(), "generated")
            .unwrap();
        assert_eq!(pair.cert.len(), 1, "the leaf alone is served");
    }

    #[test]
    fn mismatched_key_is_rejected() {
        let a = generate(&["a".into()], 1).unwrap();
        let b = generate(&["b".into()], 1).unwrap();
        assert!(certified_key_from_pem(a.cert_pem.as_bytes(), b.key_pem.as_bytes(), "x").is_err());
        assert!(certified_key_from_pem(b"junk", a.key_pem.as_bytes(), "x").is_err());
        assert!(certified_key_from_pem(a.cert_pem.as_bytes(), b"", "x").is_err());
    }

    #[test]
    fn cipher_allow_list() {
        let g = generate(&["a".into()], 1).unwrap();
        let resolver = CertResolver::new(
            certified_key_from_pem(g.cert_pem.as_bytes(), g.key_pem.as_bytes(), "a").unwrap(),
        );
        let suites = |c: &str| {
            let cfg =
                server_config_with_ciphers(resolver.clone(), MinTlsVersion::Tls12, c).unwrap();
            cfg.crypto_provider()
                .cipher_suites
                .iter()
                .map(|s| s.suite().as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        let all = suites("");
        let one = suites("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:NOPE");
        assert!(one.contains(&"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".to_owned()));
        assert!(!one.contains(&"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".to_owned()));
        assert!(
            one.iter().any(|s| s.starts_with("TLS13_")),
            "TLS 1.3 suites stay"
        );
        assert!(one.len() < all.len());
        assert_eq!(suites("NOPE, ALSO_NOPE"), all, "nothing usable: defaults");
    }

    #[test]
    fn min_tls_version_parses() {
        assert_eq!(
            "tls1_2".parse::<MinTlsVersion>().unwrap(),
            MinTlsVersion::Tls12
        );
        assert_eq!(
            "tls1_3".parse::<MinTlsVersion>().unwrap(),
            MinTlsVersion::Tls13
        );
        assert!("tls1_1".parse::<MinTlsVersion>().is_err());
    }

    #[test]
    fn reload_keeps_old_pair_on_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        let a = generate(&["a".into()], 1).unwrap();
        std::fs::write(&files.cert, &a.cert_pem).unwrap();
        std::fs::write(&files.key, &a.key_pem).unwrap();
        let (resolver, reloader) = Reloader::load(files.clone(), None).unwrap();
        let first = resolver.current().cert[0].clone();
        assert_eq!(reloader.reload_if_changed(), ReloadOutcome::Unchanged);
        std::fs::write(&files.cert, "garbage").unwrap();
        assert_eq!(reloader.reload_if_changed(), ReloadOutcome::Failed);
        assert_eq!(resolver.current().cert[0], first);
        let b = generate(&["b".into()], 1).unwrap();
        std::fs::write(&files.cert, &b.cert_pem).unwrap();
        assert_eq!(
            reloader.reload_if_changed(),
            ReloadOutcome::Failed,
            "key does not match yet"
        );
        std::fs::write(&files.key, &b.key_pem).unwrap();
        assert_eq!(reloader.reload_if_changed(), ReloadOutcome::Reloaded);
        assert_ne!(resolver.current().cert[0], first);
    }
}
