//! The cluster model's state ([`ClusterState`]): pods, containers, aggregates keyed by (namespace,
//! container name, label set), VPAs, per-container-name merging and garbage collection.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use super::aggregate::{AggregateContainerState, AggregationsConfig};
use super::container::{ContainerState, SampleRejected};
use super::fxhash::FxBuildHasher;
use super::pod_groups::PodGroups;
use super::selector::{LabelSet, Labels, Selector, label_set_key};
use tailor_crds::PodResourcePolicy;

use crate::histogram::{DecayingHistogram, ZERO_TIME};

mod batch;
pub use batch::{FEED_SAMPLES, SAMPLE_BATCH};

/// A container's CPU and memory usage histograms, borrowed from the model or merged.
pub type UsagePair<'a> = (Cow<'a, DecayingHistogram>, Cow<'a, DecayingHistogram>);
use crate::units::{Nanos, Resource, ResourceAmount, sat_sub};

type FxMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// Pod phase as far as the model cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodPhase {
    /// Running (or anything active).
    #[default]
    Running,
    /// Pending.
    Pending,
    /// Succeeded (inactive).
    Succeeded,
    /// Failed (inactive).
    Failed,
    /// Unknown (history-only pods).
    Unknown,
}

impl PodPhase {
    /// Neither Succeeded nor Failed.
    pub fn is_active(self) -> bool {
        !matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// Errors feeding the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Unknown pod.
    #[error("pod {0} not found in the model")]
    PodNotFound(String),
    /// Unknown container.
    #[error("container {0} not found in the model")]
    ContainerNotFound(String),
    /// Sample or OOM rejected by the container rules.
    #[error(transparent)]
    Rejected(#[from] SampleRejected),
}

/// A VPA's own OOM bump (upstream's per-VPA `oomBumpUpRatio` and `oomMinBumpUp`); `None` keeps the flag's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OomBump {
    /// Memory after an OOM is at least the memory used times this.
    pub ratio: Option<f64>,
    /// Memory after an OOM is at least the memory used plus this many bytes.
    pub min_bytes: Option<f64>,
}

/// One usage sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Measurement time.
    pub time: Nanos,
    /// Which resource.
    pub resource: Resource,
    /// Millicores or bytes.
    pub usage: ResourceAmount,
}

#[derive(Debug, Clone)]
struct ContainerEntry {
    name: u32,
    slot: u32,
    state: ContainerState,
}

/// A pod's containers; the first is stored inline (most pods have one or two), sparing a heap indirection.
#[derive(Debug, Clone, Default)]
struct Containers {
    first: Option<ContainerEntry>,
    rest: Vec<ContainerEntry>,
}

impl Containers {
    fn iter(&self) -> impl Iterator<Item = &ContainerEntry> {
        self.first.iter().chain(self.rest.iter())
    }

    fn get(&self, i: usize) -> Option<&ContainerEntry> {
        match i {
            0 => self.first.as_ref(),
            _ => self.rest.get(i - 1),
        }
    }

    fn push(&mut self, e: ContainerEntry) {
        if self.first.is_none() {
            self.first = Some(e);
        } else {
            self.rest.push(e);
        }
    }
}

impl std::ops::Index<usize> for Containers {
    type Output = ContainerEntry;
    fn index(&self, i: usize) -> &ContainerEntry {
        match (i, &self.first) {
            (0, Some(f)) => f,
            _ => &self.rest[i - 1],
        }
    }
}

impl std::ops::IndexMut<usize> for Containers {
    fn index_mut(&mut self, i: usize) -> &mut ContainerEntry {
        match (i, &mut self.first) {
            (0, Some(f)) => f,
            _ => &mut self.rest[i - 1],
        }
    }
}

/// A short name stored inline (pod names are usually under 32 bytes), or on the heap.
#[derive(Debug, Clone)]
enum Name {
    Inline { len: u8, buf: [u8; 30] },
    Heap(Box<str>),
}

