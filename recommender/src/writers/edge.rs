//! The recommender's writes at the edge, one object at a time: a VPA's status, a checkpoint applied, a
//! checkpoint deleted, a Warning Event on a VPA. The loop plans every write purely and then hands each to a
//! [`Writes`]: the API server's ([`ApiWrites`], what the daemon uses), a record of them ([`RecordedWrites`],
//! which tests read) or one JSON line each on stdout ([`PrintedWrites`], `--dry-run`). Pacing
//! (`--kube-api-qps`) and the leader fence stay in the write steps, before the call, so every implementation
//! gets the same calls in the same order.

use std::collections::VecDeque;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Client;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tailor_kube::vpa_event::VpaEvent;

use crate::writers::write_request::{delete_discarding, patch_discarding};

/// A write in flight.
pub type WriteFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, kube::Error>> + Send + 'a>>;

/// An Event in flight: whether it was recorded (an Event is best effort, never an error of the loop).
pub type EventFuture<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// Where the recommender's writes go. Each call is one write; its error is the API server's.
pub trait Writes: Send + Sync {
    /// Merge-patches the status subresource of VPA `namespace/name` with `body`.
    fn patch_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a RawValue,
    ) -> WriteFuture<'a, ()>;

    /// Applies `object`, the whole checkpoint `namespace/name`, server-side (forced, as the writer's
    /// field manager).
    fn apply_checkpoint<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        object: &'a VerticalPodAutoscalerCheckpoint,
    ) -> WriteFuture<'a, ()>;

    /// Deletes checkpoint `namespace/name`; `false` when it was already gone.
    fn delete_checkpoint<'a>(&'a self, namespace: &'a str, name: &'a str) -> WriteFuture<'a, bool>;

    /// Records `event` (a Warning on a VPA) for `action`, e.g. `Restore`.
    fn record_event<'a>(&'a self, event: &'a VpaEvent, action: &'static str) -> EventFuture<'a>;
}

/// The API server's writes, through `client`, as `field_manager`; Events as the recommender
/// (`reportingController: tailor-recommender`, the pod's name as the instance).
#[derive(Clone)]
pub struct ApiWrites {
    client: Client,
    field_manager: &'static str,
    recorder: Recorder,
}

impl ApiWrites {
    /// Writes through `client` as `field_manager`.
    pub fn new(client: Client, field_manager: &'static str) -> Self {
        let reporter = Reporter {
            controller: "tailor-recommender".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        ApiWrites {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            field_manager,
        }
    }
}

impl Writes for ApiWrites {
    fn patch_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a RawValue,
    ) -> WriteFuture<'a, ()> {
        Box::pin(async move {
            let pp = PatchParams {
                field_manager: Some(self.field_manager.into()),
                ..Default::default()
            };
            patch_discarding::<VerticalPodAutoscaler, _>(
                &self.client,
                namespace,
                name,
                Some("status"),
                &pp,
                &Patch::Merge(body),
            )
            .await
        })
    }

    fn apply_checkpoint<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        object: &'a VerticalPodAutoscalerCheckpoint,
    ) -> WriteFuture<'a, ()> {
        Box::pin(async move {
            let pp = PatchParams::apply(self.field_manager).force();
            patch_discarding::<VerticalPodAutoscalerCheckpoint, _>(
                &self.client,
                namespace,
                name,
                None,
                &pp,
                &Patch::Apply(object),
            )
            .await
        })
    }

    fn delete_checkpoint<'a>(&'a self, namespace: &'a str, name: &'a str) -> WriteFuture<'a, bool> {
        Box::pin(delete_discarding::<VerticalPodAutoscalerCheckpoint>(
            &self.client,
            namespace,
            name,
        ))
    }

    fn record_event<'a>(&'a self, event: &'a VpaEvent, action: &'static str) -> EventFuture<'a> {
        Box::pin(event.publish(&self.recorder, action))
    }
}

/// One write as [`RecordedWrites`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// A status merge patch: namespace, VPA, body.
    Status(String, String, Value),
    /// A checkpoint applied: namespace, name, object.
    Checkpoint(String, String, Value),
    /// A checkpoint deleted: namespace, name.
    Deleted(String, String),
    /// A Warning Event on a VPA, for an action.
    Event(VpaEvent, &'static str),
}

