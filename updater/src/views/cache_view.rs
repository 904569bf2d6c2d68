//! The iteration's reads ([`CacheView`], its [`ClusterView`]) over the binary's reflector caches or a
//! snapshot's objects (`tailor plan`): VPA matching, and processed recommendations, resize plans and
//! priorities kept per VPA across iterations while their inputs are unchanged; namespace labels; the
//! replica counts of pod creators ([`ReplicaStores`], with [`ScaleReplicas`] for controllers of other
//! kinds). The binary's writes go through [`crate::writers::api_actuator`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{LimitRange, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use tailor_crds::{RecommendedPodResources, VerticalPodAutoscaler};
use tailor_kube::index::{ControllerRef, Index};

use crate::FastMap;
use crate::decisions::config::{FeatureGates, RestrictionConfig};
use crate::decisions::priority::{MilliCache, ParsedRecommendation, PodPriority, priority_for};
use crate::decisions::resize::{ResizeError, ResizePlan, plan_resize};
use crate::decisions::restriction::{Creator, ReplicaLookup, Restriction, unknown_kind_replicas};
use crate::iteration::{Candidates, ClusterView};
use crate::views::pods::{self, CachedPod, Owner};

/// Replica counts of controllers of other kinds, read from their `/scale` subresource in the background
/// (Tailor: upstream counts 0 replicas for them, so every pod is disruptable,
/// docs/design/upstream-updater.md §8 item 3).
///
/// Only the creators of pods some VPA governs are looked up (docs/decisions/scale-lookups.md: static pods,
/// Tekton or KubeVirt pods must not cost a discovery and a `/scale` GET per pod owner and interval), answers
/// that say "no count" are remembered like counts, and each refresh fetches at most [`MAX_FETCHES_PER_REFRESH`].
#[derive(Clone, Debug, Default)]
pub struct ScaleReplicas {
    counts: Arc<std::sync::RwLock<HashMap<Creator, ScaleAnswer>>>,
}

/// One remembered `/scale` answer: the count (`None`: no usable count) and when it was read.
#[derive(Clone, Copy, Debug)]
struct ScaleAnswer {
    replicas: Option<i32>,
    at: std::time::Instant,
    /// How long the answer is used.
    ttl: Duration,
}

/// How long a `/scale` answer (or the answer that there is none) is used before it is fetched again.
pub const SCALE_TTL: Duration = Duration::from_secs(600);
/// How long a failed `/scale` read (an error other than absence) is remembered before it is tried again.
pub const SCALE_RETRY: Duration = Duration::from_secs(60);
/// Most controllers of other kinds whose replica counts are kept.
pub const MAX_SCALE_ENTRIES: usize = 10_000;
/// Most `/scale` reads of one refresh (the rest wait for the next one).
pub const MAX_FETCHES_PER_REFRESH: usize = 32;

impl ScaleReplicas {
    /// The cached replica count of a controller, if any.
    pub fn get(&self, creator: &Creator) -> Option<i32> {
        let counts = self
            .counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.get(creator).and_then(|a| a.replicas)
    }

    /// Records a replica count.
    pub fn insert(&self, creator: Creator, replicas: i32) {
        self.remember(creator, Some(replicas), SCALE_TTL);
    }

    fn remember(&self, creator: Creator, replicas: Option<i32>, ttl: Duration) {
        let mut counts = self
            .counts
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if counts.len() < MAX_SCALE_ENTRIES || counts.contains_key(&creator) {
            counts.insert(
                creator,
                ScaleAnswer {
                    replicas,
                    at: std::time::Instant::now(),
                    ttl,
                },
            );
        }
    }

    fn is_fresh(&self, creator: &Creator) -> bool {
        let counts = self
            .counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.get(creator).is_some_and(|a| a.at.elapsed() < a.ttl)
    }

    /// Controllers with an answer in memory (a count or the answer that there is none).
    pub fn len(&self) -> usize {
        self.counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The creators of other kinds among `pods` that `wanted` accepts (those of pods some VPA governs),
    /// bounded by [`MAX_SCALE_ENTRIES`], with their API versions.
    pub fn wanted(
        pods: &[Arc<CachedPod>],
        wanted: impl Fn(&Creator, &str) -> bool,
    ) -> HashMap<Creator, String> {
        let mut out: HashMap<Creator, String> = HashMap::new();
        for pod in pods {
            let Some(owner) = pods::creator(pod) else {
                continue;
            };
            if is_counted_kind(&owner.kind) || owner.kind == "Node" {
                continue;
            }
            if out.len() >= MAX_SCALE_ENTRIES {
                break;
            }
            let creator = Creator::of(pod);
            if out.contains_key(&creator) || !wanted(&creator, &owner.api_version) {
                continue;
            }
            out.insert(creator, owner.api_version.clone());
        }
        out
    }

    /// Fetches `/scale` for the controllers of `wanted` (from [`ScaleReplicas::wanted`]) whose answer is
    /// not fresh, at most [`MAX_FETCHES_PER_REFRESH`] of them; forgets the others. Each fetch is bounded by
    /// `timeout`. Returns the number of fetches.
    pub async fn refresh(
        &self,
        client: &Client,
        wanted: HashMap<Creator, String>,
        timeout: Duration,
    ) -> usize {
        {
            let mut counts = self
                .counts
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            counts.retain(|c, _| wanted.contains_key(c));
        }
        let mut fetches = 0;
        for (creator, api_version) in wanted {
            if self.is_fresh(&creator) {
                continue;
            }
            if fetches >= MAX_FETCHES_PER_REFRESH {
                break;
            }
            fetches += 1;
            let fetch = tailor_kube::scale::scale_replicas(
                client,
                &api_version,
                &creator.kind,
                &creator.namespace,
                &creator.name,
            );
            match tokio::time::timeout(timeout, fetch).await {
                Ok(Ok(n)) => self.insert(creator, n),
                Ok(Err(e)) if e.is_absent() => {
                    tracing::debug!(error = %e, "no /scale replica count");
                    self.remember(creator, None, SCALE_TTL);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "/scale replica count not read");
                    self.remember(creator, None, SCALE_RETRY);
                }
                Err(_) => {
                    tracing::debug!(controller = %creator.name, "/scale lookup timed out");
                    self.remember(creator, None, SCALE_RETRY);
                }
            }
        }
        fetches
    }
}

