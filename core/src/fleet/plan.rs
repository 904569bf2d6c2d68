//! The fleet plan: from the namespaces, their workloads and the VPAs that exist, which VPAs Tailor
//! creates, changes and deletes, and which workloads it leaves out and why.
//!
//! The rules, in order, for each workload of a chosen namespace: a workload being deleted, one whose
//! controller owner is itself a covered kind (that owner gets the VPA), one annotated
//! `tailor.dev/vpa: "false"` or with an annotation that names no mode, one that a VPA Tailor did not
//! create already targets (a Tailor VPA or an upstream `autoscaling.k8s.io` one: never two autoscalers on
//! one workload), and one whose VPA name is taken or too long, get none. Every other gets the VPA
//! [`desired`] builds. Only VPAs Tailor created ([`super::is_managed`]) are ever changed or deleted; a
//! refused namespace policy or a workload annotation that cannot be read leaves what exists as it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;
use tailor_crds::{
    ContainerResourcePolicy, CrossVersionObjectReference, PodResourcePolicy, PodUpdatePolicy,
    UpdateMode, VerticalPodAutoscaler, VerticalPodAutoscalerSpec,
};

use super::namespace_policy::{self, FleetSettings, NamespacePolicy, PolicyError, parse_mode};
use super::{
    MANAGED_BY, MANAGED_BY_LABEL, OPT_IN, OPT_OUT, POLICY_ANNOTATION, PROFILE_KEY, VPA_KEY,
    vpa_name,
};
use crate::policy::DEFAULT_CONTAINER;
use crate::text::cut;

/// A namespace as the plan reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Namespace {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations (only the `tailor.dev/` ones are read).
    pub annotations: BTreeMap<String, String>,
}

/// A workload of a covered kind, as the plan reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// Namespace.
    pub namespace: String,
    /// `apiVersion`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// UID (for the created VPA's owner reference).
    pub uid: String,
    /// Its `tailor.dev/vpa` annotation.
    pub annotation: Option<String>,
    /// The kind of its controller owner, when that owner is of a covered kind.
    pub controlled_by: Option<String>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// The fields of a VPA the fleet writes, compared to tell whether a created VPA needs changing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnedFields {
    target: Option<CrossVersionObjectReference>,
    update_policy: Option<PodUpdatePolicy>,
    resource_policy: Option<PodResourcePolicy>,
    profile: Option<String>,
    policy: Option<String>,
}

impl OwnedFields {
    /// What the fleet owns of a VPA with this spec and these annotations.
    pub fn of(spec: &VerticalPodAutoscalerSpec, annotations: &BTreeMap<String, String>) -> Self {
        OwnedFields {
            target: spec.target_ref.clone(),
            update_policy: spec.update_policy.clone(),
            resource_policy: spec.resource_policy.clone(),
            profile: annotations.get(PROFILE_KEY).cloned(),
            policy: annotations.get(POLICY_ANNOTATION).cloned(),
        }
    }
}

/// A Tailor VPA that exists.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExistingVpa {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.targetRef`.
    pub target: Option<CrossVersionObjectReference>,
    /// What the fleet owns of it, when the fleet created it ([`super::is_managed`]); `None` for a user's.
    pub managed: Option<OwnedFields>,
}

/// The target of an upstream `autoscaling.k8s.io` VPA.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpstreamTarget {
    /// Namespace.
    pub namespace: String,
    /// The upstream VPA's name.
    pub vpa: String,
    /// `spec.targetRef.kind`.
    pub kind: String,
    /// `spec.targetRef.name`.
    pub name: String,
}

/// Whether a VPA is created or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Change {
    /// It does not exist yet.
    Create,
    /// It exists and differs from what the policy says.
    Update,
}

/// A VPA to create or change (by server-side apply).
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    /// The whole object as the fleet writes it.
    pub vpa: VerticalPodAutoscaler,
    /// Create or change.
    pub change: Change,
    /// The workload's kind.
    pub kind: String,
    /// The workload's name.
    pub workload: String,
}

