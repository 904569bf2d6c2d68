//! Bounds on connections: how many may be open, how long one may sit idle, and which to close first when
//! the limit is reached (the one idle longest; a connection with a request in progress is never shed).
//!
//! Every connection is registered from `accept` on, so the states hyper's own timers miss (TLS accepted but no
//! byte of HTTP yet, HTTP/1.1 keep-alive, an HTTP/2 connection without streams) are all covered by one idle
//! rule: no request in progress and none started or finished for [`ConnectionLimits::idle_timeout`]. Bytes
//! alone do not count: HTTP/2 pings, or headers dribbled in a byte at a time, keep no connection alive.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::metrics::ConnectionClose;

/// Limits on the webhook's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once; at the limit the longest-idle one is closed for a new one (and a new
    /// one is refused when none is idle).
    pub max_connections: usize,
    /// A connection with no traffic and no request in progress for this long is closed. Longer than the API
    /// server's own 90 s idle timeout, so that in normal operation the client closes first.
    pub idle_timeout: Duration,
    /// Deadline of the TLS handshake.
    pub handshake_timeout: Duration,
    /// New connections accepted per second, sustained; beyond the burst, a connection is closed before its TLS
    /// handshake, so that a storm of new connections costs an `accept` each, not a key exchange. The default
    /// caps the handshakes' CPU at about a fifth of a core (docs/decisions/handshake-limit.md). At least 1.
    pub handshakes_per_second: u32,
    /// New connections accepted at once before `handshakes_per_second` applies (the bucket refills at that
    /// rate). As large as `max_connections` by default: when every API server replica reconnects together
    /// (a webhook rollout, an API server restart), all of its connections are let in. At least 1.
    pub handshake_burst: u32,
    /// Threads serving connections, each with a single-threaded runtime (see [`super::workers`]); a review
    /// then wakes one thread. 0 (the default) serves them on the server's own multi-threaded runtime: on a
    /// single-threaded runtime a review cannot wait for a live read of an owner missing from the caches
    /// ([`crate::live_owners`]), so the pods of a brand-new ReplicaSet would be admitted unsized.
    pub threads: usize,
}

/// Default of [`ConnectionLimits::handshakes_per_second`]: a full handshake with an ECDSA P-256 key and its
/// first review cost the server about 400 µs of CPU (a refusal about 40 µs), so 500 a second take about a fifth
/// of a core, and a quarter on a CPU a quarter slower (`hack/bench-handshakes.sh`, BENCHMARKS.md).
pub const DEFAULT_HANDSHAKES_PER_SECOND: u32 = 500;

/// Default of [`ConnectionLimits::max_connections`], and so of [`ConnectionLimits::handshake_burst`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            idle_timeout: Duration::from_secs(120),
            handshake_timeout: Duration::from_secs(10),
            handshakes_per_second: DEFAULT_HANDSHAKES_PER_SECOND,
            handshake_burst: DEFAULT_MAX_CONNECTIONS,
            threads: 0,
        }
    }
}

/// What the registry knows about one connection.
#[derive(Debug)]
pub struct ConnState {
    /// The registry's epoch.
    epoch: Instant,
    /// Milliseconds since the epoch at which the connection opened or a request last started or ended.
    last_activity: AtomicU64,
    /// Requests being handled on this connection.
    in_flight: AtomicUsize,
    /// Asks the connection's task to close it.
    close: Notify,
}

impl ConnState {
    /// A request started on this connection; the guard ends it.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }

    fn idle_since(&self, now: Instant) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_activity.load(Ordering::Acquire));
        Some(now.saturating_duration_since(self.epoch + last))
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity.store(ms, Ordering::Release);
    }
}

/// Marks a request in progress until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sockets that may be open beyond the limit while shed connections finish closing.
const CLOSING_SLACK: usize = 64;

/// The open connections.
#[derive(Debug)]
pub struct Registry {
    limits: ConnectionLimits,
    epoch: Instant,
    next_id: AtomicU64,
    /// Connections that count against the limit (shed ones leave at once).
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    /// Sockets held, shed ones included until their task has closed them.
    sockets: AtomicUsize,
    handshakes: governor::DefaultDirectRateLimiter,
}

/// A registered connection; dropping it unregisters the connection.
#[derive(Debug)]
pub struct Registered {
    id: u64,
    /// The connection's state (shared with its I/O wrapper and requests).
    pub state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut open) = self.registry.open.lock() {
            open.remove(&self.id);
        }
        self.registry.sockets.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a new connection was not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every open connection has a request in progress (or shed ones are still closing).
    Full,
    /// New connections beyond the burst, arriving faster than `handshakes_per_second`.
    TooFast,
}

