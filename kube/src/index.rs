//! In-memory indexes for pod → VPA matching (docs/design/upstream-admission.md §3.2) and LimitRange lookup.
//!
//! The server feeds an [`Index`] from kube-rs reflector [`Store`]s; standalone mode (`--vpa-dir`) and tests
//! build it from plain objects. A lookup never waits on the API server: objects not in the caches are
//! treated as missing, and kinds outside the well-known set are resolved through a [`ScaleLookup`] the
//! caller provides ([`Index::with_scale_lookup`]): in the server a [`ScaleCache`](crate::scale_cache)
//! filled in the background, in standalone mode the custom objects of the manifests.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

mod static_vpas;
use static_vpas::StaticVpas;

use crate::reflectors::{WorkloadStores, workload_stores};
use crate::workload_cache::{CompactWorkload, WorkloadCacheWriter};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tailor_core::policy::{has_startup_boost, update_mode};
use tailor_core::target::{LabelLookup, SelectorError, WorkloadInfo};
use tailor_core::workload::{SlimWorkload, WorkloadKind};
use tailor_crds::{UpdateMode, VerticalPodAutoscaler};

use tailor_core::target::controller_owner;

/// Longest ownership chain followed before giving up.
const MAX_CHAIN: usize = 32;

/// A controller in a pod's ownership chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ControllerRef {
    /// API version of the controller (may be empty).
    pub api_version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (the pod's).
    pub namespace: String,
}

impl ControllerRef {
    fn from_owner(owner: &OwnerReference, namespace: &str) -> Self {
        Self {
            api_version: owner.api_version.clone(),
            kind: owner.kind.clone(),
            name: owner.name.clone(),
            namespace: namespace.to_owned(),
        }
    }
}

impl fmt::Display for ControllerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why the controller chain of a pod could not be resolved (the pod then gets no VPA).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A well-known controller is in neither the cache nor the API server.
    #[error("{kind} {namespace}/{name} does not exist")]
    Missing {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A well-known controller missing from the cache could not be read in time (`why`: `shed` when a
    /// bound of the live reads was reached, `failed` when the read failed or timed out).
    #[error("{kind} {namespace}/{name} is not cached and could not be read ({why})")]
    Unread {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `shed` or `failed`.
        why: &'static str,
    },
    /// The chain loops.
    #[error("cycle detected in ownership chain")]
    Cycle,
    /// A controller in the chain is owned by something that cannot be a controller (e.g. a Node).
    #[error("unhandled targetRef {api_version} / {kind} / {name}, last error {reason}")]
    Unhandled {
        /// API version of the owner.
        api_version: String,
        /// Kind of the owner.
        kind: String,
        /// Name of the owner.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// A label selector cannot be evaluated.
    #[error("invalid selector: {0}")]
    Selector(String),
}

/// What the server knows about an object of a kind outside [`WELL_KNOWN_KINDS`](tailor_core::target::WELL_KNOWN_KINDS) (from its `/scale`
/// subresource and metadata).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleInfo {
    /// The object's controller owner, if any.
    pub owner: Option<OwnerReference>,
    /// The selector from `status.selector` of the scale subresource.
    pub selector: Option<LabelSelector>,
}

/// Resolves objects of kinds outside [`WELL_KNOWN_KINDS`](tailor_core::target::WELL_KNOWN_KINDS); `None` means the object has no `/scale`
/// subresource (or is unknown). Must answer from memory.
pub trait ScaleLookup: Send + Sync {
    /// Looks up `kind`/`name` (of `api_version`) in `namespace`.
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<ScaleInfo>;
}

/// What a lookup of a well-known owner missing from the caches came to.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnerAnswer {
    /// Read (or remembered): the owner.
    Found(WorkloadInfo),
    /// It does not exist (the API server said so, or there is nothing to ask).
    Absent,
    /// Not read: a bound (reads in flight, reads per second) was reached, or the caller cannot wait.
    Shed,
    /// The read failed or timed out.
    Failed,
}

impl OwnerAnswer {
    /// The owner, when found.
    pub fn found(self) -> Option<WorkloadInfo> {
        match self {
            OwnerAnswer::Found(info) => Some(info),
            _ => None,
        }
    }
}

/// Answers for well-known controllers the caches do not hold yet (the first pods of a new ReplicaSet or Job
/// arrive before its watch event), with why it could not tell in time. Called on the review path: an
/// implementation bounds its own wait.
pub trait OwnerFallback: Send + Sync {
    /// Looks up the well-known `kind` `namespace/name`.
    fn lookup(&self, kind: &str, namespace: &str, name: &str) -> OwnerAnswer;
}

