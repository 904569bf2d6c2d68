//! The recommender's API write pacing (`--kube-api-qps`, `--kube-api-burst`), shared by all workers: the
//! daemons' one token bucket ([`tailor_kube::rate::TokenBucket`]) behind a lock, waited on asynchronously.

use std::sync::{Arc, Mutex, PoisonError};

use tailor_kube::rate::{RateSettings, TokenBucket};
use tokio::time::{Duration, Instant};

/// Client-side rate limiter: `qps` tokens per second, at most `burst` saved up. `qps <= 0` disables it.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    bucket: Arc<Mutex<TokenBucket>>,
    start: Instant,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimiter {
            bucket: Arc::new(Mutex::new(TokenBucket::new(RateSettings::from_flags(
                qps,
                burst.max(1),
            )))),
            start: Instant::now(),
        }
    }

    /// No limit.
    pub fn unlimited() -> Self {
        RateLimiter::new(0.0, 1)
    }

    /// Waits for a token (taken at once, so callers queue behind each other's waits).
    pub async fn acquire(&self) {
        let now = self.start.elapsed().as_secs_f64();
        let wait = {
            let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
            // No deadline, and a burst of at least one: the bucket always grants, after its wait.
            bucket.reserve(now, f64::INFINITY).unwrap_or(Duration::ZERO)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let l = RateLimiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..15 {
            l.acquire().await;
        }
        let took = start.elapsed().as_secs_f64();
        assert!((0.95..1.1).contains(&took), "{took}");
    }
}
