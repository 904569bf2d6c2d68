//! What the updater reads off a pod: phase, current resources, observed containers, resize conditions,
//! resize policies and start-up boost annotations
//! (docs/design/upstream-updater.md §2.1, §2.2, §3.2, §5.3, §5.7, §5.8).
//!
//! The pod cache keeps each pod as a [`CachedPod`]: the few fields the decisions read, with what many pods
//! share (namespaces' owners, label sets, container names, resource lists, observed-container lists)
//! interned process-wide, and every quantity parsed once when the pod is cached. The decision functions
//! read it directly; `tailor plan` and the conformance vectors convert their pods the same way.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use tailor_core::policy::container_policy;
use tailor_core::quantity::{self, QuantityError};
use tailor_core::sizing::{
    CPU, MEMORY, OBSERVED_CONTAINERS_ANNOTATION, STARTUP_BOOST_ANNOTATION_PREFIX,
    current_resources, parse_observed_containers, pod_level_resources,
};
use tailor_crds::{ResourceList, VerticalPodAutoscaler};

use crate::decisions::qos::Qos;

/// Pod condition the kubelet sets while a resize waits (`Deferred` or `Infeasible`).
pub const RESIZE_PENDING: &str = "PodResizePending";
/// Pod condition the kubelet sets while a resize is being actuated.
pub const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

type Quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity's thousandths as Go's `MilliValue` gives them (rounded up) and whether they are exact, or why
/// it does not parse.
pub type Milli = Result<(i64, bool), QuantityError>;

/// A resource list shared by every cached pod that has it, with each quantity parsed once.
#[derive(Debug)]
pub struct Amounts {
    list: ResourceList,
    /// Per entry of `list` (in its order): Go's `MilliValue` (rounded up) and whether it is exact, or the
    /// parse error.
    milli: Box<[Milli]>,
}

impl Amounts {
    fn parse(list: ResourceList) -> Self {
        let milli = list
            .values()
            .map(|q| {
                // In the order the per-iteration cache parsed them (the same error when both fail).
                let exact = quantity::is_whole_milli(q)?;
                Ok((quantity::milli_value(q)?, exact))
            })
            .collect();
        Amounts { list, milli }
    }

    /// The resource list.
    pub fn list(&self) -> &ResourceList {
        &self.list
    }

    /// The quantity of `resource` with its parsed thousandths (rounded up, and whether exact).
    pub fn get(&self, resource: &str) -> Option<(&Quantity, &Milli)> {
        self.list
            .iter()
            .zip(self.milli.iter())
            .find(|((k, _), _)| k.as_str() == resource)
            .map(|((_, q), m)| (q, m))
    }

    /// Whether the list names `resource`.
    pub fn contains(&self, resource: &str) -> bool {
        self.list.contains_key(resource)
    }
}

/// A controller owner reference (with the pod's namespace), shared by the pods of one controller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The pod's namespace.
    pub namespace: String,
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// Kind of the owner.
    pub kind: String,
    /// Name of the owner.
    pub name: String,
}

/// One of `spec.containers`, as the decisions read it.
#[derive(Clone, Debug)]
pub struct ContainerInfo {
    /// The container's name.
    pub name: Arc<str>,
    /// Current requests: the status's when it reports resources, else the spec's
    /// (docs/design/upstream-updater.md §2.1).
    pub requests: Option<Arc<Amounts>>,
    /// Current limits, from the same place as the requests.
    pub limits: Option<Arc<Amounts>>,
    /// Whether `spec.containers[].resources.requests` is set.
    pub spec_requests: bool,
    /// Whether `spec.containers[].resources.limits` is set.
    pub spec_limits: bool,
    /// Whether the container's memory `resizePolicy` is `RestartContainer` (default `NotRequired`).
    pub memory_restart: bool,
}

/// The last termination of a container that was OOM-killed (for quick OOMs, docs/design/upstream-updater.md §2.4).
#[derive(Clone, Debug)]
pub struct OomKill {
    /// The container's name (from its status).
    pub container: Arc<str>,
    /// When it started (Go's zero time when absent).
    pub started: Timestamp,
    /// When it was killed (Go's zero time when absent).
    pub finished: Timestamp,
}

/// A `PodResizePending` or `PodResizeInProgress` condition.
#[derive(Clone, Debug)]
struct ResizeCondition {
    pending: bool,
    status_true: bool,
    reason: Option<Box<str>>,
    message: bool,
}

