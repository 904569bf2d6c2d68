//! Node fit (docs/decisions/node-fit.md): a VPA's per-container targets capped so that its pods, all containers together,
//! fit the largest node they can schedule on. Pure: the pods' shapes ([`PodShape`], read from the slim pods)
//! and the places a pod may land ([`Candidate`]: the cluster's nodes, and the largest instances Karpenter
//! NodePools allow, see [`crate::karpenter`]) in; the capped recommendation and what capped it out.
//!
//! A pod can land on a candidate when its `nodeSelector` and required node affinity match the candidate's
//! labels and its tolerations tolerate the candidate's `NoSchedule` / `NoExecute` taints. A pod's request
//! on a node is what the scheduler counts: the larger of (the regular containers plus every native sidecar)
//! and (for each init container, itself plus the sidecars started before it), plus the pod overhead.
//! Containers with a recommendation count at their target, the others at their current request.
//!
//! When no candidate holds the pod at its targets, the candidate that holds the largest share of them is
//! chosen and, per resource that does not fit, every recommended container's target is scaled down by the
//! same factor; `lowerBound` and `upperBound` are then held at or below the new target (so the updater does
//! not evict a pod for being at it). `uncappedTarget` is left alone. No candidate known (a cluster whose
//! nodes cannot be read, or a conformance vector): no cap.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, Toleration as ApiToleration,
};
use tailor_engine::estimate::ContainerRecommendation;

use crate::pod_spec::{SlimContainer, SlimPodSpec};

/// At most this many `nodeSelector` entries, affinity terms, expressions per term, values per expression,
/// tolerations, taints or containers are read from one object; a pod past any of them gets no shape (and
/// its VPA no cap), a node or NodePool past them is not a candidate.
pub const MAX_ITEMS: usize = 64;

/// Requests: millicores and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Req {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
}

impl Req {
    fn get(&self, r: Resource) -> i64 {
        match r {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
        }
    }

    /// The requests of a `cpu`/`memory` map (absent = 0; an unreadable value is an error).
    pub fn of(
        map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    ) -> Result<Req, ShapeError> {
        let get = |name: &str| -> Result<i64, ShapeError> {
            match map.and_then(|m| m.get(name)) {
                None => Ok(0),
                Some(q) => tailor_core::quantity::amount(name, q)
                    .map(|v| v.max(0))
                    .map_err(|e| ShapeError::Quantity(format!("{name} {:?}: {e}", q.0))),
            }
        };
        Ok(Req {
            cpu: get("cpu")?,
            memory: get("memory")?,
        })
    }
}

/// The two resources node fit caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// CPU (millicores).
    Cpu,
    /// Memory (bytes).
    Memory,
}

impl Resource {
    /// Both, in order.
    pub const ALL: [Resource; 2] = [Resource::Cpu, Resource::Memory];

    /// The API name.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }

    fn get(self, r: &tailor_engine::policy::Resources) -> Option<i64> {
        match self {
            Resource::Cpu => r.cpu,
            Resource::Memory => r.memory,
        }
    }

    fn slot(self, r: &mut tailor_engine::policy::Resources) -> &mut Option<i64> {
        match self {
            Resource::Cpu => &mut r.cpu,
            Resource::Memory => &mut r.memory,
        }
    }
}

/// Why a pod has no shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A request or overhead is not a quantity.
    #[error("unreadable quantity: {0}")]
    Quantity(String),
    /// More entries than [`MAX_ITEMS`] somewhere.
    #[error("{0}: more than {MAX_ITEMS} entries")]
    TooMany(&'static str),
}

/// A node selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `In`.
    In,
    /// `NotIn`.
    NotIn,
    /// `Exists`.
    Exists,
    /// `DoesNotExist`.
    DoesNotExist,
    /// `Gt` (integer).
    Gt,
    /// `Lt` (integer).
    Lt,
}

impl Op {
    /// Parses an operator; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "In" => Op::In,
            "NotIn" => Op::NotIn,
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            "Gt" => Op::Gt,
            "Lt" => Op::Lt,
            _ => return None,
        })
    }
}

/// One `key op values` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Expr {
    /// Label key (or field, for `matchFields`).
    pub key: Box<str>,
    /// Operator; `None` for an unknown one (matches nothing, as the scheduler treats an invalid selector).
    pub op: Option<Op>,
    /// Values.
    pub values: Box<[Box<str>]>,
}

impl Expr {
    /// The bounded form of an API requirement.
    pub fn of(r: &NodeSelectorRequirement) -> Result<Expr, ShapeError> {
        let values = r.values.as_deref().unwrap_or_default();
        if values.len() > MAX_ITEMS {
            return Err(ShapeError::TooMany("requirement values"));
        }
        Ok(Expr {
            key: r.key.as_str().into(),
            op: Op::parse(&r.operator),
            values: values.iter().map(|v| v.as_str().into()).collect(),
        })
    }
}

