//! The OOM kills of a Job's earlier attempts, for the retry bump (docs/jobs.md): when a Job replaces a pod that
//! was OOM-killed, the replacement reaches the webhook like any pod of the Job; the webhook then reads the
//! Job's failed pods (one bounded `LIST` by the Job's uid label and `status.phase=Failed`) and raises the
//! memory of each container that an attempt lost to the OOM killer ([`tailor_core::sizing::raise_for_retry`]).
//!
//! Only pods whose controller is a Job and whose VPA sizes them are looked up. Bounds, as for the live owner
//! reads: a timeout per read, reads at once and per second (over either bound the pod gets the VPA's target
//! alone), one page of at most [`MAX_FAILED_PODS`] failed pods, answers remembered for a few seconds per Job
//! (a wave of replacements costs one read) and at most [`MAX_REMEMBERED`] of them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tailor_core::quantity;
use tailor_core::sizing::MEMORY;

use crate::live_reads::{AnswerMemo, ReadGate, ReadSettings, can_block};

/// Failed pods read per Job at most (one page).
pub const MAX_FAILED_PODS: u32 = 100;
/// Jobs whose answer is remembered at most.
pub const MAX_REMEMBERED: usize = 4_096;
/// Containers per pod read at most.
const MAX_CONTAINERS: usize = 64;

/// What the Job's earlier attempts lost to the OOM killer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobOoms {
    /// Failed pods with at least one OOM-killed container.
    pub killed_pods: u32,
    /// Per container, the largest memory request (else limit) of an attempt it was OOM-killed in, in bytes.
    pub containers: Vec<(String, i64)>,
    /// The OOM-killed attempt with the most memory (the last one bumped), as (name, uid).
    pub last_killed: Option<(String, String)>,
}

/// Where the webhook learns a Job's OOM kills; `None` when it could not tell (read failed, shed, timed out).
pub trait JobOomHistory: Send + Sync {
    /// The OOM kills of Job `job_uid`'s failed pods in `namespace`.
    fn ooms(&self, namespace: &str, job_uid: &str) -> Option<Arc<JobOoms>>;
}

/// The controller owner of the pod of `meta` when it is a Job: its name and uid.
pub fn job_owner(meta: &ObjectMeta) -> Option<(&str, &str)> {
    let owners = meta.owner_references.as_deref()?;
    let job = owners.iter().find(|o| o.controller == Some(true))?;
    (job.kind == "Job" && job.api_version.starts_with("batch/") && valid_uid(&job.uid))
        .then_some((job.name.as_str(), job.uid.as_str()))
}