/// A [`ScaleLookup`] over a fixed map, for standalone mode and tests.
#[derive(Clone, Debug, Default)]
pub struct StaticScaleLookup {
    /// (kind, namespace, name) → info.
    pub objects: HashMap<(String, String, String), ScaleInfo>,
}

impl ScaleLookup for StaticScaleLookup {
    fn lookup(
        &self,
        _api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<ScaleInfo> {
        self.objects
            .get(&(kind.to_owned(), namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

/// A read-only source of cached objects: a reflector [`Store`] or a fixed set.
pub trait ObjectSource<K>: Send + Sync {
    /// The object `namespace/name`.
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>>;
    /// All objects satisfying `predicate`.
    fn filter(&self, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>>;
    /// The objects of `namespace` satisfying `predicate` (a fixed set looks only at that namespace's).
    fn filter_in(&self, namespace: &str, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>>;
    /// Whether an object of `namespace` satisfies `predicate`.
    fn any_in(&self, namespace: &str, predicate: &dyn Fn(&K) -> bool) -> bool {
        !self.filter_in(namespace, predicate).is_empty()
    }
}

impl<K> ObjectSource<K> for Store<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        Store::get(self, &ObjectRef::new(name).within(namespace))
    }

    fn filter(&self, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.state_filter(|k| predicate(k))
    }

    fn filter_in(&self, namespace: &str, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.state_filter(|k| k.meta().namespace.as_deref() == Some(namespace) && predicate(k))
    }
}

/// The VPAs matching reads: the webhook's compact VPA cache (`tailor_admission::vpa_cache`), or any
/// [`ObjectSource`] of whole objects (a reflector store, a fixed set).
pub trait VpaSource: Send + Sync {
    /// Whether `namespace` holds a VPA that takes part in matching ([`is_active`]).
    fn has_active(&self, namespace: &str) -> bool;
    /// The VPAs of `namespace` that take part in matching and whose `targetRef` names `kind`/`name`.
    fn active_targeting(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<Arc<VerticalPodAutoscaler>>;
    /// Calls `f(namespace, api_version, kind, name)` for every VPA's `targetRef` (API version empty when
    /// missing).
    fn each_target(&self, f: &mut dyn FnMut(&str, &str, &str, &str));
}

impl<S: ObjectSource<VerticalPodAutoscaler>> VpaSource for S {
    fn each_target(&self, f: &mut dyn FnMut(&str, &str, &str, &str)) {
        for v in self.filter(&|_| true) {
            if let (Some(namespace), Some(t)) = (&v.metadata.namespace, &v.spec.target_ref) {
                f(
                    namespace,
                    t.api_version.as_deref().unwrap_or_default(),
                    &t.kind,
                    &t.name,
                );
            }
        }
    }

    fn has_active(&self, namespace: &str) -> bool {
        self.any_in(namespace, &is_active)
    }

    fn active_targeting(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<Arc<VerticalPodAutoscaler>> {
        self.filter_in(namespace, &|v| {
            v.spec
                .target_ref
                .as_ref()
                .is_some_and(|t| t.name == name && t.kind == kind)
                && is_active(v)
        })
    }
}

/// A fixed set of objects, keyed by namespace and name, and listed per namespace (a pod's review looks only
/// at its namespace's VPAs and LimitRanges).
#[derive(Clone, Debug)]
pub struct StaticSource<K> {
    objects: Vec<Arc<K>>,
    /// namespace → name → index in `objects`: looked up with the review's strings, without copying them.
    by_key: HashMap<String, HashMap<String, usize, StaticHasher>, StaticHasher>,
    by_namespace: HashMap<String, Vec<usize>, StaticHasher>,
}

/// The hasher of the fixed sets' maps: foldhash (seeded per process), as the caches' maps use. A review looks
/// up several of them by namespace and name, and SipHash was the larger part of each lookup.
pub(crate) type StaticHasher = foldhash::fast::RandomState;

impl<K> Default for StaticSource<K> {
    fn default() -> Self {
        Self {
            objects: Vec::new(),
            by_key: HashMap::default(),
            by_namespace: HashMap::default(),
        }
    }
}

impl<K: Resource> StaticSource<K> {
    /// Indexes `objects`; a later object with the same namespace and name replaces an earlier one.
    pub fn new(objects: Vec<K>) -> Self {
        let mut source = Self::default();
        for object in objects {
            let namespace = object.meta().namespace.clone().unwrap_or_default();
            let name = object.meta().name.clone().unwrap_or_default();
            let names = source.by_key.entry(namespace.clone()).or_default();
            match names.get(&name) {
                Some(&i) => source.objects[i] = Arc::new(object),
                None => {
                    let i = source.objects.len();
                    names.insert(name, i);
                    source.by_namespace.entry(namespace).or_default().push(i);
                    source.objects.push(Arc::new(object));
                }
            }
        }
        source
    }
}

impl<K> StaticSource<K> {
    fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = &Arc<K>> {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.objects.get(i))
    }
}

impl<K: Send + Sync> ObjectSource<K> for StaticSource<K> {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        (self.by_key.get(namespace))
            .and_then(|names| names.get(name))
            .and_then(|&i| self.objects.get(i).cloned())
    }

    fn filter(&self, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.objects
            .iter()
            .filter(|k| predicate(k))
            .cloned()
            .collect()
    }

    fn filter_in(&self, namespace: &str, predicate: &dyn Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.in_namespace(namespace)
            .filter(|k| predicate(k))
            .cloned()
            .collect()
    }

    fn any_in(&self, namespace: &str, predicate: &dyn Fn(&K) -> bool) -> bool {
        self.in_namespace(namespace).any(|k| predicate(k))
    }
}

/// Plain objects for [`Index::from_objects`] (standalone mode, tests).
#[derive(Clone, Debug, Default)]
pub struct IndexObjects {
    /// Tailor VPAs.
    pub vpas: Vec<VerticalPodAutoscaler>,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// ReplicaSets.
    pub replica_sets: Vec<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Vec<StatefulSet>,
    /// DaemonSets.
    pub daemon_sets: Vec<DaemonSet>,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// CronJobs.
    pub cron_jobs: Vec<CronJob>,
    /// ReplicationControllers.
    pub replication_controllers: Vec<ReplicationController>,
    /// LimitRanges.
    pub limit_ranges: Vec<LimitRange>,
    /// Objects of other kinds that can own pods' controllers (custom kinds with a selector).
    pub scale: StaticScaleLookup,
}

/// Reflector stores for [`Index::from_stores`] (the server).
#[derive(Clone)]
pub struct IndexStores {
    /// Tailor VPAs (the webhook: its compact `VpaCache`; the updater: a reflector store).
    pub vpas: Arc<dyn VpaSource>,
    /// The well-known workload kinds, slim (shared with the recommender).
    pub workloads: WorkloadStores,
    /// LimitRanges.
    pub limit_ranges: Store<LimitRange>,
}

/// The caches the webhook matches pods against.
pub struct Index {
    vpas: Arc<dyn VpaSource>,
    workloads: WorkloadStores,
    limit_ranges: Box<dyn ObjectSource<LimitRange>>,
    quotas: Option<Arc<dyn crate::quota_cache::QuotaSource>>,
    scale: Option<Arc<dyn ScaleLookup>>,
    fallback: Option<Arc<dyn OwnerFallback>>,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

/// What [`Index::well_known`] reads of a cached workload of kind `K`.
trait CachedPart {
    /// What is read.
    type Out;
    /// Reads it.
    fn of<K: WorkloadKind>(&self, cached: &CompactWorkload) -> Self::Out;
}

/// The controller owner as the next link of an ownership chain in `namespace`; only the owner is
/// copied (not the UID, nor the selector).
struct OwnerPart<'a> {
    namespace: &'a str,
}

impl CachedPart for OwnerPart<'_> {
    type Out = Option<ControllerRef>;
    fn of<K: WorkloadKind>(&self, cached: &CompactWorkload) -> Self::Out {
        cached
            .owner_names()
            .map(|(api_version, kind, name)| ControllerRef {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                name: name.to_owned(),
                namespace: self.namespace.to_owned(),
            })
    }
}

/// The pod selector (the owner is not copied).
struct SelectorPart;

impl CachedPart for SelectorPart {
    type Out = Option<LabelSelector>;
    fn of<K: WorkloadKind>(&self, cached: &CompactWorkload) -> Self::Out {
        cached.selector::<K>()
    }
}

/// Whether the workload's pod selector selects some labels ([`CompactWorkload::selects`]).
struct SelectsPart<'l, L: ?Sized> {
    labels: &'l L,
}

impl<L: LabelLookup + ?Sized> CachedPart for SelectsPart<'_, L> {
    type Out = Option<Result<bool, SelectorError>>;
    fn of<K: WorkloadKind>(&self, cached: &CompactWorkload) -> Self::Out {
        cached.selects::<K, L>(self.labels)
    }
}

impl Index {
    /// An index over plain objects (workloads cached as the server caches them, VPAs whole as the updater's
    /// store holds them); objects of other kinds answer from [`IndexObjects::scale`].
    pub fn from_objects(objects: IndexObjects) -> Self {
        fn fill<K: WorkloadKind>(writer: &mut WorkloadCacheWriter<K>, objects: &[K]) {
            for object in objects {
                writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
                    SlimWorkload::of(object),
                ));
            }
        }
        let (workloads, mut w) = workload_stores();
        fill(&mut w.deployments, &objects.deployments);
        fill(&mut w.replica_sets, &objects.replica_sets);
        fill(&mut w.stateful_sets, &objects.stateful_sets);
        fill(&mut w.daemon_sets, &objects.daemon_sets);
        fill(&mut w.jobs, &objects.jobs);
        fill(&mut w.cron_jobs, &objects.cron_jobs);
        fill(
            &mut w.replication_controllers,
            &objects.replication_controllers,
        );
        Self::from_parts(objects.vpas, workloads, objects.limit_ranges, objects.scale)
    }