/// Why a workload gets no VPA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum SkipReason {
    /// Annotated `tailor.dev/vpa: "false"`.
    OptedOut,
    /// Its `tailor.dev/vpa` annotation names no mode.
    InvalidAnnotation,
    /// A Tailor VPA the fleet did not create targets it.
    TargetedByVPA,
    /// An upstream `autoscaling.k8s.io` VPA targets it.
    TargetedByUpstreamVPA,
    /// Its controller owner is a covered kind, which gets the VPA.
    ControlledByWorkload,
    /// A VPA the fleet did not create has the name the fleet would give.
    NameTaken,
    /// The name the fleet would give is longer than a name may be.
    NameTooLong,
    /// It is being deleted.
    Deleting,
}

impl SkipReason {
    /// The reason as a metric label and an Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::OptedOut => "OptedOut",
            SkipReason::InvalidAnnotation => "InvalidAnnotation",
            SkipReason::TargetedByVPA => "TargetedByVPA",
            SkipReason::TargetedByUpstreamVPA => "TargetedByUpstreamVPA",
            SkipReason::ControlledByWorkload => "ControlledByWorkload",
            SkipReason::NameTaken => "NameTaken",
            SkipReason::NameTooLong => "NameTooLong",
            SkipReason::Deleting => "Deleting",
        }
    }
}

/// A workload left out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skip {
    /// Namespace.
    pub namespace: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Why.
    pub reason: SkipReason,
    /// In words, naming what decided it.
    pub detail: String,
}

/// Why a created VPA is deleted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum DeleteReason {
    /// Its namespace is no longer chosen (label removed, or no longer selected).
    NamespaceNotChosen,
    /// Its workload no longer exists.
    WorkloadGone,
    /// Its workload gets a VPA under another name (a leftover of an older naming).
    Replaced,
    /// Its workload is now left out.
    Skipped(SkipReason),
}

/// A created VPA to delete.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delete {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why.
    pub reason: DeleteReason,
}

/// A namespace whose policy is refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    /// The namespace.
    pub namespace: String,
    /// Why, naming the label or annotation.
    pub message: String,
}

/// What the fleet does now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetPlan {
    /// VPAs to create or change.
    pub apply: Vec<Apply>,
    /// Created VPAs to delete.
    pub delete: Vec<Delete>,
    /// Workloads of chosen namespaces left out.
    pub skipped: Vec<Skip>,
    /// Namespaces whose policy is refused.
    pub refused: Vec<Refusal>,
    /// Created VPAs there will be once the plan is done, by mode.
    pub by_mode: BTreeMap<String, usize>,
}

/// (namespace, kind, name) of a workload or a target.
type TargetKey = (String, String, String);

/// The API group of an `apiVersion` (empty for the core group).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The VPAs that exist, indexed the ways the plan looks them up.
struct Existing<'a> {
    /// By namespace and name.
    by_name: HashMap<(&'a str, &'a str), &'a ExistingVpa>,
    /// Users' VPAs by target, with the target's `apiVersion`.
    users: HashMap<TargetKey, Vec<&'a ExistingVpa>>,
    /// Upstream VPAs by target.
    upstream: HashMap<TargetKey, &'a str>,
}

impl<'a> Existing<'a> {
    fn new(vpas: &'a [ExistingVpa], upstream: &'a [UpstreamTarget]) -> Self {
        let mut e = Existing {
            by_name: HashMap::new(),
            users: HashMap::new(),
            upstream: HashMap::new(),
        };
        for v in vpas {
            e.by_name.insert((&v.namespace, &v.name), v);
            if let (None, Some(t)) = (&v.managed, &v.target) {
                let key = (v.namespace.clone(), t.kind.clone(), t.name.clone());
                e.users.entry(key).or_default().push(v);
            }
        }
        for u in upstream {
            let key = (u.namespace.clone(), u.kind.clone(), u.name.clone());
            let name = e.upstream.entry(key).or_insert(&u.vpa);
            *name = (*name).min(u.vpa.as_str());
        }
        e
    }