/// Whether the pods of `creator` are governed by a VPA of `vpas`: some VPA in its namespace names the
/// creator itself, or the top-most controller above it (as the webhook resolves it through `index`).
pub fn governed_creator(
    index: &Index,
    vpas: &[Arc<VerticalPodAutoscaler>],
    creator: &Creator,
    api_version: &str,
) -> bool {
    let targets = |kind: &str, name: &str| {
        vpas.iter().any(|v| {
            v.metadata.namespace.as_deref() == Some(creator.namespace.as_str())
                && v.spec
                    .target_ref
                    .as_ref()
                    .is_some_and(|t| t.kind == kind && t.name == name)
        })
    };
    if !vpas
        .iter()
        .any(|v| v.metadata.namespace.as_deref() == Some(creator.namespace.as_str()))
    {
        return false;
    }
    if targets(&creator.kind, &creator.name) {
        return true;
    }
    // Only a VPA over a kind of other kinds can govern pods a controller of another kind created above it
    // (no well-known controller owns such objects): no lookup otherwise.
    let custom_target = vpas.iter().any(|v| {
        v.metadata.namespace.as_deref() == Some(creator.namespace.as_str())
            && v.spec
                .target_ref
                .as_ref()
                .is_some_and(|t| !tailor_core::target::is_well_known(&t.kind))
    });
    if !custom_target {
        return false;
    }
    let start = ControllerRef {
        api_version: api_version.to_owned(),
        kind: creator.kind.clone(),
        name: creator.name.clone(),
        namespace: creator.namespace.clone(),
    };
    matches!(index.topmost_controller(&start), Ok(Some(top)) if targets(&top.kind, &top.name))
}

/// Kinds whose replica count the updater reads from its own caches (docs/design/upstream-updater.md §3.1 table).
fn is_counted_kind(kind: &str) -> bool {
    matches!(
        kind,
        "ReplicaSet" | "StatefulSet" | "ReplicationController" | "DaemonSet" | "Job"
    )
}

/// Replica counts of the controllers that create pods directly.
#[derive(Clone)]
pub struct ReplicaStores {
    /// ReplicaSets (spec.replicas).
    pub replica_sets: Store<ReplicaSet>,
    /// StatefulSets (spec.replicas).
    pub stateful_sets: Store<StatefulSet>,
    /// ReplicationControllers (spec.replicas).
    pub replication_controllers: Store<ReplicationController>,
    /// DaemonSets (status.numberReady).
    pub daemon_sets: Store<DaemonSet>,
    /// Other kinds, through `/scale`.
    pub scaled: ScaleReplicas,
}

fn positive(n: Option<i32>, what: &str) -> Result<i32, String> {
    n.filter(|n| *n > 0)
        .ok_or_else(|| format!("{what} unset or 0"))
}

impl ReplicaLookup for ReplicaStores {
    fn configured(&self, c: &Creator, live: i32) -> Result<i32, String> {
        let missing = || format!("{} {}/{} not found", c.kind, c.namespace, c.name);
        match c.kind.as_str() {
            "ReplicaSet" => {
                let o = self
                    .replica_sets
                    .get(&ObjectRef::new(&c.name).within(&c.namespace))
                    .ok_or_else(missing)?;
                positive(o.spec.as_ref().and_then(|s| s.replicas), "replicas")
            }
            "StatefulSet" => {
                let o = self
                    .stateful_sets
                    .get(&ObjectRef::new(&c.name).within(&c.namespace))
                    .ok_or_else(missing)?;
                positive(o.spec.as_ref().and_then(|s| s.replicas), "replicas")
            }
            "ReplicationController" => {
                let o = self
                    .replication_controllers
                    .get(&ObjectRef::new(&c.name).within(&c.namespace))
                    .ok_or_else(missing)?;
                positive(o.spec.as_ref().and_then(|s| s.replicas), "replicas")
            }
            "DaemonSet" => {
                let o = self
                    .daemon_sets
                    .get(&ObjectRef::new(&c.name).within(&c.namespace))
                    .ok_or_else(missing)?;
                positive(o.status.as_ref().map(|s| s.number_ready), "numberReady")
            }
            "Job" => Ok(live),
            _ => Ok(self
                .scaled
                .get(c)
                .filter(|n| *n > 0)
                .unwrap_or_else(unknown_kind_replicas)),
        }
    }
}

/// Keeps only what the replica lookup reads: name, namespace, replicas and readiness counts.
pub fn strip_controller<K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned>(
    o: K,
) -> K {
    let mut v = serde_json::to_value(&o).unwrap_or_default();
    if let Some(spec) = v.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.retain(|k, _| k == "replicas" || k == "selector");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "uid" | "resourceVersion"));
    }
    if let Some(status) = v.get_mut("status").and_then(|s| s.as_object_mut()) {
        status.retain(|k, _| k == "numberReady" || k == "replicas");
    }
    serde_json::from_value(v).unwrap_or(o)
}

