//! The fleet as the dashboard shows it, built from what the recommender holds after a loop: each VPA's
//! stored status (its recommendation and conditions, as `kubectl` shows them), the pods the model matches
//! to it (from the pod cache: running pods, their requests and limits, whether Tailor sized them,
//! their OOM kills of the last day, the instance family of their nodes from node fit's node cache), the
//! usage histograms of the model, and the updater's last actions ([`super::actions`]). No request to the
//! API server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::{ObjectRef, Store};
use tailor_core::quantity::Amount;
use tailor_dashboard::model::{
    ApiGroup, Condition, Container, Flag, Flags, Resources, Usage, Workload,
};
use tailor_engine::units::Nanos;

use tailor_engine::model::{ClusterState, PodPhase, UsagePair};

use super::actions::UpdaterActions;
use crate::tracked::{VpaEntry, VpaKey};
use crate::views::pod_store::StoredPod;
use crate::views::stores::Stores;
use crate::views::watched_vpa::WatchedVpa;
use tailor_cluster_fit::node_fit::Req;
use tailor_cluster_fit::nodes::SlimNode;

/// How far back an OOM kill counts.
const DAY: Nanos = 86_400 * 1_000_000_000;

fn amount(list: &BTreeMap<String, Quantity>, resource: &str) -> Option<i64> {
    let a = Amount::parse(list.get(resource)?).ok()?;
    i64::try_from(a.amount_i128(resource)?).ok()
}

fn resources(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    let Some(list) = list else {
        return Resources::default();
    };
    Resources::of(amount(list, "cpu"), amount(list, "memory"))
}

/// What the snapshot reads besides the model's VPAs.
pub(crate) struct Inputs<'a> {
    /// The model.
    pub model: &'a ClusterState,
    /// The loop's VPAs, indexed in the model.
    pub vpas: &'a BTreeMap<VpaKey, VpaEntry>,
    /// The caches.
    pub stores: &'a Stores,
    /// Node fit's nodes, when it is on (instance families).
    pub nodes: Option<&'a Store<SlimNode>>,
    /// The updater's last actions.
    pub actions: &'a UpdaterActions,
}

/// Running pods, each container's largest request and limit, the pods the webhook did not size, the OOM
/// kills of the last day, and how many pods run on each instance family.
#[derive(Default)]
struct PodFacts {
    running: i64,
    requests: BTreeMap<String, Resources>,
    limits: BTreeMap<String, Resources>,
    unsized_pods: i64,
    ooms: i64,
    families: HashMap<String, i64>,
}

fn raise(map: &mut BTreeMap<String, Resources>, name: &str, r: &Req, zero_unknown: bool) {
    let known = |v: i64| (!zero_unknown || v > 0).then_some(v);
    if !map.contains_key(name) {
        map.insert(name.to_string(), Resources::default());
    }
    let Some(e) = map.get_mut(name) else {
        return;
    };
    *e = e.max(Resources::of(known(r.cpu), known(r.memory)));
}

fn node_family(nodes: Option<&Store<SlimNode>>, node: &str) -> Option<String> {
    let n = nodes?.get(&ObjectRef::new(node))?;
    let labels = n.metadata.labels.as_ref()?;
    tailor_dashboard::money::instance_family(|k| labels.get(k).map(String::as_str))
        .map(str::to_owned)
}

fn pod_facts<'a>(
    pods: impl Iterator<Item = std::sync::Arc<StoredPod>> + 'a,
    nodes: Option<&Store<SlimNode>>,
    now: Nanos,
) -> PodFacts {
    let mut f = PodFacts::default();
    let mut family_of: HashMap<std::sync::Arc<str>, Option<String>> = HashMap::new();
    for p in pods {
        if p.phase == PodPhase::Running {
            f.running += 1;
            f.unsized_pods += i64::from(!p.sized_by_tailor);
            if let Some(node) = &p.node {
                let fam = family_of
                    .entry(node.clone())
                    .or_insert_with(|| node_family(nodes, node));
                if let Some(fam) = fam {
                    *f.families.entry(fam.clone()).or_default() += 1;
                }
            }
            // Requests and limits of the running pods only: a finished pod's are not paid for.
            for (i, (name, req)) in p.shape.iter().flat_map(|s| s.containers.iter().enumerate()) {
                raise(&mut f.requests, name, req, false);
                if let Some(l) = p.shape.as_ref().and_then(|s| s.limits.get(i)) {
                    raise(&mut f.limits, name, l, true);
                }
            }
        }
        let recent = |t: &Option<crate::views::pod_store::Terminated>| {
            t.is_some_and(|t| t.oom_killed && t.finished_at.is_some_and(|at| now - at <= DAY))
        };
        for s in p.statuses.iter() {
            f.ooms += i64::from(recent(&s.terminated) || recent(&s.last_terminated));
        }
    }
    f
}

/// One copy of each name and condition list a fleet repeats (namespaces, kinds, modes, container names,
/// the conditions most VPAs share): the fleet stays resident between loops, so repeats are not kept twice.
#[derive(Default)]
struct Shared {
    strings: HashSet<Arc<str>>,
    conditions: HashSet<Arc<[Condition]>>,
}

impl Shared {
    fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        self.strings.insert(a.clone());
        a
    }

    fn conditions(&mut self, c: Arc<[Condition]>) -> Arc<[Condition]> {
        if let Some(a) = self.conditions.get(&c) {
            return a.clone();
        }
        self.conditions.insert(c.clone());
        c
    }
}

