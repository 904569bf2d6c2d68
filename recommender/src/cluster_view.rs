//! What the recommender reads of the rest of the cluster to size within it (docs/decisions/node-fit.md): Nodes (slim:
//! labels, taints, allocatable CPU and memory), Karpenter NodePools and HorizontalPodAutoscalers, each
//! watched into a reflector store when its part is on ([`ViewConfig`]). Each loop turns the nodes and
//! NodePools into node-fit candidates once ([`Candidates`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use tailor_kube::reflector_set::ReflectorSet;
use tailor_kube::reflectors::{OnWatchError, spawn_reflector};
use tokio::task::JoinHandle;

use crate::hpa::SlimHpa;
use crate::karpenter::{InstanceTable, NodePool, SlimTaint};
use crate::node_fit::{Candidate, MAX_ITEMS, Placement, Req, Taint};

/// `spec` of a Node: taints and whether it is cordoned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNodeSpec {
    /// Taints.
    #[serde(default)]
    pub taints: Vec<SlimTaint>,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// `status` of a Node: what it offers pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNodeStatus {
    /// Allocatable resources (only `cpu` and `memory` are kept).
    #[serde(default)]
    pub allocatable: BTreeMap<String, Quantity>,
}

/// A Node, as far as node fit reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlimNode {
    /// Metadata (name and labels kept).
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: SlimNodeSpec,
    /// Status.
    #[serde(default)]
    pub status: SlimNodeStatus,
}

tailor_core::trimmed_resource!(SlimNode => k8s_openapi::api::core::v1::Node);

fn strip_meta(m: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        labels: m.labels,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    }
}

/// Keeps of a Node only what node fit reads.
pub fn strip_node(mut n: SlimNode) -> SlimNode {
    n.metadata = strip_meta(n.metadata);
    n.status
        .allocatable
        .retain(|k, _| k == "cpu" || k == "memory");
    n
}

/// Keeps of a NodePool only what node fit reads.
pub fn strip_pool(mut p: NodePool) -> NodePool {
    p.metadata = ObjectMeta {
        name: p.metadata.name,
        resource_version: p.metadata.resource_version,
        ..ObjectMeta::default()
    };
    p
}

impl SlimNode {
    /// The node as a candidate; `None` past [`MAX_ITEMS`] labels or taints, or with an unreadable
    /// allocatable. A cordoned node carries the `node.kubernetes.io/unschedulable` taint.
    pub fn candidate(&self) -> Option<Candidate> {
        let labels = self.metadata.labels.clone().unwrap_or_default();
        if labels.len() > MAX_ITEMS || self.spec.taints.len() > MAX_ITEMS {
            return None;
        }
        let mut taints: Vec<Taint> = self.spec.taints.iter().map(SlimTaint::taint).collect();
        if self.spec.unschedulable {
            taints.push(Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
            });
        }
        let allocatable = Req::of(Some(&self.status.allocatable)).ok()?;
        Some(Candidate::node(
            self.metadata.name.as_deref().unwrap_or_default(),
            &labels,
            taints,
            allocatable,
        ))
    }
}

/// Which parts of the view are on (flags `--node-fit`, `--node-fit-karpenter`, `--hpa-coherence`).
#[derive(Debug, Clone)]
pub struct ViewConfig {
    /// Watch Nodes and cap targets to them.
    pub node_fit: bool,
    /// With node fit, also watch Karpenter NodePools.
    pub karpenter: bool,
    /// Watch HPAs and leave what they scale on to them.
    pub hpa_coherence: bool,
    /// The instance types NodePools launch.
    pub instance_types: Arc<InstanceTable>,
    /// How long to wait before looking again for the NodePool API when it is not served.
    pub nodepool_retry: Duration,
}

impl Default for ViewConfig {
    fn default() -> Self {
        ViewConfig {
            node_fit: true,
            karpenter: true,
            hpa_coherence: true,
            instance_types: Arc::new(InstanceTable::builtin()),
            nodepool_retry: Duration::from_secs(60),
        }
    }
}

/// Read handles of the view's stores (`None` = that part is off).
#[derive(Clone, Default)]
pub struct ClusterView {
    /// Nodes.
    pub nodes: Option<Store<SlimNode>>,
    /// Karpenter NodePools.
    pub pools: Option<Store<NodePool>>,
    /// HPAs.
    pub hpas: Option<Store<SlimHpa>>,
    /// Instance types of NodePools.
    pub instance_types: Arc<InstanceTable>,
}

/// Write handles of the view's stores. Tests feed them directly.
pub struct ViewWriters {
    /// Nodes.
    pub nodes: Option<Writer<SlimNode>>,
    /// NodePools.
    pub pools: Option<Writer<NodePool>>,
    /// HPAs.
    pub hpas: Option<Writer<SlimHpa>>,
}

/// Empty stores for the parts `cfg` turns on, and their writers.
pub fn new_view(cfg: &ViewConfig) -> (ClusterView, ViewWriters) {
    let nodes = cfg.node_fit.then(Writer::<SlimNode>::default);
    let pools = (cfg.node_fit && cfg.karpenter).then(Writer::<NodePool>::default);
    let hpas = cfg.hpa_coherence.then(Writer::<SlimHpa>::default);
    let view = ClusterView {
        nodes: nodes.as_ref().map(Writer::as_reader),
        pools: pools.as_ref().map(Writer::as_reader),
        hpas: hpas.as_ref().map(Writer::as_reader),
        instance_types: cfg.instance_types.clone(),
    };
    (view, ViewWriters { nodes, pools, hpas })
}