/// What few pods have (OOM kills, boosts, resizes under way, pod-level resources), kept apart so that the
/// others do not pay for it.
#[derive(Clone, Debug, Default)]
struct Rare {
    oom_kills: Box<[OomKill]>,
    boosts: BTreeMap<String, String>,
    /// When the pod became `Ready` (kept with boosts only: nothing else reads it).
    ready_since: Option<Timestamp>,
    resize: Box<[ResizeCondition]>,
    /// Whether `spec.resources` is set (which resources it names: `pod_level_names`).
    pod_level: bool,
    pod_level_names: &'static [&'static str],
    /// The pod-level requests of CPU and memory in thousandths (a request absent: the limit; `None`: neither,
    /// or unreadable), what the envelope is compared with (docs/pod-level-resources.md).
    pod_level_requests: [Option<i64>; 2],
}

/// What the pod cache keeps of a pod, and what every decision reads (see the module documentation).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(from = "Pod")]
pub struct CachedPod {
    /// Name, namespace, UID and resourceVersion only (what the cache keys by and events name).
    pub metadata: ObjectMeta,
    key: Arc<str>,
    labels: Arc<BTreeMap<String, String>>,
    creator: Option<Arc<Owner>>,
    controller: Option<Arc<Owner>>,
    containers: Arc<[ContainerInfo]>,
    observed: Option<Arc<[String]>>,
    rare: Option<Box<Rare>>,
    start_time: Option<Timestamp>,
    pending: bool,
    /// The `Ready` condition is `False` (a pod without one is not counted unready).
    unready: bool,
    /// `status.qosClass` (what the API server computed at creation; a resize may not change it), or without
    /// a status the class computed from the spec ([`crate::decisions::qos::of_spec`]).
    qos: Qos,
    /// Whether every init container would keep a `Guaranteed` pod `Guaranteed` (cpu and memory limits,
    /// requests equal or unset); true without init containers.
    init_guaranteed: bool,
    terminating: bool,
    has_annotations: bool,
    /// Which of upstream VPA's marks ([`UPSTREAM_MARKS`]) the pod carries, plus one (0: none).
    upstream_mark: u8,
    restart_on_resize: bool,
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Values shared between cached pods. Entries no pod holds any more are dropped when the tables have
/// doubled since the last sweep.
#[derive(Default)]
struct Interner {
    strings: HashMap<Arc<str>, ()>,
    labels: HashMap<Arc<BTreeMap<String, String>>, ()>,
    owners: HashMap<Arc<Owner>, ()>,
    amounts: HashMap<Vec<(String, String)>, Arc<Amounts>>,
    observed: HashMap<String, Option<Arc<[String]>>>,
    containers: HashMap<Vec<ContainerKey>, Arc<[ContainerInfo]>>,
    swept_at: usize,
}

/// What identifies a [`ContainerInfo`] in the interner (resource lists by address: they are interned).
#[derive(Clone, PartialEq, Eq, Hash)]
struct ContainerKey {
    name: Arc<str>,
    requests: usize,
    limits: usize,
    spec_requests: bool,
    spec_limits: bool,
    memory_restart: bool,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(Mutex::default);

fn shared<T: Eq + Hash + ?Sized>(
    map: &mut HashMap<Arc<T>, ()>,
    value: &T,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    if let Some((k, ())) = map.get_key_value(value) {
        return Arc::clone(k);
    }
    let v = make();
    map.insert(Arc::clone(&v), ());
    v
}

impl Interner {
    fn len(&self) -> usize {
        self.strings.len()
            + self.labels.len()
            + self.owners.len()
            + self.amounts.len()
            + self.observed.len()
            + self.containers.len()
    }

    /// Drops what no cached pod holds when the tables have doubled since the last sweep.
    fn maybe_sweep(&mut self) {
        if self.len() < 2 * self.swept_at + 1024 {
            return;
        }
        self.containers.retain(|_, v| Arc::strong_count(v) > 1);
        self.amounts.retain(|_, v| Arc::strong_count(v) > 1);
        self.observed
            .retain(|_, v| v.as_ref().is_none_or(|v| Arc::strong_count(v) > 1));
        self.labels.retain(|k, ()| Arc::strong_count(k) > 1);
        self.owners.retain(|k, ()| Arc::strong_count(k) > 1);
        self.strings.retain(|k, ()| Arc::strong_count(k) > 1);
        self.swept_at = self.len();
    }