    /// An index over VPAs, LimitRanges and custom controllers as given and workload caches already filled
    /// (manifests read through [`crate::manifests::index_objects::ManifestIndex`]).
    pub fn from_parts(
        vpas: Vec<VerticalPodAutoscaler>,
        workloads: WorkloadStores,
        limit_ranges: Vec<LimitRange>,
        scale: StaticScaleLookup,
    ) -> Self {
        Self {
            vpas: Arc::new(StaticVpas::new(vpas)),
            workloads,
            limit_ranges: Box::new(StaticSource::new(limit_ranges)),
            quotas: None,
            scale: (!scale.objects.is_empty()).then(|| Arc::new(scale) as Arc<dyn ScaleLookup>),
            fallback: None,
        }
    }

    /// An index over reflector stores, without a scale lookup.
    pub fn from_stores(stores: IndexStores) -> Self {
        Self {
            vpas: stores.vpas,
            workloads: stores.workloads,
            limit_ranges: Box::new(stores.limit_ranges),
            quotas: None,
            scale: None,
            fallback: None,
        }
    }

    /// Adds the lookup for kinds outside [`WELL_KNOWN_KINDS`](tailor_core::target::WELL_KNOWN_KINDS).
    pub fn with_scale_lookup(mut self, lookup: Arc<dyn ScaleLookup>) -> Self {
        self.scale = Some(lookup);
        self
    }

