//! `tailor recommend --snapshot`: the recommendations sized within a cluster read from a snapshot file, as the
//! recommender sizes them within the cluster it watches. The snapshot's Nodes and Karpenter NodePools give
//! the node-fit candidates, its HPAs the resources left to an HPA, and its Tailor VPAs, workloads and pods
//! which pod shapes each VPA covers; then the one function the daemon calls
//! ([`tailor_cluster_fit::within::size_within_cluster`]) caps each trace's recommendation. A trace goes with
//! the VPA its id names (`namespace/name`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use tailor_cluster_fit::hpa::SlimHpa;
use tailor_cluster_fit::karpenter::{InstanceTable, NodePool};
use tailor_cluster_fit::node_fit::{MAX_SHAPES, PodShape};
use tailor_cluster_fit::nodes::SlimNode;
use tailor_cluster_fit::pod_spec::SlimPodSpec;
use tailor_cluster_fit::view::{Candidates, FitView};
use tailor_cluster_fit::within::{ClusterNotes, cluster_conditions, size_within_cluster};
use tailor_crds::{PodResourcePolicy, VerticalPodAutoscaler};
use tailor_engine::estimate::ContainerRecommendation;
use tailor_engine::model::Selector;
use tailor_engine::replay::OutputRecommendation;
use tailor_kube::index::{ControllerRef, Index};
use tailor_kube::manifests::index_objects::{IndexObject, ManifestIndex};
use tailor_kube::manifests::{self, Keep, Object, Walk};

use crate::error::InputError;
use crate::fleet::text_at;
use crate::output::{ClusterCondition, Recommendation};

/// At most this many pods, Nodes, NodePools and HPAs of a snapshot are read together (a larger cluster: pass
/// the namespaces that matter).
pub const MAX_OBJECTS: usize = 200_000;

/// `--snapshot` and the switches of sizing within the cluster (the daemon's defaults: all on).
#[derive(Debug, clap::Args)]
pub struct SnapshotArgs {
    /// Size within the cluster of a snapshot file or directory (repeatable): what `kubectl get
    /// nodes,pods,deploy,sts,ds,rs,cronjob,job,hpa,tvpa -A -o yaml` prints (add `nodepools` with
    /// Karpenter), YAML or JSON. Each trace goes with the Tailor VPA its id names (`namespace/name`): node
    /// fit caps its target to the largest node its pods may land on, and a resource an HPA scales on by
    /// utilization is left to the HPA, as the recommender does.
    #[arg(
        long,
        value_name = "PATH",
        help_heading = "Sizing within a cluster snapshot"
    )]
    pub snapshot: Vec<PathBuf>,
    /// With --snapshot, cap targets to the largest node the pods may land on (`false`: no node fit).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within a cluster snapshot")]
    pub node_fit: bool,
    /// With --snapshot and --node-fit, count the largest instance each Karpenter NodePool of the snapshot
    /// may launch as a node.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within a cluster snapshot")]
    pub node_fit_karpenter: bool,
    /// Instance types NodePools launch: a YAML or JSON list of `{name, cpu, memory, labels}` with
    /// allocatable CPU and memory (default: a built-in table of common AWS types).
    #[arg(
        long,
        value_name = "PATH",
        help_heading = "Sizing within a cluster snapshot"
    )]
    pub node_fit_instance_types: Option<PathBuf>,
    /// With --snapshot, leave CPU or memory to an HPA of the snapshot that scales the same workload on its
    /// utilization (no target for it).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, help_heading = "Sizing within a cluster snapshot")]
    pub hpa_coherence: bool,
}

/// What a snapshot says of one Tailor VPA: its target, its policy and its pods' distinct shapes.
#[derive(Debug)]
struct VpaFacts {
    /// (`apiVersion`, kind, name) of `spec.targetRef`.
    target: Option<(Option<String>, String, String)>,
    policy: Option<PodResourcePolicy>,
    shapes: Vec<PodShape>,
}

/// A snapshot read for sizing within it: the view and each VPA's facts, by (namespace, name).
#[derive(Debug)]
pub struct ClusterSnapshot {
    view: FitView,
    vpas: BTreeMap<(String, String), VpaFacts>,
}

/// A pod as sizing within the cluster reads it.
#[derive(Debug)]
struct SnapshotPod {
    namespace: String,
    labels: BTreeMap<String, String>,
    /// `None` for a pending pod (the recommender does not watch them) or an unreadable shape.
    shape: Option<PodShape>,
}

/// What `--snapshot` keeps of one object.
enum Kept {
    Index(Box<IndexObject>),
    Pod(Box<SnapshotPod>),
    Node(Box<SlimNode>),
    Pool(Box<NodePool>),
    Hpa(Box<SlimHpa>),
    Other,
}

