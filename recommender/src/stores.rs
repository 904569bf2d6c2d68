//! Reflector stores for everything the loop reads, the field stripping applied before objects enter them,
//! and the watch tasks that feed them (including the OOM observer on pod updates and eviction events).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec, StatefulSet,
    StatefulSetSpec,
};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Event, PodTemplateSpec, ReplicationController, ReplicationControllerSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::oom::{OomQueue, eviction_ooms, pod_ooms};
use super::slim::{SlimContainer, SlimPod, SlimResources};
use std::sync::Arc;

/// Read handles of every store.
#[derive(Clone)]
pub struct Stores {
    /// Tailor VPAs.
    pub vpas: Store<VerticalPodAutoscaler>,
    /// Tailor VPA checkpoints.
    pub checkpoints: Store<VerticalPodAutoscalerCheckpoint>,
    /// Pods that are not Pending.
    pub pods: Store<SlimPod>,
    /// Deployments (selector and owners only).
    pub deployments: Store<Deployment>,
    /// ReplicaSets.
    pub replica_sets: Store<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// DaemonSets.
    pub daemon_sets: Store<DaemonSet>,
    /// Jobs.
    pub jobs: Store<Job>,
    /// CronJobs (job template labels only).
    pub cron_jobs: Store<CronJob>,
    /// ReplicationControllers.
    pub replication_controllers: Store<ReplicationController>,
}

/// Write handles of every store. Tests feed them with [`Writers::apply`] and friends.
pub struct Writers {
    /// VPAs.
    pub vpas: Writer<VerticalPodAutoscaler>,
    /// Checkpoints.
    pub checkpoints: Writer<VerticalPodAutoscalerCheckpoint>,
    /// Pods, through the OOM observer.
    pub pods: PodFeed,
    /// Deployments.
    pub deployments: Writer<Deployment>,
    /// ReplicaSets.
    pub replica_sets: Writer<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Writer<StatefulSet>,
    /// DaemonSets.
    pub daemon_sets: Writer<DaemonSet>,
    /// Jobs.
    pub jobs: Writer<Job>,
    /// CronJobs.
    pub cron_jobs: Writer<CronJob>,
    /// ReplicationControllers.
    pub replication_controllers: Writer<ReplicationController>,
}

/// Creates empty stores and their writers; pod updates report OOMs to `ooms`.
pub fn new_stores(ooms: OomQueue) -> (Stores, Writers) {
    let vpas = Writer::default();
    let checkpoints = Writer::default();
    let pods = Writer::default();
    let deployments = Writer::default();
    let replica_sets = Writer::default();
    let stateful_sets = Writer::default();
    let daemon_sets = Writer::default();
    let jobs = Writer::default();
    let cron_jobs = Writer::default();
    let replication_controllers = Writer::default();
    let stores = Stores {
        vpas: vpas.as_reader(),
        checkpoints: checkpoints.as_reader(),
        pods: pods.as_reader(),
        deployments: deployments.as_reader(),
        replica_sets: replica_sets.as_reader(),
        stateful_sets: stateful_sets.as_reader(),
        daemon_sets: daemon_sets.as_reader(),
        jobs: jobs.as_reader(),
        cron_jobs: cron_jobs.as_reader(),
        replication_controllers: replication_controllers.as_reader(),
    };
    let writers = Writers {
        vpas,
        checkpoints,
        pods: PodFeed { writer: pods, ooms },
        deployments,
        replica_sets,
        stateful_sets,
        daemon_sets,
        jobs,
        cron_jobs,
        replication_controllers,
    };
    (stores, writers)
}

/// Applies one watch event to a store after stripping the object with `strip`.
pub fn apply_stripped<K>(writer: &mut Writer<K>, event: watcher::Event<K>, strip: fn(K) -> K)
where
    K: Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let event = match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(strip(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(strip(o)),
        other => other,
    };
    writer.apply_watcher_event(&event);
}

/// The pod store's writer plus the OOM observer: every update is compared with the stored copy first.
pub struct PodFeed {
    writer: Writer<SlimPod>,
    ooms: OomQueue,
}

impl PodFeed {
    /// Handles one pod watch event: detects OOMs against the stored copy (which a relist keeps until
    /// `InitDone`), strips the object and stores it.
    pub fn handle(&mut self, event: watcher::Event<SlimPod>) {
        let event = match event {
            watcher::Event::Apply(o) => watcher::Event::Apply(self.observe(o)),
            watcher::Event::InitApply(o) => watcher::Event::InitApply(self.observe(o)),
            other => other,
        };
        self.writer.apply_watcher_event(&event);
    }