    /// Adds the fallback for well-known controllers missing from the caches.
    pub fn with_owner_fallback(mut self, fallback: Arc<dyn OwnerFallback>) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// Adds the ResourceQuotas pods are fitted into (quota fit, docs/decisions/quota-fit.md); without them no quota
    /// applies.
    pub fn with_quotas(mut self, quotas: Arc<dyn crate::quota_cache::QuotaSource>) -> Self {
        self.quotas = Some(quotas);
        self
    }

    /// The ResourceQuotas of `namespace` that bound a tracked key (none without [`Index::with_quotas`]).
    pub fn quotas(&self, namespace: &str) -> Vec<tailor_core::quota::Quota> {
        self.quotas
            .as_ref()
            .map(|q| q.quotas(namespace))
            .unwrap_or_default()
    }

    /// The LimitRanges of `namespace`.
    pub fn limit_ranges(&self, namespace: &str) -> Vec<LimitRange> {
        self.shared_limit_ranges(namespace)
            .iter()
            .map(|lr| (**lr).clone())
            .collect()
    }

    /// The LimitRanges of `namespace` as the index holds them, uncopied: a new version of one is a new
    /// `Arc`, so their identity tells whether an answer computed from them still holds.
    pub fn shared_limit_ranges(&self, namespace: &str) -> Vec<Arc<LimitRange>> {
        self.limit_ranges.filter_in(namespace, &|_| true)
    }

