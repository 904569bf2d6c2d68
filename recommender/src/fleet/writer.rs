//! The fleet's writes: created VPAs by server-side apply as [`FIELD_MANAGER`], deletes with a UID
//! precondition (never a VPA recreated under the same name since the plan), and events on the created VPAs
//! and on namespaces. Behind [`FleetWriter`], which the controller's tests implement in memory.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::vpa_event::NOTE_BYTES;

use super::FIELD_MANAGER;

/// How long one write or event may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server refused it or could not be reached.
    #[error("{0}")]
    Api(String),
    /// Another manager owns a field the fleet sets (a create over a VPA someone else wrote).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The object is gone, or was replaced by another with the same name.
    #[error("gone: {0}")]
    Gone(String),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
}

/// The object an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventTarget {
    /// A namespace.
    Namespace(String),
    /// A VPA (namespace, name).
    Vpa(String, String),
}

/// One event the fleet records.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetEvent {
    /// What it is about.
    pub target: EventTarget,
    /// Warning (something to fix) or Normal.
    pub warning: bool,
    /// Machine-readable reason.
    pub reason: &'static str,
    /// What happened, in words.
    pub note: String,
    /// The object the event is also about (the skipped workload, the deleted VPA): events on one
    /// namespace with the same reason are told apart by it, not by their note.
    pub related: Option<ObjectReference>,
}

/// A reference to `kind` `name` in `namespace` (`api_version` empty when not known).
pub fn reference(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: (!api_version.is_empty()).then(|| api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// How the fleet writes.
pub trait FleetWriter {
    /// Applies `vpa`; `force` takes fields over from other managers (only for VPAs the fleet created).
    fn apply(
        &self,
        vpa: &VerticalPodAutoscaler,
        force: bool,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
    /// Deletes the VPA, only if its UID is still `uid`.
    fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
    /// Records `event` (failures are only logged).
    fn event(&self, event: &FleetEvent) -> impl Future<Output = ()> + Send;
}

/// The writer against the API server.
#[derive(Clone)]
pub struct ApiWriter {
    client: Client,
    recorder: Recorder,
}

impl ApiWriter {
    /// Writes through `client`; events report as `tailor-recommender` (`POD_NAME` as the instance).
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: "tailor-recommender".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        ApiWriter {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }
}

fn classify(e: kube::Error) -> WriteError {
    match e {
        kube::Error::Api(s) if s.code == 409 => WriteError::Conflict(s.message),
        kube::Error::Api(s) if s.code == 404 => WriteError::Gone(s.message),
        other => WriteError::Api(other.to_string()),
    }
}

impl FleetWriter for ApiWriter {
    async fn apply(&self, vpa: &VerticalPodAutoscaler, force: bool) -> Result<(), WriteError> {
        let namespace = vpa.metadata.namespace.as_deref().unwrap_or_default();
        let name = vpa.metadata.name.as_deref().unwrap_or_default();
        let api: Api<VerticalPodAutoscaler> = Api::namespaced(self.client.clone(), namespace);
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = force;
        match tokio::time::timeout(CALL_TIMEOUT, api.patch(name, &params, &Patch::Apply(vpa))).await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(WriteError::Timeout),
        }
    }

    async fn delete(&self, namespace: &str, name: &str, uid: &str) -> Result<(), WriteError> {
        let api: Api<VerticalPodAutoscaler> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match tokio::time::timeout(CALL_TIMEOUT, api.delete(name, &params)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(WriteError::Timeout),
        }
    }

    async fn event(&self, event: &FleetEvent) {
        let reference = match &event.target {
            EventTarget::Namespace(name) => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Namespace".into()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            },
            EventTarget::Vpa(namespace, name) => ObjectReference {
                api_version: Some("autoscaling.tailor.dev/v1".into()),
                kind: Some("VerticalPodAutoscaler".into()),
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectReference::default()
            },
        };
        let e = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.into(),
            note: Some(tailor_core::text::cut(&event.note, NOTE_BYTES - 32)),
            action: "Onboard".into(),
            secondary: event.related.clone(),
        };
        match tokio::time::timeout(CALL_TIMEOUT, self.recorder.publish(&e, &reference)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, reason = event.reason, "fleet event not recorded")
            }
            Err(_) => tracing::debug!(reason = event.reason, "fleet event not recorded in time"),
        }
    }
}