/// Starts the view's watches (HPAs in `namespace`, empty = all). The NodePool watch starts once the API
/// serves NodePools (looked for again every `cfg.nodepool_retry` while it does not, quietly: most clusters
/// have no Karpenter).
pub fn spawn_view_watchers(
    client: &Client,
    namespace: &str,
    writers: ViewWriters,
    cfg: &ViewConfig,
    on_error: OnWatchError,
) -> Vec<JoinHandle<()>> {
    let config = watcher::Config::default();
    let mut reflectors = ReflectorSet::new(client, namespace, config.clone(), on_error.clone());
    if let Some(w) = writers.nodes {
        reflectors.reflect_cluster(w, strip_node);
    }
    if let Some(w) = writers.hpas {
        reflectors.reflect(w, crate::hpa::strip);
    }
    let mut tasks = reflectors.into_tasks();
    if let Some(w) = writers.pools {
        let pools = Api::<NodePool>::all(client.clone());
        let retry = cfg.nodepool_retry;
        tasks.push(tokio::spawn(async move {
            loop {
                match pools.list_metadata(&ListParams::default().limit(1)).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        tracing::debug!("no Karpenter NodePool API; looking again later");
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot list Karpenter NodePools; trying again later"),
                }
                tokio::time::sleep(retry).await;
            }
            tracing::info!("Karpenter NodePools found: node fit counts the instances they may launch");
            let task = spawn_reflector(pools, config, w, strip_pool, on_error);
            let _ = task.await;
        }));
    }
    tasks
}

/// The stores of the view that must have listed once before the first loop (the NodePool API may be
/// absent, so its store is not waited for).
pub async fn wait_until_ready(view: &ClusterView) {
    if let Some(s) = &view.nodes {
        let _ = s.wait_until_ready().await;
    }
    if let Some(s) = &view.hpas {
        let _ = s.wait_until_ready().await;
    }
}

/// At most this many placements are remembered per loop (more are computed each time they are asked).
pub const MAX_CACHED_PLACEMENTS: usize = 1024;

/// One loop's node-fit candidates, and the frontier of each placement asked for.
#[derive(Debug, Default)]
pub struct Candidates {
    all: Vec<Candidate>,
    cache: HashMap<Placement, Vec<usize>>,
}

impl Candidates {
    /// The candidates of the view's nodes and NodePools now.
    pub fn of(view: &ClusterView) -> Candidates {
        let mut all: Vec<Candidate> = view
            .nodes
            .iter()
            .flat_map(|s| s.state())
            .filter_map(|n| n.candidate())
            .collect();
        for p in view.pools.iter().flat_map(|s| s.state()) {
            all.extend(crate::karpenter::candidates(&p, &view.instance_types));
        }
        all.sort_by(|a, b| {
            (a.kind as u8, &a.name, &a.instance).cmp(&(b.kind as u8, &b.name, &b.instance))
        });
        Candidates {
            all,
            cache: HashMap::new(),
        }
    }

    /// Whether there is none (node fit then caps nothing).
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Works out (and remembers, up to [`MAX_CACHED_PLACEMENTS`]) the candidates a pod placed by `p` may
    /// land on.
    pub fn prepare(&mut self, p: &Placement) {
        if self.cache.len() < MAX_CACHED_PLACEMENTS && !self.cache.contains_key(p) {
            let indices = crate::node_fit::frontier_indices(p, &self.all);
            self.cache.insert(p.clone(), indices);
        }
    }

    /// The candidates a pod placed by `p` may land on ([`crate::node_fit::frontier`]), remembered by
    /// [`Candidates::prepare`] or worked out now.
    pub fn frontier(&self, p: &Placement) -> Vec<&Candidate> {
        match self.cache.get(p) {
            Some(v) => v.iter().filter_map(|&i| self.all.get(i)).collect(),
            None => crate::node_fit::frontier(p, &self.all),
        }
    }
}

/// HPAs by the workload they scale: `(namespace, kind, name)`.
type HpaIndex = HashMap<(String, String, String), Vec<Arc<SlimHpa>>>;

/// What one loop reads of the view: the node-fit candidates and the HPAs by target.
#[derive(Debug, Default)]
pub struct LoopView {
    /// Node-fit candidates.
    pub candidates: Candidates,
    hpas: HpaIndex,
    /// Whether HPA coherence is on.
    pub hpa_coherence: bool,
}

impl LoopView {
    /// The view's state now.
    pub fn of(view: &ClusterView) -> LoopView {
        let mut hpas = HpaIndex::new();
        for h in view.hpas.iter().flat_map(|s| s.state()) {
            let t = &h.spec.scale_target_ref;
            let key = (
                h.metadata.namespace.clone().unwrap_or_default(),
                t.kind.clone(),
                t.name.clone(),
            );
            hpas.entry(key).or_default().push(h);
        }
        LoopView {
            candidates: Candidates::of(view),
            hpas,
            hpa_coherence: view.hpas.is_some(),
        }
    }

    /// The HPAs scaling `kind`/`name` in `namespace`.
    pub fn hpas_of(&self, namespace: &str, kind: &str, name: &str) -> &[Arc<SlimHpa>] {
        self.hpas
            .get(&(namespace.to_string(), kind.to_string(), name.to_string()))
            .map_or(&[], Vec::as_slice)
    }
}