    /// `Some(Err(answer))` when `kind` is well-known but the object is neither cached nor found by the
    /// fallback (`Absent` without one); `None` for other kinds. `cached` reads the cached object of kind
    /// `K`, `fallback` the fallback's answer.
    fn well_known<T>(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        cached: impl CachedPart<Out = T>,
        fallback: impl FnOnce(WorkloadInfo) -> T,
    ) -> Option<Result<T, OwnerAnswer>> {
        let w = &self.workloads;
        let found = match kind {
            "Deployment" => w
                .deployments
                .with(namespace, name, |c| cached.of::<Deployment>(c)),
            "ReplicaSet" => w
                .replica_sets
                .with(namespace, name, |c| cached.of::<ReplicaSet>(c)),
            "StatefulSet" => w
                .stateful_sets
                .with(namespace, name, |c| cached.of::<StatefulSet>(c)),
            "DaemonSet" => w
                .daemon_sets
                .with(namespace, name, |c| cached.of::<DaemonSet>(c)),
            "Job" => w.jobs.with(namespace, name, |c| cached.of::<Job>(c)),
            "CronJob" => w
                .cron_jobs
                .with(namespace, name, |c| cached.of::<CronJob>(c)),
            "ReplicationController" => w
                .replication_controllers
                .with(namespace, name, |c| cached.of::<ReplicationController>(c)),
            _ => return None,
        };
        Some(match found {
            Some(found) => Ok(found),
            None => match self.fallback.as_ref() {
                None => Err(OwnerAnswer::Absent),
                Some(f) => match f.lookup(kind, namespace, name) {
                    OwnerAnswer::Found(info) => Ok(fallback(info)),
                    other => Err(other),
                },
            },
        })
    }

    fn scale_info(&self, c: &ControllerRef) -> Option<ScaleInfo> {
        if c.kind == "Node" {
            return None;
        }
        self.scale
            .as_ref()
            .and_then(|s| s.lookup(&c.api_version, &c.kind, &c.namespace, &c.name))
    }

    /// The topmost well-known-or-scalable controller above `start` (docs/design/upstream-admission.md §3.2 step 2).
    pub fn topmost_controller(
        &self,
        start: &ControllerRef,
    ) -> Result<Option<ControllerRef>, ChainError> {
        self.topmost_from(start.clone())
    }

    /// [`Index::topmost_controller`], taking `start` over.
    fn topmost_from(&self, start: ControllerRef) -> Result<Option<ControllerRef>, ChainError> {
        // The controllers passed, in order: the last one is the top-most so far. Chains are a few links
        // long, so a cycle is found by scanning them (by kind, namespace and name; not API version).
        let mut chain: Vec<ControllerRef> = Vec::with_capacity(4);
        let mut current = start;
        for _ in 0..MAX_CHAIN {
            if chain.iter().any(|c| {
                c.kind == current.kind && c.name == current.name && c.namespace == current.namespace
            }) {
                return Err(ChainError::Cycle);
            }
            let namespace = current.namespace.as_str();
            let next = match self.well_known(
                &current.kind,
                namespace,
                &current.name,
                OwnerPart { namespace },
                |info| {
                    info.owner
                        .map(|owner| ControllerRef::from_owner(&owner, namespace))
                },
            ) {
                Some(Ok(next)) => next,
                Some(Err(answer)) => {
                    let (kind, namespace, name) = (
                        current.kind.clone(),
                        current.namespace.clone(),
                        current.name.clone(),
                    );
                    return Err(match answer {
                        OwnerAnswer::Shed => ChainError::Unread {
                            kind,
                            namespace,
                            name,
                            why: "shed",
                        },
                        OwnerAnswer::Failed => ChainError::Unread {
                            kind,
                            namespace,
                            name,
                            why: "failed",
                        },
                        _ => ChainError::Missing {
                            kind,
                            namespace,
                            name,
                        },
                    });
                }
                None => match self.scale_info(&current) {
                    Some(info) => info
                        .owner
                        .map(|owner| ControllerRef::from_owner(&owner, namespace)),
                    None if chain.is_empty() => return Ok(None),
                    None if current.kind == "Node" => {
                        return Err(ChainError::Unhandled {
                            api_version: current.api_version.clone(),
                            kind: current.kind.clone(),
                            name: current.name.clone(),
                            reason: "node is not a valid owner".into(),
                        });
                    }
                    // The parent is neither well-known nor scalable: the child is the top.
                    None => return Ok(chain.pop()),
                },
            };
            chain.push(current);
            match next {
                Some(next) => current = next,
                None => return Ok(chain.pop()),
            }
        }
        Err(ChainError::Cycle)
    }