impl Name {
    fn new(s: &str) -> Self {
        if s.len() <= 30 {
            let mut buf = [0u8; 30];
            buf[..s.len()].copy_from_slice(s.as_bytes());
            Name::Inline {
                len: s.len() as u8,
                buf,
            }
        } else {
            Name::Heap(s.into())
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, buf } => &buf[..*len as usize],
            Name::Heap(b) => b.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
struct PodState {
    /// Distinguishes this pod from earlier ones at the same index, for [`ContainerRef`]s.
    generation: u32,
    namespace: u32,
    name: Name,
    labels: u32,
    phase: PodPhase,
    containers: Containers,
}

#[derive(Debug, Clone)]
struct AggSlot {
    namespace: u32,
    container: u32,
    labels: u32,
    state: Option<AggregateContainerState>,
}

/// A VPA as the model sees it.
#[derive(Debug, Clone)]
pub struct VpaState {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pod selector derived from the target.
    pub selector: Selector,
    /// `spec.resourcePolicy`.
    pub policy: Option<PodResourcePolicy>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// Whether the target controller still resolves (used by GC).
    pub controller_exists: bool,
    /// Aggregates restored from checkpoints, by container name.
    pub initial_states: BTreeMap<String, AggregateContainerState>,
    slots: Vec<u32>,
    /// Label-set ids of the pod groups of its namespace that its selector matches (see [`PodGroups`]).
    label_groups: Vec<u32>,
    /// Retired by [`ClusterState::retire_vpa`]; its index is reused by the next [`ClusterState::add_vpa`].
    retired: bool,
}

impl VpaState {
    /// A VPA with no restored state.
    pub fn new(namespace: &str, name: &str, selector: Selector) -> Self {
        VpaState {
            namespace: namespace.into(),
            name: name.into(),
            selector,
            policy: None,
            annotations: BTreeMap::new(),
            controller_exists: true,
            initial_states: BTreeMap::new(),
            slots: Vec::new(),
            label_groups: Vec::new(),
            retired: false,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Interner {
    names: Vec<Box<str>>,
    index: FxMap<Box<str>, u32>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(s.into());
        self.index.insert(s.into(), i);
        i
    }
    fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }
}

/// String equality without a `memcmp` call (names are short).
#[inline]
fn short_eq(a: &str, b: &str) -> bool {
    bytes_eq(a.as_bytes(), b.as_bytes())
}

#[inline]
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A container instance resolved once by its names ([`ClusterState::container_ref`]), then fed by it
/// ([`ClusterState::add_sample_to`]) without looking the names up again: a dense index into the model. It
/// stays valid while the pod is in the model; once the pod is deleted, feeding by it fails with
/// [`ModelError::PodNotFound`], even after another pod took its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerRef {
    pod: u32,
    container: u32,
    generation: u32,
}

/// Reference to a container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerId<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Pod name.
    pub pod: &'a str,
    /// Container name.
    pub container: &'a str,
}

impl std::fmt::Display for ContainerId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.pod, self.container)
    }
}

/// The memory window of one container instance that is still open at checkpoint time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenWindow {
    /// Container name.
    pub container: String,
    /// Pod name.
    pub pod: String,
    /// Window end.
    pub end: Nanos,
    /// Peak of the window so far (bytes, OOM bumps included).
    pub peak: ResourceAmount,
}

/// The content of a VPA's checkpoints: per container name, the merged aggregate without the open windows.
#[derive(Debug, Clone)]
pub struct VpaCheckpoint {
    /// Aggregates by container name, open windows subtracted.
    pub states: BTreeMap<String, AggregateContainerState>,
    /// The open windows left out of `states`.
    pub open_windows: Vec<OpenWindow>,
}

/// The whole model. Time enters only through method arguments and [`ClusterState::set_now`].
#[derive(Debug, Clone)]
pub struct ClusterState {
    /// Aggregation parameters.
    pub config: AggregationsConfig,
    strings: Interner,
    label_sets: Vec<LabelSet>,
    label_index: FxMap<String, u32>,
    /// Pods by a 64-bit hash of (namespace, name); `u32::MAX` marks a hash shared by several pods, which are then
    /// found in `pod_collisions`.
    pod_lookup: FxMap<u64, u32>,
    pod_collisions: HashMap<(Box<str>, Box<str>), u32>,
    pods: Vec<Option<PodState>>,
    slots: Vec<AggSlot>,
    slot_index: FxMap<(u32, u32, u32), u32>,
    vpas: Vec<VpaState>,
    /// Indices of retired VPAs, reused by `add_vpa`.
    free_vpas: Vec<usize>,
    /// Reusable indices of removed pods and aggregate slots.
    free_pods: Vec<u32>,
    free_slots: Vec<u32>,
    free_labels: Vec<u32>,
    /// Aggregate slots per namespace id.
    slots_by_ns: FxMap<u32, Vec<u32>>,
    /// Live pods by namespace id and label-set id.
    pod_groups: PodGroups,
    /// VPA indices per namespace id.
    vpas_by_ns: FxMap<u32, Vec<usize>>,
    /// The generation the next new pod gets.
    next_generation: u32,
    last_gc: Nanos,
    gc_interval: i64,
    now: Nanos,
}

