//! The one writer of `coordination.k8s.io/v1` Leases: it reads a Lease, then creates it when absent or
//! replaces it under the `resourceVersion` it read, and says what happened ([`Written`]); a lost race (409:
//! Conflict on a replace, AlreadyExists on a create) is an outcome, not an error, since the caller decides
//! what it means. Leader election ([`crate::leader`]) adds the holder, expiry and fencing rules on top; the
//! webhook's status Lease adds its interval and retries.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

/// A failed Lease call.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server answered with an error.
    #[error("{op} lease {namespace}/{lease}: {source}")]
    Api {
        /// The call (`get`, `create`, `update`).
        op: &'static str,
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("{op} lease {namespace}/{lease}: no answer within {after:?}")]
    Timeout {
        /// The call (`get`, `create`, `update`, or `renew` for a whole attempt).
        op: &'static str,
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        lease: String,
        /// How long it waited.
        after: Duration,
    },
}

impl LeaseError {
    /// Whether the API server answered 409 (Conflict or AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, LeaseError::Api { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// What a write did.
#[derive(Debug)]
pub enum Written {
    /// The Lease was absent and is now created, as the API server returned it.
    Created(Lease),
    /// The Lease read was replaced, as the API server returned it.
    Replaced(Lease),
    /// Another writer got there first (409): the answer, for a caller to whom that is an error.
    Conflict(LeaseError),
}

/// The fields every renewal writes: holder, duration and `renewTime`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// `holderIdentity` (`None` clears it: a released lease).
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub duration_seconds: i32,
    /// `renewTime`.
    pub renew_time: Option<MicroTime>,
}

impl Stamp {
    /// Writes the stamp into `spec`, leaving its other fields (`acquireTime`, `leaseTransitions`) alone.
    pub fn apply(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = self.holder.clone();
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = self.renew_time.clone();
    }
}

/// A Lease's duration in whole seconds, at least 1 (and at most `i32::MAX`).
pub fn duration_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// Reads and writes one Lease.
#[derive(Clone)]
pub struct LeaseWriter {
    api: Api<Lease>,
    namespace: String,
    name: String,
    call_timeout: Option<Duration>,
}

impl std::fmt::Debug for LeaseWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseWriter")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

/// Whether a GET found nothing (404).
fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.is_not_found())
}