    fn observe(&self, pod: SlimPod) -> SlimPod {
        let old = self.writer.as_reader().get(&ObjectRef::from_obj(&pod));
        let new = strip_pod(pod);
        self.ooms.push(pod_ooms(old.as_deref(), &new));
        new
    }
}

fn strip_meta(m: ObjectMeta, labels: bool, annotations: bool) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: if labels { m.labels } else { None },
        annotations: if annotations { m.annotations } else { None },
        owner_references: m.owner_references,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    }
}

fn memory_requests(r: Option<SlimResources>) -> Option<SlimResources> {
    let requests: Option<BTreeMap<_, _>> = r
        .and_then(|r| r.requests)
        .map(|m| m.into_iter().filter(|(k, _)| k == "memory").collect());
    requests.map(|requests| SlimResources {
        requests: Some(requests),
    })
}

/// Keeps what the loop and the OOM observer read: identity, labels, owners, container names and memory
/// requests, init container names, phase and container states.
pub fn strip_pod(mut p: SlimPod) -> SlimPod {
    p.metadata = strip_meta(p.metadata, true, false);
    for c in &mut p.spec.containers {
        c.resources = memory_requests(c.resources.take());
    }
    for c in &mut p.spec.init_containers {
        *c = SlimContainer {
            name: std::mem::take(&mut c.name),
            resources: None,
        };
    }
    for c in &mut p.status.container_statuses {
        c.resources = memory_requests(c.resources.take());
    }
    p
}

/// VPAs keep spec, status and annotations (post-processor switches); managed fields and labels go.
pub fn strip_vpa(mut v: VerticalPodAutoscaler) -> VerticalPodAutoscaler {
    v.metadata = strip_meta(v.metadata, false, true);
    v
}

/// Checkpoints keep everything but managed fields and labels.
pub fn strip_checkpoint(mut c: VerticalPodAutoscalerCheckpoint) -> VerticalPodAutoscalerCheckpoint {
    c.metadata = strip_meta(c.metadata, false, true);
    c
}

/// Deployments keep identity, owners and the selector.
pub fn strip_deployment(d: Deployment) -> Deployment {
    Deployment {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| DeploymentSpec {
            selector: s.selector,
            template: PodTemplateSpec::default(),
            ..Default::default()
        }),
        status: None,
    }
}

/// ReplicaSets keep identity, owners and the selector.
pub fn strip_replica_set(d: ReplicaSet) -> ReplicaSet {
    ReplicaSet {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| ReplicaSetSpec {
            selector: s.selector,
            ..Default::default()
        }),
        status: None,
    }
}

/// StatefulSets keep identity, owners and the selector.
pub fn strip_stateful_set(d: StatefulSet) -> StatefulSet {
    StatefulSet {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| StatefulSetSpec {
            selector: s.selector,
            ..Default::default()
        }),
        status: None,
    }
}

/// DaemonSets keep identity, owners and the selector.
pub fn strip_daemon_set(d: DaemonSet) -> DaemonSet {
    DaemonSet {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| DaemonSetSpec {
            selector: s.selector,
            ..Default::default()
        }),
        status: None,
    }
}

/// Jobs keep identity, owners and the selector.
pub fn strip_job(d: Job) -> Job {
    Job {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| JobSpec {
            selector: s.selector,
            ..Default::default()
        }),
        status: None,
    }
}

/// CronJobs keep identity, owners and the labels of the job template's pod template.
pub fn strip_cron_job(d: CronJob) -> CronJob {
    CronJob {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| CronJobSpec {
            job_template: JobTemplateSpec {
                metadata: None,
                spec: s.job_template.spec.map(|js| JobSpec {
                    template: PodTemplateSpec {
                        metadata: js.template.metadata.map(|m| ObjectMeta {
                            labels: m.labels,
                            ..Default::default()
                        }),
                        spec: None,
                    },
                    ..Default::default()
                }),
            },
            schedule: s.schedule,
            ..Default::default()
        }),
        status: None,
    }
}

/// ReplicationControllers keep identity, owners and the selector.
pub fn strip_replication_controller(d: ReplicationController) -> ReplicationController {
    ReplicationController {
        metadata: strip_meta(d.metadata, false, false),
        spec: d.spec.map(|s| ReplicationControllerSpec {
            selector: s.selector,
            ..Default::default()
        }),
        status: None,
    }
}