/// One node selector term: its expressions and fields, ANDed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Term {
    /// `matchExpressions`.
    pub exprs: Box<[Expr]>,
    /// `matchFields` (only `metadata.name` exists).
    pub fields: Box<[Expr]>,
}

/// A toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates every taint.
    pub key: Box<str>,
    /// Operator `Exists` (else `Equal`).
    pub exists: bool,
    /// Value (for `Equal`).
    pub value: Box<str>,
    /// Effect; empty tolerates every effect.
    pub effect: Box<str>,
}

impl Toleration {
    fn of(t: &ApiToleration) -> Toleration {
        Toleration {
            key: t.key.as_deref().unwrap_or_default().into(),
            exists: t.operator.as_deref() == Some("Exists"),
            value: t.value.as_deref().unwrap_or_default().into(),
            effect: t.effect.as_deref().unwrap_or_default().into(),
        }
    }

    /// Whether it tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && *self.effect != *taint.effect {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        *self.key == *taint.key && (self.exists || *self.value == *taint.value)
    }
}

/// A taint of a node or of a NodePool's template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// Whether the scheduler keeps pods that do not tolerate it away.
    pub fn repels(&self) -> bool {
        self.effect == "NoSchedule" || self.effect == "NoExecute"
    }
}

/// Where a pod may go: its node selector, required node affinity and tolerations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Placement {
    /// `nodeSelector`.
    pub node_selector: Box<[(Box<str>, Box<str>)]>,
    /// Required node affinity terms (ORed); `None` = no requirement.
    pub required: Option<Box<[Term]>>,
    /// Tolerations.
    pub tolerations: Box<[Toleration]>,
}

fn bounded<'a, T>(items: &'a [T], what: &'static str) -> Result<&'a [T], ShapeError> {
    if items.len() > MAX_ITEMS {
        Err(ShapeError::TooMany(what))
    } else {
        Ok(items)
    }
}

impl Placement {
    fn of(spec: &SlimPodSpec) -> Result<Placement, ShapeError> {
        let selector = spec.node_selector.as_ref();
        if selector.is_some_and(|s| s.len() > MAX_ITEMS) {
            return Err(ShapeError::TooMany("nodeSelector"));
        }
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(terms_of)
            .transpose()?;
        let tolerations = bounded(
            spec.tolerations.as_deref().unwrap_or_default(),
            "tolerations",
        )?;
        Ok(Placement {
            node_selector: selector
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
            required,
            tolerations: tolerations.iter().map(Toleration::of).collect(),
        })
    }
}