    /// The user's VPA (in name order, the first) that targets `w` (a target's `apiVersion`, when given,
    /// must name `w`'s group).
    fn user_vpa(&self, w: &Workload) -> Option<&'a ExistingVpa> {
        let key = (w.namespace.clone(), w.kind.clone(), w.name.clone());
        (self.users.get(&key)?.iter())
            .filter(|v| {
                let target = v.target.as_ref().and_then(|t| t.api_version.as_deref());
                target.is_none_or(|a| group(a) == group(&w.api_version))
            })
            .min_by_key(|v| &v.name)
            .copied()
    }
}

/// The plan for `namespaces` and their `workloads`, given the Tailor VPAs and upstream VPA targets that
/// exist.
pub fn plan(
    namespaces: &[Namespace],
    workloads: &[Workload],
    vpas: &[ExistingVpa],
    upstream: &[UpstreamTarget],
    settings: &FleetSettings,
) -> FleetPlan {
    let existing = Existing::new(vpas, upstream);
    let mut by_namespace: HashMap<&str, Vec<&Workload>> = HashMap::new();
    for w in workloads {
        by_namespace.entry(&w.namespace).or_default().push(w);
    }
    let mut out = FleetPlan::default();
    let mut seen = Seen {
        present: (workloads.iter())
            .map(|w| (w.namespace.clone(), w.kind.clone(), w.name.clone()))
            .collect(),
        ..Seen::default()
    };
    let mut sorted: Vec<&Namespace> = namespaces.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for ns in sorted {
        match namespace_policy::read(ns, settings) {
            Ok(None) => {}
            Ok(Some(policy)) => {
                seen.chosen.insert(ns.name.clone());
                let mut list = by_namespace.remove(ns.name.as_str()).unwrap_or_default();
                list.sort_by(|a, b| {
                    (&a.kind, &a.name, &a.api_version).cmp(&(&b.kind, &b.name, &b.api_version))
                });
                let mut named = BTreeSet::new();
                for w in list {
                    match decide(w, &policy, &existing, &named) {
                        Decision::Want { name, apply } => {
                            out.apply.extend(apply.map(|a| *a));
                            named.insert(name.clone());
                            seen.keep.insert((w.namespace.clone(), name));
                        }
                        Decision::Skip(skip) => {
                            let key = (w.namespace.clone(), w.kind.clone(), w.name.clone());
                            seen.skipped.insert(key, skip.reason);
                            out.skipped.push(skip);
                        }
                    }
                }
            }
            Err(e) => {
                seen.frozen.insert(ns.name.clone());
                out.refused.push(Refusal {
                    namespace: ns.name.clone(),
                    message: refusal_message(&ns.name, &e),
                });
            }
        }
    }
    deletions(vpas, &seen, &mut out);
    for a in &out.apply {
        *out.by_mode
            .entry(crate::policy::update_mode(&a.vpa.spec).to_string())
            .or_default() += 1;
    }
    out
}

/// What the pass over the namespaces found.
#[derive(Default)]
struct Seen {
    /// Chosen namespaces.
    chosen: BTreeSet<String>,
    /// Namespaces whose policy is refused: their created VPAs stay as they are.
    frozen: BTreeSet<String>,
    /// Created VPAs that stay (namespace, name).
    keep: BTreeSet<(String, String)>,
    /// Why each workload of a chosen namespace was left out.
    skipped: HashMap<TargetKey, SkipReason>,
    /// Every workload.
    present: BTreeSet<TargetKey>,
}

