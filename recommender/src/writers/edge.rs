//! The recommender's writes at the edge, one object at a time: a VPA's status, a checkpoint applied, a
//! checkpoint deleted. The loop plans every write purely and then hands each to a [`Writes`]: the API
//! server's ([`ApiWrites`], what the daemon uses) or a record of them ([`RecordedWrites`], which tests read
//! and which a dry run can use to see what would be written without writing it). Pacing (`--kube-api-qps`)
//! and the leader fence stay in the write steps, before the call, so every implementation gets the same
//! calls in the same order. Events go through kube-runtime's recorder ([`crate::writers::events`]), not here.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use serde_json::value::RawValue;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};

use crate::writers::write_request::{delete_discarding, patch_discarding};

/// A write in flight.
pub type WriteFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, kube::Error>> + Send + 'a>>;

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
}

/// The API server's writes, through `client`, as `field_manager`.
#[derive(Clone)]
pub struct ApiWrites {
    client: Client,
    field_manager: &'static str,
}

impl ApiWrites {
    /// Writes through `client` as `field_manager`.
    pub fn new(client: Client, field_manager: &'static str) -> Self {
        ApiWrites {
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
}
