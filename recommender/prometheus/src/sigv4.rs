//! AWS Signature Version 4 for Amazon Managed Prometheus (service `aps`) and other SigV4 endpoints: requests are
//! signed with `aws-sigv4`, credentials come from the standard AWS chain of `aws-config` (environment, shared
//! config and credentials files and profiles, web identity / IRSA, ECS and EKS Pod Identity container
//! credentials, instance metadata). The chain is built on first use and its credentials are cached until five
//! minutes before they expire.

use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::identity::Identity;

/// Credentials expiring sooner than this are refreshed before signing.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// What to sign for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigV4Config {
    /// AWS region (`us-east-1`); empty = the chain's region (`AWS_REGION`, profile).
    pub region: String,
    /// Signing name of the service (`aps` for Amazon Managed Prometheus).
    pub service: String,
}

/// Why a request could not be signed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SigV4Error {
    /// No credentials from the AWS chain.
    #[error(
        "SigV4: no AWS credentials ({0}); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, \
         IRSA (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE) or EKS Pod Identity"
    )]
    Credentials(String),
    /// No region from the flags or the chain.
    #[error("SigV4: no AWS region; pass --prometheus-sigv4-region or set AWS_REGION")]
    Region,
    /// The signer refused the request.
    #[error("SigV4: cannot sign the request: {0}")]
    Sign(String),
}

/// An error and its sources, `: `-separated.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let m = s.to_string();
        if !msg.contains(&m) {
            msg.push_str(": ");
            msg.push_str(&m);
        }
        src = s.source();
    }
    msg
}

/// The credential chain and its cached credentials.
pub(crate) struct Signer {
    config: SigV4Config,
    chain: tokio::sync::OnceCell<(SharedCredentialsProvider, String)>,
    cached: tokio::sync::Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("config", &self.config)
            .finish()
    }
}

impl Signer {
    pub(crate) fn new(config: SigV4Config) -> Self {
        Signer {
            config,
            chain: tokio::sync::OnceCell::new(),
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The default chain (HTTP through rustls with ring, like the Prometheus client) and the region.
    async fn chain(&self) -> Result<&(SharedCredentialsProvider, String), SigV4Error> {
        self.chain
            .get_or_try_init(|| async {
                let http = aws_smithy_http_client::Builder::new()
                    .tls_provider(tls::Provider::Rustls(
                        tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https();
                let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
                if !self.config.region.is_empty() {
                    loader = loader.region(aws_config::Region::new(self.config.region.clone()));
                }
                let conf = loader.load().await;
                let region = conf
                    .region()
                    .map(|r| r.as_ref().to_string())
                    .ok_or(SigV4Error::Region)?;
                let provider = conf.credentials_provider().ok_or_else(|| {
                    SigV4Error::Credentials("the AWS configuration has no provider".into())
                })?;
                Ok((provider, region))
            })
            .await
    }

    /// Cached credentials, refreshed when they expire within [`REFRESH_BEFORE`].
    async fn credentials(&self) -> Result<(Credentials, &str), SigV4Error> {
        let (provider, region) = self.chain().await?;
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            let fresh = c
                .expiry()
                .is_none_or(|e| e > SystemTime::now() + REFRESH_BEFORE);
            if fresh {
                return Ok((c.clone(), region));
            }
        }
        let c = provider
            .provide_credentials()
            .await
            .map_err(|e| SigV4Error::Credentials(with_sources(&e)))?;
        *cached = Some(c.clone());
        Ok((c, region))
    }

    /// Signs `req` (its `Host` header set, its body `body`) in place: adds `Authorization`, `X-Amz-Date`,
    /// and `X-Amz-Security-Token` for temporary credentials.
    pub(crate) async fn sign<B>(
        &self,
        req: &mut http::Request<B>,
        body: &[u8],
    ) -> Result<(), SigV4Error> {
        let (creds, region) = self.credentials().await?;
        let identity: Identity = creds.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(&self.config.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SigV4Error::Sign(e.to_string()))?
            .into();
        let headers: Vec<(&str, &str)> = req
            .headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v)))
            .collect();
        let signable = SignableRequest::new(
            req.method().as_str(),
            req.uri().to_string(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| SigV4Error::Sign(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| SigV4Error::Sign(e.to_string()))?
            .into_parts();
        instructions.apply_to_request_http1x(req);
        Ok(())
    }
}