    fn str(&mut self, s: &str) -> Arc<str> {
        shared(&mut self.strings, s, || Arc::from(s))
    }

    fn amounts(&mut self, list: Option<&ResourceList>) -> Option<Arc<Amounts>> {
        let list = list?;
        let key: Vec<(String, String)> =
            list.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect();
        if let Some(a) = self.amounts.get(&key) {
            return Some(Arc::clone(a));
        }
        let a = Arc::new(Amounts::parse(list.clone()));
        self.amounts.insert(key, Arc::clone(&a));
        Some(a)
    }

    fn owner(&mut self, namespace: &str, o: Option<&OwnerReference>) -> Option<Arc<Owner>> {
        let o = o?;
        let owner = Owner {
            namespace: namespace.to_owned(),
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        };
        Some(shared(&mut self.owners, &owner, || Arc::new(owner.clone())))
    }

    fn labels(
        &mut self,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Arc<BTreeMap<String, String>> {
        let empty = BTreeMap::new();
        let labels = labels.unwrap_or(&empty);
        shared(&mut self.labels, labels, || Arc::new(labels.clone()))
    }

    /// The pod's containers as cached: one shared list per distinct set of names, resources and
    /// resize policies.
    fn containers(&mut self, pod: &Pod, spec_containers: &[Container]) -> Arc<[ContainerInfo]> {
        let container_keys: Vec<(ContainerKey, [Option<Arc<Amounts>>; 2])> = spec_containers
            .iter()
            .map(|c| {
                let current = current_resources(pod, c, false);
                let requests = self.amounts(current.requests);
                let limits = self.amounts(current.limits);
                let spec = c.resources.as_ref();
                let key = ContainerKey {
                    name: self.str(&c.name),
                    requests: requests.as_ref().map_or(0, |a| Arc::as_ptr(a) as usize),
                    limits: limits.as_ref().map_or(0, |a| Arc::as_ptr(a) as usize),
                    spec_requests: spec.is_some_and(|r| r.requests.is_some()),
                    spec_limits: spec.is_some_and(|r| r.limits.is_some()),
                    memory_restart: c.resize_policy.iter().flatten().any(|p| {
                        p.resource_name == "memory" && p.restart_policy == "RestartContainer"
                    }),
                };
                (key, [requests, limits])
            })
            .collect();
        let keys: Vec<ContainerKey> = container_keys.iter().map(|(k, _)| k.clone()).collect();
        if let Some(c) = self.containers.get(&keys) {
            return Arc::clone(c);
        }
        let list: Arc<[ContainerInfo]> = container_keys
            .into_iter()
            .map(|(k, [requests, limits])| ContainerInfo {
                name: k.name,
                requests,
                limits,
                spec_requests: k.spec_requests,
                spec_limits: k.spec_limits,
                memory_restart: k.memory_restart,
            })
            .collect();
        self.containers.insert(keys, Arc::clone(&list));
        list
    }

    /// The containers' last terminations by the OOM killer.
    fn oom_kills(&mut self, status: Option<&PodStatus>) -> Box<[OomKill]> {
        status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|s| {
                let t = s.last_state.as_ref()?.terminated.as_ref()?;
                (t.reason.as_deref() == Some("OOMKilled")).then(|| OomKill {
                    container: self.str(&s.name),
                    started: t
                        .started_at
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or_else(go_zero_time),
                    finished: t
                        .finished_at
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or_else(go_zero_time),
                })
            })
            .collect()
    }

    fn observed(&mut self, value: Option<&String>) -> Option<Arc<[String]>> {
        let value = value?;
        if let Some(v) = self.observed.get(value.as_str()) {
            return v.clone();
        }
        let parsed: Option<Arc<[String]>> = parse_observed_containers(value).ok().map(Arc::from);
        self.observed.insert(value.clone(), parsed.clone());
        parsed
    }
}

fn lock() -> std::sync::MutexGuard<'static, Interner> {
    INTERNER.lock().unwrap_or_else(PoisonError::into_inner)
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        CachedPod::new(&pod)
    }
}

