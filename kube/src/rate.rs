//! The token bucket every daemon paces its API requests with: the updater's evictions and in-place resizes
//! (docs/design/upstream-updater.md §3.5), the recommender's status and checkpoint writes (`--kube-api-qps`),
//! with an injected clock so a plan or a test can run it on made-up time.
//!
//! A small bucket rather than a crate: the flags allow fractional rates and Go's `rate.Limiter` semantics
//! (a burst of 0 with a positive rate refuses every wait), which the common limiter crates do not model.

use std::time::Duration;

/// Rate and burst as the flags give them; a rate ≤ 0 means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateSettings {
    /// Tokens per second (`f64::INFINITY` = unlimited).
    pub limit: f64,
    /// Bucket size (0 when unlimited).
    pub burst: u32,
}

impl RateSettings {
    /// From a rate flag and its burst flag (`--eviction-rate-limit`/`--eviction-rate-burst`,
    /// `--kube-api-qps`/`--kube-api-burst`).
    pub fn from_flags(rate: f64, burst: u32) -> Self {
        if rate <= 0.0 || !rate.is_finite() {
            RateSettings {
                limit: f64::INFINITY,
                burst: 0,
            }
        } else {
            RateSettings { limit: rate, burst }
        }
    }
}

/// Why a wait was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// A positive rate with a burst of 0 can never grant a token.
    #[error("rate limiter burst is 0: no token can ever be granted")]
    ZeroBurst,
    /// The wait would pass the iteration's deadline.
    #[error("rate limiter wait of {0:?} would pass the deadline")]
    PastDeadline(Duration),
}

/// A token bucket over elapsed time (seconds since an arbitrary origin), so that it is testable.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    settings: RateSettings,
    tokens: f64,
    last: f64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(settings: RateSettings) -> Self {
        TokenBucket {
            settings,
            tokens: f64::from(settings.burst),
            last: 0.0,
        }
    }

    /// Takes one token at `now` (seconds); returns how long to wait before acting, or an error when the
    /// wait would end after `deadline` (seconds).
    pub fn reserve(&mut self, now: f64, deadline: f64) -> Result<Duration, WaitError> {
        if self.settings.limit.is_infinite() {
            return Ok(Duration::ZERO);
        }
        if self.settings.burst == 0 {
            return Err(WaitError::ZeroBurst);
        }
        let elapsed = (now - self.last).max(0.0);
        self.tokens =
            (self.tokens + elapsed * self.settings.limit).min(f64::from(self.settings.burst));
        self.last = now;
        let wait = if self.tokens >= 1.0 {
            0.0
        } else {
            (1.0 - self.tokens) / self.settings.limit
        };
        if now + wait > deadline {
            return Err(WaitError::PastDeadline(Duration::from_secs_f64(wait)));
        }
        self.tokens -= 1.0;
        Ok(Duration::from_secs_f64(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_token_per_period_each_reservation_queued_behind_the_last() {
        let mut b = TokenBucket::new(RateSettings::from_flags(10.0, 2));
        let waits: Vec<f64> = (0..4)
            .map(|_| {
                b.reserve(0.0, f64::INFINITY)
                    .map_or(-1.0, |d| d.as_secs_f64())
            })
            .collect();
        assert_eq!(waits.len(), 4);
        assert!(waits[0] == 0.0 && waits[1] == 0.0, "{waits:?}");
        assert!(
            (waits[2] - 0.1).abs() < 1e-9 && (waits[3] - 0.2).abs() < 1e-9,
            "{waits:?}"
        );
        // A wait past the deadline takes no token.
        assert!(matches!(
            b.reserve(0.0, 0.05),
            Err(WaitError::PastDeadline(_))
        ));
        assert!(
            (b.reserve(0.3, f64::INFINITY)
                .map_or(-1.0, |d| d.as_secs_f64())
                - 0.0)
                .abs()
                < 1e-9
        );
    }

    #[test]
    fn unlimited_never_waits_and_a_zero_burst_never_grants() {
        let mut free = TokenBucket::new(RateSettings::from_flags(0.0, 0));
        assert_eq!(free.reserve(0.0, 0.0), Ok(Duration::ZERO));
        let mut shut = TokenBucket::new(RateSettings::from_flags(5.0, 0));
        assert_eq!(shut.reserve(0.0, f64::INFINITY), Err(WaitError::ZeroBurst));
    }
}
