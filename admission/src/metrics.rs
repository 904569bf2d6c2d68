//! Prometheus metrics of the webhook (prometheus-client, served as OpenMetrics text on `/metrics`).

use std::time::Duration;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::review::{ResourceKind, ReviewResult};

/// Content type of the `/metrics` answer.
pub const OPENMETRICS_CONTENT_TYPE: &str = tailor_kube::admin::OPENMETRICS;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    resource: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    result: &'static str,
}

/// Why a request was refused before it reached the review decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// `Content-Type` is not `application/json`.
    ContentType,
    /// Body above the 5 MiB cap.
    TooLarge,
    /// Reading the body failed or took too long.
    BodyRead,
    /// Not a POST.
    Method,
    /// A large body arrived while every large-review slot stayed busy (HTTP 503).
    Busy,
}

impl Rejection {
    fn as_str(self) -> &'static str {
        match self {
            Rejection::ContentType => "content_type",
            Rejection::TooLarge => "too_large",
            Rejection::BodyRead => "body_read",
            Rejection::Method => "method",
            Rejection::Busy => "busy",
        }
    }
}

/// All metrics of the webhook, registered in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reviews: Family<ReviewLabels, Counter>,
    latency: Family<ResourceLabels, Histogram>,
    skipped_upstream: Counter,
    rejected: Family<ReasonLabels, Counter>,
    cert_reloads: Family<OutcomeLabels, Counter>,
    cert_expiry: Gauge<i64>,
    in_flight: Gauge<i64>,
    connections_open: Gauge<i64>,
    connections_closed: Family<ReasonLabels, Counter>,
}

/// Why the server closed a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionClose {
    /// No traffic and no request for the idle timeout.
    Idle,
    /// Closed to make room for a new connection at the connection limit.
    Shed,
    /// Refused at the limit: every open connection had a request in progress.
    Refused,
    /// Refused before the handshake: connections arrived faster than the handshake rate.
    TooFast,
    /// The TLS handshake failed or timed out.
    Handshake,
}

impl ConnectionClose {
    fn as_str(self) -> &'static str {
        match self {
            ConnectionClose::Idle => "idle",
            ConnectionClose::Shed => "shed",
            ConnectionClose::Refused => "refused",
            ConnectionClose::TooFast => "too_fast",
            ConnectionClose::Handshake => "handshake",
        }
    }
}

fn latency_histogram() -> Histogram {
    // 25 µs … ~1.6 s: the interesting range is well below a millisecond.
    Histogram::new([
        0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
        0.1, 0.25, 0.5, 1.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric under the `tailor_admission` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tailor_admission");
        let reviews = Family::<ReviewLabels, Counter>::default();
        registry.register(
            "reviews",
            "Admission reviews answered, by resource (pod, vpa, other) and result",
            reviews.clone(),
        );
        let latency = Family::<ResourceLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "review_duration",
            "Time to decode, review and encode one admission review",
            prometheus_client::registry::Unit::Seconds,
            latency.clone(),
        );
        let skipped_upstream = Counter::default();
        registry.register(
            "pods_skipped_upstream_annotation",
            "Pods left alone because they already carry upstream VPA's vpaUpdates annotation",
            skipped_upstream.clone(),
        );
        let rejected = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "requests_rejected",
            "HTTP requests refused before review (wrong content type, body too large, read error, method, busy)",
            rejected.clone(),
        );
        let cert_reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads, by result (success, error)",
            cert_reloads.clone(),
        );
        let cert_expiry = Gauge::<i64>::default();
        registry.register_with_unit(
            "certificate_expiry_timestamp",
            "Unix time at which the serving certificate expires",
            prometheus_client::registry::Unit::Seconds,
            cert_expiry.clone(),
        );
        let in_flight = Gauge::<i64>::default();
        registry.register(
            "reviews_in_flight",
            "Admission reviews being processed",
            in_flight.clone(),
        );
        let connections_open = Gauge::<i64>::default();
        registry.register(
            "connections_open",
            "Webhook connections open (TLS handshake included)",
            connections_open.clone(),
        );
        let connections_closed = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "connections_closed",
            "Webhook connections closed or refused by the server, by reason (idle, shed, refused, too_fast, handshake)",
            connections_closed.clone(),
        );
        Metrics {
            registry,
            connections_open,
            connections_closed,
            reviews,
            latency,
            skipped_upstream,
            rejected,
            cert_reloads,
            cert_expiry,
            in_flight,
        }
    }

    /// Records one answered review.
    pub fn review(&self, resource: ResourceKind, result: ReviewResult, elapsed: Duration) {
        self.reviews
            .get_or_create(&ReviewLabels {
                resource: resource.as_str(),
                result: result.as_str(),
            })
            .inc();
        self.latency
            .get_or_create(&ResourceLabels {
                resource: resource.as_str(),
            })
            .observe(elapsed.as_secs_f64());
        if result == ReviewResult::SkippedUpstream {
            self.skipped_upstream.inc();
        }
    }

    /// Records a request refused before review.
    pub fn rejected(&self, reason: Rejection) {
        self.rejected
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Records a certificate reload attempt.
    pub fn cert_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.cert_reloads
            .get_or_create(&OutcomeLabels { result })
            .inc();
    }

    /// Sets the expiry time of the certificate being served.
    pub fn set_cert_expiry(&self, unix_seconds: i64) {
        self.cert_expiry.set(unix_seconds);
    }

    /// Gauge of open webhook connections.
    pub fn connections_open(&self) -> &Gauge<i64> {
        &self.connections_open
    }

    /// Records a connection the server closed or refused.
    pub fn connection_closed(&self, why: ConnectionClose) {
        self.connections_closed
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    /// Gauge of reviews in progress (incremented by the server around each review).
    pub fn in_flight(&self) -> &Gauge<i64> {
        &self.in_flight
    }

    /// The registry, to add more metrics (e.g. index sizes) before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
            out.push_str("# EOF\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_histograms() {
        let m = Metrics::new();
        m.review(
            ResourceKind::Pod,
            ReviewResult::Patched,
            Duration::from_micros(80),
        );
        m.review(
            ResourceKind::Pod,
            ReviewResult::SkippedUpstream,
            Duration::from_micros(30),
        );
        m.rejected(Rejection::TooLarge);
        m.cert_reload(true);
        let text = m.encode();
        assert!(
            text.contains(r#"tailor_admission_reviews_total{resource="pod",result="patched"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("tailor_admission_pods_skipped_upstream_annotation_total 1"),
            "{text}"
        );
        assert!(
            text.contains(r#"tailor_admission_review_duration_seconds_count{resource="pod"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tailor_admission_requests_rejected_total{reason="too_large"} 1"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