/// The iteration's view of the caches (the binary's informers, or a snapshot's objects in `tailor plan`).
pub struct CacheView<R: ReplicaLookup = ReplicaStores> {
    /// Pod → VPA matching and LimitRanges (shared with the webhook).
    pub index: Index,
    /// Replica counts.
    pub replicas: R,
    /// Budget settings.
    pub restriction: RestrictionConfig,
    /// Feature gates.
    pub gates: FeatureGates,
    /// Clock of this iteration (for the resize plan's boost expiry).
    pub now: Timestamp,
    /// The webhook's pod floor (docs/decisions/pod-floor.md): processed recommendations are raised to it, as
    /// the webhook's.
    pub floor: Option<tailor_core::sizing::PodFloor>,
    /// What the API server accepts of an in-place resize (its version's rules).
    pub resize_rules: crate::decisions::resize_check::ResizeRules,
    /// Namespace labels (for the webhook's namespace selector; `None`: not watched).
    pub namespaces: Option<NamespaceLabels>,
    /// Upstream VPAs (`None`: none).
    pub upstream: Option<tailor_kube::upstream_vpa::UpstreamVpas>,
    caches: IterationCaches,
}

/// An `Arc` compared and hashed by address: the values the pod cache shares (owners, label sets,
/// container lists) are interned, so equal addresses mean equal values; holding the `Arc` keeps the
/// address from being reused while the key lives.
#[derive(Debug)]
struct ByAddress<T: ?Sized>(Arc<T>);

impl<T: ?Sized> PartialEq for ByAddress<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: ?Sized> Eq for ByAddress<T> {}

impl<T: ?Sized> std::hash::Hash for ByAddress<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0).cast::<()>(), state);
    }
}

/// What matching found for the pods of one controller: the top-most controller and its selector, the
/// strongest selected VPA targeting it, and which label sets the selector matched.
#[derive(Debug)]
struct Matching {
    target: Option<(ControllerRef, LabelSelector)>,
    strongest: Option<usize>,
    labels: Vec<(ByAddress<std::collections::BTreeMap<String, String>>, bool)>,
}

/// A cached value and the iteration that last used it (entries not used in an iteration are dropped at
/// the start of the next one).
#[derive(Debug)]
struct Used<V> {
    value: V,
    used: u64,
}

/// The processed-recommendation key: the pod's container names (interned).
type ProcessedKey = Vec<ByAddress<str>>;

/// The resize-plan key: the pod's containers (names, current resources and which spec maps are set,
/// interned) and whether the pod has annotations.
type PlanKey = (ByAddress<[pods::ContainerInfo]>, bool);

/// The priority cache key: the parsed recommendation, the pod's containers (interned, with their current
/// resources), its observed-container list (interned) and the resources it sets at pod level.
type PriorityKey = (
    ByAddress<ParsedRecommendation>,
    ByAddress<[pods::ContainerInfo]>,
    Option<ByAddress<[String]>>,
    &'static [&'static str],
);

/// What was computed for one VPA: processed recommendations and resize plans per container shape. Valid
/// while the VPA's UID and resourceVersion (bumped by every spec or status change), the namespace, its
/// LimitRanges (compared by value) and the CPU start-up boost gate are those recorded; a change of any
/// of them empties it.
#[derive(Debug)]
struct VpaCache {
    uid: Option<String>,
    resource_version: Option<String>,
    namespace: String,
    limit_ranges: Arc<[LimitRange]>,
    boost_gate: bool,
    used: u64,
    /// Processed recommendations by the interned container list (pods of one controller share it).
    processed_by_list:
        FastMap<ByAddress<[pods::ContainerInfo]>, Used<Option<Arc<RecommendedPodResources>>>>,
    /// Processed recommendations by container names.
    processed: FastMap<ProcessedKey, Used<Option<Arc<RecommendedPodResources>>>>,
    /// Resize plans of pods without boost annotations or pod-level resources.
    plans: FastMap<PlanKey, Used<Result<ResizePlan, ResizeError>>>,
}

/// What a [`VpaCache`] depends on besides the VPA: the namespace, its LimitRanges and the boost gate.
struct VpaInputs<'a> {
    namespace: &'a str,
    limit_ranges: &'a Arc<[LimitRange]>,
    boost_gate: bool,
}

impl VpaCache {
    fn new(vpa: &VerticalPodAutoscaler, inputs: &VpaInputs<'_>, used: u64) -> Self {
        VpaCache {
            uid: vpa.metadata.uid.clone(),
            resource_version: vpa.metadata.resource_version.clone(),
            namespace: inputs.namespace.to_owned(),
            limit_ranges: Arc::clone(inputs.limit_ranges),
            boost_gate: inputs.boost_gate,
            used,
            processed_by_list: FastMap::default(),
            processed: FastMap::default(),
            plans: FastMap::default(),
        }
    }

    /// Whether the entries were computed from `vpa` and `inputs`; equal LimitRanges read in another
    /// iteration are adopted, so that the next checks compare addresses only.
    fn valid_for(&mut self, vpa: &VerticalPodAutoscaler, inputs: &VpaInputs<'_>) -> bool {
        if self.uid != vpa.metadata.uid
            || self.resource_version != vpa.metadata.resource_version
            || self.namespace != inputs.namespace
            || self.boost_gate != inputs.boost_gate
        {
            return false;
        }
        if Arc::ptr_eq(&self.limit_ranges, inputs.limit_ranges) {
            return true;
        }
        if *self.limit_ranges == **inputs.limit_ranges {
            self.limit_ranges = Arc::clone(inputs.limit_ranges);
            return true;
        }
        false
    }

    /// Drops the entries not used in iteration `generation`.
    fn sweep(&mut self, generation: u64) {
        self.processed_by_list.retain(|_, e| e.used == generation);
        self.processed.retain(|_, e| e.used == generation);
        self.plans.retain(|_, e| e.used == generation);
    }
}