fn terms_of(s: &NodeSelector) -> Result<Box<[Term]>, ShapeError> {
    bounded(&s.node_selector_terms, "nodeSelectorTerms")?
        .iter()
        .map(|t| {
            let exprs = bounded(
                t.match_expressions.as_deref().unwrap_or_default(),
                "matchExpressions",
            )?;
            let fields = bounded(t.match_fields.as_deref().unwrap_or_default(), "matchFields")?;
            Ok(Term {
                exprs: exprs.iter().map(Expr::of).collect::<Result<_, _>>()?,
                fields: fields.iter().map(Expr::of).collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

/// An init container's requests, and whether it is a native sidecar (runs beside the regular containers).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InitReq {
    /// Requests.
    pub req: Req,
    /// `restartPolicy: Always`.
    pub sidecar: bool,
}

/// What node fit reads of one pod: placement, requests per container, pod overhead (and the limits, which
/// the dashboard shows). Pods of one ReplicaSet share one (the pod store interns them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodShape {
    /// Where it may go.
    pub placement: Placement,
    /// Regular containers and their current requests.
    pub containers: Box<[(Box<str>, Req)]>,
    /// The regular containers' limits, in the same order (0: none; the dashboard shows them).
    pub limits: Box<[Req]>,
    /// Init containers in order.
    pub init: Box<[InitReq]>,
    /// `spec.overhead`.
    pub overhead: Req,
}

impl PodShape {
    /// The shape of a pod with `spec`; an error when something is unreadable or past [`MAX_ITEMS`].
    pub fn of(spec: &SlimPodSpec) -> Result<PodShape, ShapeError> {
        let requests =
            |c: &SlimContainer| Req::of(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
        Ok(PodShape {
            placement: Placement::of(spec)?,
            containers: bounded(&spec.containers, "containers")?
                .iter()
                .map(|c| Ok((c.name.as_str().into(), requests(c)?)))
                .collect::<Result<_, ShapeError>>()?,
            limits: (spec.containers.iter())
                .map(|c| Req::of(c.resources.as_ref().and_then(|r| r.limits.as_ref())))
                .collect::<Result<_, ShapeError>>()?,
            init: bounded(&spec.init_containers, "initContainers")?
                .iter()
                .map(|c| {
                    Ok(InitReq {
                        req: requests(c)?,
                        sidecar: c.restart_policy.as_deref() == Some("Always"),
                    })
                })
                .collect::<Result<_, ShapeError>>()?,
            overhead: Req::of(spec.overhead.as_ref())?,
        })
    }
}

/// What a candidate's label key can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Domain {
    /// Exactly this value (a node's label).
    Is(String),
    /// One of these (a NodePool requirement `In`).
    OneOf(BTreeSet<String>),
    /// Any value but these (a NodePool requirement `NotIn`, `Exists`, or a well-known label the NodePool
    /// leaves open).
    AnyBut(BTreeSet<String>),
}

impl Domain {
    fn any(&self, f: impl Fn(&str) -> bool, open: bool) -> bool {
        match self {
            Domain::Is(v) => f(v),
            Domain::OneOf(s) => s.iter().any(|v| f(v)),
            Domain::AnyBut(_) => open,
        }
    }
}

/// Whether the candidate whose label `key` has domain `d` (`None` = absent) can satisfy `e`.
fn satisfies(d: Option<&Domain>, e: &Expr) -> bool {
    let Some(op) = e.op else {
        return false;
    };
    let number = |v: &str| v.parse::<i64>().ok();
    let bound = e.values.first().and_then(|v| number(v));
    match (op, d) {
        (Op::Exists, d) => d.is_some(),
        (Op::DoesNotExist, d) => d.is_none(),
        (Op::In, None) | (Op::Gt, None) | (Op::Lt, None) => false,
        (Op::NotIn, None) => true,
        (Op::In, Some(Domain::AnyBut(ex))) => e.values.iter().any(|v| !ex.contains(&**v)),
        (Op::In, Some(d)) => d.any(|v| e.values.iter().any(|x| &**x == v), true),
        (Op::NotIn, Some(d)) => d.any(|v| !e.values.iter().any(|x| &**x == v), true),
        (Op::Gt, Some(d)) => {
            bound.is_some_and(|b| d.any(|v| number(v).is_some_and(|n| n > b), true))
        }
        (Op::Lt, Some(d)) => {
            bound.is_some_and(|b| d.any(|v| number(v).is_some_and(|n| n < b), true))
        }
    }
}

/// Whether a label with value `v` satisfies `e`.
pub fn satisfies_value(v: &str, e: &Expr) -> bool {
    satisfies(Some(&Domain::Is(v.to_string())), e)
}

/// Whether a candidate is a node or a NodePool's instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateKind {
    /// A node of the cluster.
    Node,
    /// The largest instance a Karpenter NodePool may launch.
    NodePool,
}

/// A place a pod may land: a node, or the largest node a NodePool may launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Node or NodePool.
    pub kind: CandidateKind,
    /// The node's or NodePool's name.
    pub name: String,
    /// For a NodePool, the instance type.
    pub instance: Option<String>,
    /// Labels (a node's are all [`Domain::Is`]).
    pub labels: BTreeMap<String, Domain>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Req,
}

impl Candidate {
    /// A node with these labels, taints and allocatable requests.
    pub fn node(
        name: &str,
        labels: &BTreeMap<String, String>,
        taints: Vec<Taint>,
        allocatable: Req,
    ) -> Candidate {
        Candidate {
            kind: CandidateKind::Node,
            name: name.to_string(),
            instance: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.clone(), Domain::Is(v.clone())))
                .collect(),
            taints,
            allocatable,
        }
    }

    /// How a condition names it: `node N` or `NodePool P (instance type I)`.
    pub fn describe(&self) -> String {
        match (self.kind, &self.instance) {
            (CandidateKind::Node, _) => format!("node {}", self.name),
            (CandidateKind::NodePool, Some(i)) => {
                format!("NodePool {} (instance type {i})", self.name)
            }
            (CandidateKind::NodePool, None) => format!("NodePool {}", self.name),
        }
    }

    /// Whether a pod placed by `p` can land here.
    pub fn admits(&self, p: &Placement) -> bool {
        let selector_ok = p.node_selector.iter().all(|(k, v)| {
            satisfies(
                self.labels.get(&**k),
                &Expr {
                    key: k.clone(),
                    op: Some(Op::In),
                    values: Box::new([v.clone()]),
                },
            )
        });
        if !selector_ok {
            return false;
        }
        if let Some(terms) = &p.required {
            let name = match self.kind {
                CandidateKind::Node => Some(Domain::Is(self.name.clone())),
                // A launched node's name is not known: any.
                CandidateKind::NodePool => Some(Domain::AnyBut(BTreeSet::new())),
            };
            let term_ok = |t: &Term| {
                (!t.exprs.is_empty() || !t.fields.is_empty())
                    && t.exprs
                        .iter()
                        .all(|e| satisfies(self.labels.get(&*e.key), e))
                    && t.fields
                        .iter()
                        .all(|e| &*e.key == "metadata.name" && satisfies(name.as_ref(), e))
            };
            if !terms.iter().any(term_ok) {
                return false;
            }
        }
        self.taints
            .iter()
            .filter(|t| t.repels())
            .all(|t| p.tolerations.iter().any(|tol| tol.tolerates(t)))
    }
}

