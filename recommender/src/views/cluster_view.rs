//! What the recommender reads of the rest of the cluster to size within it (docs/decisions/node-fit.md): Nodes (slim:
//! labels, taints, allocatable CPU and memory), Karpenter NodePools and HorizontalPodAutoscalers, each
//! watched into a reflector store when its part is on ([`ViewConfig`]). Each loop reads the stores into
//! one [`FitView`] ([`loop_view`]), which the pure sizing within the cluster reads.

use std::sync::Arc;
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client};
use tailor_cluster_fit::hpa::SlimHpa;
use tailor_cluster_fit::karpenter::{InstanceTable, NodePool};
use tailor_cluster_fit::nodes::{SlimNode, strip_node, strip_pool};
use tailor_cluster_fit::view::{Candidates, FitView};
use tailor_kube::reflector_set::ReflectorSet;
use tailor_kube::reflectors::{OnWatchError, spawn_reflector};
use tokio::task::JoinHandle;

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
        reflectors.reflect(w, tailor_cluster_fit::hpa::strip);
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

/// The view's state now, as sizing within the cluster reads it.
pub fn loop_view(view: &ClusterView) -> FitView {
    let nodes: Vec<Arc<SlimNode>> = view.nodes.iter().flat_map(Store::state).collect();
    let pools: Vec<Arc<NodePool>> = view.pools.iter().flat_map(Store::state).collect();
    let candidates = Candidates::of(
        nodes.iter().map(|n| &**n),
        pools.iter().map(|p| &**p),
        &view.instance_types,
    );
    FitView::new(candidates, view.hpas.as_ref().map(Store::state))
}
