//! Self-managed certificates (`--self-signed-certs`): the webhook generates its CA and serving certificate,
//! keeps them in one Secret (shared by all replicas), and writes the CA into its MutatingWebhookConfiguration's
//! `caBundle`.
//!
//! Convergence, not a one-shot: a reconcile runs at start, whenever the Secret or the webhook configuration
//! changes (a `helm upgrade` re-applying the configuration without `caBundle`, someone emptying the Secret), and
//! hourly. Replicas race safely: the Secret is replaced with its `resourceVersion`, and the loser of a conflict
//! re-reads and serves the winner's certificate. A new CA is published in the `caBundle` *together with* the
//! previous one before the new certificate is served, so the API server trusts both during the switch.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use base64::Engine as _;
use futures::StreamExt as _;
use k8s_openapi::{
    ByteString, api::admissionregistration::v1::MutatingWebhookConfiguration, api::core::v1::Secret,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt as _, watcher},
};
use rustls_pki_types::{CertificateDer, pem::PemObject};

use crate::{
    certs::{self, CertError, CertResolver, certified_key_from_pem},
    metrics::Metrics,
};

/// Secret key of the serving certificate chain.
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving private key.
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the CA certificate.
pub const CA_CRT: &str = "ca.crt";
/// Annotation on the Secret: Unix time at which the certificates expire.
pub const EXPIRY_ANNOTATION: &str = "tailor.dev/certificate-expiry-unix";
/// Lifetime of generated certificates.
pub const VALIDITY_DAYS: i64 = 3650;
/// Certificates are replaced when they expire within this many days.
pub const RENEW_BEFORE_DAYS: i64 = 30;

/// Errors of the self-managed certificate mode.
#[derive(Debug, thiserror::Error)]
pub enum SelfManagedError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        source: kube::Error,
    },
    /// Generating or loading the certificate failed.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// The Secret kept changing under us.
    #[error("secret {0}: too many update conflicts")]
    Conflicts(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SelfManagedError {
    let what = what.into();
    move |source| SelfManagedError::Api { what, source }
}

/// PEM material kept in the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    /// CA certificate(s).
    pub ca_pem: Vec<u8>,
    /// Serving chain.
    pub cert_pem: Vec<u8>,
    /// Serving key.
    pub key_pem: Vec<u8>,
}

/// Where the self-managed certificate lives and where its CA goes.
#[derive(Clone)]
pub struct SelfManaged {
    /// API client.
    pub client: Client,
    /// Namespace of the Secret and the Service.
    pub namespace: String,
    /// Secret holding `tls.crt`, `tls.key`, `ca.crt`.
    pub secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the `caBundle`.
    pub webhook_config: String,
    /// Service name the certificate is issued for.
    pub service: String,
}

impl std::fmt::Debug for SelfManaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfManaged")
            .field("namespace", &self.namespace)
            .field("secret", &self.secret)
            .field("webhook_config", &self.webhook_config)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The usable material in a Secret: all three keys present, the pair valid, not expiring soon.
pub fn usable(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    let get = |k: &str| data.get(k).map(|b| b.0.clone()).filter(|b| !b.is_empty());
    let m = Material {
        ca_pem: get(CA_CRT)?,
        cert_pem: get(TLS_CRT)?,
        key_pem: get(TLS_KEY)?,
    };
    certified_key_from_pem(&m.cert_pem, &m.key_pem, "secret").ok()?;
    let expiry = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXPIRY_ANNOTATION))
        .and_then(|v| v.parse::<i64>().ok());
    match expiry {
        Some(t) if t - now_unix() > RENEW_BEFORE_DAYS * 86_400 => Some(m),
        Some(_) => None,
        // Not ours (no annotation) but valid: use it as it is.
        None => Some(m),
    }
}

/// Whether every PEM certificate of `wanted` occurs in `bundle`.
pub fn bundle_contains(bundle: &[u8], wanted: &[u8]) -> bool {
    let have: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(bundle)
        .filter_map(Result::ok)
        .collect();
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(wanted) {
        match cert {
            Ok(c) if have.contains(&c) => any = true,
            _ => return false,
        }
    }
    any
}

impl SelfManaged {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn configs(&self) -> Api<MutatingWebhookConfiguration> {
        Api::all(self.client.clone())
    }