impl LeaseWriter {
    /// The Lease `namespace/name` through `client`; calls are not bounded unless
    /// [`LeaseWriter::with_call_timeout`] says so.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        LeaseWriter {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            call_timeout: None,
        }
    }

    /// Bounds every API call by `after` (a [`LeaseError::Timeout`] past it).
    pub fn with_call_timeout(mut self, after: Duration) -> Self {
        self.call_timeout = Some(after);
        self
    }

    /// One API call under the call timeout, its error named by `op`.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, LeaseError> {
        let api_error = |source| LeaseError::Api {
            op,
            namespace: self.namespace.clone(),
            lease: self.name.clone(),
            source,
        };
        let Some(after) = self.call_timeout else {
            return fut.await.map_err(api_error);
        };
        match tokio::time::timeout(after, fut).await {
            Ok(result) => result.map_err(api_error),
            Err(_) => Err(LeaseError::Timeout {
                op,
                namespace: self.namespace.clone(),
                lease: self.name.clone(),
                after,
            }),
        }
    }

    /// The Lease, or `None` when absent.
    pub async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        let read = async {
            match self.api.get(&self.name).await {
                Ok(lease) => Ok(Some(lease)),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(e),
            }
        };
        self.call("get", read).await
    }

    /// Writes `spec`: creates the Lease when `read` is `None`, else replaces the Lease read (under its
    /// `resourceVersion`).
    pub async fn write(&self, read: Option<Lease>, spec: LeaseSpec) -> Result<Written, LeaseError> {
        let pp = PostParams::default();
        let written = match read {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                let created = self.call("create", self.api.create(&pp, &lease)).await;
                created.map(Written::Created)
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                let replaced =
                    (self.call("update", self.api.replace(&self.name, &pp, &lease))).await;
                replaced.map(Written::Replaced)
            }
        };
        match written {
            Err(e) if e.is_conflict() => Ok(Written::Conflict(e)),
            other => other,
        }
    }

    /// Reads the Lease and writes `stamp` over it: a new Lease carries only the stamp, a renewed one keeps
    /// its other fields.
    pub async fn renew(&self, stamp: &Stamp) -> Result<Written, LeaseError> {
        let mut read = self.read().await?;
        let mut spec = (read.as_mut())
            .and_then(|lease| lease.spec.take())
            .unwrap_or_default();
        stamp.apply(&mut spec);
        self.write(read, spec).await
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use serde_json::json;
    use tailor_testkit::scenario::{ApiServer, Reply, Scenario, Step, api_server};

    use super::*;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l";

    fn writer() -> (LeaseWriter, ApiServer) {
        let (client, api) = api_server("ns");
        (LeaseWriter::new(client, "ns", "l"), api)
    }

    fn stamp() -> Stamp {
        Stamp {
            holder: Some("me".into()),
            duration_seconds: 10,
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
        }
    }

    #[tokio::test]
    async fn an_absent_lease_is_created_and_already_exists_is_a_conflict() {
        let (writer, api) = writer();
        let leases = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
        let created = Step::post(leases).check(|sent| {
            assert_eq!(sent.body["metadata"]["name"], "l");
            assert_eq!(sent.body["metadata"]["namespace"], "ns");
            assert_eq!(
                sent.body["spec"],
                json!({"holderIdentity": "me", "leaseDurationSeconds": 10,
                       "renewTime": "1970-01-01T00:00:00.000000Z"})
            );
        });
        let scenario = Scenario::new("an absent lease another writer creates first")
            .then(Step::get(LEASE).reply(Reply::error(StatusCode::NOT_FOUND, "NotFound")))
            .then(created.reply(Reply::error(StatusCode::CONFLICT, "AlreadyExists")));
        let (written, _) = api.verify(scenario, writer.renew(&stamp())).await;
        let written = written.expect("a conflict is no error");
        assert!(matches!(written, Written::Conflict(e) if e.is_conflict()));
    }

    #[tokio::test]
    async fn a_lease_is_replaced_under_the_version_read_keeping_its_other_fields() {
        let (writer, api) = writer();
        let stored: Lease = serde_json::from_value(json!({
            "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"holderIdentity": "other", "leaseTransitions": 2}}))
        .expect("a lease");
        let replaced = Step::put(LEASE).check(|sent| {
            assert_eq!(sent.body["metadata"]["resourceVersion"], "7");
            assert_eq!(sent.body["spec"]["holderIdentity"], "me");
            assert_eq!(sent.body["spec"]["leaseTransitions"], 2);
        });
        let scenario = Scenario::new("a lease another holder renewed")
            .then(Step::get(LEASE).reply(Reply::object(&stored)))
            .then(replaced.echo());
        let (written, _) = api.verify(scenario, writer.renew(&stamp())).await;
        assert!(matches!(written.expect("replaced"), Written::Replaced(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_call_times_out_under_its_name() {
        let (writer, api) = writer();
        let writer = writer.with_call_timeout(Duration::from_secs(2));
        let scenario = Scenario::new("the read is never answered").then(Step::get(LEASE).hold());
        let (read, _held) = api.verify(scenario, writer.read()).await;
        let err = read.expect_err("no answer");
        assert!(
            matches!(err, LeaseError::Timeout { op: "get", .. }),
            "{err}"
        );
        assert_eq!(err.to_string(), "get lease ns/l: no answer within 2s");
    }

    #[test]
    fn a_stamp_keeps_acquire_time_and_transitions() {
        let mut spec = LeaseSpec {
            holder_identity: Some("old".into()),
            acquire_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(3),
            ..Default::default()
        };
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        Stamp {
            holder: None,
            duration_seconds: 1,
            renew_time: Some(now.clone()),
        }
        .apply(&mut spec);
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.renew_time, Some(now));
        assert_eq!(spec.lease_transitions, Some(3));
        assert!(spec.acquire_time.is_some());
    }

    #[test]
    fn durations_are_whole_seconds_of_at_least_one() {
        assert_eq!(duration_seconds(Duration::from_millis(300)), 1);
        assert_eq!(duration_seconds(Duration::from_secs(15)), 15);
        assert_eq!(duration_seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }
}