/// Writes kept in order instead of sent; every write succeeds, and a checkpoint counts as existing until
/// deleted. At most [`RecordedWrites::MAX`] are kept (the oldest are dropped), so a long dry run stays small.
#[derive(Debug, Clone, Default)]
pub struct RecordedWrites {
    writes: Arc<Mutex<VecDeque<Recorded>>>,
}

impl RecordedWrites {
    /// Writes kept at most.
    pub const MAX: usize = 100_000;

    /// The writes so far, oldest first.
    pub fn writes(&self) -> Vec<Recorded> {
        let writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.iter().cloned().collect()
    }

    fn keep(&self, w: Recorded) {
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        if writes.len() >= Self::MAX {
            writes.pop_front();
        }
        writes.push_back(w);
    }
}

impl Writes for RecordedWrites {
    fn patch_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a RawValue,
    ) -> WriteFuture<'a, ()> {
        let body = serde_json::from_str(body.get()).unwrap_or(Value::Null);
        self.keep(Recorded::Status(namespace.into(), name.into(), body));
        Box::pin(async { Ok(()) })
    }

    fn apply_checkpoint<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        object: &'a VerticalPodAutoscalerCheckpoint,
    ) -> WriteFuture<'a, ()> {
        let object = serde_json::to_value(object).unwrap_or(Value::Null);
        self.keep(Recorded::Checkpoint(namespace.into(), name.into(), object));
        Box::pin(async { Ok(()) })
    }

    fn delete_checkpoint<'a>(&'a self, namespace: &'a str, name: &'a str) -> WriteFuture<'a, bool> {
        self.keep(Recorded::Deleted(namespace.into(), name.into()));
        Box::pin(async { Ok(true) })
    }

    fn record_event<'a>(&'a self, event: &'a VpaEvent, action: &'static str) -> EventFuture<'a> {
        self.keep(Recorded::Event(event.clone(), action));
        Box::pin(async { true })
    }
}

/// Writes printed instead of sent (`--dry-run`): one JSON object per line on stdout, `{"write": "status" |
/// "checkpoint" | "checkpointDeleted" | "event", "namespace", "name", …}`. A status carries the merge patch
/// the API server would get; a checkpoint only its size (its histograms are for the next restart, not for a
/// reader); an Event its reason, action and note. Every write succeeds; a line stdout refuses is dropped
/// (logged at debug level), never an error of the loop.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrintedWrites;

impl PrintedWrites {
    fn print(line: &Value) {
        let mut out = std::io::stdout().lock();
        if let Err(error) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            tracing::debug!(%error, "dry-run write not printed");
        }
    }
}

impl Writes for PrintedWrites {
    fn patch_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a RawValue,
    ) -> WriteFuture<'a, ()> {
        let body = serde_json::from_str(body.get()).unwrap_or(Value::Null);
        Self::print(
            &json!({"write": "status", "namespace": namespace, "name": name, "patch": body}),
        );
        Box::pin(async { Ok(()) })
    }

    fn apply_checkpoint<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        object: &'a VerticalPodAutoscalerCheckpoint,
    ) -> WriteFuture<'a, ()> {
        let bytes = serde_json::to_vec(object).map_or(0, |b| b.len());
        Self::print(
            &json!({"write": "checkpoint", "namespace": namespace, "name": name, "bytes": bytes}),
        );
        Box::pin(async { Ok(()) })
    }

    fn delete_checkpoint<'a>(&'a self, namespace: &'a str, name: &'a str) -> WriteFuture<'a, bool> {
        Self::print(&json!({"write": "checkpointDeleted", "namespace": namespace, "name": name}));
        Box::pin(async { Ok(true) })
    }

    fn record_event<'a>(&'a self, event: &'a VpaEvent, action: &'static str) -> EventFuture<'a> {
        Self::print(&json!({
            "write": "event",
            "namespace": event.namespace,
            "name": event.name,
            "reason": event.reason,
            "action": action,
            "note": event.note,
        }));
        Box::pin(async { true })
    }
}