/// The candidates a pod placed by `p` can land on, without those another of them is at least as large as
/// in both resources (the first of equal ones is kept).
pub fn frontier<'a>(p: &Placement, candidates: &'a [Candidate]) -> Vec<&'a Candidate> {
    frontier_indices(p, candidates)
        .into_iter()
        .filter_map(|i| candidates.get(i))
        .collect()
}

/// [`frontier`] as positions in `candidates`.
pub fn frontier_indices(p: &Placement, candidates: &[Candidate]) -> Vec<usize> {
    let eligible: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].admits(p))
        .collect();
    eligible
        .iter()
        .copied()
        .filter(|&i| {
            let b = candidates[i].allocatable;
            !eligible.iter().any(|&j| {
                let a = candidates[j].allocatable;
                let ge = a.cpu >= b.cpu && a.memory >= b.memory;
                let gt = a.cpu > b.cpu || a.memory > b.memory;
                ge && (gt || j < i)
            })
        })
        .collect()
}

/// One target lowered by node fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lowered {
    /// Container.
    pub container: String,
    /// Resource.
    pub resource: Resource,
    /// Target before.
    pub from: i64,
    /// Target after.
    pub to: i64,
    /// The container policy's `minAllowed` kept the target above what fits (`to` is that floor).
    pub held_by_min_allowed: bool,
}

/// What node fit did to one VPA's recommendation.
#[derive(Debug, Clone, PartialEq)]
pub enum FitOutcome {
    /// Nothing known to fit against (no shape, or no candidate in the cluster): no cap.
    Unknown,
    /// The pods fit some candidate at their targets.
    Fits,
    /// Targets lowered to fit `by`.
    Capped {
        /// The candidate (its [`Candidate::describe`]).
        by: String,
        /// Whether it is a node or a NodePool.
        kind: CandidateKind,
        /// Its allocatable requests.
        allocatable: Req,
        /// What was lowered.
        lowered: Vec<Lowered>,
    },
    /// Not even with every recommended container at zero would the pod fit any candidate it may land on
    /// (or it may land on none): targets left alone.
    NoneFits(String),
}

/// The pod's fixed requests (containers without a target for the resource, sidecars, overhead), its
/// recommended total, and its init-phase request, per resource.
fn parts(recs: &[ContainerRecommendation], shape: &PodShape, r: Resource) -> (i64, i64, i64) {
    let sidecars: i64 = shape
        .init
        .iter()
        .filter(|i| i.sidecar)
        .map(|i| i.req.get(r))
        .fold(0, i64::saturating_add);
    let mut fixed = shape.overhead.get(r).saturating_add(sidecars);
    let mut variable = 0i64;
    for (name, req) in shape.containers.iter() {
        match recs
            .iter()
            .find(|c| c.container_name == **name)
            .and_then(|c| r.get(&c.target))
        {
            Some(t) => variable = variable.saturating_add(t.max(0)),
            None => fixed = fixed.saturating_add(req.get(r)),
        }
    }
    let mut before = 0i64;
    let mut init = 0i64;
    for i in shape.init.iter() {
        if i.sidecar {
            before = before.saturating_add(i.req.get(r));
        } else {
            init = init.max(before.saturating_add(i.req.get(r)));
        }
    }
    (fixed, variable, shape.overhead.get(r).saturating_add(init))
}

/// The share (0..=1, as a fraction `num/den`) of the recommended total that fits `a` for resource `r`;
/// `None` when the fixed parts alone do not fit.
fn share(fixed: i64, variable: i64, init: i64, a: i64) -> Option<(i128, i128)> {
    if init > a || fixed > a || (fixed == a && variable > 0) {
        return None;
    }
    if fixed.saturating_add(variable) <= a || variable == 0 {
        return Some((1, 1));
    }
    Some((i128::from(a - fixed), i128::from(variable)))
}