impl Keep for Kept {
    fn keep(o: Object) -> Result<Self, String> {
        Ok(match (o.group(), o.api_version.as_str(), o.kind.as_str()) {
            ("", _, "Pod") => Kept::Pod(Box::new(pod(&o)?)),
            ("", _, "Node") => {
                Kept::Node(Box::new(tailor_cluster_fit::nodes::strip_node(o.decode()?)))
            }
            ("karpenter.sh", "karpenter.sh/v1", "NodePool") => Kept::Pool(Box::new(o.decode()?)),
            // The HPA fields read are autoscaling/v2's (what kubectl prints by default).
            ("autoscaling", "autoscaling/v2", "HorizontalPodAutoscaler") => {
                Kept::Hpa(Box::new(tailor_cluster_fit::hpa::strip(o.decode()?)))
            }
            _ => match IndexObject::of(&o) {
                Some(object) => Kept::Index(Box::new(object?)),
                None => Kept::Other,
            },
        })
    }
}

fn pod(o: &Object) -> Result<SnapshotPod, String> {
    let v = &o.value;
    let labels = match v.pointer("/metadata/labels") {
        Some(l) if !l.is_null() => serde_json::from_value(l.clone()).map_err(|e| e.to_string())?,
        _ => BTreeMap::new(),
    };
    let pending = text_at(v, "/status/phase") == "Pending";
    let shape = if pending {
        None
    } else {
        let spec: SlimPodSpec = match v.get("spec") {
            Some(s) => serde_json::from_value(s.clone()).map_err(|e| format!("spec: {e}"))?,
            None => SlimPodSpec::default(),
        };
        PodShape::of(&spec).ok()
    };
    Ok(SnapshotPod {
        namespace: text_at(v, "/metadata/namespace"),
        labels,
        shape,
    })
}

/// The objects as read, before the VPAs are matched to their pods.
#[derive(Default)]
struct Read {
    index: ManifestIndex,
    pods: Vec<SnapshotPod>,
    nodes: Vec<SlimNode>,
    pools: Vec<NodePool>,
    hpas: Vec<Arc<SlimHpa>>,
}

impl Read {
    fn add(&mut self, kept: Kept) -> Result<(), InputError> {
        let held = self.pods.len() + self.nodes.len() + self.pools.len() + self.hpas.len();
        if held >= MAX_OBJECTS && !matches!(kept, Kept::Index(_) | Kept::Other) {
            return Err(InputError(format!(
                "--snapshot: more than {MAX_OBJECTS} pods, Nodes, NodePools and HPAs: pass fewer namespaces"
            )));
        }
        match kept {
            Kept::Index(o) => self.index.add(*o),
            Kept::Pod(p) => self.pods.push(*p),
            Kept::Node(n) => self.nodes.push(*n),
            Kept::Pool(p) => self.pools.push(*p),
            Kept::Hpa(h) => self.hpas.push(Arc::new(*h)),
            Kept::Other => {}
        }
        Ok(())
    }
}

impl SnapshotArgs {
    /// The snapshot these flags name, read; `None` without `--snapshot` (then no other flag of the group may
    /// be given a file).
    pub fn load(&self) -> anyhow::Result<Option<ClusterSnapshot>> {
        if self.snapshot.is_empty() {
            if self.node_fit_instance_types.is_some() {
                return Err(InputError("--node-fit-instance-types needs --snapshot".into()).into());
            }
            return Ok(None);
        }
        ClusterSnapshot::load(self).map(Some)
    }
}

impl ClusterSnapshot {
    /// Reads the snapshot's files (a directory's files directly in it) with the switches of `args`.
    fn load(args: &SnapshotArgs) -> anyhow::Result<ClusterSnapshot> {
        let mut read = Read::default();
        let mut failed = None;
        for file in manifests::manifest_files(&args.snapshot, Walk::Flat)? {
            manifests::read_file(&file, |_, kept| {
                if failed.is_none()
                    && let Err(e) = read.add(kept)
                {
                    failed = Some(e);
                }
            })?;
            if let Some(e) = failed.take() {
                return Err(e.into());
            }
        }
        let table = match &args.node_fit_instance_types {
            None => InstanceTable::builtin(),
            Some(path) => InstanceTable::read_file(path).map_err(|e| {
                InputError(format!("--node-fit-instance-types {}: {e}", path.display()))
            })?,
        };
        Ok(ClusterSnapshot::of(read, args, &table))
    }