    /// Reads the Secret, generating and storing new material when it holds none that is usable. Returns the
    /// material now in the Secret.
    pub async fn ensure_secret(&self) -> Result<Material, SelfManagedError> {
        let api = self.secrets();
        for _ in 0..5 {
            let existing = api.get_opt(&self.secret).await.map_err(api_err(format!(
                "reading secret {}/{}",
                self.namespace, self.secret
            )))?;
            if let Some(m) = existing.as_ref().and_then(usable) {
                return Ok(m);
            }
            let names = certs::service_dns_names(&self.service, &self.namespace);
            let generated = certs::generate(&names, VALIDITY_DAYS)?;
            let material = Material {
                ca_pem: generated.ca_cert_pem.into_bytes(),
                cert_pem: generated.cert_pem.into_bytes(),
                key_pem: generated.key_pem.into_bytes(),
            };
            // Publish the new CA next to the old one before any replica serves the new certificate.
            let old_ca = existing
                .as_ref()
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(CA_CRT))
                .map(|b| b.0.clone())
                .unwrap_or_default();
            let mut bundle = material.ca_pem.clone();
            if !old_ca.is_empty() && !bundle_contains(&material.ca_pem, &old_ca) {
                bundle.extend_from_slice(&old_ca);
            }
            self.patch_ca_bundle(&bundle).await?;
            let mut data = BTreeMap::new();
            data.insert(CA_CRT.to_owned(), ByteString(material.ca_pem.clone()));
            data.insert(TLS_CRT.to_owned(), ByteString(material.cert_pem.clone()));
            data.insert(TLS_KEY.to_owned(), ByteString(material.key_pem.clone()));
            let expiry = (now_unix() + VALIDITY_DAYS * 86_400).to_string();
            let result = match existing {
                Some(mut secret) => {
                    secret.data = Some(data);
                    secret.string_data = None;
                    secret
                        .metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(EXPIRY_ANNOTATION.to_owned(), expiry);
                    secret.metadata.managed_fields = None;
                    api.replace(&self.secret, &PostParams::default(), &secret)
                        .await
                }
                None => {
                    let mut secret = Secret {
                        data: Some(data),
                        type_: Some("kubernetes.io/tls".to_owned()),
                        ..Secret::default()
                    };
                    secret.metadata.name = Some(self.secret.clone());
                    secret.metadata.namespace = Some(self.namespace.clone());
                    secret.metadata.annotations =
                        Some(BTreeMap::from([(EXPIRY_ANNOTATION.to_owned(), expiry)]));
                    api.create(&PostParams::default(), &secret).await
                }
            };
            match result {
                Ok(_) => {
                    tracing::info!(secret = %self.secret, "generated a new CA and serving certificate");
                    return Ok(material);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::info!(secret = %self.secret, "another replica updated the certificate secret; re-reading");
                    continue;
                }
                Err(e) => {
                    return Err(api_err(format!(
                        "writing secret {}/{}",
                        self.namespace, self.secret
                    ))(e));
                }
            }
        }
        Err(SelfManagedError::Conflicts(self.secret.clone()))
    }

    /// Makes every webhook of the configuration trust `ca_pem` (a bundle that already contains all of its
    /// certificates is left alone). Returns whether a patch was sent.
    pub async fn patch_ca_bundle(&self, ca_pem: &[u8]) -> Result<bool, SelfManagedError> {
        let api = self.configs();
        let what = format!("mutatingwebhookconfiguration {}", self.webhook_config);
        let config = api
            .get(&self.webhook_config)
            .await
            .map_err(api_err(what.clone()))?;
        let webhooks = config.webhooks.unwrap_or_default();
        let stale: Vec<&str> = webhooks
            .iter()
            .filter(|w| {
                let have = w
                    .client_config
                    .ca_bundle
                    .as_ref()
                    .map(|b| b.0.as_slice())
                    .unwrap_or_default();
                !bundle_contains(have, ca_pem)
            })
            .map(|w| w.name.as_str())
            .collect();
        if stale.is_empty() {
            return Ok(false);
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        let patch = serde_json::json!({
            "webhooks": stale.iter().map(|name| serde_json::json!({
                "name": name,
                "clientConfig": {"caBundle": encoded},
            })).collect::<Vec<_>>()
        });
        api.patch(
            &self.webhook_config,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .map_err(api_err(what))?;
        tracing::info!(config = %self.webhook_config, webhooks = ?stale, "caBundle written");
        Ok(true)
    }

    /// One convergence step: the Secret holds usable material, the resolver serves it, the configuration
    /// trusts its CA.
    pub async fn reconcile(&self, resolver: &CertResolver) -> Result<(), SelfManagedError> {
        let material = self.ensure_secret().await?;
        let pair = certified_key_from_pem(&material.cert_pem, &material.key_pem, "secret")?;
        if resolver.current().cert != pair.cert {
            resolver.set(pair);
            tracing::info!(secret = %self.secret, "serving the certificate from the secret");
        }
        self.patch_ca_bundle(&material.ca_pem).await?;
        Ok(())
    }

    /// Reconciles at start (retrying until it succeeds or `shutdown` resolves) and returns a resolver serving
    /// the Secret's certificate.
    pub async fn bootstrap(
        &self,
        metrics: &Metrics,
    ) -> Result<Arc<CertResolver>, SelfManagedError> {
        let mut delay = Duration::from_millis(500);
        loop {
            let attempt = async {
                let material = self.ensure_secret().await?;
                let pair = certified_key_from_pem(&material.cert_pem, &material.key_pem, "secret")?;
                self.patch_ca_bundle(&material.ca_pem).await?;
                Ok::<_, SelfManagedError>(CertResolver::new(pair))
            };
            match attempt.await {
                Ok(resolver) => {
                    metrics.cert_reload(true);
                    return Ok(resolver);
                }
                Err(e) if delay < Duration::from_secs(30) => {
                    metrics.cert_reload(false);
                    tracing::warn!(error = %e, "self-managed certificate setup failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Keeps reconciling on changes of the Secret or the configuration, and hourly, until `shutdown`.
    pub async fn run(
        self,
        resolver: Arc<CertResolver>,
        metrics: Arc<Metrics>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let secret_events = watcher(
            self.secrets(),
            watcher::Config::default().fields(&format!("metadata.name={}", self.secret)),
        )
        .default_backoff()
        .touched_objects()
        .map(|_| ())
        .boxed();
        let config_events = watcher(
            self.configs(),
            watcher::Config::default().fields(&format!("metadata.name={}", self.webhook_config)),
        )
        .default_backoff()
        .touched_objects()
        .map(|_| ())
        .boxed();
        let mut events = futures::stream::select(secret_events, config_events);
        let mut ticker = tokio::time::interval(Duration::from_secs(3600));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                e = events.next() => if e.is_none() { return },
                _ = ticker.tick() => {}
            }
            // Coalesce bursts (our own writes echo back as events).
            tokio::time::sleep(Duration::from_millis(200)).await;
            while let Some(Some(())) = futures::FutureExt::now_or_never(events.next()) {}
            match self.reconcile(&resolver).await {
                Ok(()) => metrics.cert_reload(true),
                Err(e) => {
                    metrics.cert_reload(false);
                    tracing::warn!(error = %e, "self-managed certificate reconcile failed; will retry");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(m: Option<&Material>, expiry: Option<i64>) -> Secret {
        let mut s = Secret::default();
        if let Some(m) = m {
            s.data = Some(BTreeMap::from([
                (CA_CRT.to_owned(), ByteString(m.ca_pem.clone())),
                (TLS_CRT.to_owned(), ByteString(m.cert_pem.clone())),
                (TLS_KEY.to_owned(), ByteString(m.key_pem.clone())),
            ]));
        }
        if let Some(t) = expiry {
            s.metadata.annotations = Some(BTreeMap::from([(
                EXPIRY_ANNOTATION.to_owned(),
                t.to_string(),
            )]));
        }
        s
    }

    fn material() -> Material {
        let g = certs::generate(&certs::service_dns_names("svc", "ns"), 10).unwrap();
        Material {
            ca_pem: g.ca_cert_pem.into_bytes(),
            cert_pem: g.cert_pem.into_bytes(),
            key_pem: g.key_pem.into_bytes(),
        }
    }

    #[test]
    fn usable_material() {
        let m = material();
        assert!(usable(&secret(None, None)).is_none(), "empty secret");
        assert_eq!(usable(&secret(Some(&m), None)), Some(m.clone()));
        assert!(usable(&secret(Some(&m), Some(now_unix() + 400 * 86_400))).is_some());
        assert!(
            usable(&secret(Some(&m), Some(now_unix() + 86_400))).is_none(),
            "expiring soon"
        );
        let mut broken = m.clone();
        broken.key_pem = material().key_pem;
        assert!(
            usable(&secret(Some(&broken), None)).is_none(),
            "key mismatch"
        );
    }

    #[test]
    fn bundles() {
        let a = material().ca_pem;
        let b = material().ca_pem;
        let both = [a.clone(), b.clone()].concat();
        assert!(bundle_contains(&both, &a));
        assert!(bundle_contains(&both, &b));
        assert!(!bundle_contains(&a, &b));
        assert!(!bundle_contains(b"", &a));
        assert!(!bundle_contains(&a, b""));
    }
}