impl CachedPod {
    /// The compact form of `pod`: the shared parts (containers, labels, owners, names) through the
    /// interner, under one lock; what few pods have in `Rare`.
    pub fn new(pod: &Pod) -> Self {
        let m = &pod.metadata;
        let namespace = m.namespace.as_deref().unwrap_or_default();
        let name = m.name.as_deref().unwrap_or_default();
        let spec_containers: &[Container] = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let status = pod.status.as_ref();
        let annotations = m.annotations.as_ref();
        let owners = m.owner_references.as_ref();
        let first_controller = owners
            .into_iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let last_controller = tailor_core::target::controller_owner(owners);
        let mut interner = lock();
        interner.maybe_sweep();
        let containers = interner.containers(pod, spec_containers);
        let oom_kills = interner.oom_kills(status);
        let labels = interner.labels(m.labels.as_ref());
        let creator = interner.owner(namespace, first_controller);
        let controller = if first_controller == last_controller {
            creator.clone()
        } else {
            interner.owner(namespace, last_controller)
        };
        let observed =
            interner.observed(annotations.and_then(|a| a.get(OBSERVED_CONTAINERS_ANNOTATION)));
        drop(interner);
        CachedPod {
            metadata: ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                ..ObjectMeta::default()
            },
            key: Arc::from(format!("{namespace}/{name}")),
            labels,
            creator,
            controller,
            containers,
            observed,
            rare: Rare::of(pod, oom_kills),
            start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            pending: status.and_then(|s| s.phase.as_deref()) == Some("Pending"),
            unready: conditions(status).any(|c| c.type_ == "Ready" && c.status == "False"),
            qos: match qos_class(status) {
                Qos::Unknown => pod
                    .spec
                    .as_ref()
                    .map_or(Qos::Unknown, crate::decisions::qos::of_spec),
                reported => reported,
            },
            init_guaranteed: init_guaranteed(pod),
            terminating: m.deletion_timestamp.is_some(),
            has_annotations: annotations.is_some(),
            upstream_mark: annotations.map_or(0, upstream_mark_of),
            restart_on_resize: spec_containers.iter().any(|c| {
                c.resize_policy
                    .iter()
                    .flatten()
                    .any(|p| p.restart_policy == "RestartContainer")
            }),
        }
    }
}

/// The pod's conditions.
fn conditions(status: Option<&PodStatus>) -> impl Iterator<Item = &PodCondition> + Clone {
    status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
}

/// The QoS class in `status.qosClass`.
fn qos_class(status: Option<&PodStatus>) -> Qos {
    match status.and_then(|s| s.qos_class.as_deref()) {
        Some("BestEffort") => Qos::BestEffort,
        Some("Burstable") => Qos::Burstable,
        Some("Guaranteed") => Qos::Guaranteed,
        _ => Qos::Unknown,
    }
}

/// Whether every init container has CPU and memory limits, with requests unset or equal to them.
fn init_guaranteed(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .all(|c| {
            let r = c.resources.as_ref();
            let limits = r.and_then(|r| r.limits.as_ref());
            let requests = r.and_then(|r| r.requests.as_ref());
            ["cpu", "memory"].iter().all(|res| {
                limits.and_then(|l| l.get(*res)).is_some_and(|l| {
                    requests
                        .and_then(|q| q.get(*res))
                        .is_none_or(|q| quantity::same_value(q, l).unwrap_or(false))
                })
            })
        })
}

impl Rare {
    /// What of it `pod` has, with its `oom_kills`; `None` when nothing (most pods).
    fn of(pod: &Pod, oom_kills: Box<[OomKill]>) -> Option<Box<Rare>> {
        let boosts: BTreeMap<String, String> = (pod.metadata.annotations.iter())
            .flatten()
            .filter(|(k, _)| k.starts_with(STARTUP_BOOST_ANNOTATION_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let status = pod.status.as_ref();
        let resize = conditions(status)
            .filter(|c| c.type_ == RESIZE_PENDING || c.type_ == RESIZE_IN_PROGRESS)
            .map(|c| ResizeCondition {
                pending: c.type_ == RESIZE_PENDING,
                status_true: c.status == "True",
                reason: c.reason.as_deref().map(Box::from),
                message: c.message.as_deref().is_some_and(|m| !m.is_empty()),
            })
            .collect();
        let ready_since = conditions(status)
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or_else(go_zero_time)
            });
        let pod_level = pod.spec.as_ref().is_some_and(|s| s.resources.is_some());
        let rare = Rare {
            ready_since: ready_since.filter(|_| !boosts.is_empty()),
            oom_kills,
            boosts,
            resize,
            pod_level_names: pod_level_names(&pod_level_resources(pod)),
            pod_level_requests: [CPU, MEMORY].map(|r| pod_level_request_milli(pod, r)),
            pod_level,
        };
        (!rare.oom_kills.is_empty()
            || !rare.boosts.is_empty()
            || !rare.resize.is_empty()
            || rare.pod_level)
            .then(|| Box::new(rare))
    }
}