/// The per-VPA caches: kept across iterations by UID for VPAs with a UID and a resourceVersion, by
/// address (for one iteration) for the others (snapshots, hand-written objects).
#[derive(Debug, Default)]
struct VpaCaches {
    by_uid: FastMap<String, VpaCache>,
    by_address: FastMap<usize, VpaCache>,
}

impl VpaCaches {
    /// The valid cache of `vpa` (emptied if its inputs changed), marked used in iteration `generation`;
    /// `None` when the table is full and `vpa` has none.
    fn get(
        &mut self,
        vpa: &VerticalPodAutoscaler,
        inputs: &VpaInputs<'_>,
        generation: u64,
    ) -> Option<&mut VpaCache> {
        let cache = match (&vpa.metadata.uid, &vpa.metadata.resource_version) {
            (Some(uid), Some(_)) => {
                if !self.by_uid.contains_key(uid.as_str()) {
                    if self.by_uid.len() >= CACHE_ENTRIES {
                        return None;
                    }
                    self.by_uid
                        .insert(uid.clone(), VpaCache::new(vpa, inputs, generation));
                }
                self.by_uid.get_mut(uid.as_str())?
            }
            _ => {
                let len = self.by_address.len();
                match self.by_address.entry(address(vpa)) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        if len >= CACHE_ENTRIES {
                            return None;
                        }
                        e.insert(VpaCache::new(vpa, inputs, generation))
                    }
                }
            }
        };
        if !cache.valid_for(vpa, inputs) {
            *cache = VpaCache::new(vpa, inputs, generation);
        }
        cache.used = generation;
        Some(cache)
    }

    /// Keeps what iteration `generation` used (by UID only: addresses identify a VPA within one
    /// iteration).
    fn sweep(&mut self, generation: u64) {
        self.by_uid.retain(|_, c| c.used == generation);
        for cache in self.by_uid.values_mut() {
            cache.sweep(generation);
        }
        self.by_address.clear();
    }
}

/// The address of a VPA (cache key of VPAs without a UID or resourceVersion, within one iteration).
fn address(vpa: &VerticalPodAutoscaler) -> usize {
    std::ptr::from_ref(vpa) as usize
}

/// What the view computes once and reuses. For one iteration: parsed quantities, LimitRanges, the
/// matching of each pod controller. Across iterations, while their inputs are unchanged and as long as
/// an iteration uses them: processed recommendations that do not depend on a pod's own resources, resize
/// plans of pods alike (per VPA, see [`VpaCache`]), parsed recommendations and the priorities of pods
/// alike (keyed by the cached processed recommendation).
#[derive(Debug, Default)]
struct IterationCaches {
    /// The current iteration (entries record the last one that used them).
    generation: u64,
    millis: RefCell<MilliCache>,
    limit_ranges: RefCell<FastMap<String, Arc<[LimitRange]>>>,
    matching: RefCell<FastMap<ByAddress<Owner>, Matching>>,
    parsed: RefCell<FastMap<ByAddress<RecommendedPodResources>, Used<Arc<ParsedRecommendation>>>>,
    priorities: RefCell<FastMap<PriorityKey, Used<Result<PodPriority, String>>>>,
    vpas: RefCell<VpaCaches>,
}

impl IterationCaches {
    /// Starts the next iteration: the per-iteration caches are emptied, and entries of the others not
    /// used in the iteration that ends (deleted VPAs, pods gone) are dropped.
    fn begin_iteration(&mut self) {
        let generation = self.generation;
        self.millis = RefCell::default();
        self.limit_ranges = RefCell::default();
        self.matching = RefCell::default();
        self.parsed.get_mut().retain(|_, e| e.used == generation);
        self.priorities
            .get_mut()
            .retain(|_, e| e.used == generation);
        self.vpas.get_mut().sweep(generation);
        self.generation = generation.wrapping_add(1);
    }
}

/// Most entries in each cache (beyond it, lookups are computed without caching).
const CACHE_ENTRIES: usize = 1 << 20;

/// Most label sets remembered per controller.
const LABEL_SETS: usize = 8;

impl<R: ReplicaLookup> CacheView<R> {
    /// A view over `index` and `replicas`.
    pub fn new(
        index: Index,
        replicas: R,
        restriction: RestrictionConfig,
        gates: FeatureGates,
        now: Timestamp,
    ) -> Self {
        CacheView {
            index,
            replicas,
            restriction,
            gates,
            now,
            floor: None,
            resize_rules: crate::decisions::resize_check::ResizeRules::default(),
            namespaces: None,
            upstream: None,
            caches: IterationCaches::default(),
        }
    }

    /// Starts an iteration at `now`: what was cached for one iteration only is dropped, and so are the
    /// kept entries the previous iteration did not use.
    pub fn begin_iteration(&mut self, now: Timestamp) {
        self.now = now;
        self.caches.begin_iteration();
    }

    /// Number of VPAs with entries kept across iterations (for tests).
    #[cfg(test)]
    fn kept_vpas(&self) -> usize {
        self.caches.vpas.borrow().by_uid.len()
    }

    /// The LimitRanges of `namespace`, read once per iteration.
    fn limit_ranges(&self, namespace: &str) -> Arc<[LimitRange]> {
        if let Some(hit) = self.caches.limit_ranges.borrow().get(namespace) {
            return Arc::clone(hit);
        }
        let found: Arc<[LimitRange]> = self.index.limit_ranges(namespace).into();
        let mut cache = self.caches.limit_ranges.borrow_mut();
        if cache.len() < CACHE_ENTRIES {
            cache.insert(namespace.to_owned(), Arc::clone(&found));
        }
        found
    }