/// Every VPA of the loop (indexed in the model), as the dashboard shows it, at `now`.
pub(crate) fn workloads(inputs: &Inputs<'_>, now: Nanos) -> Vec<Workload> {
    let mut out = Vec::with_capacity(inputs.vpas.len());
    let mut shared = Shared::default();
    for ((ns, name), entry) in inputs.vpas {
        let Some(vpa) = inputs.stores.vpas.get(&ObjectRef::new(name).within(ns)) else {
            continue;
        };
        let pods: Vec<_> = (inputs.model.matching_pods(entry.index))
            .filter_map(|(pns, pname)| inputs.stores.pods.get(pns, pname))
            .collect();
        let objects = std::iter::once(("VerticalPodAutoscaler", name.as_str()))
            .chain(pods.iter().map(|p| ("Pod", &*p.name)));
        let actions = (inputs.actions).on(ns, objects, tailor_dashboard::MAX_ACTIONS);
        let facts = pod_facts(pods.iter().cloned(), inputs.nodes, now);
        let usage = inputs.model.usage_by_container_name(entry.index);
        let mut w = workload(&vpa, facts, &usage, &mut shared);
        w.updater_actions = actions.into();
        out.push(w);
    }
    out
}

/// Per container: the recommendation's four rows, the pods' requests, and the model's usage.
fn containers(
    vpa: &WatchedVpa,
    facts: &PodFacts,
    usage: &BTreeMap<&str, UsagePair<'_>>,
    shared: &mut Shared,
) -> (Vec<Container>, bool) {
    let recommendation = vpa.status.as_ref().and_then(|s| s.recommendation());
    let mut containers: BTreeMap<String, Container> = BTreeMap::new();
    // The pod-level envelope's row is not a container: counted as one, it would add to the pod's cost.
    for r in (recommendation.iter())
        .flat_map(|r| r.container_recommendations.iter().flatten())
        .filter(|r| r.container_name.as_deref() != Some(tailor_core::sizing::POD_ROW))
    {
        let name = r.container_name.clone().unwrap_or_default();
        containers.insert(
            name.clone(),
            Container {
                name: shared.str(&name),
                target: resources(Some(&r.target)),
                lower_bound: resources(r.lower_bound.as_ref()),
                upper_bound: resources(r.upper_bound.as_ref()),
                uncapped_target: resources(r.uncapped_target.as_ref()),
                ..Container::default()
            },
        );
    }
    for (name, req) in &facts.requests {
        let c = containers.entry(name.clone()).or_insert_with(|| Container {
            name: shared.str(name),
            ..Container::default()
        });
        c.requests = *req;
        c.limits = facts.limits.get(name).copied().unwrap_or_default();
    }
    for (name, (cpu, memory)) in usage {
        if let Some(c) = containers.get_mut(*name) {
            c.cpu_usage = Usage::of(cpu.histogram());
            c.memory_usage = Usage::of(memory.histogram());
        }
    }
    (containers.into_values().collect(), recommendation.is_some())
}

fn workload(
    vpa: &WatchedVpa,
    facts: PodFacts,
    usage: &BTreeMap<&str, UsagePair<'_>>,
    shared: &mut Shared,
) -> Workload {
    let (containers, recommended) = containers(vpa, &facts, usage, shared);
    let conditions: Arc<[Condition]> = (vpa.conditions().iter())
        .map(|c| {
            Condition::new(
                &c.type_,
                &c.status,
                c.reason.as_deref(),
                c.message.as_deref(),
            )
        })
        .collect();
    let holds = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    let mode = tailor_core::policy::update_mode(&vpa.spec);
    // Pods count as admitted unsized only where the mode sizes pods at creation.
    let admitted_unsized = if mode == tailor_crds::UpdateMode::Off {
        0
    } else {
        facts.unsized_pods
    };
    let mut flags = Flags::default();
    if facts.ooms > 0 {
        flags.insert(Flag::Oom);
    }
    if holds("LowConfidence") {
        flags.insert(Flag::LowConfidence);
    }
    if holds("UpdatesBlocked") {
        flags.insert(Flag::UpdatesBlocked);
    }
    if admitted_unsized > 0 {
        flags.insert(Flag::AdmittedUnsized);
    }
    if facts.running == 0 {
        flags.insert(Flag::NoPods);
    }
    if !recommended {
        flags.insert(Flag::NoRecommendation);
    }
    let m = &vpa.metadata;
    let target = vpa.spec.target_ref.as_ref();
    Workload {
        namespace: shared.str(m.namespace.as_deref().unwrap_or_default()),
        vpa: shared.str(m.name.as_deref().unwrap_or_default()),
        api_group: ApiGroup::Tailor,
        kind: shared.str(target.map_or("", |t| &t.kind)),
        name: shared.str(target.map_or("", |t| &t.name)),
        mode: shared.str(&mode.to_string()),
        profile: (m.annotations.as_ref())
            .and_then(|a| a.get(tailor_engine::profile::PROFILE_ANNOTATION))
            .map(|p| shared.str(p)),
        pods: facts.running,
        admitted_unsized,
        instance_family: (facts.families.into_iter())
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(f, _)| shared.str(&f)),
        ooms_last_day: facts.ooms,
        containers: containers.into(),
        conditions: shared.conditions(conditions),
        flags,
        explain: Box::default(),
        updater_actions: Box::default(),
    }
}