    fn of(read: Read, args: &SnapshotArgs, table: &InstanceTable) -> ClusterSnapshot {
        let Read {
            index,
            pods,
            nodes,
            pools,
            hpas,
        } = read;
        let vpas_read: Vec<VerticalPodAutoscaler> = index.vpas().to_vec();
        let index = index.into_index();
        // Pods by namespace, once: a VPA only looks at its own namespace's.
        let mut by_namespace: HashMap<&str, Vec<&SnapshotPod>> = HashMap::new();
        for p in &pods {
            by_namespace
                .entry(p.namespace.as_str())
                .or_default()
                .push(p);
        }
        let vpas = vpas_read
            .iter()
            .map(|v| {
                let namespace = v.metadata.namespace.clone().unwrap_or_default();
                let name = v.metadata.name.clone().unwrap_or_default();
                let in_namespace = by_namespace
                    .get(namespace.as_str())
                    .map_or(&[][..], Vec::as_slice);
                let facts = facts(v, &namespace, &index, in_namespace);
                ((namespace, name), facts)
            })
            .collect();
        let pools = if args.node_fit_karpenter {
            pools
        } else {
            Vec::new()
        };
        let candidates = if args.node_fit {
            Candidates::of(&nodes, &pools, table)
        } else {
            Candidates::default()
        };
        let view = FitView::new(candidates, args.hpa_coherence.then_some(hpas));
        ClusterSnapshot { view, vpas }
    }

    /// Sizes `r` within the cluster when the snapshot has the VPA its id names; `false` when it has none.
    pub fn size(&self, r: &mut Recommendation) -> bool {
        let Some((namespace, name)) = r.output.id.split_once('/') else {
            return false;
        };
        let Some(facts) = self.vpas.get(&(namespace.to_owned(), name.to_owned())) else {
            return false;
        };
        if r.output.error.is_some() {
            return true;
        }
        let mut recs: Vec<ContainerRecommendation> =
            r.output.recommendations.iter().map(engine_form).collect();
        let target = (facts.target.as_ref()).map(|(api_version, kind, name)| {
            (
                namespace,
                api_version.as_deref(),
                kind.as_str(),
                name.as_str(),
            )
        });
        let shapes: Vec<&PodShape> = facts.shapes.iter().collect();
        let notes = size_within_cluster(
            &mut recs,
            &self.view,
            target,
            &shapes,
            facts.policy.as_ref(),
        );
        for (out, rec) in r.output.recommendations.iter_mut().zip(recs) {
            out.target = rec.target;
            out.lower_bound = rec.lower_bound;
            out.upper_bound = rec.upper_bound;
            out.uncapped_target = rec.uncapped_target;
        }
        r.cluster = conditions(&notes);
        true
    }
}

/// The VPA's target, policy, and the distinct shapes (at most [`MAX_SHAPES`]) of the pods of its
/// namespace (`pods`) its target's selector matches, as the recommender's model matches them.
fn facts(
    v: &VerticalPodAutoscaler,
    namespace: &str,
    index: &Index,
    pods: &[&SnapshotPod],
) -> VpaFacts {
    let target = v.spec.target_ref.as_ref();
    let selector = target.and_then(|t| {
        let controller = ControllerRef {
            api_version: t.api_version.clone().unwrap_or_default(),
            kind: t.kind.clone(),
            name: t.name.clone(),
            namespace: namespace.to_owned(),
        };
        let s = index.selector(&controller)?;
        Selector::from_label_selector(&s).ok()
    });
    let mut shapes: Vec<PodShape> = Vec::new();
    if let Some(selector) = selector {
        let matched = pods.iter().filter(|p| selector.matches(&p.labels));
        for shape in matched.filter_map(|p| p.shape.as_ref()) {
            if shapes.len() >= MAX_SHAPES {
                break;
            }
            if !shapes.contains(shape) {
                shapes.push(shape.clone());
            }
        }
    }
    VpaFacts {
        target: target.map(|t| (t.api_version.clone(), t.kind.clone(), t.name.clone())),
        policy: v.spec.resource_policy.clone(),
        shapes,
    }
}

fn engine_form(r: &OutputRecommendation) -> ContainerRecommendation {
    ContainerRecommendation {
        container_name: r.container_name.clone(),
        target: r.target,
        lower_bound: r.lower_bound,
        upper_bound: r.upper_bound,
        uncapped_target: r.uncapped_target,
    }
}

/// The conditions the recommender sets on the VPA for what sizing within the cluster did.
fn conditions(notes: &ClusterNotes) -> Vec<ClusterCondition> {
    cluster_conditions(notes.node_fit.as_ref(), notes.left_to_hpa.as_deref())
        .into_iter()
        .filter_map(|(type_, state)| {
            let (status, reason, message) = state?;
            Some(ClusterCondition::new(type_, status, reason, message))
        })
        .collect()
}