    /// The top-most controller of the pod's controller and its selector.
    fn target_of(&self, owner: &Owner) -> Option<(ControllerRef, LabelSelector)> {
        if owner.kind == "Node" {
            return None;
        }
        let controller = ControllerRef {
            api_version: owner.api_version.clone(),
            kind: owner.kind.clone(),
            name: owner.name.clone(),
            namespace: owner.namespace.clone(),
        };
        self.index
            .topmost_controller(&controller)
            .ok()
            .flatten()
            .and_then(|top| self.index.selector(&top).map(|sel| (top, sel)))
    }

    /// Matching for the pods of `owner`'s controller (uncached).
    fn matching(&self, owner: &Owner, selected: &Candidates) -> Matching {
        let target = self.target_of(owner);
        // The strongest: oldest, then smallest name (as the webhook's matching).
        let strongest = target.as_ref().and_then(|(top, _)| {
            selected
                .for_target(&owner.namespace, &top.kind, &top.name)
                .iter()
                .copied()
                .min_by(|&a, &b| {
                    let (va, vb) = (&selected.vpas[a], &selected.vpas[b]);
                    let ta = va.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    let tb = vb.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    ta.cmp(&tb)
                        .then_with(|| va.metadata.name.cmp(&vb.metadata.name))
                })
        });
        Matching {
            target,
            strongest,
            labels: Vec::new(),
        }
    }
}

/// Whether `matching`'s selector selects `labels`, remembered per label set.
fn selects(
    matching: &mut Matching,
    labels: &Arc<std::collections::BTreeMap<String, String>>,
) -> bool {
    if let Some((_, hit)) = matching
        .labels
        .iter()
        .find(|(l, _)| Arc::ptr_eq(&l.0, labels))
    {
        return *hit;
    }
    let hit = matching.target.as_ref().is_some_and(|(_, selector)| {
        tailor_core::target::selector_matches(selector, &**labels).unwrap_or(false)
    });
    if matching.labels.len() < LABEL_SETS {
        matching.labels.push((ByAddress(Arc::clone(labels)), hit));
    }
    hit
}

impl<R: ReplicaLookup> ClusterView for CacheView<R> {
    type Gate = Restriction;

    fn fetch_selector(&self, vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        let ns = vpa.metadata.namespace.clone().unwrap_or_default();
        let target = vpa.spec.target_ref.as_ref().ok_or("no targetRef")?;
        let c = tailor_kube::index::ControllerRef {
            api_version: target.api_version.clone().unwrap_or_default(),
            kind: target.kind.clone(),
            name: target.name.clone(),
            namespace: ns,
        };
        self.index
            .selector(&c)
            .map(|_| ())
            .ok_or_else(|| format!("{c} has no selector"))
    }

    fn controlling_vpa(&self, pod: &CachedPod, selected: &Candidates) -> Option<usize> {
        // No selected VPA in the pod's namespace: nothing to match, and no `/scale` lookup of its owner
        // (static pods, Tekton or KubeVirt pods cost nothing: docs/decisions/scale-lookups.md).
        if !selected.has_namespace(pods::namespace(pod)) {
            return None;
        }
        let owner = pods::controller(pod)?;
        // A controller of another kind (a Tekton TaskRun, a KubeVirt VMI) can only lead to a VPA that
        // targets a kind of other kinds itself: no `/scale` lookup otherwise (the webhook's answer, no match,
        // is the same).
        if !tailor_core::target::is_well_known(&owner.kind)
            && !selected.has_custom_target(pods::namespace(pod))
        {
            return None;
        }
        let labels = pods::label_set(pod);
        let mut cache = self.caches.matching.borrow_mut();
        let key = ByAddress(Arc::clone(owner));
        if let Some(m) = cache.get_mut(&key) {
            m.strongest?;
            return selects(m, labels).then_some(m.strongest).flatten();
        }
        let mut m = self.matching(owner, selected);
        let found = m.strongest.is_some() && selects(&mut m, labels);
        let strongest = m.strongest;
        if cache.len() < CACHE_ENTRIES {
            cache.insert(key, m);
        }
        if found { strongest } else { None }
    }

