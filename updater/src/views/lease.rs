//! The webhook's status Lease: the updater acts only while admission is alive (docs/design/upstream-updater.md §1.2
//! step 1).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use crate::decisions::calculator::add;

/// Whether the lease proves a live webhook at `now`: created, or renewed, less than `timeout` ago.
pub fn is_valid(lease: &Lease, timeout: Duration, now: Timestamp) -> bool {
    let created = lease.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let renewed = lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0);
    created.is_some_and(|c| add(c, timeout) > now) || renewed.is_some_and(|r| add(r, timeout) > now)
}

/// Sleeps between the attempts of [`fetch_with_retry`]: 100 ms, then 300 ms (3 attempts in all).
pub const RETRY_SLEEPS: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(300)];

/// Whether a failed GET is worth retrying: server-side timeouts and internal errors, 429, a Retry-After
/// hint, or a connection reset / unexpected EOF / timeout on the wire.
pub fn is_retryable(error: &kube::Error) -> bool {
    if let kube::Error::Api(status) = error {
        return matches!(status.code, 429 | 500 | 504)
            || matches!(
                status.reason.as_str(),
                "InternalError" | "Timeout" | "ServerTimeout" | "TooManyRequests"
            )
            || status
                .details
                .as_ref()
                .is_some_and(|d| d.retry_after_seconds > 0);
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::TimedOut
            )
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// Runs `get` up to three times, retrying only errors that [`is_retryable`] accepts, sleeping with
/// `sleep` between attempts.
pub async fn fetch_with_retry<T, G, GF, S, SF>(mut get: G, mut sleep: S) -> Result<T, kube::Error>
where
    G: FnMut() -> GF,
    GF: Future<Output = Result<T, kube::Error>>,
    S: FnMut(Duration) -> SF,
    SF: Future<Output = ()>,
{
    let mut attempt = 0;
    loop {
        match get().await {
            Ok(v) => return Ok(v),
            Err(e) if is_retryable(&e) && attempt < RETRY_SLEEPS.len() => {
                sleep(RETRY_SLEEPS[attempt]).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
