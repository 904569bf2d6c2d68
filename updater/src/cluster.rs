//! The updater against a cluster: caches the iteration reads ([`CacheView`]) and the API calls it makes
//! ([`ApiActuator`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kube::api::{EvictParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource};
use tailor_crds::cluster::index::{ControllerRef, Index};
use tailor_crds::{RecommendedPodResources, VerticalPodAutoscaler};

use crate::config::{FeatureGates, RestrictionConfig};
use crate::events::{EventObject, UpdaterEvent};
use crate::iteration::{ActError, Actuator, Candidates, ClusterView};
use crate::pods;
use crate::priority::{MilliCache, PodPriority, pod_priority_with};
use crate::rate_limit::{RateSettings, TokenBucket};
use crate::resize::{ResizeError, ResizePlan, plan_resize};
use crate::restriction::{Creator, ReplicaLookup, Restriction, unknown_kind_replicas};

/// Replica counts of controllers of other kinds, read from their `/scale` subresource in the background
/// (Tailor: upstream counts 0 replicas for them, so every pod is disruptable, spec §8 item 3).
#[derive(Clone, Debug, Default)]
pub struct ScaleReplicas {
    counts: Arc<std::sync::RwLock<HashMap<Creator, (i32, std::time::Instant)>>>,
}

/// How long a `/scale` answer is used before it is fetched again.
pub const SCALE_TTL: Duration = Duration::from_secs(600);
/// Most controllers of other kinds whose replica counts are kept.
pub const MAX_SCALE_ENTRIES: usize = 10_000;

impl ScaleReplicas {
    /// The cached replica count of a controller, if any.
    pub fn get(&self, creator: &Creator) -> Option<i32> {
        let counts = self
            .counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.get(creator).map(|(n, _)| *n)
    }

    /// Records a replica count.
    pub fn insert(&self, creator: Creator, replicas: i32) {
        let mut counts = self
            .counts
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if counts.len() < MAX_SCALE_ENTRIES || counts.contains_key(&creator) {
            counts.insert(creator, (replicas, std::time::Instant::now()));
        }
    }

    fn is_fresh(&self, creator: &Creator) -> bool {
        let counts = self
            .counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts
            .get(creator)
            .is_some_and(|(_, at)| at.elapsed() < SCALE_TTL)
    }

    /// Fetches `/scale` for the controllers of other kinds that own `pods` and are not fresh; forgets the
    /// ones no pod names any more. Each fetch is bounded by `timeout`.
    pub async fn refresh(&self, client: &Client, pods: &[Arc<Pod>], timeout: Duration) {
        let mut wanted: HashMap<Creator, String> = HashMap::new();
        for pod in pods {
            let Some(owner) = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
            else {
                continue;
            };
            if is_counted_kind(&owner.kind) || wanted.len() >= MAX_SCALE_ENTRIES {
                continue;
            }
            wanted.insert(Creator::of(pod), owner.api_version.clone());
        }
        {
            let mut counts = self
                .counts
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            counts.retain(|c, _| wanted.contains_key(c));
        }
        for (creator, api_version) in wanted {
            if self.is_fresh(&creator) {
                continue;
            }
            let fetch = tailor_crds::cluster::scale::scale_replicas(
                client,
                &api_version,
                &creator.kind,
                &creator.namespace,
                &creator.name,
            );
            match tokio::time::timeout(timeout, fetch).await {
                Ok(Ok(n)) => self.insert(creator, n),
                Ok(Err(e)) => tracing::debug!(error = %e, "no /scale replica count"),
                Err(_) => tracing::debug!(controller = %creator.name, "/scale lookup timed out"),
            }
        }
    }
}

/// Kinds whose replica count the updater reads from its own caches (§3.1 table).
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
    caches: IterationCaches,
}

/// (namespace, kind or VPA name, name or container names): what the iteration caches are keyed by.
type ObjectKey = (String, String, String);

/// What one iteration computes once and reuses: parsed quantities, the top-most controller and selector
/// of each pod controller, and processed recommendations that do not depend on a pod's own resources.
#[derive(Debug, Default)]
struct IterationCaches {
    millis: RefCell<MilliCache>,
    targets: RefCell<HashMap<ObjectKey, Option<(ControllerRef, LabelSelector)>>>,
    processed: RefCell<HashMap<ObjectKey, Option<Arc<RecommendedPodResources>>>>,
}

/// Most entries in each iteration cache (beyond it, lookups are computed without caching).
const CACHE_ENTRIES: usize = 1 << 20;

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
            caches: IterationCaches::default(),
        }
    }

    /// Starts an iteration at `now`: what was cached for the previous one is dropped.
    pub fn begin_iteration(&mut self, now: Timestamp) {
        self.now = now;
        self.caches = IterationCaches::default();
    }

    /// The top-most controller of the pod's controller and its selector, cached per controller.
    fn target_of(&self, pod: &Pod) -> Option<(ControllerRef, LabelSelector)> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let owner = tailor_crds::target::controller_owner(pod.metadata.owner_references.as_ref())?;
        let key = (ns.to_owned(), owner.kind.clone(), owner.name.clone());
        if let Some(hit) = self.caches.targets.borrow().get(&key) {
            return hit.clone();
        }
        let found = self
            .index
            .pod_top_controller(pod, ns)
            .ok()
            .flatten()
            .and_then(|top| self.index.selector(&top).map(|sel| (top, sel)));
        let mut targets = self.caches.targets.borrow_mut();
        if targets.len() < CACHE_ENTRIES {
            targets.insert(key, found.clone());
        }
        found
    }
}

impl<R: ReplicaLookup> ClusterView for CacheView<R> {
    type Gate = Restriction;