    fn gate(&self, vpa: &VerticalPodAutoscaler, pods: &[Arc<CachedPod>]) -> Restriction {
        Restriction::new(vpa, pods, &self.replicas, &self.restriction, self.gates)
    }

    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        pod: &CachedPod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        let ns = pods::namespace(pod);
        let limit_ranges = self.limit_ranges(ns);
        // Without LimitRanges and RequestsOnly policies the result depends only on the container names.
        let per_pod = !limit_ranges.is_empty() || uses_requests_only(vpa);
        if per_pod {
            return processed_with(vpa, pod, &limit_ranges, self.floor.as_ref())
                .map(|r| r.map(Arc::new));
        }
        let inputs = VpaInputs {
            namespace: ns,
            limit_ranges: &limit_ranges,
            boost_gate: self.gates.cpu_startup_boost,
        };
        let generation = self.caches.generation;
        let list = pods::container_list(pod);
        let names = || -> ProcessedKey {
            pods::containers(pod)
                .iter()
                .map(|c| ByAddress(Arc::clone(&c.name)))
                .collect()
        };
        // First by the interned container list (pods of one controller share it), then by the names.
        let cached = {
            let mut vpas = self.caches.vpas.borrow_mut();
            vpas.get(vpa, &inputs, generation).and_then(|cache| {
                if let Some(hit) = cache
                    .processed_by_list
                    .get_mut(&ByAddress(Arc::clone(list)))
                {
                    hit.used = generation;
                    return Some(hit.value.clone());
                }
                let hit = cache.processed.get_mut(&names())?;
                hit.used = generation;
                let value = hit.value.clone();
                if cache.processed_by_list.len() < CACHE_ENTRIES {
                    cache.processed_by_list.insert(
                        ByAddress(Arc::clone(list)),
                        Used {
                            value: value.clone(),
                            used: generation,
                        },
                    );
                }
                Some(value)
            })
        };
        if let Some(hit) = cached {
            return Ok(hit);
        }
        let value = processed_with(vpa, pod, &limit_ranges, self.floor.as_ref())?.map(Arc::new);
        let mut vpas = self.caches.vpas.borrow_mut();
        if let Some(cache) = vpas.get(vpa, &inputs, generation) {
            let used = |value: &Option<Arc<RecommendedPodResources>>| Used {
                value: value.clone(),
                used: generation,
            };
            if cache.processed.len() < CACHE_ENTRIES {
                cache.processed.insert(names(), used(&value));
            }
            if cache.processed_by_list.len() < CACHE_ENTRIES {
                cache
                    .processed_by_list
                    .insert(ByAddress(Arc::clone(list)), used(&value));
            }
        }
        Ok(value)
    }

    fn pod_level_resources(&self) -> bool {
        self.gates.pod_level_resources
    }

    fn priority(
        &self,
        pod: &CachedPod,
        rec: Option<&Arc<RecommendedPodResources>>,
    ) -> Result<PodPriority, String> {
        // No recommendation, or one held only by the caller (computed for this pod alone: LimitRanges,
        // RequestsOnly): parsed for this pod.
        let Some(rec) = rec.filter(|r| Arc::strong_count(r) > 1) else {
            let parsed =
                ParsedRecommendation::new(rec.map(|r| &**r), &mut self.caches.millis.borrow_mut());
            return priority_for(pod, &parsed).map_err(|e| e.to_string());
        };
        let generation = self.caches.generation;
        let key = ByAddress(Arc::clone(rec));
        let hit = self.caches.parsed.borrow_mut().get_mut(&key).map(|e| {
            e.used = generation;
            Arc::clone(&e.value)
        });
        let parsed = match hit {
            Some(p) => p,
            None => {
                let p = Arc::new(ParsedRecommendation::new(
                    Some(rec),
                    &mut self.caches.millis.borrow_mut(),
                ));
                let mut parsed = self.caches.parsed.borrow_mut();
                if parsed.len() < CACHE_ENTRIES {
                    parsed.insert(
                        key,
                        Used {
                            value: Arc::clone(&p),
                            used: generation,
                        },
                    );
                }
                p
            }
        };
        // Pods alike (interned containers with their current resources, observed-container list,
        // pod-level resources) get the same priority from the same recommendation: computed once.
        let key = (
            ByAddress(Arc::clone(&parsed)),
            ByAddress(Arc::clone(pods::container_list(pod))),
            pods::observed_list(pod).map(|o| ByAddress(Arc::clone(o))),
            pods::pod_level(pod),
        );
        if let Some(hit) = self.caches.priorities.borrow_mut().get_mut(&key) {
            hit.used = generation;
            return hit.value.clone();
        }
        let value = priority_for(pod, &parsed).map_err(|e| e.to_string());
        let mut priorities = self.caches.priorities.borrow_mut();
        if priorities.len() < CACHE_ENTRIES {
            priorities.insert(
                key,
                Used {
                    value: value.clone(),
                    used: generation,
                },
            );
        }
        value
    }

    fn resize_plan(
        &self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        // What the API server would refuse is not sent (docs/decisions/resize-precheck.md): the caller skips
        // or evicts instead.
        let plan = self.computed_plan(pod, vpa, now)?;
        match crate::decisions::resize_check::refusal(pod, &plan.resize, &self.resize_rules) {
            Some(why) => Err(ResizeError::Refused(why)),
            None => Ok(plan),
        }
    }

    fn quota_hold(
        &self,
        vpa: &VerticalPodAutoscaler,
        pod: &CachedPod,
        purpose: crate::decisions::quota::QuotaUse,
    ) -> Option<crate::decisions::skip::Skip> {
        let ns = pods::namespace(pod);
        let quotas = self.index.quotas(ns);
        if quotas.is_empty() {
            return None;
        }
        // Errors here are the sizing's, reported by the resize or left to the eviction as before.
        let processed = self.processed(vpa, pod).ok()?;
        let limit_ranges = self.limit_ranges(ns);
        let provided = crate::decisions::resize::provider_resources(
            pod,
            vpa,
            processed.as_deref(),
            &limit_ranges,
        )
        .ok()?;
        crate::decisions::quota::quota_hold(pod, &provided, &quotas, purpose)
            .ok()
            .flatten()
            .map(crate::decisions::skip::Skip::Quota)
    }

    fn begin_iteration(&mut self, now: Timestamp) {
        // The inherent method (inherent items take precedence over trait ones).
        CacheView::<R>::begin_iteration(self, now);
    }

    fn namespace_labels(
        &self,
        namespace: &str,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        self.namespaces.as_ref()?.labels(namespace)
    }

    fn upstream_vpa(
        &self,
        vpa: &VerticalPodAutoscaler,
    ) -> Result<Option<tailor_kube::upstream_vpa::UpstreamVpa>, String> {
        self.upstream.as_ref().map_or(Ok(None), |u| u.covering(vpa))
    }
}

/// Where namespace labels come from: the binary's namespace cache, or a snapshot's Namespaces.
#[derive(Clone)]
pub enum NamespaceLabels {
    /// A reflector store (labels unknown until it has listed).
    Store(Store<k8s_openapi::api::core::v1::Namespace>),
    /// Fixed labels by namespace; a namespace not listed has only `kubernetes.io/metadata.name` (which the
    /// API server sets on every namespace).
    Fixed(HashMap<String, std::collections::BTreeMap<String, String>>),
}