/// `pod`'s pod-level request of `resource` in thousandths (the limit when there is no request).
fn pod_level_request_milli(pod: &Pod, resource: &str) -> Option<i64> {
    let r = pod.spec.as_ref()?.resources.as_ref()?;
    let q = (r.requests.as_ref().and_then(|m| m.get(resource)))
        .or_else(|| r.limits.as_ref()?.get(resource))?;
    quantity::milli_value(q).ok()
}

fn pod_level_names(list: &[&'static str]) -> &'static [&'static str] {
    use tailor_core::sizing::{CPU, MEMORY};
    match (list.contains(&CPU), list.contains(&MEMORY)) {
        (true, true) => &[CPU, MEMORY],
        (true, false) => &[CPU],
        (false, true) => &[MEMORY],
        (false, false) => &[],
    }
}

/// `namespace/name`, the key upstream uses for pods in its maps.
pub fn pod_key(pod: &CachedPod) -> &str {
    &pod.key
}

/// The pod's key as a shared string (map keys without copying).
pub fn shared_key(pod: &CachedPod) -> Arc<str> {
    Arc::clone(&pod.key)
}

/// The pod's name (empty when absent).
pub fn name(pod: &CachedPod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// The pod's namespace (empty when absent).
pub fn namespace(pod: &CachedPod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// The pod's UID (empty when absent).
pub fn uid(pod: &CachedPod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// Whether the pod's phase is `Pending` (scheduled, not yet running; an absent phase counts as running).
pub fn is_pending(pod: &CachedPod) -> bool {
    pod.pending
}

/// The pod's QoS class as the API server reported it, or computed from its spec without a status.
pub fn qos(pod: &CachedPod) -> Qos {
    pod.qos
}

/// Whether the pod's init containers would keep it `Guaranteed` (see [`Qos::Guaranteed`]).
pub fn init_containers_guaranteed(pod: &CachedPod) -> bool {
    pod.init_guaranteed
}

/// Whether the pod sets pod-level resources (`spec.resources`).
pub fn has_pod_level_resources(pod: &CachedPod) -> bool {
    pod.rare.as_ref().is_some_and(|r| r.pod_level)
}

/// The pod-level request of `resource` (`cpu` or `memory`) in thousandths, when the pod sets one.
pub fn pod_level_request(pod: &CachedPod, resource: &str) -> Option<i64> {
    let i = match resource {
        CPU => 0,
        MEMORY => 1,
        _ => return None,
    };
    pod.rare.as_ref()?.pod_level_requests[i]
}

/// Whether the pod's `Ready` condition is `False` (running but not serving: a replica down already).
pub fn is_unready(pod: &CachedPod) -> bool {
    pod.unready
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &CachedPod) -> bool {
    pod.terminating
}

/// The pod's `status.startTime`.
pub fn start_time(pod: &CachedPod) -> Option<Timestamp> {
    pod.start_time
}

/// The containers of `spec.containers`.
pub fn containers(pod: &CachedPod) -> &[ContainerInfo] {
    &pod.containers
}

/// The container list, shared by the pods that have the same one (identity for per-iteration caches).
pub fn container_list(pod: &CachedPod) -> &Arc<[ContainerInfo]> {
    &pod.containers
}

/// The resources (`cpu`, `memory`) the pod sets at pod level (`spec.resources`).
pub fn pod_level(pod: &CachedPod) -> &'static [&'static str] {
    pod.rare.as_ref().map_or(&[], |r| r.pod_level_names)
}

/// Containers whose last termination was an OOM kill.
pub fn oom_kills(pod: &CachedPod) -> &[OomKill] {
    pod.rare.as_ref().map_or(&[], |r| &r.oom_kills)
}

fn resize_conditions(pod: &CachedPod) -> &[ResizeCondition] {
    pod.rare.as_ref().map_or(&[], |r| &r.resize)
}

/// The first owner reference with `controller: true` (the pod's creator, docs/design/upstream-updater.md §3.1).
pub fn creator(pod: &CachedPod) -> Option<&Arc<Owner>> {
    pod.creator.as_ref()
}

/// The last owner reference with `controller: true` (what target resolution follows).
pub fn controller(pod: &CachedPod) -> Option<&Arc<Owner>> {
    pod.controller.as_ref()
}

/// The containers the webhook observed, from the observed-containers annotation; `None` (all observed)
/// when the annotation is absent or any name in it is invalid (docs/design/upstream-updater.md §2.2).
pub fn observed_containers(pod: &CachedPod) -> Option<&[String]> {
    pod.observed.as_deref()
}

/// The observed-container list, shared by the pods that have the same one (identity for per-iteration
/// caches).
pub fn observed_list(pod: &CachedPod) -> Option<&Arc<[String]>> {
    pod.observed.as_ref()
}

/// Whether `container` counts for priorities and quick OOMs under `observed`
/// (docs/design/upstream-updater.md §2.2).
pub fn is_observed(observed: Option<&[String]>, container: &str) -> bool {
    observed.is_none_or(|list| list.iter().any(|c| c == container))
}

/// Whether a resize is under way: the first resize condition's status is `True`
/// (docs/design/upstream-updater.md §3.2).
pub fn is_in_place_updating(pod: &CachedPod) -> bool {
    resize_conditions(pod)
        .first()
        .is_some_and(|c| c.status_true)
}

/// Where a pod's resize stands (docs/design/upstream-updater.md §5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeStatus {
    /// No resize under way.
    None,
    /// The kubelet defers it (does not fit now).
    Deferred,
    /// It can never fit this node.
    Infeasible,
    /// Being actuated.
    InProgress,
    /// Actuation failed.
    Error,
    /// Any other state.
    Unknown,
}

impl ResizeStatus {
    /// Upstream's name (`ResizeNone`, `ResizeDeferred`, …).
    pub fn name(self) -> &'static str {
        match self {
            ResizeStatus::None => "ResizeNone",
            ResizeStatus::Deferred => "ResizeDeferred",
            ResizeStatus::Infeasible => "ResizeInfeasible",
            ResizeStatus::InProgress => "ResizeInProgress",
            ResizeStatus::Error => "ResizeError",
            ResizeStatus::Unknown => "ResizeUnknown",
        }
    }
}

fn condition(pod: &CachedPod, pending: bool) -> Option<&ResizeCondition> {
    resize_conditions(pod).iter().find(|c| c.pending == pending)
}

/// The resize status of a pod (docs/design/upstream-updater.md §5.7): `PodResizePending` wins over
/// `PodResizeInProgress`.
pub fn resize_status(pod: &CachedPod) -> ResizeStatus {
    if !is_in_place_updating(pod) {
        return ResizeStatus::None;
    }
    if let Some(c) = condition(pod, true) {
        return match c.reason.as_deref() {
            Some("Deferred") => ResizeStatus::Deferred,
            Some("Infeasible") => ResizeStatus::Infeasible,
            _ => ResizeStatus::Unknown,
        };
    }
    if let Some(c) = condition(pod, false) {
        let reason = c.reason.as_deref().unwrap_or_default();
        return match (reason, c.message) {
            ("", false) => ResizeStatus::InProgress,
            ("Error", _) => ResizeStatus::Error,
            _ => ResizeStatus::Unknown,
        };
    }
    ResizeStatus::Unknown
}

/// The `PodResizePending` condition's reason, if that condition exists (its status is not checked).
pub fn pending_reason(pod: &CachedPod) -> Option<&str> {
    condition(pod, true).map(|c| c.reason.as_deref().unwrap_or_default())
}

/// The `PodResizeInProgress` condition's reason and whether it has a message, if that condition exists.
pub fn in_progress_state(pod: &CachedPod) -> Option<(&str, bool)> {
    condition(pod, false).map(|c| (c.reason.as_deref().unwrap_or_default(), c.message))
}

/// Whether resizing the pod restarts no container: no container in `spec.containers` has a
/// `RestartContainer` resize policy (docs/design/upstream-updater.md §5.3 step 7).
pub fn is_non_disruptive(pod: &CachedPod) -> bool {
    !pod.restart_on_resize
}

/// Whether the pod has an annotations map at all.
pub fn has_annotations(pod: &CachedPod) -> bool {
    pod.has_annotations
}

/// The annotations upstream VPA leaves on a pod: its webhook's (`vpaUpdates`, `vpaObservedContainers`)
/// and its updater's after an in-place resize (`vpaInPlaceUpdated`, without `vpaUpdates`).
pub const UPSTREAM_MARKS: [&str; 3] = [
    tailor_core::sizing::UPSTREAM_UPDATES_ANNOTATION,
    "vpaInPlaceUpdated",
    "vpaObservedContainers",
];

/// One plus the index in [`UPSTREAM_MARKS`] of the first mark `annotations` carry (0: none).
fn upstream_mark_of(annotations: &BTreeMap<String, String>) -> u8 {
    (UPSTREAM_MARKS
        .iter()
        .position(|m| annotations.contains_key(*m)))
    .and_then(|i| u8::try_from(i + 1).ok())
    .unwrap_or(0)
}

/// The first of upstream VPA's marks ([`UPSTREAM_MARKS`]) the pod carries: upstream sized or resized it, so
/// an upstream VPA covers its workload too (an evicted pod would come back with upstream's numbers).
pub fn upstream_mark(pod: &CachedPod) -> Option<&'static str> {
    let i = usize::from(pod.upstream_mark).checked_sub(1)?;
    UPSTREAM_MARKS.get(i).copied()
}

/// Whether the pod carries any of upstream VPA's marks ([`upstream_mark`]).
pub fn sized_by_upstream(pod: &CachedPod) -> bool {
    pod.upstream_mark != 0
}

/// The start-up boost annotations of a pod (key → value), `None` when it has none.
pub fn boost_annotations(pod: &CachedPod) -> Option<&BTreeMap<String, String>> {
    pod.rare
        .as_ref()
        .map(|r| &r.boosts)
        .filter(|b| !b.is_empty())
}

/// Whether the pod carries any start-up boost annotation (a boost is, or was, in progress).
pub fn has_boost_annotation(pod: &CachedPod) -> bool {
    boost_annotations(pod).is_some()
}

/// The annotation key of `container`'s boost.
pub fn boost_key(container: &str) -> String {
    format!("{STARTUP_BOOST_ANNOTATION_PREFIX}{container}")
}

/// The boost annotation keys whose boost has run its course at `now` (docs/design/upstream-updater.md §5.8):
/// none unless the pod is `Ready`; a key expires when its duration is 0 or more than that many seconds have
/// passed since the pod became ready. The duration is the VPA's `startupBoost.cpu.durationSeconds`, overridden
/// by the container policy's when that one sets it.
pub fn expired_boost_keys(
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
    now: Timestamp,
) -> Vec<String> {
    let (Some(boosts), Some(ready_time)) = (
        boost_annotations(pod),
        pod.rare.as_ref().and_then(|r| r.ready_since),
    ) else {
        return Vec::new();
    };
    let pod_level = vpa
        .spec
        .startup_boost
        .as_ref()
        .and_then(|b| b.cpu.as_ref())
        .and_then(|c| c.duration_seconds)
        .unwrap_or(0);
    let policy = vpa.spec.resource_policy.as_ref();
    let mut out = Vec::new();
    for key in boosts.keys() {
        let container = &key[STARTUP_BOOST_ANNOTATION_PREFIX.len()..];
        let seconds = container_policy(policy, container)
            .and_then(|p| p.startup_boost.as_ref())
            .and_then(|b| b.cpu.as_ref())
            .and_then(|c| c.duration_seconds)
            .unwrap_or(pod_level);
        let elapsed = now.as_second().saturating_sub(ready_time.as_second());
        let elapsed_longer = elapsed > i64::from(seconds)
            || (elapsed == i64::from(seconds)
                && now.subsec_nanosecond() > ready_time.subsec_nanosecond());
        if seconds == 0 || elapsed_longer {
            out.push(key.clone());
        }
    }
    out
}

/// Go's zero time, `0001-01-01T00:00:00Z`: what an absent timestamp reads as upstream.
pub fn go_zero_time() -> Timestamp {
    Timestamp::new(-62_135_596_800, 0).unwrap_or(Timestamp::MIN)
}

/// Labels of the pod (an empty map when absent).
pub fn labels(pod: &CachedPod) -> &BTreeMap<String, String> {
    &pod.labels
}

/// The label set, shared by the pods that have the same one (identity for per-iteration caches).
pub fn label_set(pod: &CachedPod) -> &Arc<BTreeMap<String, String>> {
    &pod.labels
}