    /// The pod's controller (last ownerReference with `controller: true`), `None` for bare and static pods.
    pub fn pod_controller(pod: &Pod, namespace: &str) -> Option<ControllerRef> {
        Self::controller_of(&pod.metadata, namespace)
    }

    /// [`Index::pod_controller`] from the pod's metadata alone.
    pub fn controller_of(meta: &ObjectMeta, namespace: &str) -> Option<ControllerRef> {
        let owner = controller_owner(meta.owner_references.as_ref())?;
        if owner.kind == "Node" {
            return None;
        }
        Some(ControllerRef::from_owner(owner, namespace))
    }

    /// The label selector of a controller: `spec.selector` for well-known kinds (CronJob: its job
    /// template's labels; ReplicationController: its selector map), else the scale lookup's.
    pub fn selector(&self, c: &ControllerRef) -> Option<LabelSelector> {
        match self.well_known(&c.kind, &c.namespace, &c.name, SelectorPart, |i| i.selector) {
            Some(selector) => selector.ok().flatten(),
            None => self.scale_info(c).and_then(|i| i.selector),
        }
    }

    /// Whether the label selector of a controller ([`Index::selector`]) selects `labels`; `None` when it has
    /// none. A cached workload's selector is matched as cached, without building it.
    pub fn selects<L: LabelLookup + ?Sized>(
        &self,
        c: &ControllerRef,
        labels: &L,
    ) -> Option<Result<bool, SelectorError>> {
        let part = SelectsPart { labels };
        let of_full = |s: LabelSelector| tailor_core::target::selector_matches(&s, labels);
        match self.well_known(&c.kind, &c.namespace, &c.name, part, |i| {
            i.selector.map(of_full)
        }) {
            Some(selects) => selects.ok().flatten(),
            None => self.scale_info(c).and_then(|i| i.selector).map(of_full),
        }
    }

    /// The top-most well-known or scalable controller of `pod` (its controller owner, walked up), `None`
    /// for bare and static pods.
    pub fn pod_top_controller(
        &self,
        pod: &Pod,
        namespace: &str,
    ) -> Result<Option<ControllerRef>, ChainError> {
        match Self::pod_controller(pod, namespace) {
            Some(controller) => self.topmost_from(controller),
            None => Ok(None),
        }
    }

    /// The VPA that governs `pod` in `namespace` (docs/design/upstream-admission.md §3.2), or `None`: among
    /// the VPAs that take part ([`is_active`]) and name the pod's top-most controller, the [`strongest`], if the
    /// controller's selector selects the pod.
    pub fn matching_vpa(
        &self,
        pod: &Pod,
        namespace: &str,
    ) -> Result<Option<Arc<VerticalPodAutoscaler>>, ChainError> {
        Ok(self.matching_vpas(pod, namespace)?.map(|m| m.vpa))
    }

    /// [`Index::matching_vpa`], with the names of the other VPAs that target the same controller (a
    /// conflict the updater refuses to act on: it updates none of them, docs/decisions/conflicting-vpas.md).
    pub fn matching_vpas(&self, pod: &Pod, namespace: &str) -> Result<Option<Matched>, ChainError> {
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        self.matching_vpas_labelled(&pod.metadata, labels, namespace)
    }

    /// [`Index::matching_vpas`] from the pod's metadata, its labels read from `labels` instead of
    /// `metadata.labels` (the webhook keeps them as the review's text and builds no `Pod` to match).
    pub fn matching_vpas_labelled<L: LabelLookup + ?Sized>(
        &self,
        meta: &ObjectMeta,
        labels: &L,
        namespace: &str,
    ) -> Result<Option<Matched>, ChainError> {
        let Some(controller) = Self::controller_of(meta, namespace) else {
            return Ok(None);
        };
        // Nothing to match in this namespace: skip the ownership walk.
        if !self.vpas.has_active(namespace) {
            return Ok(None);
        }
        let Some(top) = self.topmost_from(controller)? else {
            return Ok(None);
        };
        let candidates = self.vpas.active_targeting(namespace, &top.kind, &top.name);
        if candidates.is_empty() {
            return Ok(None);
        }
        match self.selects(&top, labels) {
            Some(Ok(true)) => {}
            Some(Err(e)) => return Err(ChainError::Selector(e.to_string())),
            Some(Ok(false)) | None => return Ok(None),
        }
        let names: Vec<String> = if candidates.len() > 1 {
            candidates
                .iter()
                .take(MAX_CONFLICT_NAMES)
                .map(|v| v.name_any())
                .collect()
        } else {
            Vec::new()
        };
        let count = candidates.len();
        Ok(strongest(candidates).map(|vpa| Matched {
            vpa,
            conflicting: count,
            names,
            target: top,
        }))
    }
}