/// The created VPAs to delete (those no rule keeps), and the count by mode of those that stay unchanged.
fn deletions(vpas: &[ExistingVpa], seen: &Seen, out: &mut FleetPlan) {
    let applied: BTreeSet<(&str, &str)> = (out.apply.iter())
        .filter_map(|a| {
            Some((
                a.vpa.metadata.namespace.as_deref()?,
                a.vpa.metadata.name.as_deref()?,
            ))
        })
        .collect();
    let mut by_mode = BTreeMap::new();
    let mut delete = Vec::new();
    for v in vpas {
        let Some(owned) = &v.managed else { continue };
        let target =
            (v.target.as_ref()).map(|t| (v.namespace.clone(), t.kind.clone(), t.name.clone()));
        let skipped = target.as_ref().and_then(|k| seen.skipped.get(k)).copied();
        let stays = seen.keep.contains(&(v.namespace.clone(), v.name.clone()))
            || seen.frozen.contains(&v.namespace)
            // An unreadable workload annotation leaves the VPA as it is.
            || (seen.chosen.contains(&v.namespace) && skipped == Some(SkipReason::InvalidAnnotation));
        if stays {
            if !applied.contains(&(v.namespace.as_str(), v.name.as_str())) {
                *by_mode.entry(mode_of(owned)).or_default() += 1;
            }
            continue;
        }
        let reason = match skipped {
            _ if !seen.chosen.contains(&v.namespace) => DeleteReason::NamespaceNotChosen,
            Some(reason) => DeleteReason::Skipped(reason),
            None if target.as_ref().is_some_and(|t| seen.present.contains(t)) => {
                DeleteReason::Replaced
            }
            None => DeleteReason::WorkloadGone,
        };
        delete.push(Delete {
            namespace: v.namespace.clone(),
            name: v.name.clone(),
            reason,
        });
    }
    out.delete = delete;
    out.by_mode = by_mode;
}

fn mode_of(owned: &OwnedFields) -> String {
    let mode = owned
        .update_policy
        .as_ref()
        .and_then(|p| p.update_mode.clone());
    mode.map_or_else(|| "Recreate".to_owned(), |m| m.to_string())
}

fn refusal_message(namespace: &str, e: &PolicyError) -> String {
    format!(
        "namespace {namespace}: fleet policy refused, nothing created from it and its VPAs left as they \
         are: {e}"
    )
}

enum Decision {
    /// The workload gets the VPA `name`: what to write, if anything.
    Want {
        /// The VPA's name.
        name: String,
        /// What to write.
        apply: Option<Box<Apply>>,
    },
    /// The workload gets none.
    Skip(Skip),
}

fn decide(
    w: &Workload,
    policy: &NamespacePolicy,
    existing: &Existing<'_>,
    named: &BTreeSet<String>,
) -> Decision {
    let skip = |(reason, detail): (SkipReason, String)| {
        Decision::Skip(Skip {
            namespace: w.namespace.clone(),
            kind: w.kind.clone(),
            name: w.name.clone(),
            reason,
            detail,
        })
    };
    let (mode, overridden) = match mode_of_workload(w, policy) {
        Ok(m) => m,
        Err(why) => return skip(why),
    };
    if let Some(why) = covered_elsewhere(w, existing) {
        return skip(why);
    }
    let name = match free_name(w, existing, named) {
        Ok(n) => n,
        Err(why) => return skip(why),
    };
    let mut source = policy.describe();
    if overridden {
        source.push_str(&format!("; workload annotation {VPA_KEY}={mode}"));
    }
    let vpa = desired(w, &name, policy, mode, &source);
    let found = existing.by_name.get(&(w.namespace.as_str(), name.as_str()));
    let change = match found.and_then(|v| v.managed.as_ref()) {
        None => Some(Change::Create),
        Some(owned) => {
            let annotations = vpa.metadata.annotations.clone().unwrap_or_default();
            (owned != &OwnedFields::of(&vpa.spec, &annotations)).then_some(Change::Update)
        }
    };
    let apply = change.map(|change| {
        Box::new(Apply {
            vpa,
            change,
            kind: w.kind.clone(),
            workload: w.name.clone(),
        })
    });
    Decision::Want { name, apply }
}