/// A candidate's share per resource, as a fraction `(num, den)`.
type Shares = Vec<(Resource, (i128, i128))>;

/// Caps `recs` (one VPA's recommendation) so that a pod shaped `shape` fits one of `candidates` (already
/// filtered to the ones it may land on: [`frontier`]). See the module documentation. `floor(container,
/// resource)` is the container policy's `minAllowed` (0 when none): the user's explicit floor wins over the
/// node's size, and the outcome names the containers it held up.
pub fn fit(
    recs: &mut [ContainerRecommendation],
    shape: &PodShape,
    candidates: &[&Candidate],
    floor: &dyn Fn(&str, Resource) -> i64,
) -> FitOutcome {
    if candidates.is_empty() {
        return FitOutcome::NoneFits(
            "no node or NodePool admits the pods (node selector, node affinity or taints)".into(),
        );
    }
    let per_resource: Vec<(Resource, (i64, i64, i64))> = Resource::ALL
        .iter()
        .map(|&r| (r, parts(recs, shape, r)))
        .collect();
    let (c, shares) = match best_candidate(&per_resource, candidates) {
        Best::Fits => return FitOutcome::Fits,
        Best::NoFit => {
            return FitOutcome::NoneFits(
                "the pods' other containers, init containers or overhead alone exceed every node they may land on"
                    .into(),
            );
        }
        Best::Candidate(c, shares) => (c, shares),
    };
    FitOutcome::Capped {
        by: c.describe(),
        kind: c.kind,
        allocatable: c.allocatable,
        lowered: cap(recs, shape, shares, floor),
    }
}

/// Which candidate a pod is capped to.
enum Best<'a> {
    /// One candidate takes the whole recommendation: nothing is capped.
    Fits,
    /// None takes even the fixed parts.
    NoFit,
    /// The candidate whose smallest share is the largest, with its shares.
    Candidate(&'a Candidate, Shares),
}

/// The best of `candidates` for a pod whose parts per resource (fixed, variable, init) are `per_resource`:
/// the one with the largest smaller share, or the first that takes everything.
fn best_candidate<'a>(
    per_resource: &[(Resource, (i64, i64, i64))],
    candidates: &[&'a Candidate],
) -> Best<'a> {
    let mut best: Option<(&Candidate, Shares)> = None;
    let mut best_score = (0i128, 1i128);
    for &c in candidates {
        let Some(shares) = candidate_shares(per_resource, c) else {
            continue;
        };
        let score = shares
            .iter()
            .map(|(_, s)| *s)
            .min_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)))
            .unwrap_or((1, 1));
        if score.0 >= score.1 {
            return Best::Fits;
        }
        if best.is_none() || score.0 * best_score.1 > best_score.0 * score.1 {
            best = Some((c, shares));
            best_score = score;
        }
    }
    match best {
        Some((c, shares)) => Best::Candidate(c, shares),
        None => Best::NoFit,
    }
}

/// The candidate's share per resource; `None` when the fixed parts of some resource do not fit it.
fn candidate_shares(per_resource: &[(Resource, (i64, i64, i64))], c: &Candidate) -> Option<Shares> {
    per_resource
        .iter()
        .map(|&(r, (fixed, variable, init))| {
            share(fixed, variable, init, c.allocatable.get(r)).map(|s| (r, s))
        })
        .collect()
}

/// Lowers the targets (and bounds above them) of the shape's containers to their `shares`, never below
/// `floor`; returns what was lowered or held up by the floor.
fn cap(
    recs: &mut [ContainerRecommendation],
    shape: &PodShape,
    shares: Shares,
    floor: &dyn Fn(&str, Resource) -> i64,
) -> Vec<Lowered> {
    let mut lowered = Vec::new();
    for (r, (num, den)) in shares {
        if num >= den {
            continue;
        }
        for rec in recs.iter_mut() {
            if !shape
                .containers
                .iter()
                .any(|(n, _)| **n == *rec.container_name)
            {
                continue;
            }
            let Some(t) = r.get(&rec.target) else {
                continue;
            };
            let fitting = i64::try_from(i128::from(t) * num / den).unwrap_or(t);
            let min_allowed = floor(&rec.container_name, r);
            let to = fitting.max(min_allowed).min(t);
            let held_by_min_allowed = fitting < min_allowed;
            if to < t || held_by_min_allowed {
                lowered.push(Lowered {
                    container: rec.container_name.clone(),
                    resource: r,
                    from: t,
                    to,
                    held_by_min_allowed,
                });
            }
            *r.slot(&mut rec.target) = Some(to);
            for b in [&mut rec.lower_bound, &mut rec.upper_bound] {
                if let Some(v) = r.slot(b).as_mut() {
                    *v = (*v).min(to);
                }
            }
        }
    }
    lowered
}

