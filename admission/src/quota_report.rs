//! What the webhook reports when quota fit (docs/decisions/quota-fit.md) changes a patch: the counter
//! `tailor_admission_quota_fit_pods_total{outcome}` (`scaled`, `dropped`, `left_alone`) and a Warning Event
//! `QuotaFit` on the VPA (the pod may have no name yet), paced and queued by [`crate::vpa_events`].

use crate::vpa_events::VpaEvents;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family};
use prometheus_client::registry::Registry;
use tailor_core::quota::QuotaFit;
use tailor_kube::vpa_event::VpaEvent;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The metric and the Events.
#[derive(Debug)]
pub struct QuotaReport {
    fitted: Family<OutcomeLabels, Counter>,
    events: Option<VpaEvents>,
}

impl QuotaReport {
    /// Registers the counter in `registry` (prefixed `tailor_admission` by [`crate::metrics::Metrics`]).
    pub fn new(registry: &mut Registry) -> Self {
        let fitted = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "quota_fit_pods",
            "Pods whose patch quota fit changed to stay within the namespace's ResourceQuotas, by outcome (scaled, dropped, left_alone)",
            fitted.clone(),
        );
        QuotaReport {
            fitted,
            events: None,
        }
    }

    /// Writes a `QuotaFit` Event on the VPA through `events`.
    pub fn with_events(mut self, events: VpaEvents) -> Self {
        self.events = Some(events);
        self
    }

    /// Records a pod whose patch quota fit changed: `vpa` is `namespace/name`, `pod` names the pod (or its
    /// `generateName`).
    pub fn record(&self, vpa: &str, vpa_uid: &str, pod: &str, fit: &QuotaFit) {
        self.fitted
            .get_or_create(&OutcomeLabels {
                outcome: fit.outcome.as_str(),
            })
            .inc();
        let Some(events) = &self.events else {
            return;
        };
        let (namespace, name) = vpa.split_once('/').unwrap_or(("", vpa));
        events.send(VpaEvent {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: vpa_uid.to_owned(),
            reason: "QuotaFit",
            note: format!("Pod {pod}: {}", fit.notes().join("; ")),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::quota::{Binding, QuotaOutcome};

    #[test]
    fn counts_pods_by_outcome() {
        let mut registry = Registry::with_prefix("tailor_admission");
        let report = QuotaReport::new(&mut registry);
        let fit = QuotaFit {
            outcome: QuotaOutcome::Scaled,
            bindings: vec![Binding {
                resource: "cpu",
                quota: "q".into(),
                key: "requests.cpu",
                headroom: 300,
                share: 1 << 15,
            }],
        };
        report.record("ns/web", "", "web-", &fit);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"tailor_admission_quota_fit_pods_total{outcome="scaled"} 1"#),
            "{text}"
        );
    }
}