impl Registry {
    /// An empty registry with these limits.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        let nonzero = |n: u32| std::num::NonZeroU32::new(n).unwrap_or(std::num::NonZeroU32::MIN);
        let quota = governor::Quota::per_second(nonzero(limits.handshakes_per_second))
            .allow_burst(nonzero(limits.handshake_burst));
        Arc::new(Registry {
            limits,
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            sockets: AtomicUsize::new(0),
            handshakes: governor::RateLimiter::direct(quota),
        })
    }

    /// The limits.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open.lock().map_or(0, |o| o.len())
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registers a new connection. At the limit, the longest-idle connection is asked to close; refused when
    /// every open connection has a request in progress, or when connections arrive faster than
    /// `handshakes_per_second`.
    pub fn register(self: &Arc<Self>) -> Result<Registered, Refusal> {
        if self.handshakes.check().is_err() {
            return Err(Refusal::TooFast);
        }
        let mut open = self.open.lock().map_err(|_| Refusal::Full)?;
        if self.sockets.load(Ordering::Acquire) >= self.limits.max_connections + CLOSING_SLACK {
            return Err(Refusal::Full);
        }
        if open.len() >= self.limits.max_connections {
            let now = Instant::now();
            let victim = open
                .iter()
                .filter_map(|(id, c)| c.idle_since(now).map(|idle| (idle, *id)))
                .max()
                .map(|(_, id)| id)
                .ok_or(Refusal::Full)?;
            // Closed by its own task; forgotten here so that it is not picked twice.
            if let Some(c) = open.remove(&victim) {
                c.close.notify_one();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            epoch: self.epoch,
            last_activity: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            close: Notify::new(),
        });
        state.touch();
        open.insert(id, state.clone());
        self.sockets.fetch_add(1, Ordering::AcqRel);
        Ok(Registered {
            id,
            state,
            registry: self.clone(),
        })
    }

    /// Resolves when the connection should be closed, with why: it has been idle for the idle timeout, or it
    /// was shed for a new one.
    pub async fn closed(&self, state: &ConnState) -> ConnectionClose {
        let idle_timeout = self.limits.idle_timeout;
        // Check a few times per timeout: an idle connection closes within 1.25 × the timeout.
        let tick = (idle_timeout / 4).max(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = state.close.notified() => return ConnectionClose::Shed,
                _ = tokio::time::sleep(tick) => {}
            }
            if state
                .idle_since(Instant::now())
                .is_some_and(|idle| idle >= idle_timeout)
            {
                return ConnectionClose::Idle;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, idle_ms: u64) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            idle_timeout: Duration::from_millis(idle_ms),
            handshake_timeout: Duration::from_secs(1),
            handshakes_per_second: 1000,
            handshake_burst: 1000,
            ..ConnectionLimits::default()
        }
    }

    #[tokio::test]
    async fn at_the_limit_the_longest_idle_connection_is_shed() {
        let registry = Registry::new(limits(2, 60_000));
        let first = registry.register().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let second = registry.register().unwrap();
        let third = registry.register().expect("an idle connection makes room");
        assert_eq!(registry.len(), 2);
        // The first (idle longest) was told to close.
        let why = tokio::time::timeout(Duration::from_millis(50), registry.closed(&first.state))
            .await
            .expect("the oldest idle connection is shed");
        assert_eq!(why, ConnectionClose::Shed);
        // With every open connection busy, a new one is refused.
        let _busy = (second.state.request(), third.state.request());
        assert_eq!(registry.register().err(), Some(Refusal::Full));
        drop(first);
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn beyond_the_burst_connections_are_refused_before_the_handshake_until_the_rate_refills() {
        let registry = Registry::new(ConnectionLimits {
            handshakes_per_second: 20,
            handshake_burst: 50,
            ..limits(1000, 60_000)
        });
        let accepted: Vec<_> = (0..200).filter_map(|_| registry.register().ok()).collect();
        assert_eq!(accepted.len(), 50, "the burst is let in at once, no more");
        assert_eq!(registry.register().err(), Some(Refusal::TooFast));
        // The bucket refills at the sustained rate: one connection per 50 ms.
        let emptied = Instant::now();
        std::thread::sleep(Duration::from_millis(120));
        let later: Vec<_> = (0..50).filter_map(|_| registry.register().ok()).collect();
        let refilled = emptied.elapsed().as_secs_f64() * 20.0;
        assert!(
            later.len() >= 2 && later.len() as f64 <= refilled.ceil() + 1.0,
            "{} connections let in {:.0} ms after the burst, at 20/s",
            later.len(),
            emptied.elapsed().as_secs_f64() * 1e3
        );
    }

    #[test]
    fn by_default_a_reconnect_of_every_allowed_connection_is_absorbed_at_once() {
        let defaults = ConnectionLimits::default();
        assert_eq!(defaults.handshake_burst as usize, defaults.max_connections);
        let registry = Registry::new(defaults);
        let reconnected: Vec<_> = (0..defaults.max_connections)
            .map(|_| registry.register())
            .collect::<Result<_, _>>()
            .expect("every connection of a reconnect storm up to --max-connections is let in");
        assert_eq!(reconnected.len(), defaults.max_connections);
    }

    #[tokio::test]
    async fn idle_connections_close_and_busy_ones_stay() {
        let registry = Registry::new(limits(8, 40));
        let idle = registry.register().unwrap();
        let started = Instant::now();
        assert_eq!(registry.closed(&idle.state).await, ConnectionClose::Idle);
        assert!(started.elapsed() >= Duration::from_millis(40));

        let busy = registry.register().unwrap();
        let guard = busy.state.request();
        let waited =
            tokio::time::timeout(Duration::from_millis(150), registry.closed(&busy.state)).await;
        assert!(
            waited.is_err(),
            "a connection with a request in progress is not idle"
        );
        drop(guard);
    }
}