/// Node fit for one VPA: every distinct pod shape of it (at most [`MAX_SHAPES`], in the order given) caps
/// in turn, so the result fits each; `frontier_of` gives the candidates a placement may land on.
pub fn fit_all<'a>(
    recs: &mut [ContainerRecommendation],
    shapes: &[&PodShape],
    mut frontier_of: impl FnMut(&Placement) -> Vec<&'a Candidate>,
    floor: &dyn Fn(&str, Resource) -> i64,
) -> FitOutcome {
    let mut outcome = FitOutcome::Unknown;
    for shape in shapes.iter().take(MAX_SHAPES) {
        let candidates = frontier_of(&shape.placement);
        match fit(recs, shape, &candidates, floor) {
            FitOutcome::Fits => {
                if outcome == FitOutcome::Unknown {
                    outcome = FitOutcome::Fits;
                }
            }
            FitOutcome::Capped {
                by,
                kind,
                allocatable,
                lowered,
            } => {
                let mut all = match std::mem::replace(&mut outcome, FitOutcome::Unknown) {
                    FitOutcome::Capped { lowered, .. } => lowered,
                    _ => Vec::new(),
                };
                all.extend(lowered);
                outcome = FitOutcome::Capped {
                    by,
                    kind,
                    allocatable,
                    lowered: all,
                };
            }
            n @ FitOutcome::NoneFits(_) => {
                if !matches!(outcome, FitOutcome::Capped { .. }) {
                    outcome = n;
                }
            }
            FitOutcome::Unknown => {}
        }
    }
    outcome
}

/// Distinct pod shapes of one VPA node fit looks at.
pub const MAX_SHAPES: usize = 4;

fn amount(r: Resource, v: i64) -> String {
    tailor_core::quantity::from_amount(r.name(), v).0
}

