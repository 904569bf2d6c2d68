//! `spec.targetRef` → pod selector. Well-known controllers are read from the reflector stores; any other
//! kind through its `/scale` subresource, whose answers are cached by the loop ([`ScaleLookups`]).
//! Resolution itself is pure over the stores and the cache.

use std::collections::HashMap;

use tailor_core::target::WorkloadInfo;
use tailor_crds::CrossVersionObjectReference;

use crate::views::stores::Stores;
use tailor_core::target::is_well_known;
use tailor_engine::model::Selector;
use tailor_engine::units::Nanos;

/// Identity of a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    /// `apiVersion` of the reference (may be empty).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (the VPA's).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl TargetKey {
    /// The key of a VPA's reference.
    pub fn new(namespace: &str, r: &CrossVersionObjectReference) -> Self {
        TargetKey {
            api_version: r.api_version.clone().unwrap_or_default(),
            kind: r.kind.clone(),
            namespace: namespace.into(),
            name: r.name.clone(),
        }
    }

    /// `apiVersion.kind/name`, as upstream's messages name a target.
    pub fn describe(&self) -> String {
        format!("{}.{}/{}", self.api_version, self.kind, self.name)
    }
}

/// One `/scale` lookup: the selector string or the error, and when it was fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleEntry {
    /// `status.selector` of the Scale, or why it could not be read.
    pub selector: Result<String, String>,
    /// Fetch time.
    pub fetched: Nanos,
}

/// Cached `/scale` lookups for targets that are not well-known kinds.
#[derive(Debug, Clone, Default)]
pub struct ScaleLookups {
    entries: HashMap<TargetKey, ScaleEntry>,
}

impl ScaleLookups {
    /// The cached entry.
    pub fn get(&self, key: &TargetKey) -> Option<&ScaleEntry> {
        self.entries.get(key)
    }

    /// Stores a lookup.
    pub fn insert(&mut self, key: TargetKey, entry: ScaleEntry) {
        self.entries.insert(key, entry);
    }

    /// Whether `key` was fetched less than `ttl` ago.
    pub fn is_fresh(&self, key: &TargetKey, now: Nanos, ttl: Nanos) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| now.saturating_sub(e.fetched) < ttl)
    }

    /// Drops entries no VPA refers to any more.
    pub fn retain(&mut self, keep: impl Fn(&TargetKey) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

/// Outcome of resolving a target: the selector (`Nothing` when unresolvable) and the `ConfigUnsupported`
/// message, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// Pod selector.
    pub selector: Selector,
    /// Why the target cannot be served; `None` when it resolved.
    pub unsupported: Option<String>,
}

impl Resolution {
    fn unsupported(message: String) -> Self {
        Resolution {
            selector: Selector::Nothing,
            unsupported: Some(message),
        }
    }
}

fn lookup(stores: &Stores, kind: &str, ns: &str, name: &str) -> Option<WorkloadInfo> {
    let w = &stores.workloads;
    match kind {
        "Deployment" => w.deployments.info(ns, name),
        "ReplicaSet" => w.replica_sets.info(ns, name),
        "StatefulSet" => w.stateful_sets.info(ns, name),
        "DaemonSet" => w.daemon_sets.info(ns, name),
        "Job" => w.jobs.info(ns, name),
        // A job template without labels selects no pod here (upstream's empty selector would select
        // every pod of the namespace): the selector as kept, not as matching widens it.
        "CronJob" => w.cron_jobs.with(ns, name, |c| WorkloadInfo {
            owner: c.owner_reference(),
            selector: c.kept_selector(),
        }),
        "ReplicationController" => w.replication_controllers.info(ns, name),
        _ => None,
    }
}

/// What target resolution asks the cluster, injected so that [`resolve`] stays pure.
pub trait TargetLookup {
    /// The pod selector of the target; `Ok(None)` when there is none to read (no target).
    fn selector(&self, target: Option<&TargetKey>) -> Result<Option<Selector>, String>;
    /// The top-most well-known or scalable controller of the target (the target itself when no such
    /// controller owns it); `Ok(None)` when that cannot be decided.
    fn topmost(&self, target: &TargetKey) -> Result<Option<TargetKey>, String>;
}

/// Resolves a VPA's target. The target must yield a selector and be top-most: a target whose controlling
/// owner is a well-known controller (a Deployment's ReplicaSet, a CronJob's Job) is refused, with
/// upstream's `ConfigUnsupported` messages. A VPA without a target that still yields a selector selects
/// nothing and has no `ConfigUnsupported` condition (upstream stores an empty-type condition).
pub fn resolve(target: Option<&TargetKey>, lookup: &impl TargetLookup) -> Resolution {
    let selector = match lookup.selector(target) {
        Ok(Some(s)) => s,
        Ok(None) => return Resolution::unsupported("Cannot read targetRef".into()),
        Err(e) => return Resolution::unsupported(format!("Cannot read targetRef. Reason: {e}")),
    };
    let Some(t) = target else {
        return Resolution {
            selector: Selector::Nothing,
            unsupported: None,
        };
    };
    let desc = t.describe();
    match lookup.topmost(t) {
        Err(e) => Resolution::unsupported(format!(
            "Error checking if target {desc} is a topmost well-known or scalable controller: {e}"
        )),
        Ok(None) => Resolution::unsupported(format!(
            "Unknown error during checking if target {desc} is a topmost well-known or scalable controller"
        )),
        Ok(Some(top)) if top != *t => Resolution::unsupported(format!(
            "The target {desc} has a parent controller but it should point to a topmost well-known or scalable controller"
        )),
        Ok(Some(_)) => Resolution {
            selector,
            unsupported: None,
        },
    }
}

/// The controller's [`TargetLookup`]: well-known kinds from the reflector stores, any other kind from the
/// `/scale` cache.
#[derive(Clone, Copy)]
pub struct StoreLookup<'a> {
    /// Reflector stores.
    pub stores: &'a Stores,
    /// `/scale` answers.
    pub scale: &'a ScaleLookups,
}

impl TargetLookup for StoreLookup<'_> {
    fn selector(&self, target: Option<&TargetKey>) -> Result<Option<Selector>, String> {
        let Some(t) = target else {
            return Ok(None);
        };
        if is_well_known(&t.kind) {
            let info = lookup(self.stores, &t.kind, &t.namespace, &t.name)
                .ok_or_else(|| format!("{} {}/{} does not exist", t.kind, t.namespace, t.name))?;
            return info
                .selector
                .map_or(Ok(Selector::Nothing), |s| Selector::from_label_selector(&s))
                .map(Some)
                .map_err(|e| e.to_string());
        }
        match self.scale.get(t) {
            Some(ScaleEntry {
                selector: Ok(s), ..
            }) => Selector::parse(s).map(Some).map_err(|e| e.to_string()),
            Some(ScaleEntry {
                selector: Err(e), ..
            }) => Err(e.clone()),
            None => Err(format!(
                "{} {}/{} has not been looked up yet",
                t.kind, t.namespace, t.name
            )),
        }
    }

    fn topmost(&self, target: &TargetKey) -> Result<Option<TargetKey>, String> {
        if !is_well_known(&target.kind) {
            return Ok(Some(target.clone()));
        }
        let owner = lookup(self.stores, &target.kind, &target.namespace, &target.name)
            .and_then(|info| info.owner)
            .filter(|o| is_well_known(&o.kind));
        Ok(Some(match owner {
            Some(o) => TargetKey {
                api_version: o.api_version,
                kind: o.kind,
                namespace: target.namespace.clone(),
                name: o.name,
            },
            None => target.clone(),
        }))
    }
}