    fn fetch_selector(&self, vpa: &VerticalPodAutoscaler) -> Result<(), String> {
        let ns = vpa.metadata.namespace.clone().unwrap_or_default();
        let target = vpa.spec.target_ref.as_ref().ok_or("no targetRef")?;
        let c = tailor_crds::cluster::index::ControllerRef {
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

    fn controlling_vpa(&self, pod: &Pod, selected: &Candidates) -> Option<usize> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let (top, selector) = self.target_of(pod)?;
        let candidates = selected.for_target(ns, &top.kind, &top.name);
        if candidates.is_empty() {
            return None;
        }
        let empty = std::collections::BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        if !tailor_crds::target::selector_matches(&selector, labels).unwrap_or(false) {
            return None;
        }
        // The strongest: oldest, then smallest name (as the webhook's matching).
        candidates.iter().copied().min_by(|&a, &b| {
            let (va, vb) = (&selected.vpas[a], &selected.vpas[b]);
            let ta = va.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let tb = vb.metadata.creation_timestamp.as_ref().map(|t| t.0);
            ta.cmp(&tb)
                .then_with(|| va.metadata.name.cmp(&vb.metadata.name))
        })
    }

    fn gate(&self, vpa: &VerticalPodAutoscaler, pods: &[Arc<Pod>]) -> Restriction {
        Restriction::new(vpa, pods, &self.replicas, &self.restriction, self.gates)
    }

    fn processed(
        &self,
        vpa: &VerticalPodAutoscaler,
        pod: &Pod,
    ) -> Result<Option<Arc<RecommendedPodResources>>, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let limit_ranges = self.index.limit_ranges(ns);
        // Without LimitRanges and RequestsOnly policies the result depends only on the container names.
        let per_pod = !limit_ranges.is_empty() || uses_requests_only(vpa);
        if per_pod {
            return processed_with(vpa, pod, &limit_ranges).map(|r| r.map(Arc::new));
        }
        let names: Vec<&str> = pods::containers(pod)
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let key = (
            ns.to_owned(),
            vpa.metadata.name.clone().unwrap_or_default(),
            names.join("\u{0}"),
        );
        if let Some(hit) = self.caches.processed.borrow().get(&key) {
            return Ok(hit.clone());
        }
        let value = processed_with(vpa, pod, &limit_ranges)?.map(Arc::new);
        let mut processed = self.caches.processed.borrow_mut();
        if processed.len() < CACHE_ENTRIES {
            processed.insert(key, value.clone());
        }
        Ok(value)
    }

    fn priority(
        &self,
        pod: &Pod,
        rec: Option<&RecommendedPodResources>,
    ) -> Result<PodPriority, String> {
        pod_priority_with(pod, rec, &mut self.caches.millis.borrow_mut()).map_err(|e| e.to_string())
    }

    fn resize_plan(
        &self,
        pod: &Pod,
        vpa: &VerticalPodAutoscaler,
        now: Timestamp,
    ) -> Result<ResizePlan, ResizeError> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        plan_resize(
            pod,
            vpa,
            &self.index.limit_ranges(ns),
            self.gates.cpu_startup_boost,
            now,
        )
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

/// The capping processor (§2.1): the webhook's recommendation processing for `pod`.
pub fn processed_recommendation(
    index: &Index,
    vpa: &VerticalPodAutoscaler,
    pod: &Pod,
) -> Result<Option<RecommendedPodResources>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let limit_ranges: Vec<LimitRange> = index.limit_ranges(ns);
    processed_with(vpa, pod, &limit_ranges)
}

/// [`processed_recommendation`] with explicit LimitRanges.
pub fn processed_with(
    vpa: &VerticalPodAutoscaler,
    pod: &Pod,
    limit_ranges: &[LimitRange],
) -> Result<Option<RecommendedPodResources>, String> {
    use tailor_crds::limitrange;
    use tailor_crds::sizing::{PatchOptions, process_recommendation, slots};
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let container = limitrange::merged_item(
        limitrange::in_namespace(limit_ranges, ns),
        limitrange::CONTAINER,
    );
    let pod_item =
        limitrange::merged_item(limitrange::in_namespace(limit_ranges, ns), limitrange::POD);
    let slots = slots(pod, &PatchOptions::default());
    process_recommendation(vpa, &slots, container.as_ref(), pod_item.as_ref())
        .map(|p| p.map(|p| p.recommendation))
        .map_err(|e| e.to_string())
}

/// Evictions, resizes and events through the API, paced by the two token buckets.
pub struct ApiActuator {
    client: Client,
    recorder: Recorder,
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
        ApiActuator {
            client,
            recorder,
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

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }
}

impl Actuator for ApiActuator {
    async fn wait_eviction(&mut self) -> Result<(), ActError> {
        self.wait(true).await
    }

    async fn wait_in_place(&mut self) -> Result<(), ActError> {
        self.wait(false).await
    }

    async fn evict(&mut self, pod: &Pod) -> Result<(), ActError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.pods(pod).evict(name, &EvictParams::default()).await?;
        Ok(())
    }

    async fn resize(&mut self, pod: &Pod, plan: &ResizePlan) -> Result<(), ActError> {
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

    fn event(&mut self, pod: &Pod, vpa: &VerticalPodAutoscaler, event: UpdaterEvent) {
        let reference = match event.object {
            EventObject::Pod => pod.object_ref(&()),
            EventObject::Vpa => vpa.object_ref(&()),
        };
        let recorder = self.recorder.clone();
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
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&e, &reference).await {
                tracing::debug!(error = %err, "event not recorded");
            }
        });
    }
}