impl Index {
    /// The VPAs that probably govern a pod whose owner chain stopped at `e` (a pod admitted unsized):
    /// those naming the unresolved owner itself, and for a ReplicaSet or a Job those naming the Deployment
    /// or CronJob its name was made from (`<parent>-<suffix>`, as their controllers name them), as
    /// (name, uid); at most [`MAX_CONFLICT_NAMES`]. Empty when the error names no owner.
    pub fn likely_vpas(&self, e: &ChainError) -> Vec<(String, String)> {
        let (ChainError::Missing {
            kind,
            namespace,
            name,
        }
        | ChainError::Unread {
            kind,
            namespace,
            name,
            ..
        }) = e
        else {
            return Vec::new();
        };
        let parent = match kind.as_str() {
            "ReplicaSet" => Some("Deployment"),
            "Job" => Some("CronJob"),
            _ => None,
        }
        .zip(name.rsplit_once('-').map(|(p, _)| p));
        let mut found = self.vpas.active_targeting(namespace, kind, name);
        if let Some((parent_kind, parent_name)) = parent {
            found.extend(
                self.vpas
                    .active_targeting(namespace, parent_kind, parent_name),
            );
        }
        found
            .iter()
            .take(MAX_CONFLICT_NAMES)
            .map(|v| (v.name_any(), v.metadata.uid.clone().unwrap_or_default()))
            .collect()
    }
}

/// Most VPA names [`Matched::names`] holds.
pub const MAX_CONFLICT_NAMES: usize = 8;

/// The VPA that governs a pod ([`Index::matching_vpas`]).
#[derive(Clone, Debug)]
pub struct Matched {
    /// The strongest VPA: the one the webhook applies.
    pub vpa: Arc<VerticalPodAutoscaler>,
    /// How many VPAs take part in matching and target the pod's controller (1: no conflict).
    pub conflicting: usize,
    /// Their names when there are several (at most [`MAX_CONFLICT_NAMES`]).
    pub names: Vec<String>,
    /// The controller they target.
    pub target: ControllerRef,
}

impl Matched {
    /// The warning the webhook returns when several VPAs target the pod's controller.
    pub fn conflict_warning(&self) -> Option<String> {
        if self.conflicting < 2 {
            return None;
        }
        let mut names = self.names.clone();
        names.sort_unstable();
        Some(format!(
            "conflicting VPAs: {} VPAs ({}) target {} {}/{}; the webhook sizes the pod from the oldest ({}) and the updater updates none of them until only one remains",
            self.conflicting,
            names.join(", "),
            self.target.kind,
            self.target.namespace,
            self.target.name,
            self.vpa.name_any()
        ))
    }
}

/// Whether a VPA takes part in matching: any mode but `Off`, or `Off` with a start-up boost.
pub fn is_active(vpa: &VerticalPodAutoscaler) -> bool {
    update_mode(&vpa.spec) != UpdateMode::Off || has_startup_boost(&vpa.spec)
}

/// The oldest VPA (by `creationTimestamp`, missing first), ties broken by the smaller name.
pub fn strongest<V: std::ops::Deref<Target = VerticalPodAutoscaler>>(vpas: Vec<V>) -> Option<V> {
    vpas.into_iter().min_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        ta.cmp(&tb).then_with(|| a.name_any().cmp(&b.name_any()))
    })
}