/// A uid that can stand as a label value in the selector (it comes from the review: never trusted).
fn valid_uid(uid: &str) -> bool {
    (1..=63).contains(&uid.len()) && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The slice of a pod list the OOM history reads.
#[derive(Debug, Default, Deserialize)]
pub struct FailedPods {
    #[serde(default)]
    items: Vec<FailedPod>,
}

#[derive(Debug, Default, Deserialize)]
struct FailedPod {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    spec: FailedSpec,
    #[serde(default)]
    status: FailedStatus,
}

#[derive(Debug, Default, Deserialize)]
struct FailedSpec {
    #[serde(default)]
    containers: Vec<k8s_openapi::api::core::v1::Container>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailedStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    container_statuses: Vec<k8s_openapi::api::core::v1::ContainerStatus>,
}

impl FailedPods {
    /// The OOM kills in these pods: containers of `Failed` pods whose state (or last state) ended `OOMKilled`.
    pub fn ooms(&self) -> JobOoms {
        let mut out = JobOoms::default();
        let mut largest = 0;
        for pod in &self.items {
            if pod.status.phase.as_deref() != Some("Failed") {
                continue;
            }
            let mut killed = false;
            for cs in pod.status.container_statuses.iter().take(MAX_CONTAINERS) {
                let oom = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| {
                    s.and_then(|s| s.terminated.as_ref())
                        .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"))
                };
                if !(oom(cs.state.as_ref()) || oom(cs.last_state.as_ref())) {
                    continue;
                }
                let spec = pod.spec.containers.iter().find(|c| c.name == cs.name);
                let Some(bytes) = spec.and_then(memory_of) else {
                    continue;
                };
                killed = true;
                if bytes > largest || out.last_killed.is_none() {
                    largest = bytes;
                    out.last_killed = Some((
                        pod.metadata.name.clone().unwrap_or_default(),
                        pod.metadata.uid.clone().unwrap_or_default(),
                    ));
                }
                let room = out.containers.len() < MAX_CONTAINERS;
                match out.containers.iter_mut().find(|(n, _)| *n == cs.name) {
                    Some((_, b)) => *b = (*b).max(bytes),
                    None if room => out.containers.push((cs.name.clone(), bytes)),
                    None => {}
                }
            }
            out.killed_pods += u32::from(killed);
        }
        out
    }
}

/// A container's memory request, else its limit, in bytes.
fn memory_of(c: &k8s_openapi::api::core::v1::Container) -> Option<i64> {
    let r = c.resources.as_ref()?;
    let pick = |l: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >| {
        l.and_then(|l| l.get(MEMORY))
            .and_then(|q| quantity::value(q).ok())
    };
    pick(r.requests.as_ref()).or_else(|| pick(r.limits.as_ref()))
}

/// The failed-pod reads' bounds: a second per read, two at once, twenty a second, answers reused for 3 s
/// (shorter than the Job controller's first retry delay, 10 s).
pub const FAILED_POD_READS: ReadSettings = ReadSettings {
    timeout: Duration::from_secs(1),
    in_flight: 2,
    per_second: 20,
    ttl: Duration::from_secs(3),
};

/// How a lookup ended, the label of `tailor_admission_job_failed_pod_reads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadResult {
    result: &'static str,
}

/// Read counts: `read`, `failed` (an error or the timeout) and `shed` (a bound reached).
#[derive(Clone, Debug, Default)]
pub struct JobReadStats {
    results: Family<ReadResult, Counter>,
}

impl JobReadStats {
    fn count(&self, result: &'static str) {
        self.results.get_or_create(&ReadResult { result }).inc();
    }

    /// The count of lookups that ended with `result`.
    pub fn get(&self, result: &'static str) -> u64 {
        self.results.get_or_create(&ReadResult { result }).get()
    }
}

/// Reads a Job's failed pods from the API server, within its [`ReadSettings`] ([`FAILED_POD_READS`] in the webhook).
pub struct LiveJobOoms {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    settings: ReadSettings,
    remembered: AnswerMemo<(String, String), Arc<JobOoms>>,
    gate: ReadGate,
    stats: JobReadStats,
}

impl LiveJobOoms {
    /// Reads through `client` on `runtime` (the server's runtime: a review blocks its own thread only).
    pub fn new(
        client: kube::Client,
        runtime: tokio::runtime::Handle,
        settings: ReadSettings,
    ) -> Self {
        Self {
            client,
            runtime,
            settings,
            remembered: AnswerMemo::new(settings.ttl, MAX_REMEMBERED),
            gate: ReadGate::new(&settings),
            stats: JobReadStats::default(),
        }
    }

    /// Read counts.
    pub fn stats(&self) -> &JobReadStats {
        &self.stats
    }

    /// Registers `tailor_admission_job_failed_pod_reads_total{result}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "job_failed_pod_reads",
            "Reads of a Job's failed pods for the OOM retry bump, by result (read, failed, shed)",
            self.stats.results.clone(),
        );
    }

    async fn read(&self, namespace: &str, job_uid: &str) -> Result<FailedPods, ReadError> {
        let params = kube::api::ListParams::default()
            .labels(&format!("batch.kubernetes.io/controller-uid={job_uid}"))
            .fields("status.phase=Failed")
            .limit(MAX_FAILED_PODS);
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"))
            .list(&params)
            .map_err(|e| ReadError::Request(e.to_string()))?;
        Ok(self.client.request::<FailedPods>(req).await?)
    }
}