impl NamespaceLabels {
    /// The labels of `namespace`, when known.
    pub fn labels(&self, namespace: &str) -> Option<std::collections::BTreeMap<String, String>> {
        match self {
            NamespaceLabels::Store(store) => store
                .get(&ObjectRef::new(namespace))
                .map(|n| n.metadata.labels.clone().unwrap_or_default()),
            NamespaceLabels::Fixed(map) => Some(map.get(namespace).cloned().unwrap_or_else(|| {
                std::collections::BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    namespace.to_owned(),
                )])
            })),
        }
    }
}

impl<R: ReplicaLookup> CacheView<R> {
    /// The resize plan of `pod` (cached for pods alike), before the API server's rules are checked.
    fn computed_plan(
        &self,
        pod: &CachedPod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        let ns = pods::namespace(pod);
        let limit_ranges = self.limit_ranges(ns);
        let plan = || {
            // The processed recommendation the priorities used (cached per VPA and containers).
            let processed = self.processed(vpa, pod).map_err(ResizeError::Processing)?;
            plan_resize(
                pod,
                vpa,
                processed.as_deref(),
                &limit_ranges,
                self.gates.cpu_startup_boost,
                now,
            )
        };
        // Without boost annotations and pod-level resources, the plan depends only on the VPA, the
        // namespace's LimitRanges, the boost gate and the containers (not on `now`): pods alike share it,
        // across iterations too.
        if pods::has_boost_annotation(pod) || !pods::pod_level(pod).is_empty() {
            return plan();
        }
        let inputs = VpaInputs {
            namespace: ns,
            limit_ranges: &limit_ranges,
            boost_gate: self.gates.cpu_startup_boost,
        };
        let generation = self.caches.generation;
        let key = (
            ByAddress(Arc::clone(pods::container_list(pod))),
            pods::has_annotations(pod),
        );
        let hit = self
            .caches
            .vpas
            .borrow_mut()
            .get(vpa, &inputs, generation)
            .and_then(|cache| cache.plans.get_mut(&key))
            .map(|e| {
                e.used = generation;
                e.value.clone()
            });
        if let Some(hit) = hit {
            return hit;
        }
        let value = plan();
        let mut vpas = self.caches.vpas.borrow_mut();
        if let Some(cache) = vpas.get(vpa, &inputs, generation)
            && cache.plans.len() < CACHE_ENTRIES
        {
            cache.plans.insert(
                key,
                Used {
                    value: value.clone(),
                    used: generation,
                },
            );
        }
        value
    }
}

/// Whether a container policy of `vpa` caps requests at the current limit (then processing depends on
/// each pod's limits).
fn uses_requests_only(vpa: &VerticalPodAutoscaler) -> bool {
    vpa.spec
        .resource_policy
        .as_ref()
        .and_then(|p| p.container_policies.as_ref())
        .is_some_and(|list| {
            list.iter()
                .any(|c| c.controlled_values == Some(tailor_crds::ControlledValues::RequestsOnly))
        })
}

/// The capping processor (docs/design/upstream-updater.md §2.1): the webhook's recommendation processing for
/// `pod` (without a floor).
pub fn processed_recommendation(
    index: &Index,
    vpa: &VerticalPodAutoscaler,
    pod: &CachedPod,
) -> Result<Option<RecommendedPodResources>, String> {
    let ns = pods::namespace(pod);
    let limit_ranges: Vec<LimitRange> = index.limit_ranges(ns);
    processed_with(vpa, pod, &limit_ranges, None)
}

