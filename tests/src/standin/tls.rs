//! Test certificates (an rcgen CA that issues serving certificates) and the rustls configurations that use
//! them: the stand-in's own HTTPS, the webhook's serving certificate, and a client that trusts the CA.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why certificates or a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// PEM could not be read.
    #[error("reading PEM: {0}")]
    Pem(#[from] rustls_pki_types::pem::Error),
    /// rustls rejected the material.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A serving certificate (chain, leaf first) and its key, in PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Leaf then CA certificate.
    pub cert_pem: String,
    /// The leaf's private key.
    pub key_pem: String,
}

/// A throw-away certificate authority.
pub struct TestCa {
    /// The CA certificate (what clients trust).
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `common_name`.
    pub fn new(common_name: &str) -> Result<TestCa, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(TestCa {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn issue(&self, names: &[&str]) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *cn);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: format!("{}{}", cert.pem(), self.ca_pem),
            key_pem: key.serialize_pem(),
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration serving `issued`, HTTP/1.1 over ALPN.
pub fn server_config(issued: &Issued) -> Result<rustls::ServerConfig, TlsError> {
    let certs = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A rustls client configuration that trusts only `ca_pem`.
pub fn client_config(ca_pem: &str) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
