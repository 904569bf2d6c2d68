//! Sizing within the cluster, in one place: an HPA that scales a workload on CPU or memory utilisation
//! takes that resource ([`crate::hpa`]), then the targets are capped so the pods fit the largest node or
//! NodePool instance they may land on ([`crate::node_fit`]). The recommender's planner and
//! `tailor recommend --snapshot` both call [`size_within_cluster`], so the offline answer is the daemon's.

use tailor_core::sizing::POD_ROW;
use tailor_crds::condition as cond;
use tailor_crds::{PodResourcePolicy, ResourceList};
use tailor_engine::estimate::ContainerRecommendation;
use tailor_engine::policy::IntegerBounds;

use crate::hpa::{leave_to_hpa, left_to_hpa};
use crate::node_fit::{CandidateKind, FitOutcome, PodShape, Resource, capped_message, fit_all};
use crate::view::FitView;

/// The `CappedToNodeSize` condition of a VPA.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeFitNote {
    /// `True`: the target was lowered (reason `LargestNode` or `LargestNodePoolInstance`).
    Capped {
        /// Reason.
        reason: &'static str,
        /// Message naming the node or NodePool.
        message: String,
    },
    /// `False`, reason `NoNodeFits`: the pods fit nowhere whatever the target (message: why).
    NoneFits(String),
}

/// `CappedToNodeSize` reason when the pods fit no node whatever the target.
pub const NO_NODE_FITS_REASON: &str = "NoNodeFits";
/// `ResourcesLeftToHPA` reason.
pub const LEFT_TO_HPA_REASON: &str = "HorizontalPodAutoscaler";

impl NodeFitNote {
    /// The `CappedToNodeSize` condition it sets: (status, reason, message).
    pub fn condition(&self) -> (bool, &str, &str) {
        match self {
            NodeFitNote::Capped { reason, message } => (true, reason, message),
            NodeFitNote::NoneFits(message) => (false, NO_NODE_FITS_REASON, message),
        }
    }

    /// The note for a node-fit outcome (`None` when nothing is to be said).
    pub fn of(outcome: &FitOutcome) -> Option<NodeFitNote> {
        match outcome {
            FitOutcome::Capped {
                by,
                kind,
                allocatable,
                lowered,
            } => Some(NodeFitNote::Capped {
                reason: match kind {
                    CandidateKind::Node => "LargestNode",
                    CandidateKind::NodePool => "LargestNodePoolInstance",
                },
                message: capped_message(by, *allocatable, lowered),
            }),
            FitOutcome::NoneFits(m) => Some(NodeFitNote::NoneFits(m.clone())),
            FitOutcome::Fits | FitOutcome::Unknown => None,
        }
    }
}

/// A condition as sizing within the cluster decides it: `Some((status, reason, message))` to set, `None`
/// to remove.
pub type ConditionState<'a> = Option<(bool, &'a str, &'a str)>;

/// The VPA conditions sizing within the cluster owns, each with what node fit and HPA coherence decided
/// of it: `CappedToNodeSize` and `ResourcesLeftToHPA`, in that order. The recommender sets or removes
/// each; `tailor recommend --snapshot` prints those set.
pub fn cluster_conditions<'a>(
    node_fit: Option<&'a NodeFitNote>,
    left_to_hpa: Option<&'a str>,
) -> [(&'static str, ConditionState<'a>); 2] {
    [
        (
            cond::CAPPED_TO_NODE_SIZE,
            node_fit.map(NodeFitNote::condition),
        ),
        (
            cond::RESOURCES_LEFT_TO_HPA,
            left_to_hpa.map(|m| (true, LEFT_TO_HPA_REASON, m)),
        ),
    ]
}

/// What sizing within the cluster did to one recommendation (see [`crate::node_fit`], [`crate::hpa`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterNotes {
    /// Node fit.
    pub node_fit: Option<NodeFitNote>,
    /// `ResourcesLeftToHPA` message.
    pub left_to_hpa: Option<String>,
}

/// The HPA and node-fit post-processing of one VPA's engine recommendation, in that order: resources an
/// HPA scales on by utilization are taken out ([`crate::hpa`]), then the targets are capped so the pods
/// fit the largest node or NodePool instance they may land on ([`crate::node_fit`]; `shapes` are the
/// VPA's pods' distinct shapes; `policy` is its `resourcePolicy`, whose `minAllowed` node fit never goes
/// below). The one place both are decided: the webhook, the updater and the previews all size from the
/// published result.
pub fn size_within_cluster(
    recs: &mut [ContainerRecommendation],
    view: &FitView,
    target: Option<(&str, Option<&str>, &str, &str)>,
    shapes: &[&PodShape],
    policy: Option<&PodResourcePolicy>,
) -> ClusterNotes {
    let mut notes = ClusterNotes::default();
    if view.hpa_coherence
        && let Some((namespace, api_version, kind, name)) = target
        && let Some(left) = left_to_hpa(
            view.hpas_of(namespace, kind, name).iter().map(|h| &**h),
            namespace,
            api_version,
            kind,
            name,
        )
    {
        leave_to_hpa(recs, &left);
        notes.left_to_hpa = Some(left.message());
    }
    if !view.candidates.is_empty() && !shapes.is_empty() {
        let floor = |container: &str, r: Resource| min_allowed(policy, container, r);
        // The pod-level row (docs/pod-level-resources.md) is not a container: node fit sizes the containers,
        // whose sum the envelope follows.
        let containers = match recs.iter().position(|r| r.container_name == POD_ROW) {
            Some(i) => {
                let last = recs.len() - 1;
                recs.swap(i, last);
                Some((i, last))
            }
            None => None,
        };
        let end = containers.map_or(recs.len(), |(_, last)| last);
        let outcome = fit_all(
            &mut recs[..end],
            shapes,
            |p| view.candidates.frontier(p),
            &floor,
        );
        if let Some((i, last)) = containers {
            recs.swap(i, last);
        }
        notes.node_fit = NodeFitNote::of(&outcome);
    }
    notes
}

/// A container policy's `minAllowed` for `r` in millicores or bytes; 0 when unset or unreadable (an
/// unreadable policy is reported as `ConfigUnsupported` before node fit runs).
fn min_allowed(policy: Option<&PodResourcePolicy>, container: &str, r: Resource) -> i64 {
    let policy = tailor_core::policy::container_policy(policy, container);
    let Ok(bounds) = IntegerBounds::compile(policy, &ResourceList::new()) else {
        return 0;
    };
    match r {
        Resource::Cpu => bounds.min.cpu,
        Resource::Memory => bounds.min.memory,
    }
    .unwrap_or(0)
}