/// The message of the `CappedToNodeSize` condition for a capped outcome.
pub fn capped_message(by: &str, allocatable: Req, lowered: &[Lowered]) -> String {
    let what: Vec<String> = lowered
        .iter()
        .take(MAX_ITEMS)
        .map(|l| {
            if l.held_by_min_allowed {
                format!(
                    "{} {} kept at {} by minAllowed (the pods do not fit)",
                    l.container,
                    l.resource.name(),
                    amount(l.resource, l.to)
                )
            } else {
                format!(
                    "{} {} {} -> {}",
                    l.container,
                    l.resource.name(),
                    amount(l.resource, l.from),
                    amount(l.resource, l.to)
                )
            }
        })
        .collect();
    format!(
        "target capped to fit {by} (allocatable cpu {}, memory {}): {}",
        amount(Resource::Cpu, allocatable.cpu),
        amount(Resource::Memory, allocatable.memory),
        what.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tailor_engine::policy::Resources;
    use tailor_testkit::fixtures::PodFixture;

    /// No container policy sets `minAllowed`.
    const NO_FLOOR: fn(&str, Resource) -> i64 = |_, _| 0;

    fn rec(name: &str, cpu: i64, memory: i64) -> ContainerRecommendation {
        let r = Resources {
            cpu: Some(cpu),
            memory: Some(memory),
        };
        ContainerRecommendation {
            container_name: name.into(),
            target: r,
            lower_bound: Resources {
                cpu: Some(cpu / 2),
                memory: Some(memory / 2),
            },
            upper_bound: Resources {
                cpu: Some(cpu * 2),
                memory: Some(memory * 2),
            },
            uncapped_target: r,
        }
    }

    fn pod(pod: PodFixture) -> PodShape {
        PodShape::of(&spec_of(pod)).unwrap()
    }

    /// The spec of a pod as the recommender's pod watch decodes it.
    fn spec_of(pod: PodFixture) -> SlimPodSpec {
        serde_json::from_value(pod.spec_json()).unwrap()
    }

    const GI: i64 = 1 << 30;

    fn node(name: &str, cpu: i64, gib: i64) -> Candidate {
        Candidate::node(
            name,
            &BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]),
            Vec::new(),
            Req {
                cpu,
                memory: gib * GI,
            },
        )
    }

    #[test]
    fn a_pod_that_fits_is_left_alone_and_one_that_does_not_is_scaled_to_the_largest_node() {
        let shape = pod(PodFixture::new("ns", "p")
            .container("app", json!({"cpu": "1"}), Value::Null)
            .container("proxy", json!({"cpu": "2", "memory": "1Gi"}), Value::Null));
        let nodes = [node("small", 8_000, 16), node("big", 32_000, 64)];
        let f = frontier(&shape.placement, &nodes);
        assert_eq!(f.len(), 1, "the small node is dominated");
        let mut recs = vec![rec("app", 20_000, 8 * GI)];
        assert_eq!(fit(&mut recs, &shape, &f, &NO_FLOOR), FitOutcome::Fits);
        assert_eq!(recs[0].target.cpu, Some(20_000));

        // 40 cores wanted: the proxy's 2 cores stay, app gets the other 30.
        let mut recs = vec![rec("app", 40_000, 8 * GI)];
        let out = fit(&mut recs, &shape, &f, &NO_FLOOR);
        let FitOutcome::Capped { by, lowered, .. } = &out else {
            panic!("{out:?}")
        };
        assert_eq!(by, "node big");
        assert_eq!(recs[0].target.cpu, Some(30_000));
        assert_eq!(recs[0].target.memory, Some(8 * GI), "memory fits");
        assert_eq!(recs[0].upper_bound.cpu, Some(30_000));
        assert_eq!(recs[0].lower_bound.cpu, Some(20_000));
        assert_eq!(recs[0].uncapped_target.cpu, Some(40_000));
        assert_eq!(lowered.len(), 1);
        assert_eq!(
            capped_message("node big", nodes[1].allocatable, lowered),
            "target capped to fit node big (allocatable cpu 32, memory 68719476736): app cpu 40 -> 30"
        );
    }

    #[test]
    fn two_recommended_containers_share_the_room_in_proportion_and_sidecars_and_overhead_count() {
        let shape = pod(PodFixture::new("ns", "p")
            .spec_fields(json!({"overhead": {"cpu": "500m"}}))
            .init_container(json!({"name": "side", "restartPolicy": "Always",
                                   "resources": {"requests": {"cpu": "1500m"}}}))
            .init_container(json!({"name": "setup", "resources": {"requests": {"cpu": "4"}}}))
            .container_resources("a", Value::Null)
            .container_resources("b", Value::Null));
        let nodes = [node("n", 10_000, 64)];
        let f = frontier(&shape.placement, &nodes);
        let mut recs = vec![rec("a", 12_000, GI), rec("b", 4_000, GI)];
        assert!(matches!(
            fit(&mut recs, &shape, &f, &NO_FLOOR),
            FitOutcome::Capped { .. }
        ));
        // Room: 10 - 0.5 - 1.5 = 8 cores, shared 3:1.
        assert_eq!(recs[0].target.cpu, Some(6_000));
        assert_eq!(recs[1].target.cpu, Some(2_000));

        // An init container larger than the node: nothing can help.
        let shape = pod(PodFixture::new("ns", "p")
            .init_container(json!({"name": "setup", "resources": {"requests": {"cpu": "11"}}}))
            .container_resources("a", Value::Null));
        let mut recs = vec![rec("a", 12_000, GI)];
        assert!(matches!(
            fit(
                &mut recs,
                &shape,
                &frontier(&shape.placement, &nodes),
                &NO_FLOOR
            ),
            FitOutcome::NoneFits(_)
        ));
        assert_eq!(recs[0].target.cpu, Some(12_000));
    }

    #[test]
    fn selectors_affinity_and_taints_choose_the_nodes() {
        let mut tainted = node("gpu", 64_000, 256);
        tainted.taints.push(Taint {
            key: "gpu".into(),
            value: "yes".into(),
            effect: "NoSchedule".into(),
        });
        tainted
            .labels
            .insert("pool".into(), Domain::Is("gpu".into()));
        let mut soft = node("soft", 48_000, 64);
        soft.taints.push(Taint {
            key: "x".into(),
            value: String::new(),
            effect: "PreferNoSchedule".into(),
        });
        let nodes = [node("plain", 16_000, 64), tainted, soft];
        let plain = Placement::default();
        let names = |f: Vec<&Candidate>| f.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(frontier(&plain, &nodes)), ["soft"]);

        let tolerant = pod(PodFixture::new("ns", "p").spec_fields(json!({
            "tolerations": [{"key": "gpu", "operator": "Exists"}]})));
        assert_eq!(names(frontier(&tolerant.placement, &nodes)), ["gpu"]);

        let selected = pod(PodFixture::new("ns", "p").spec_fields(json!({
            "nodeSelector": {"kubernetes.io/hostname": "plain"}})));
        assert_eq!(names(frontier(&selected.placement, &nodes)), ["plain"]);

        let affinity = pod(PodFixture::new("ns", "p").spec_fields(json!({
            "tolerations": [{"operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["plain"]}]}]}}}})));
        assert_eq!(names(frontier(&affinity.placement, &nodes)), ["soft"]);
    }

    #[test]
    fn node_pool_domains_answer_what_some_launched_node_could_satisfy() {
        let e = |op: &str, v: &[&str]| Expr {
            key: "k".into(),
            op: Op::parse(op),
            values: v.iter().map(|s| Box::from(*s)).collect(),
        };
        let one_of = Domain::OneOf(["a".to_string(), "b".to_string()].into());
        assert!(satisfies(Some(&one_of), &e("In", &["b", "c"])));
        assert!(!satisfies(Some(&one_of), &e("In", &["c"])));
        assert!(satisfies(Some(&one_of), &e("NotIn", &["a"])));
        let open = Domain::AnyBut(["a".to_string()].into());
        assert!(!satisfies(Some(&open), &e("In", &["a"])));
        assert!(satisfies(Some(&open), &e("In", &["z"])));
        let cpus = Domain::OneOf(["16".to_string(), "4".to_string()].into());
        assert!(satisfies(Some(&cpus), &e("Gt", &["8"])));
        assert!(!satisfies(Some(&cpus), &e("Lt", &["4"])));
        assert!(!satisfies(None, &e("In", &["a"])));
        assert!(satisfies(None, &e("DoesNotExist", &[])));
        assert!(!satisfies(Some(&one_of), &e("Bogus", &[])));
    }

    #[test]
    fn shapes_past_the_bounds_are_refused() {
        let many: Vec<serde_json::Value> = (0..=MAX_ITEMS)
            .map(|i| json!({"key": format!("k{i}"), "operator": "Exists"}))
            .collect();
        let p = spec_of(PodFixture::new("ns", "p").spec_fields(json!({"tolerations": many})));
        assert_eq!(PodShape::of(&p), Err(ShapeError::TooMany("tolerations")));
        let p =
            spec_of(PodFixture::new("ns", "p").container("a", json!({"cpu": "lots"}), Value::Null));
        assert!(matches!(PodShape::of(&p), Err(ShapeError::Quantity(_))));
    }

    #[test]
    fn every_shape_of_a_vpa_is_fitted() {
        let small = pod(PodFixture::new("ns", "p")
            .container_resources("app", Value::Null)
            .spec_fields(json!({"nodeSelector": {"kubernetes.io/hostname": "small"}})));
        let any = pod(PodFixture::new("ns", "q").container_resources("app", Value::Null));
        let nodes = [node("small", 8_000, 16), node("big", 32_000, 64)];
        let mut recs = vec![rec("app", 12_000, GI)];
        let out = fit_all(
            &mut recs,
            &[&any, &small],
            |p| frontier(p, &nodes),
            &NO_FLOOR,
        );
        assert!(matches!(&out, FitOutcome::Capped { by, .. } if by == "node small"));
        assert_eq!(recs[0].target.cpu, Some(8_000));
        let mut recs = vec![rec("app", 12_000, GI)];
        assert_eq!(
            fit_all(&mut recs, &[], |p| frontier(p, &nodes), &NO_FLOOR),
            FitOutcome::Unknown
        );
    }

    #[test]
    fn min_allowed_wins_over_the_node_and_the_message_says_so() {
        let shape = pod(PodFixture::new("ns", "p").container_resources("app", Value::Null));
        let nodes = [node("big", 32_000, 64)];
        let f = frontier(&shape.placement, &nodes);
        let floor = |c: &str, r: Resource| {
            if c == "app" && r == Resource::Cpu {
                40_000
            } else {
                0
            }
        };
        let mut recs = vec![rec("app", 50_000, GI)];
        let out = fit(&mut recs, &shape, &f, &floor);
        let FitOutcome::Capped { lowered, .. } = &out else {
            panic!("{out:?}")
        };
        assert_eq!(
            recs[0].target.cpu,
            Some(40_000),
            "lowered only to minAllowed"
        );
        assert!(lowered[0].held_by_min_allowed);
        assert_eq!(
            capped_message("node big", nodes[0].allocatable, lowered),
            "target capped to fit node big (allocatable cpu 32, memory 68719476736): app cpu kept at 40 by \
             minAllowed (the pods do not fit)"
        );
        // A floor at the target itself: nothing lowered, the hold is still reported.
        let mut recs = vec![rec("app", 40_000, GI)];
        let out = fit(&mut recs, &shape, &f, &floor);
        assert!(
            matches!(&out, FitOutcome::Capped { lowered, .. } if lowered[0].from == 40_000 && lowered[0].to == 40_000)
        );
        assert_eq!(recs[0].target.cpu, Some(40_000));
    }
}
