//! The iteration's writes against a cluster ([`ApiActuator`], the [`Actuator`] over the API): evictions,
//! in-place resizes, VPA conditions and events, paced by the two token buckets.

use std::time::Duration;

use kube::api::{EvictParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use tailor_crds::VerticalPodAutoscaler;

use crate::decisions::resize::ResizePlan;
use crate::iteration::{ActError, Actuator};
use crate::views::pods::CachedPod;
use crate::writers::event_queue::{EVENT_QUEUE, EventQueue};
use crate::writers::events::{EventObject, UpdaterEvent};
use tailor_kube::rate::{RateSettings, TokenBucket};

/// Evictions, resizes and events through the API, paced by the two token buckets.
pub struct ApiActuator {
    client: Client,
    events: EventQueue<(Event, k8s_openapi::api::core::v1::ObjectReference)>,
    eviction: TokenBucket,
    in_place: TokenBucket,
    origin: tokio::time::Instant,
    deadline: tokio::time::Instant,
}

impl ApiActuator {
    /// An actuator whose waits end by `deadline`.
    pub fn new(client: Client, rate: RateSettings, origin: tokio::time::Instant) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "tailor-updater".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        // One writer, a bounded queue (docs/decisions/bounded-event-queue.md): an iteration never piles up
        // event writes.
        let events = EventQueue::start(
            EVENT_QUEUE,
            move |(e, reference): (Event, k8s_openapi::api::core::v1::ObjectReference)| {
                let recorder = recorder.clone();
                async move {
                    if let Err(err) = recorder.publish(&e, &reference).await {
                        tracing::debug!(error = %err, "event not recorded");
                    }
                }
            },
        );
        ApiActuator {
            client,
            events,
            eviction: TokenBucket::new(rate),
            in_place: TokenBucket::new(rate),
            origin,
            deadline: origin,
        }
    }

    /// Sets the deadline of the coming iteration.
    pub fn set_deadline(&mut self, deadline: tokio::time::Instant) {
        self.deadline = deadline;
    }

    fn secs(&self, t: tokio::time::Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64()
    }

    async fn wait(&mut self, eviction: bool) -> Result<(), ActError> {
        let now = self.secs(tokio::time::Instant::now());
        let deadline = self.secs(self.deadline);
        let bucket = if eviction {
            &mut self.eviction
        } else {
            &mut self.in_place
        };
        let wait = bucket.reserve(now, deadline)?;
        if wait > Duration::ZERO {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    fn pods(&self, pod: &CachedPod) -> Api<k8s_openapi::api::core::v1::Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }
}

impl Actuator for ApiActuator {
    fn set_deadline(&mut self, deadline: tokio::time::Instant) {
        // The inherent method (inherent items take precedence over trait ones).
        ApiActuator::set_deadline(self, deadline);
    }

    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        self.wait(true).await
    }

    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        self.wait(false).await
    }

    async fn evict(&mut self, pod: &CachedPod) -> Result<(), ActError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.pods(pod).evict(name, &EvictParams::default()).await?;
        Ok(())
    }

    async fn resize(&mut self, pod: &CachedPod, plan: &ResizePlan) -> Result<(), ActError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api = self.pods(pod);
        let resize: Patch<()> = Patch::Json(json_patch::Patch(plan.resize.clone()));
        api.patch_subresource("resize", name, &PatchParams::default(), &resize)
            .await?;
        if !plan.annotations.is_empty() {
            let annotations: Patch<()> = Patch::Json(json_patch::Patch(plan.annotations.clone()));
            if let Err(e) = api.patch(name, &PatchParams::default(), &annotations).await {
                tracing::warn!(pod = %name, error = %e, "resized, but the annotation patch failed");
            }
        }
        Ok(())
    }

    fn event(&mut self, pod: &CachedPod, vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        let reference = match event.object {
            EventObject::Pod => pod.object_ref(&()),
            EventObject::Vpa => vpa.object_ref(&()),
        };
        self.publish(reference, event);
    }

    fn vpa_event(&mut self, vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        self.publish(vpa.object_ref(&()), event);
    }

    async fn set_conditions(
        &mut self,
        vpa: &VerticalPodAutoscaler,
        conditions: Vec<tailor_crds::VerticalPodAutoscalerCondition>,
    ) -> Result<(), ActError> {
        let api: Api<VerticalPodAutoscaler> = Api::namespaced(
            self.client.clone(),
            vpa.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let body = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status(
            vpa.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
        Ok(())
    }
}

impl ApiActuator {
    /// Queues an event for the writer task; dropped (and logged at debug level) when the queue is full.
    fn publish(&self, reference: k8s_openapi::api::core::v1::ObjectReference, event: UpdaterEvent) {
        let e = Event {
            type_: if event.type_ == "Warning" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.into(),
            note: Some(event.message),
            action: event.reason.into(),
            secondary: None,
        };
        if !self.events.send((e, reference)) {
            tracing::debug!(
                dropped = self.events.dropped(),
                "event queue full; event dropped"
            );
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped_events(&self) -> u64 {
        self.events.dropped()
    }
}