impl ClusterState {
    /// An empty model; `gc_interval` is the minimum time between aggregate GC passes (1h upstream).
    pub fn new(config: AggregationsConfig, gc_interval: i64) -> Self {
        ClusterState {
            config,
            strings: Interner::default(),
            label_sets: Vec::new(),
            label_index: FxMap::default(),
            pod_lookup: FxMap::default(),
            pod_collisions: HashMap::new(),
            pods: Vec::new(),
            slots: Vec::new(),
            slot_index: FxMap::default(),
            vpas: Vec::new(),
            free_vpas: Vec::new(),
            free_pods: Vec::new(),
            free_slots: Vec::new(),
            free_labels: Vec::new(),
            slots_by_ns: FxMap::default(),
            pod_groups: PodGroups::default(),
            vpas_by_ns: FxMap::default(),
            next_generation: 0,
            last_gc: 0,
            gc_interval,
            now: 0,
        }
    }

    /// Sets the clock used as the creation time of new aggregates.
    pub fn set_now(&mut self, now: Nanos) {
        self.now = now;
    }

    fn intern_labels(&mut self, labels: &Labels) -> u32 {
        let key = label_set_key(labels);
        if let Some(&i) = self.label_index.get(&key) {
            return i;
        }
        let set = LabelSet::new(labels);
        let i = match self.free_labels.pop() {
            Some(i) => {
                self.label_sets[i as usize] = set;
                i
            }
            None => {
                self.label_sets.push(set);
                self.label_sets.len() as u32 - 1
            }
        };
        self.label_index.insert(key, i);
        i
    }

    #[inline]
    fn pod_hash(namespace: &str, pod: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = FxBuildHasher::default().build_hasher();
        h.write(namespace.as_bytes());
        h.write_u8(0xff);
        h.write(pod.as_bytes());
        h.write_usize(namespace.len());
        h.finish()
    }

    #[inline]
    fn pod_index(&self, namespace: &str, pod: &str) -> Option<u32> {
        let i = *self.pod_lookup.get(&Self::pod_hash(namespace, pod))?;
        if i == u32::MAX {
            return self
                .pod_collisions
                .get(&(Box::from(namespace), Box::from(pod)))
                .copied();
        }
        let p = self.pods[i as usize].as_ref()?;
        (bytes_eq(p.name.as_bytes(), pod.as_bytes())
            && short_eq(self.strings.name(p.namespace), namespace))
        .then_some(i)
    }

    fn insert_pod_index(&mut self, namespace: &str, pod: &str, idx: u32) {
        let h = Self::pod_hash(namespace, pod);
        match self.pod_lookup.get(&h).copied() {
            None => {
                self.pod_lookup.insert(h, idx);
            }
            Some(u32::MAX) => {
                self.pod_collisions
                    .insert((namespace.into(), pod.into()), idx);
            }
            Some(other) => {
                // Two pods share the hash: move both to the exact map.
                if let Some(p) = self.pods[other as usize].as_ref() {
                    let key = (
                        Box::from(self.strings.name(p.namespace)),
                        Box::from(p.name.as_str()),
                    );
                    self.pod_collisions.insert(key, other);
                }
                self.pod_collisions
                    .insert((namespace.into(), pod.into()), idx);
                self.pod_lookup.insert(h, u32::MAX);
            }
        }
    }

    fn remove_pod_index(&mut self, namespace: &str, pod: &str) {
        let h = Self::pod_hash(namespace, pod);
        if self.pod_lookup.get(&h) == Some(&u32::MAX) {
            self.pod_collisions
                .remove(&(Box::from(namespace), Box::from(pod)));
        } else {
            self.pod_lookup.remove(&h);
        }
    }

