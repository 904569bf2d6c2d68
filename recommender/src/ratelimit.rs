//! A token bucket for API requests (`--kube-api-qps`, `--kube-api-burst`), shared by all workers.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio::time::{Duration, Instant};

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Client-side rate limiter: `qps` tokens per second, at most `burst` saved up. `qps <= 0` disables it.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            bucket: Arc::new(Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            })),
        }
    }

    /// No limit.
    pub fn unlimited() -> Self {
        RateLimiter::new(0.0, 1)
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 || !self.qps.is_finite() {
            return;
        }
        loop {
            let wait = {
                let mut b = self.bucket.lock().await;
                let now = Instant::now();
                let elapsed = now.duration_since(b.last).as_secs_f64();
                b.tokens = (b.tokens + elapsed * self.qps).min(self.burst);
                b.last = now;
                if b.tokens >= 1.0 {
                    b.tokens -= 1.0;
                    return;
                }
                (1.0 - b.tokens) / self.qps
            };
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
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