/// Why a read of a Job's failed pods gave no answer.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("building the request: {0}")]
    Request(String),
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// A namespace name that can stand in the request's path (it comes from the review: never trusted).
fn valid_namespace(ns: &str) -> bool {
    (1..=63).contains(&ns.len())
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl JobOomHistory for LiveJobOoms {
    fn ooms(&self, namespace: &str, job_uid: &str) -> Option<Arc<JobOoms>> {
        let key = (namespace.to_owned(), job_uid.to_owned());
        if let Some(ooms) = self.remembered.get(&key) {
            return Some(ooms);
        }
        if !valid_namespace(namespace) || !valid_uid(job_uid) {
            return None;
        }
        let Some(slot) = can_block().then(|| self.gate.enter()).flatten() else {
            self.stats.count("shed");
            return None;
        };
        let read = async {
            tokio::time::timeout(self.settings.timeout, self.read(namespace, job_uid)).await
        };
        // Blocks this review's thread only: on a runtime worker the others take over its tasks meanwhile.
        let answer = tokio::task::block_in_place(|| self.runtime.block_on(read));
        drop(slot);
        match answer {
            Ok(Ok(pods)) => {
                self.stats.count("read");
                let ooms = Arc::new(pods.ooms());
                self.remembered.put(key, ooms.clone());
                Some(ooms)
            }
            Ok(Err(e)) => {
                self.stats.count("failed");
                tracing::warn!(namespace = %tailor_core::text::capped(namespace), error = %e,
                    "reading a Job's failed pods failed; its retry gets the VPA's target");
                None
            }
            Err(_) => {
                self.stats.count("failed");
                tracing::warn!(namespace = %tailor_core::text::capped(namespace),
                    "reading a Job's failed pods timed out; its retry gets the VPA's target");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(name: &str, memory: &str, reason: &str) -> serde_json::Value {
        json!({"metadata": {"name": name},
               "spec": {"containers": [{"name": "job", "resources": {"requests": {"memory": memory}}},
                                       {"name": "side", "resources": {"limits": {"memory": "64Mi"}}}]},
               "status": {"phase": "Failed", "containerStatuses": [
                   {"name": "job", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": reason}}},
                   {"name": "side", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})
    }

    #[test]
    fn the_largest_oom_killed_request_per_container() {
        let pods: FailedPods = serde_json::from_value(json!({"items": [
            failed("a", "256Mi", "OOMKilled"),
            failed("b", "356Mi", "OOMKilled"),
            failed("c", "1Gi", "Error"),
        ]}))
        .expect("fixture");
        let ooms = pods.ooms();
        assert_eq!(ooms.killed_pods, 2);
        assert_eq!(ooms.containers, [("job".to_owned(), 356 << 20)]);
        assert_eq!(ooms.last_killed, Some(("b".to_owned(), String::new())));
    }

    #[test]
    fn a_pod_not_failed_or_without_memory_counts_nothing() {
        let mut running = failed("a", "256Mi", "OOMKilled");
        running["status"]["phase"] = json!("Running");
        let mut no_memory = failed("b", "256Mi", "OOMKilled");
        no_memory["spec"]["containers"][0]["resources"] = json!({});
        let pods: FailedPods =
            serde_json::from_value(json!({"items": [running, no_memory]})).expect("fixture");
        assert_eq!(pods.ooms(), JobOoms::default());
    }

    #[test]
    fn only_a_controlling_batch_job_with_a_plain_uid_is_looked_up() {
        let pod = |owner: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(json!({"metadata": {"ownerReferences": [owner]}}))
                .expect("fixture")
        };
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "0a-1b", "controller": true});
        assert_eq!(job_owner(&pod(job.clone()).metadata), Some(("j", "0a-1b")));
        let mut not_controller = job.clone();
        not_controller["controller"] = json!(false);
        let mut other_group = job.clone();
        other_group["apiVersion"] = json!("example.com/v1");
        let mut injected = job.clone();
        injected["uid"] = json!("x,batch.kubernetes.io/job-name!=y");
        for p in [not_controller, other_group, injected] {
            assert_eq!(job_owner(&pod(p.clone()).metadata), None, "{p}");
        }
    }
}