    /// Adds a pod or updates its labels and phase. Changed labels re-point its containers to new aggregates.
    pub fn add_or_update_pod(
        &mut self,
        namespace: &str,
        name: &str,
        labels: &Labels,
        phase: PodPhase,
    ) {
        let labels_id = self.intern_labels(labels);
        let ns = self.strings.intern(namespace);
        if let Some(i) = self.pod_index(namespace, name) {
            let relabelled_from = self.pods[i as usize]
                .as_ref()
                .map(|p| p.labels)
                .filter(|&l| l != labels_id);
            if let Some(p) = self.pods[i as usize].as_mut() {
                p.phase = phase;
                p.labels = labels_id;
            }
            if let Some(old) = relabelled_from {
                self.ungroup_pod(ns, old, i);
                self.group_pod(ns, labels_id, i);
                let names: Vec<u32> = self.pods[i as usize]
                    .as_ref()
                    .map(|p| p.containers.iter().map(|c| c.name).collect())
                    .unwrap_or_default();
                for (ci, n) in names.into_iter().enumerate() {
                    let slot = self.find_or_create_slot(ns, n, labels_id);
                    if let Some(p) = self.pods[i as usize].as_mut() {
                        p.containers[ci].slot = slot;
                    }
                }
            }
            return;
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let pod = Some(PodState {
            generation,
            namespace: ns,
            name: Name::new(name),
            labels: labels_id,
            phase,
            containers: Containers::default(),
        });
        let idx = match self.free_pods.pop() {
            Some(i) => {
                self.pods[i as usize] = pod;
                i
            }
            None => {
                self.pods.push(pod);
                self.pods.len() as u32 - 1
            }
        };
        self.insert_pod_index(namespace, name, idx);
        self.group_pod(ns, labels_id, idx);
    }

    /// Adds a pod to its group; a new group is linked to the VPAs of the namespace that select it.
    fn group_pod(&mut self, ns: u32, labels: u32, pod: u32) {
        if !self.pod_groups.insert(ns, labels, pod) {
            return;
        }
        let set = &self.label_sets[labels as usize];
        for &vi in self.vpas_by_ns.get(&ns).into_iter().flatten() {
            let v = &mut self.vpas[vi];
            if set.selected_by(&v.selector) {
                v.label_groups.push(labels);
            }
        }
    }

    /// Removes a pod from its group; a group that ends is unlinked from the VPAs of the namespace.
    fn ungroup_pod(&mut self, ns: u32, labels: u32, pod: u32) {
        if !self.pod_groups.remove(ns, labels, pod) {
            return;
        }
        for &vi in self.vpas_by_ns.get(&ns).into_iter().flatten() {
            self.vpas[vi].label_groups.retain(|&l| l != labels);
        }
    }

    /// The label sets of the namespace's pod groups that `selector` matches.
    fn selected_groups(&self, ns: u32, selector: &Selector) -> Vec<u32> {
        self.pod_groups
            .groups(ns)
            .filter(|&(labels, _)| self.label_sets[labels as usize].selected_by(selector))
            .map(|(labels, _)| labels)
            .collect()
    }

    /// Removes a pod (its aggregates stay until GC).
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        if let Some(i) = self.pod_index(namespace, name) {
            if let Some((ns, labels)) = self.pods[i as usize]
                .as_ref()
                .map(|p| (p.namespace, p.labels))
            {
                self.ungroup_pod(ns, labels, i);
            }
            self.pods[i as usize] = None;
            self.remove_pod_index(namespace, name);
            self.free_pods.push(i);
        }
    }