fn api_for<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

fn spawn_store<K>(
    client: &Client,
    namespace: &str,
    config: watcher::Config,
    mut writer: Writer<K>,
    strip: fn(K) -> K,
    metrics: Arc<Metrics>,
) -> JoinHandle<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let api = api_for::<K>(client, namespace);
    let kind = K::kind(&K::DynamicType::default()).to_string();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => apply_stripped(&mut writer, ev, strip),
                Err(e) => {
                    metrics.error("watch");
                    tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
                }
            }
        }
    })
}

/// Starts a watch per store (pods without Pending ones; `namespace` empty = all) plus the eviction-event
/// observer; returns their tasks. Stores become ready after their first list.
pub fn spawn_watchers(
    client: &Client,
    namespace: &str,
    writers: Writers,
    ooms: OomQueue,
    metrics: Arc<Metrics>,
) -> Vec<JoinHandle<()>> {
    let any = watcher::Config::default;
    let m = || metrics.clone();
    let mut tasks = vec![
        spawn_store(client, namespace, any(), writers.vpas, strip_vpa, m()),
        spawn_store(
            client,
            namespace,
            any(),
            writers.checkpoints,
            strip_checkpoint,
            m(),
        ),
        spawn_store(
            client,
            namespace,
            any(),
            writers.deployments,
            strip_deployment,
            m(),
        ),
        spawn_store(
            client,
            namespace,
            any(),
            writers.replica_sets,
            strip_replica_set,
            m(),
        ),
        spawn_store(
            client,
            namespace,
            any(),
            writers.stateful_sets,
            strip_stateful_set,
            m(),
        ),
        spawn_store(
            client,
            namespace,
            any(),
            writers.daemon_sets,
            strip_daemon_set,
            m(),
        ),
        spawn_store(client, namespace, any(), writers.jobs, strip_job, m()),
        spawn_store(
            client,
            namespace,
            any(),
            writers.cron_jobs,
            strip_cron_job,
            m(),
        ),
        spawn_store(
            client,
            namespace,
            any(),
            writers.replication_controllers,
            strip_replication_controller,
            m(),
        ),
    ];
    let pods = api_for::<SlimPod>(client, namespace);
    let mut feed = writers.pods;
    let pm = m();
    tasks.push(tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("status.phase!=Pending");
        let mut stream = watcher(pods, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => feed.handle(ev),
                Err(e) => {
                    pm.error("watch");
                    tracing::warn!(kind = "Pod", error = %e, "watch failed; retrying");
                }
            }
        }
    }));
    let events = api_for::<Event>(client, namespace);
    let em = m();
    tasks.push(tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("reason=Evicted");
        let mut seen: HashMap<String, ()> = HashMap::new();
        let mut stream = watcher(events, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(e)) | Ok(watcher::Event::InitApply(e)) => {
                    let uid = e.metadata.uid.clone().unwrap_or_default();
                    if seen.insert(uid, ()).is_some() {
                        continue;
                    }
                    if seen.len() > 100_000 {
                        seen.clear();
                    }
                    ooms.push(eviction_ooms(&e));
                }
                Ok(_) => {}
                Err(e) if is_forbidden(&e) => {
                    em.error("watch");
                    tracing::warn!(
                        error = %e,
                        "not allowed to list/watch events: OOMs from evictions are not observed \
                         (grant list and watch on events to enable them)"
                    );
                    return;
                }
                Err(e) => {
                    em.error("watch");
                    tracing::warn!(kind = "Event", error = %e, "watch failed; retrying");
                }
            }
        }
    }));
    tasks
}

fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// Waits until every store has seen its first complete list.
pub async fn wait_until_ready(
    stores: &Stores,
) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
    stores.vpas.wait_until_ready().await?;
    stores.checkpoints.wait_until_ready().await?;
    stores.pods.wait_until_ready().await?;
    stores.deployments.wait_until_ready().await?;
    stores.replica_sets.wait_until_ready().await?;
    stores.stateful_sets.wait_until_ready().await?;
    stores.daemon_sets.wait_until_ready().await?;
    stores.jobs.wait_until_ready().await?;
    stores.cron_jobs.wait_until_ready().await?;
    stores.replication_controllers.wait_until_ready().await?;
    Ok(())
}