/// The workload's mode (and whether its annotation set it), or why it gets no VPA: being deleted,
/// controlled by a covered kind, opted out, or an annotation that names no mode.
fn mode_of_workload(
    w: &Workload,
    policy: &NamespacePolicy,
) -> Result<(UpdateMode, bool), (SkipReason, String)> {
    if w.deleting {
        return Err((SkipReason::Deleting, "being deleted".into()));
    }
    if let Some(owner) = &w.controlled_by {
        let detail = format!("controlled by a {owner}, which gets the VPA");
        return Err((SkipReason::ControlledByWorkload, detail));
    }
    match w.annotation.as_deref().map(str::trim) {
        None | Some(OPT_IN) => Ok((policy.mode.clone(), false)),
        Some(OPT_OUT) => Err((
            SkipReason::OptedOut,
            format!("annotated {VPA_KEY}: \"false\""),
        )),
        Some(v) => parse_mode(v).map(|m| (m, true)).ok_or_else(|| {
            let detail = format!(
                "annotation {VPA_KEY}={:?} is neither \"false\" nor a mode (one of {}); its VPA, if any, is \
                 left as it is",
                cut(v, 64),
                namespace_policy::MODES.join(", ")
            );
            (SkipReason::InvalidAnnotation, detail)
        }),
    }
}

/// Why another autoscaler covers `w` already: a Tailor VPA the fleet did not create, or an upstream one.
fn covered_elsewhere(w: &Workload, existing: &Existing<'_>) -> Option<(SkipReason, String)> {
    if let Some(v) = existing.user_vpa(w) {
        let detail = format!("Tailor VPA {} already targets it", v.name);
        return Some((SkipReason::TargetedByVPA, detail));
    }
    let key = (w.namespace.clone(), w.kind.clone(), w.name.clone());
    let up = existing.upstream.get(&key)?;
    let detail = format!("upstream VPA {up} (autoscaling.k8s.io) already targets it");
    Some((SkipReason::TargetedByUpstreamVPA, detail))
}

/// The name of `w`'s VPA, or why there is none: too long, held by a VPA the fleet did not create, or
/// given already in this plan (`named`: a kind of the same name in another group).
fn free_name(
    w: &Workload,
    existing: &Existing<'_>,
    named: &BTreeSet<String>,
) -> Result<String, (SkipReason, String)> {
    let Some(name) = vpa_name(&w.kind, &w.name) else {
        let detail = format!(
            "its VPA's name would be longer than {} bytes",
            super::MAX_NAME_LEN
        );
        return Err((SkipReason::NameTooLong, detail));
    };
    let found = existing.by_name.get(&(w.namespace.as_str(), name.as_str()));
    if let Some(v) = found.filter(|v| v.managed.is_none()) {
        let detail = format!("a VPA named {} that Tailor did not create exists", v.name);
        return Err((SkipReason::NameTaken, detail));
    }
    if named.contains(&name) {
        let detail = format!("another workload of this namespace gets the VPA named {name}");
        return Err((SkipReason::NameTaken, detail));
    }
    Ok(name)
}