/// [`processed_recommendation`] with explicit LimitRanges and the webhook's pod floor.
pub fn processed_with(
    vpa: &VerticalPodAutoscaler,
    pod: &CachedPod,
    limit_ranges: &[LimitRange],
    floor: Option<&tailor_core::sizing::PodFloor>,
) -> Result<Option<RecommendedPodResources>, String> {
    use tailor_core::limit_range_merge;
    use tailor_core::sizing::process_recommendation_floored;
    let ns = pods::namespace(pod);
    let container = limit_range_merge::merged_item(
        limit_range_merge::in_namespace(limit_ranges, ns),
        limit_range_merge::CONTAINER,
    );
    let pod_item = limit_range_merge::merged_item(
        limit_range_merge::in_namespace(limit_ranges, ns),
        limit_range_merge::POD,
    );
    let containers = crate::decisions::sizing::containers(pod);
    let slots = crate::decisions::sizing::slots(pod, &containers);
    let processed =
        process_recommendation_floored(vpa, &slots, container.as_ref(), pod_item.as_ref(), floor)
            .map_err(|e| e.to_string())?;
    Ok(processed.map(|p| p.recommendation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tailor_kube::index::IndexObjects;
    use tailor_testkit::fixtures::{PodFixture, VpaFixture};

    /// Every creator has one configured replica.
    struct OneReplica;

    impl ReplicaLookup for OneReplica {
        fn configured(&self, _: &Creator, _: i32) -> Result<i32, String> {
            Ok(1)
        }
    }

    fn view(limit_ranges: Vec<LimitRange>) -> CacheView<OneReplica> {
        CacheView::new(
            Index::from_objects(IndexObjects {
                limit_ranges,
                ..IndexObjects::default()
            }),
            OneReplica,
            RestrictionConfig::default(),
            FeatureGates::default(),
            Timestamp::UNIX_EPOCH,
        )
    }

    fn vpa(uid: &str, resource_version: &str, cpu: &str) -> VerticalPodAutoscaler {
        let all = json!({"cpu": cpu, "memory": "100Mi"});
        VpaFixture::new("ns", uid)
            .uid(uid)
            .resource_version(resource_version)
            .target("Deployment", "d")
            .mode("InPlaceOrRecreate")
            .recommendation_row(json!({"containerName": "app",
                "target": all, "lowerBound": all, "upperBound": all}))
            .build()
    }

    fn pod() -> CachedPod {
        let pod = PodFixture::new("ns", "p")
            .uid("pod-uid")
            .container(
                "app",
                json!({"cpu": "100m", "memory": "100Mi"}),
                json!({"cpu": "200m", "memory": "200Mi"}),
            )
            .phase("Running")
            .build();
        CachedPod::from(pod)
    }

    fn cpu_max(cpu: &str) -> LimitRange {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "lr", "namespace": "ns"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": cpu}}]}
        }))
        .expect("limit range")
    }

    fn target_cpu(rec: Option<Arc<RecommendedPodResources>>) -> Option<String> {
        let rec = rec?;
        let first = rec.container_recommendations.as_ref()?.first()?;
        first.target.get("cpu").map(|q| q.0.clone())
    }

    /// What an empty view (nothing cached) computes.
    fn fresh_plan(
        limit_ranges: Vec<LimitRange>,
        vpa: &VerticalPodAutoscaler,
    ) -> Result<ResizePlan, ResizeError> {
        view(limit_ranges).resize_plan(&pod(), vpa, Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_resource_version_invalidates_the_kept_entries() {
        let mut view = view(Vec::new());
        let pod = pod();
        let old = vpa("u1", "1", "300m");
        assert_eq!(
            target_cpu(view.processed(&old, &pod).expect("processed")),
            Some("300m".into())
        );
        let old_plan = view.resize_plan(&pod, &old, Timestamp::UNIX_EPOCH);
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        // Kept across the iteration: the same Arc as before.
        let first = view.processed(&old, &pod).expect("processed");
        let again = view.processed(&old, &pod).expect("processed");
        assert!(matches!((&first, &again), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        let new = vpa("u1", "2", "500m");
        assert_eq!(
            target_cpu(view.processed(&new, &pod).expect("processed")),
            Some("500m".into())
        );
        let new_plan = view.resize_plan(&pod, &new, Timestamp::UNIX_EPOCH);
        assert_ne!(new_plan, old_plan);
        assert_eq!(new_plan, fresh_plan(Vec::new(), &new));
    }

    #[test]
    fn a_changed_limit_range_invalidates_the_kept_plan() {
        let vpa = vpa("u1", "1", "500m");
        let pod = pod();
        let mut view = view(vec![cpu_max("1")]);
        let before = view.resize_plan(&pod, &vpa, Timestamp::UNIX_EPOCH);
        assert_eq!(before, fresh_plan(vec![cpu_max("1")], &vpa));
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        // Same VPA and resourceVersion, the namespace's LimitRange now caps CPU lower.
        view.index = Index::from_objects(IndexObjects {
            limit_ranges: vec![cpu_max("150m")],
            ..IndexObjects::default()
        });
        let after = view.resize_plan(&pod, &vpa, Timestamp::UNIX_EPOCH);
        assert_ne!(after, before);
        assert_eq!(after, fresh_plan(vec![cpu_max("150m")], &vpa));
    }

    #[test]
    fn a_resize_never_goes_below_the_pod_floor() {
        // Before the pod floor, a memory target of "1" made a resize to a 1-byte request and a 2-byte limit.
        let mut vpa = vpa("u1", "1", "300m");
        if let Some(rec) = vpa
            .status
            .as_mut()
            .and_then(|s| s.recommendation.as_mut())
            .and_then(|r| r.container_recommendations.as_mut())
        {
            let first = &mut rec[0];
            let one = k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into());
            first.target.insert("memory".into(), one.clone());
            if let Some(lower) = first.lower_bound.as_mut() {
                lower.insert("memory".into(), one);
            }
        }
        let pod = pod();
        let unfloored = view(Vec::new())
            .resize_plan(&pod, &vpa, Timestamp::UNIX_EPOCH)
            .expect("plan");
        let text = serde_json::to_string(&unfloored.resize).expect("json");
        assert!(text.contains(r#"/requests/memory","value":"1""#), "{text}");
        let mut floored = view(Vec::new());
        floored.floor = Some(tailor_core::sizing::PodFloor::RECOMMENDER_MINIMUMS);
        let plan = floored
            .resize_plan(&pod, &vpa, Timestamp::UNIX_EPOCH)
            .expect("plan");
        let text = serde_json::to_string(&plan.resize).expect("json");
        // One container: the whole 250Mi, and the limit in proportion (200Mi / 100Mi).
        assert!(
            text.contains(r#"/requests/memory","value":"250Mi""#),
            "{text}"
        );
        assert!(
            text.contains(r#"/limits/memory","value":"500Mi""#),
            "{text}"
        );
        // The priority sees the floored range: a pod at the floor is not updated again.
        let rec = floored
            .processed(&vpa, &pod)
            .expect("processed")
            .expect("some");
        let target = &rec.container_recommendations.as_ref().expect("list")[0].target;
        assert_eq!(target["memory"].0, "250Mi");
    }

    #[test]
    fn entries_of_deleted_vpas_are_dropped() {
        let mut view = view(Vec::new());
        let pod = pod();
        let (a, b) = (vpa("a", "1", "300m"), vpa("b", "1", "400m"));
        for v in [&a, &b] {
            view.processed(v, &pod).expect("processed");
            let _ = view.resize_plan(&pod, v, Timestamp::UNIX_EPOCH);
        }
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        assert_eq!(view.kept_vpas(), 2);
        // `b` is gone: the next iteration uses only `a`.
        view.processed(&a, &pod).expect("processed");
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        assert_eq!(view.kept_vpas(), 1);
        assert!(view.caches.vpas.borrow().by_uid.contains_key("a"));
        view.begin_iteration(Timestamp::UNIX_EPOCH);
        assert_eq!(view.kept_vpas(), 0);
        assert!(view.caches.parsed.borrow().is_empty());
    }
}
