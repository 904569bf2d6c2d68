//! What sizing within the cluster reads of it, once per loop (or once per `tailor recommend --snapshot`):
//! the node-fit candidates of the nodes and NodePools ([`Candidates`]) and the HPAs by the workload they
//! scale ([`FitView`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::hpa::SlimHpa;
use crate::karpenter::{InstanceTable, NodePool};
use crate::node_fit::{Candidate, Placement, frontier, frontier_indices};
use crate::nodes::SlimNode;

/// At most this many placements are remembered per loop (more are computed each time they are asked).
pub const MAX_CACHED_PLACEMENTS: usize = 1024;

/// One loop's node-fit candidates, and the frontier of each placement asked for.
#[derive(Debug, Default)]
pub struct Candidates {
    all: Vec<Candidate>,
    cache: HashMap<Placement, Vec<usize>>,
}

impl Candidates {
    /// The candidates of `nodes` and of `pools` (each NodePool's instances from `instance_types`), in one
    /// order whatever the order they come in.
    pub fn of<'a>(
        nodes: impl IntoIterator<Item = &'a SlimNode>,
        pools: impl IntoIterator<Item = &'a NodePool>,
        instance_types: &InstanceTable,
    ) -> Candidates {
        let mut all: Vec<Candidate> = nodes.into_iter().filter_map(SlimNode::candidate).collect();
        for p in pools {
            all.extend(crate::karpenter::candidates(p, instance_types));
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
            let indices = frontier_indices(p, &self.all);
            self.cache.insert(p.clone(), indices);
        }
    }

    /// The candidates a pod placed by `p` may land on ([`frontier`]), remembered by
    /// [`Candidates::prepare`] or worked out now.
    pub fn frontier(&self, p: &Placement) -> Vec<&Candidate> {
        match self.cache.get(p) {
            Some(v) => v.iter().filter_map(|&i| self.all.get(i)).collect(),
            None => frontier(p, &self.all),
        }
    }
}

/// HPAs by the workload they scale: `(namespace, kind, name)`.
type HpaIndex = HashMap<(String, String, String), Vec<Arc<SlimHpa>>>;

/// What sizing within the cluster reads of it: the node-fit candidates and the HPAs by target.
#[derive(Debug, Default)]
pub struct FitView {
    /// Node-fit candidates.
    pub candidates: Candidates,
    hpas: HpaIndex,
    /// Whether HPA coherence is on.
    pub hpa_coherence: bool,
}

impl FitView {
    /// The view of `candidates` and, when HPA coherence is on (`Some`), of `hpas`.
    pub fn new(
        candidates: Candidates,
        hpas: Option<impl IntoIterator<Item = Arc<SlimHpa>>>,
    ) -> FitView {
        let hpa_coherence = hpas.is_some();
        let mut index = HpaIndex::new();
        for h in hpas.into_iter().flatten() {
            let t = &h.spec.scale_target_ref;
            let key = (
                h.metadata.namespace.clone().unwrap_or_default(),
                t.kind.clone(),
                t.name.clone(),
            );
            index.entry(key).or_default().push(h);
        }
        FitView {
            candidates,
            hpas: index,
            hpa_coherence,
        }
    }

    /// The HPAs scaling `kind`/`name` in `namespace`.
    pub fn hpas_of(&self, namespace: &str, kind: &str, name: &str) -> &[Arc<SlimHpa>] {
        self.hpas
            .get(&(namespace.to_string(), kind.to_string(), name.to_string()))
            .map_or(&[], Vec::as_slice)
    }
}