/// The VPA the fleet writes for `w`: its target, mode and the namespace's defaults, the managed-by label,
/// the policy annotation and an owner reference to the workload (so it goes when the workload goes).
pub fn desired(
    w: &Workload,
    name: &str,
    policy: &NamespacePolicy,
    mode: UpdateMode,
    source: &str,
) -> VerticalPodAutoscaler {
    let mut annotations = BTreeMap::from([(POLICY_ANNOTATION.to_owned(), source.to_owned())]);
    if let Some(p) = &policy.profile {
        annotations.insert(PROFILE_KEY.to_owned(), p.clone());
    }
    let container = ContainerResourcePolicy {
        container_name: Some(DEFAULT_CONTAINER.to_owned()),
        min_allowed: (!policy.min_allowed.is_empty()).then(|| policy.min_allowed.clone()),
        max_allowed: (!policy.max_allowed.is_empty()).then(|| policy.max_allowed.clone()),
        controlled_values: policy.controlled_values.clone(),
        ..ContainerResourcePolicy::default()
    };
    let has_defaults = container.min_allowed.is_some()
        || container.max_allowed.is_some()
        || container.controlled_values.is_some();
    VerticalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(w.namespace.clone()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_owned(),
                MANAGED_BY.to_owned(),
            )])),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: w.api_version.clone(),
                kind: w.kind.clone(),
                name: w.name.clone(),
                uid: w.uid.clone(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: VerticalPodAutoscalerSpec {
            target_ref: Some(CrossVersionObjectReference {
                api_version: Some(w.api_version.clone()),
                kind: w.kind.clone(),
                name: w.name.clone(),
            }),
            update_policy: Some(PodUpdatePolicy {
                update_mode: Some(mode),
                min_replicas: policy.min_replicas,
                ..PodUpdatePolicy::default()
            }),
            resource_policy: has_defaults.then(|| PodResourcePolicy {
                container_policies: Some(vec![container]),
            }),
            ..VerticalPodAutoscalerSpec::default()
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{MIN_ALLOWED_KEY, is_managed};

    fn namespace(name: &str, mode: Option<&str>) -> Namespace {
        Namespace {
            name: name.into(),
            labels: mode
                .map(|m| (VPA_KEY.to_owned(), m.to_owned()))
                .into_iter()
                .collect(),
            annotations: BTreeMap::new(),
        }
    }

    fn workload(ns: &str, kind: &str, name: &str) -> Workload {
        let api_version = if kind == "CronJob" {
            "batch/v1"
        } else {
            "apps/v1"
        };
        Workload {
            namespace: ns.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ..Workload::default()
        }
    }

    fn user_vpa(ns: &str, name: &str, kind: &str, target: &str) -> ExistingVpa {
        ExistingVpa {
            namespace: ns.into(),
            name: name.into(),
            target: Some(CrossVersionObjectReference {
                api_version: None,
                kind: kind.into(),
                name: target.into(),
            }),
            managed: None,
        }
    }

    /// A created VPA as it exists after `a` was applied.
    fn created(a: &Apply) -> ExistingVpa {
        let meta = &a.vpa.metadata;
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert!(is_managed(
            &meta.labels.clone().unwrap_or_default(),
            &annotations
        ));
        ExistingVpa {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            target: a.vpa.spec.target_ref.clone(),
            managed: Some(OwnedFields::of(&a.vpa.spec, &annotations)),
        }
    }

    fn settings() -> FleetSettings {
        FleetSettings {
            profiles: vec!["upstream".into(), "cautious".into()],
            protected: ["kube-system".to_string()].into(),
            ..FleetSettings::default()
        }
    }

    fn four() -> Vec<Workload> {
        vec![
            workload("shop", "Deployment", "web"),
            workload("shop", "StatefulSet", "db"),
            workload("shop", "DaemonSet", "agent"),
            workload("shop", "CronJob", "nightly"),
        ]
    }

    #[test]
    fn a_labelled_namespace_gets_one_owned_vpa_per_workload() {
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &four(),
            &[],
            &[],
            &settings(),
        );
        assert_eq!(p.apply.len(), 4);
        assert!(p.skipped.is_empty() && p.delete.is_empty() && p.refused.is_empty());
        let web = p.apply.iter().find(|a| a.workload == "web").expect("web");
        assert_eq!(web.change, Change::Create);
        assert_eq!(web.vpa.metadata.name.as_deref(), Some("web-deployment"));
        let owner = &web.vpa.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Deployment", "web", "uid-web")
        );
        let target = web.vpa.spec.target_ref.as_ref().expect("target");
        assert_eq!(target.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(crate::policy::update_mode(&web.vpa.spec), UpdateMode::Off);
        let source =
            &web.vpa.metadata.annotations.as_ref().expect("annotations")[POLICY_ANNOTATION];
        assert_eq!(source, "namespace shop label tailor.dev/vpa=Off");
        assert!(
            web.vpa.spec.resource_policy.is_none(),
            "no defaults, no policy"
        );
        assert_eq!(p.by_mode, BTreeMap::from([("Off".to_owned(), 4)]));
        // Applied, the plan is empty: nothing differs.
        let now: Vec<ExistingVpa> = p.apply.iter().map(created).collect();
        let again = plan(
            &[namespace("shop", Some("Off"))],
            &four(),
            &now,
            &[],
            &settings(),
        );
        assert!(again.apply.is_empty() && again.delete.is_empty());
        assert_eq!(again.by_mode, p.by_mode);
    }

    #[test]
    fn no_second_autoscaler_and_opted_out_workloads_get_none() {
        let mut ws = four();
        ws[2].annotation = Some("false".into());
        ws.push(workload("shop", "Deployment", "mine"));
        ws.push(workload("shop", "ReplicaSet", "web-123"));
        ws[5].controlled_by = Some("Deployment".into());
        let mut vpas = vec![user_vpa("shop", "my-vpa", "Deployment", "mine")];
        // A VPA the fleet created before the user wrote theirs goes.
        let first = plan(
            &[namespace("shop", Some("Off"))],
            &ws[4..5],
            &[],
            &[],
            &settings(),
        );
        vpas.push(created(&first.apply[0]));
        let upstream = [UpstreamTarget {
            namespace: "shop".into(),
            vpa: "old".into(),
            kind: "StatefulSet".into(),
            name: "db".into(),
        }];
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &ws,
            &vpas,
            &upstream,
            &settings(),
        );
        let names: Vec<&str> = p.apply.iter().map(|a| a.workload.as_str()).collect();
        assert_eq!(names, ["nightly", "web"]);
        let reasons: BTreeMap<&str, SkipReason> = p
            .skipped
            .iter()
            .map(|s| (s.name.as_str(), s.reason))
            .collect();
        assert_eq!(
            reasons,
            BTreeMap::from([
                ("agent", SkipReason::OptedOut),
                ("db", SkipReason::TargetedByUpstreamVPA),
                ("mine", SkipReason::TargetedByVPA),
                ("web-123", SkipReason::ControlledByWorkload),
            ])
        );
        let db = p.skipped.iter().find(|s| s.name == "db").expect("db");
        assert!(db.detail.contains("upstream VPA old"), "{}", db.detail);
        assert_eq!(
            p.delete,
            vec![Delete {
                namespace: "shop".into(),
                name: "mine-deployment".into(),
                reason: DeleteReason::Skipped(SkipReason::TargetedByVPA),
            }]
        );
    }

    #[test]
    fn a_changed_mode_or_default_updates_and_a_removed_label_deletes_only_created_vpas() {
        let ws = four();
        let first = plan(
            &[namespace("shop", Some("Off"))],
            &ws,
            &[],
            &[],
            &settings(),
        );
        let mut vpas: Vec<ExistingVpa> = first.apply.iter().map(created).collect();
        vpas.push(user_vpa("shop", "users", "Deployment", "elsewhere"));
        let p = plan(
            &[namespace("shop", Some("Recreate"))],
            &ws,
            &vpas,
            &[],
            &settings(),
        );
        assert_eq!(p.apply.len(), 4);
        assert!(p.apply.iter().all(|a| a.change == Change::Update));
        assert_eq!(p.by_mode, BTreeMap::from([("Recreate".to_owned(), 4)]));
        let mut annotated = namespace("shop", Some("Off"));
        annotated
            .annotations
            .insert(MIN_ALLOWED_KEY.into(), "memory=64Mi".into());
        let p = plan(&[annotated], &ws, &vpas, &[], &settings());
        assert_eq!(p.apply.len(), 4);
        let policy = p.apply[0]
            .vpa
            .spec
            .resource_policy
            .as_ref()
            .expect("policy");
        let container = &policy.container_policies.as_ref().expect("containers")[0];
        assert_eq!(container.container_name.as_deref(), Some("*"));
        assert_eq!(
            container.min_allowed.as_ref().expect("min")["memory"].0,
            "64Mi"
        );
        // Label removed: the four created VPAs go, the user's stays.
        let p = plan(&[namespace("shop", None)], &ws, &vpas, &[], &settings());
        assert_eq!(p.delete.len(), 4);
        assert!(
            p.delete
                .iter()
                .all(|d| d.reason == DeleteReason::NamespaceNotChosen && d.name != "users")
        );
        // A workload gone: its VPA goes.
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &ws[1..],
            &vpas,
            &[],
            &settings(),
        );
        assert_eq!(p.delete.len(), 1);
        assert_eq!(
            (p.delete[0].name.as_str(), &p.delete[0].reason),
            ("web-deployment", &DeleteReason::WorkloadGone)
        );
    }

    #[test]
    fn a_refused_policy_or_an_unreadable_annotation_creates_nothing_and_deletes_nothing() {
        let ws = four();
        let first = plan(
            &[namespace("shop", Some("Off"))],
            &ws,
            &[],
            &[],
            &settings(),
        );
        let vpas: Vec<ExistingVpa> = first.apply.iter().map(created).collect();
        let mut bad = namespace("shop", Some("Off"));
        bad.annotations
            .insert(MIN_ALLOWED_KEY.into(), "memory=lots".into());
        let other = namespace("other", Some("Off"));
        let mut ws2 = ws.clone();
        ws2.push(workload("other", "Deployment", "api"));
        let p = plan(&[bad, other], &ws2, &vpas, &[], &settings());
        assert_eq!(p.refused.len(), 1);
        assert!(
            p.refused[0].message.contains("tailor.dev/min-allowed"),
            "{}",
            p.refused[0].message
        );
        assert!(p.delete.is_empty());
        // The rest of the fleet goes on.
        assert_eq!(p.apply.len(), 1);
        assert_eq!(p.apply[0].workload, "api");
        assert_eq!(p.by_mode["Off"], 5);
        let mut odd = ws.clone();
        odd[0].annotation = Some("Sometimes".into());
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &odd,
            &vpas,
            &[],
            &settings(),
        );
        assert!(p.delete.is_empty() && p.apply.is_empty());
        assert_eq!(p.skipped[0].reason, SkipReason::InvalidAnnotation);
        // A mode on the workload overrides the namespace's, and says so.
        odd[0].annotation = Some("Initial".into());
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &odd,
            &vpas,
            &[],
            &settings(),
        );
        assert_eq!(p.apply.len(), 1);
        let source = &p.apply[0]
            .vpa
            .metadata
            .annotations
            .as_ref()
            .expect("annotations")[POLICY_ANNOTATION];
        assert!(
            source.ends_with("workload annotation tailor.dev/vpa=Initial"),
            "{source}"
        );
    }

    #[test]
    fn one_name_goes_to_one_workload_and_a_leftover_name_is_replaced() {
        let mut other = workload("shop", "Deployment", "web");
        other.api_version = "example.com/v1".into();
        let ws = vec![workload("shop", "Deployment", "web"), other];
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &ws,
            &[],
            &[],
            &settings(),
        );
        assert_eq!(p.apply.len(), 1);
        assert_eq!(
            p.apply[0]
                .vpa
                .spec
                .target_ref
                .as_ref()
                .and_then(|t| t.api_version.as_deref()),
            Some("apps/v1")
        );
        assert_eq!(p.skipped[0].reason, SkipReason::NameTaken);
        // A created VPA under an older name for a workload that now gets another is replaced.
        let mut old = created(&p.apply[0]);
        old.name = "web-old".into();
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &ws[..1],
            &[old],
            &[],
            &settings(),
        );
        assert_eq!(p.apply.len(), 1);
        assert_eq!(p.delete[0].reason, DeleteReason::Replaced);
    }

    #[test]
    fn a_name_taken_by_a_users_vpa_or_too_long_is_left_out() {
        let ws = vec![
            workload("shop", "Deployment", "web"),
            workload("shop", "Deployment", &"x".repeat(250)),
        ];
        let taken = user_vpa("shop", "web-deployment", "Deployment", "other");
        let p = plan(
            &[namespace("shop", Some("Off"))],
            &ws,
            &[taken],
            &[],
            &settings(),
        );
        let reasons: Vec<SkipReason> = p.skipped.iter().map(|s| s.reason).collect();
        assert_eq!(reasons, [SkipReason::NameTaken, SkipReason::NameTooLong]);
        assert!(p.apply.is_empty());
    }
}