    fn find_or_create_slot(&mut self, ns: u32, container: u32, labels: u32) -> u32 {
        if let Some(&s) = self.slot_index.get(&(ns, container, labels)) {
            let now = self.now;
            let slot = &mut self.slots[s as usize];
            if slot.state.is_none() {
                slot.state = Some(AggregateContainerState::new(&self.config, now));
            }
            return s;
        }
        let fresh = AggSlot {
            namespace: ns,
            container,
            labels,
            state: Some(AggregateContainerState::new(&self.config, self.now)),
        };
        let s = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = fresh;
                s
            }
            None => {
                self.slots.push(fresh);
                self.slots.len() as u32 - 1
            }
        };
        self.slot_index.insert((ns, container, labels), s);
        self.slots_by_ns.entry(ns).or_default().push(s);
        let lbl = &self.label_sets[labels as usize];
        for &vi in self.vpas_by_ns.get(&ns).into_iter().flatten() {
            let v = &mut self.vpas[vi];
            if lbl.selected_by(&v.selector) {
                v.slots.push(s);
            }
        }
        s
    }

    /// Adds a container to a pod (creating its aggregate right away).
    pub fn add_or_update_container(&mut self, id: ContainerId<'_>) -> Result<(), ModelError> {
        let pi = self
            .pod_index(id.namespace, id.pod)
            .ok_or_else(|| ModelError::PodNotFound(format!("{}/{}", id.namespace, id.pod)))?;
        let name = self.strings.intern(id.container);
        let (ns, labels, exists) = match self.pods[pi as usize].as_ref() {
            Some(p) => (
                p.namespace,
                p.labels,
                p.containers.iter().any(|c| c.name == name),
            ),
            None => {
                return Err(ModelError::PodNotFound(format!(
                    "{}/{}",
                    id.namespace, id.pod
                )));
            }
        };
        if exists {
            return Ok(());
        }
        let slot = self.find_or_create_slot(ns, name, labels);
        if let Some(p) = self.pods[pi as usize].as_mut() {
            p.containers.push(ContainerEntry {
                name,
                slot,
                state: ContainerState::default(),
            });
        }
        Ok(())
    }

    #[inline]
    fn locate(&self, id: ContainerId<'_>) -> Result<(usize, usize), ModelError> {
        let pi = self
            .pod_index(id.namespace, id.pod)
            .ok_or_else(|| ModelError::PodNotFound(format!("{}/{}", id.namespace, id.pod)))?;
        let pod = self.pods[pi as usize]
            .as_ref()
            .ok_or_else(|| ModelError::PodNotFound(id.pod.into()))?;
        let ci = pod
            .containers
            .iter()
            .position(|c| short_eq(self.strings.name(c.name), id.container))
            .ok_or_else(|| ModelError::ContainerNotFound(id.to_string()))?;
        Ok((pi as usize, ci))
    }

    /// Feeds one usage sample to a container (the recommender's `AddSample`).
    #[inline]
    pub fn add_sample(&mut self, id: ContainerId<'_>, sample: Sample) -> Result<(), ModelError> {
        let (pi, ci) = self.locate(id)?;
        self.add_sample_at(pi, ci, sample)
    }

    /// Resolves a container's names once, for [`Self::add_sample_to`].
    pub fn container_ref(&self, id: ContainerId<'_>) -> Result<ContainerRef, ModelError> {
        let (pi, ci) = self.locate(id)?;
        let generation = self.pods[pi].as_ref().map_or(0, |p| p.generation);
        Ok(ContainerRef {
            pod: pi as u32,
            container: ci as u32,
            generation,
        })
    }

    /// [`Self::add_sample`] for a container resolved by [`Self::container_ref`]: no hashing of names, no
    /// probe of the pod table, no string comparison.
    #[inline]
    pub fn add_sample_to(&mut self, c: ContainerRef, sample: Sample) -> Result<(), ModelError> {
        match self.pods.get(c.pod as usize).and_then(Option::as_ref) {
            Some(p) if p.generation == c.generation => {}
            _ => return Err(ModelError::PodNotFound(String::new())),
        }
        self.add_sample_at(c.pod as usize, c.container as usize, sample)
    }

    fn ensure_state(&mut self, slot: u32) -> &mut AggregateContainerState {
        let now = self.now;
        let config = &self.config;
        self.slots[slot as usize]
            .state
            .get_or_insert_with(|| AggregateContainerState::new(config, now))
    }

    #[inline]
    fn add_sample_at(&mut self, pi: usize, ci: usize, sample: Sample) -> Result<(), ModelError> {
        let config = self.config;
        let Some(pod) = self.pods[pi].as_mut() else {
            return Err(ModelError::PodNotFound(String::new()));
        };
        let entry = &mut pod.containers[ci];
        let slot = entry.slot;
        let mut state = entry.state;
        let agg = {
            let now = self.now;
            self.slots[slot as usize]
                .state
                .get_or_insert_with(|| AggregateContainerState::new(&config, now))
        };
        let r = match sample.resource {
            Resource::Cpu => state.add_cpu_sample(sample.time, sample.usage, agg),
            Resource::Memory => state.add_memory_sample(sample.time, sample.usage, &config, agg),
        };
        if let Some(pod) = self.pods[pi].as_mut() {
            pod.containers[ci].state = state;
        }
        r.map_err(ModelError::from)
    }

    /// Records an OOM for a container; returns the bumped memory value.
    pub fn record_oom(
        &mut self,
        id: ContainerId<'_>,
        t: Nanos,
        requested: ResourceAmount,
    ) -> Result<ResourceAmount, ModelError> {
        self.record_oom_with(id, t, requested, OomBump::default())
    }

    /// [`Self::record_oom`] with a VPA's own bump (its container policy's `oomBumpUpRatio` and
    /// `oomMinBumpUp`, upstream's per-VPA settings) in place of the flags'.
    pub fn record_oom_with(
        &mut self,
        id: ContainerId<'_>,
        t: Nanos,
        requested: ResourceAmount,
        bump: OomBump,
    ) -> Result<ResourceAmount, ModelError> {
        let (pi, ci) = self.locate(id)?;
        let mut config = self.config;
        if let Some(ratio) = bump.ratio {
            config.oom_bump_up_ratio = ratio;
        }
        if let Some(bytes) = bump.min_bytes {
            config.oom_min_bump_up_bytes = bytes;
        }
        let (slot, mut state) = match self.pods[pi].as_ref() {
            Some(p) => (p.containers[ci].slot, p.containers[ci].state),
            None => return Err(ModelError::PodNotFound(id.pod.into())),
        };
        let r = state.record_oom(t, requested, &config, self.ensure_state(slot));
        if let Some(p) = self.pods[pi].as_mut() {
            p.containers[ci].state = state;
        }
        r.map_err(ModelError::from)
    }

    /// Adds a VPA and links every aggregate it selects. Returns its index, which may be the index of a
    /// retired VPA: the VPA table grows only with the number of VPAs alive at once.
    pub fn add_vpa(&mut self, mut vpa: VpaState) -> usize {
        let ns = self.strings.intern(&vpa.namespace);
        vpa.slots = self.selected_slots(ns, &vpa.selector);
        vpa.label_groups = self.selected_groups(ns, &vpa.selector);
        vpa.retired = false;
        let idx = match self.free_vpas.pop() {
            Some(i) => {
                self.vpas[i] = vpa;
                i
            }
            None => {
                self.vpas.push(vpa);
                self.vpas.len() - 1
            }
        };
        self.vpas_by_ns.entry(ns).or_default().push(idx);
        idx
    }

    fn selected_slots(&self, ns: u32, selector: &Selector) -> Vec<u32> {
        self.slots_by_ns
            .get(&ns)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&i| {
                self.label_sets[self.slots[i as usize].labels as usize].selected_by(selector)
            })
            .collect()
    }

    /// Replaces a VPA's selector and re-links its aggregates (restored state is kept).
    pub fn set_vpa_selector(&mut self, i: usize, selector: Selector) {
        let Some(v) = self.vpas.get(i) else { return };
        let ns = self.strings.intern(&v.namespace.clone());
        let slots = self.selected_slots(ns, &selector);
        let groups = self.selected_groups(ns, &selector);
        if let Some(v) = self.vpas.get_mut(i) {
            v.selector = selector;
            v.slots = slots;
            v.label_groups = groups;
        }
    }

    /// Makes a VPA inert (selects nothing, no restored state, no controller) and frees its index for the
    /// next [`Self::add_vpa`]; indices of other VPAs stay valid.
    pub fn retire_vpa(&mut self, i: usize) {
        let Some(v) = self.vpas.get_mut(i) else {
            return;
        };
        if v.retired {
            return;
        }
        v.retired = true;
        v.selector = Selector::Nothing;
        v.slots.clear();
        v.label_groups.clear();
        v.initial_states.clear();
        v.controller_exists = false;
        v.policy = None;
        v.annotations.clear();
        let namespace = v.namespace.clone();
        let ns = self.strings.intern(&namespace);
        if let Some(list) = self.vpas_by_ns.get_mut(&ns) {
            list.retain(|&x| x != i);
        }
        self.free_vpas.push(i);
    }

    /// The VPAs in the model.
    pub fn vpas(&self) -> &[VpaState] {
        &self.vpas
    }

    /// Mutable VPA access. Do not change `namespace` or `selector` through it: use
    /// [`Self::set_vpa_selector`] (aggregate links are computed from them).
    pub fn vpa_mut(&mut self, i: usize) -> Option<&mut VpaState> {
        self.vpas.get_mut(i)
    }

    /// Number of live aggregates.
    pub fn aggregate_count(&self) -> usize {
        self.slots.iter().filter(|s| s.state.is_some()).count()
    }

    /// Allocated aggregate slots (live, deleted-but-referenced, and free for reuse).
    pub fn aggregate_slots(&self) -> usize {
        self.slots.len()
    }

    /// Allocated pod slots (live and free for reuse).
    pub fn pod_slots(&self) -> usize {
        self.pods.len()
    }

    /// Number of distinct label sets in use.
    pub fn label_set_count(&self) -> usize {
        self.label_index.len()
    }

    /// Container instances (`namespace/pod:container`) whose aggregate is linked to the VPA, sorted.
    pub fn vpa_container_ids(&self, vpa: usize) -> Vec<String> {
        let Some(v) = self.vpas.get(vpa) else {
            return Vec::new();
        };
        let mut out: Vec<String> = self
            .pods
            .iter()
            .flatten()
            .flat_map(|p| p.containers.iter().map(move |c| (p, c)))
            .filter(|(_, c)| v.slots.contains(&c.slot))
            .map(|(p, c)| {
                format!(
                    "{}/{}:{}",
                    self.strings.name(p.namespace),
                    p.name.as_str(),
                    self.strings.name(c.name)
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Live aggregates linked to the VPA, as (container name, label set, aggregate).
    pub fn vpa_aggregates(&self, vpa: usize) -> Vec<(&str, &LabelSet, &AggregateContainerState)> {
        let Some(v) = self.vpas.get(vpa) else {
            return Vec::new();
        };
        v.slots
            .iter()
            .filter_map(|&s| {
                let slot = &self.slots[s as usize];
                slot.state.as_ref().map(|a| {
                    (
                        self.strings.name(slot.container),
                        &self.label_sets[slot.labels as usize],
                        a,
                    )
                })
            })
            .collect()
    }

    /// Merges every live aggregate of the VPA and its restored state into one fresh aggregate per container name.
    pub fn aggregate_state_by_container_name(
        &self,
        vpa: usize,
    ) -> BTreeMap<String, AggregateContainerState> {
        let mut out: BTreeMap<String, AggregateContainerState> = BTreeMap::new();
        let Some(v) = self.vpas.get(vpa) else {
            return out;
        };
        for (name, _, agg) in self.vpa_aggregates(vpa) {
            out.entry(name.to_string())
                .or_insert_with(|| AggregateContainerState::new(&self.config, self.now))
                .merge(agg);
        }
        for (name, agg) in &v.initial_states {
            out.entry(name.clone())
                .or_insert_with(|| AggregateContainerState::new(&self.config, self.now))
                .merge(agg);
        }
        out
    }

    /// The CPU and memory usage histograms of the VPA per container name, as
    /// [`Self::aggregate_state_by_container_name`] merges them, without building fresh aggregates: a name with
    /// one source (the common case) borrows its histograms, one with several gets merged copies.
    pub fn usage_by_container_name(&self, vpa: usize) -> BTreeMap<&str, UsagePair<'_>> {
        let mut out: BTreeMap<&str, UsagePair<'_>> = BTreeMap::new();
        let Some(v) = self.vpas.get(vpa) else {
            return out;
        };
        let restored = (v.initial_states.iter()).map(|(n, a)| (n.as_str(), a));
        let live = self.vpa_aggregates(vpa).into_iter().map(|(n, _, a)| (n, a));
        for (name, agg) in live.chain(restored) {
            match out.get_mut(name) {
                None => {
                    out.insert(name, (Cow::Borrowed(&agg.cpu), Cow::Borrowed(&agg.memory)));
                }
                Some((cpu, memory)) => {
                    cpu.to_mut().merge(&agg.cpu);
                    memory.to_mut().merge(&agg.memory);
                }
            }
        }
        out
    }

    /// The pods of the VPA's namespace (in any phase) that it selects: the pods of the groups its selector
    /// matched when they started (or when the VPA or its selector was set), not a match per pod.
    fn selected_pods(&self, v: &VpaState) -> impl Iterator<Item = &PodState> {
        let ns = self.strings.index.get(v.namespace.as_str()).copied();
        ns.into_iter()
            .flat_map(move |ns| {
                v.label_groups
                    .iter()
                    .flat_map(move |&labels| self.pod_groups.pods(ns, labels))
            })
            .filter_map(|&i| self.pods[i as usize].as_ref())
    }

    /// Pods `(namespace, name)` of the VPA's namespace, in any phase, whose labels it selects; unordered.
    pub fn matching_pods(&self, vpa: usize) -> impl Iterator<Item = (&str, &str)> {
        self.vpas.get(vpa).into_iter().flat_map(move |v| {
            self.selected_pods(v)
                .map(move |p| (self.strings.name(p.namespace), p.name.as_str()))
        })
    }

    /// Whether any pod of the VPA's namespace (in any phase) is selected by it (`NoPodsMatched` otherwise).
    pub fn has_matching_pod(&self, vpa: usize) -> bool {
        self.matching_pods(vpa).next().is_some()
    }

    /// The open memory windows at `now` of every container the VPA selects, sorted by container and pod.
    pub fn open_windows(&self, vpa: usize, now: Nanos) -> Vec<OpenWindow> {
        let Some(v) = self.vpas.get(vpa) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in self.selected_pods(v) {
            for c in p.containers.iter() {
                if let Some((peak, end)) = c.state.open_window_peak(now) {
                    out.push(OpenWindow {
                        container: self.strings.name(c.name).to_string(),
                        pod: p.name.as_str().to_string(),
                        end,
                        peak,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.container, &a.pod).cmp(&(&b.container, &b.pod)));
        out
    }

    /// What a checkpoint of the VPA holds at `now`: [`Self::aggregate_state_by_container_name`] minus the
    /// open memory window of every selected container, and those windows.
    pub fn checkpoint_states(&self, vpa: usize, now: Nanos) -> VpaCheckpoint {
        let mut states = self.aggregate_state_by_container_name(vpa);
        let open_windows = self.open_windows(vpa, now);
        for w in &open_windows {
            if let Some(agg) = states.get_mut(&w.container) {
                agg.memory.subtract_sample(w.peak as f64, 1.0, w.end);
            }
        }
        VpaCheckpoint {
            states,
            open_windows,
        }
    }

    /// Runs [`Self::garbage_collect`] if at least the GC interval passed since the last run.
    pub fn rate_limited_garbage_collect(&mut self, now: Nanos) -> usize {
        if sat_sub(now as i128, self.last_gc as i128) < self.gc_interval {
            return 0;
        }
        self.last_gc = now;
        self.garbage_collect(now)
    }

    /// Deletes expired aggregates and empty ones no pod contributes to. Returns how many were deleted.
    pub fn garbage_collect(&mut self, now: Nanos) -> usize {
        let mut contributive = vec![false; self.slots.len()];
        for p in self.pods.iter().flatten() {
            let active = p.phase.is_active()
                || self
                    .vpas_by_ns
                    .get(&p.namespace)
                    .into_iter()
                    .flatten()
                    .any(|&vi| {
                        let v = &self.vpas[vi];
                        v.controller_exists
                            && self.label_sets[p.labels as usize].selected_by(&v.selector)
                    });
            if active {
                for c in p.containers.iter() {
                    if let Some(&s) = self.slot_index.get(&(p.namespace, c.name, p.labels)) {
                        contributive[s as usize] = true;
                    }
                }
            }
        }
        let mut referenced = vec![false; self.slots.len()];
        for p in self.pods.iter().flatten() {
            for c in p.containers.iter() {
                referenced[c.slot as usize] = true;
            }
        }
        let mut deleted = 0;
        let mut released: FxMap<u32, Vec<u32>> = FxMap::default();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let key = (slot.namespace, slot.container, slot.labels);
            if self.slot_index.get(&key) != Some(&(i as u32)) {
                continue; // already released
            }
            if let Some(agg) = slot.state.as_ref()
                && (agg.is_expired(now, &self.config) || (agg.is_empty() && !contributive[i]))
            {
                slot.state = None;
                deleted += 1;
            }
            // A deleted aggregate no container points to any more: forget the key and reuse the slot.
            if slot.state.is_none() && !referenced[i] {
                self.slot_index.remove(&key);
                released.entry(slot.namespace).or_default().push(i as u32);
            }
        }
        for (ns, gone) in released {
            let gone: std::collections::HashSet<u32> = gone.into_iter().collect();
            if let Some(list) = self.slots_by_ns.get_mut(&ns) {
                list.retain(|s| !gone.contains(s));
            }
            for &vi in self.vpas_by_ns.get(&ns).into_iter().flatten() {
                self.vpas[vi].slots.retain(|s| !gone.contains(s));
            }
            self.free_slots.extend(gone);
        }
        self.release_unused_label_sets();
        deleted
    }

    /// Forgets label sets no pod and no aggregate key uses any more (their ids are reused).
    fn release_unused_label_sets(&mut self) {
        let mut used = vec![false; self.label_sets.len()];
        for p in self.pods.iter().flatten() {
            used[p.labels as usize] = true;
        }
        for &(_, _, l) in self.slot_index.keys() {
            used[l as usize] = true;
        }
        for (i, u) in used.into_iter().enumerate() {
            if u {
                continue;
            }
            let key = self.label_sets[i].key();
            if self.label_index.get(&key) == Some(&(i as u32)) {
                self.label_index.remove(&key);
                self.label_sets[i] = LabelSet::default();
                self.free_labels.push(i as u32);
            }
        }
    }

    /// The time the last GC ran.
    pub fn last_gc(&self) -> Nanos {
        self.last_gc
    }

    /// Sets the time of the last GC (upstream starts at the Unix epoch).
    pub fn set_last_gc(&mut self, t: Nanos) {
        self.last_gc = t;
    }

    /// Sum of heap bytes held by live aggregates' histograms.
    pub fn histogram_heap_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.state.as_ref())
            .map(|a| a.heap_bytes())
            .sum()
    }
}

/// Never written reference time for sorting checkpoints (zero time).
pub const NEVER: Nanos = ZERO_TIME;