/// Whether `labels` satisfy a Kubernetes label selector ([`tailor_core::target::selector_matches`]). An
/// empty selector matches everything.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, ChainError> {
    tailor_core::target::selector_matches(selector, labels)
        .map_err(|e| ChainError::Selector(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reflectors::workload_stores;
    use kube::runtime::{reflector, watcher};
    use serde_json::json;
    use tailor_testkit::fixtures::{PodFixture, VpaFixture};

    fn vpa(name: &str, created: &str, mode: &str) -> VerticalPodAutoscaler {
        VpaFixture::new("ns", name)
            .created(created)
            .target_kind("Deployment", "web")
            .mode(mode)
            .build()
    }

    fn pod() -> Pod {
        PodFixture::new("ns", "p")
            .label("app", "web")
            .label("tier", "fe")
            .owner("Deployment", "web")
            .owner_uid("1")
            .build()
    }

    fn deployment(selector: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": selector, "template": {}}
        }))
        .unwrap()
    }

    #[test]
    fn reflector_stores_feed_the_index() {
        let (vpas, mut vpa_writer) = reflector::store();
        let (workloads, mut workload_writers) = workload_stores();
        for v in [
            vpa("b", "2024-01-01T00:00:00Z", "Recreate"),
            vpa("a", "2024-01-01T00:00:00Z", "Initial"),
            vpa("old-off", "2023-01-01T00:00:00Z", "Off"),
        ] {
            vpa_writer.apply_watcher_event(&watcher::Event::Apply(v));
        }
        let deploy_writer = &mut workload_writers.deployments;
        deploy_writer.apply_watcher_event(&watcher::Event::Apply(SlimWorkload::of(&deployment(
            json!({
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]
            }),
        ))));
        let index = Index::from_stores(IndexStores {
            vpas: Arc::new(vpas),
            workloads,
            limit_ranges: reflector::store().0,
        });
        // Same age: the smaller name wins; the older Off VPA is skipped.
        let matched = index.matching_vpa(&pod(), "ns").unwrap().unwrap();
        assert_eq!(matched.metadata.name.as_deref(), Some("a"));
        // Another namespace never matches.
        assert!(index.matching_vpa(&pod(), "other").unwrap().is_none());
    }

    #[test]
    fn selector_mismatch_and_missing_controller() {
        let index = Index::from_objects(IndexObjects {
            vpas: vec![vpa("a", "2024-01-01T00:00:00Z", "Recreate")],
            deployments: vec![deployment(
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["fe"]}]}),
            )],
            ..Default::default()
        });
        assert!(index.matching_vpa(&pod(), "ns").unwrap().is_none());
        let index = Index::from_objects(IndexObjects {
            vpas: vec![vpa("a", "2024-01-01T00:00:00Z", "Recreate")],
            ..Default::default()
        });
        assert!(matches!(
            index.matching_vpa(&pod(), "ns"),
            Err(ChainError::Missing { .. })
        ));
    }

    #[test]
    fn the_likely_vpas_of_an_unresolved_owner_are_those_of_the_workload_it_was_named_after() {
        let index = Index::from_objects(IndexObjects {
            vpas: vec![
                vpa("a", "2024-01-01T00:00:00Z", "Recreate"),
                vpa("off", "2024-01-01T00:00:00Z", "Off"),
            ],
            ..Default::default()
        });
        let missing = |kind: &str, name: &str, namespace: &str| ChainError::Missing {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        let names = |e: &ChainError| -> Vec<String> {
            index.likely_vpas(e).into_iter().map(|(n, _)| n).collect()
        };
        // A rollout's new ReplicaSet of Deployment web, not yet cached: the VPA on web (Off takes no part).
        assert_eq!(names(&missing("ReplicaSet", "web-7c9f5d", "ns")), ["a"]);
        assert!(names(&missing("ReplicaSet", "web-7c9f5d", "other")).is_empty());
        assert!(names(&missing("ReplicaSet", "webshop-1", "ns")).is_empty());
        assert!(names(&missing("StatefulSet", "web-1", "ns")).is_empty());
        assert!(names(&ChainError::Cycle).is_empty());
    }

    #[test]
    fn scalable_custom_owner_is_the_top() {
        let mut lookup = StaticScaleLookup::default();
        lookup.objects.insert(
            ("Etcd".into(), "ns".into(), "main".into()),
            ScaleInfo {
                owner: None,
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    match_expressions: None,
                }),
            },
        );
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}));
        d.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "druid.gardener.cloud/v1alpha1".into(),
            kind: "Etcd".into(),
            name: "main".into(),
            uid: "9".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let mut v = vpa("a", "2024-01-01T00:00:00Z", "Recreate");
        v.spec.target_ref = Some(tailor_crds::CrossVersionObjectReference {
            api_version: None,
            kind: "Etcd".into(),
            name: "main".into(),
        });
        let index = Index::from_objects(IndexObjects {
            vpas: vec![v],
            deployments: vec![d],
            ..Default::default()
        })
        .with_scale_lookup(Arc::new(lookup));
        assert!(index.matching_vpa(&pod(), "ns").unwrap().is_some());
    }
}
