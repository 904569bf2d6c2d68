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
use tailor_dashboard::model::{Condition, Container, Flag, Resources, Usage, Workload};
use tailor_engine::units::Nanos;

use tailor_engine::model::{ClusterState, PodPhase, UsagePair};

use super::actions::UpdaterActions;
use crate::cluster_view::SlimNode;
use crate::node_fit::Req;
use crate::pod_store::CompactPod;
use crate::stores::Stores;
use crate::tracked::{VpaEntry, VpaKey};
use crate::watched_vpa::WatchedVpa;

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
    Resources {
        cpu_millicores: amount(list, "cpu"),
        memory_bytes: amount(list, "memory"),
    }
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
    e.cpu_millicores = e.cpu_millicores.max(known(r.cpu));
    e.memory_bytes = e.memory_bytes.max(known(r.memory));
}

fn node_family(nodes: Option<&Store<SlimNode>>, node: &str) -> Option<String> {
    let n = nodes?.get(&ObjectRef::new(node))?;
    let labels = n.metadata.labels.as_ref()?;
    tailor_dashboard::money::instance_family(|k| labels.get(k).map(String::as_str))
        .map(str::to_owned)
}

fn pod_facts<'a>(
    pods: impl Iterator<Item = std::sync::Arc<CompactPod>> + 'a,
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
        let recent = |t: &Option<crate::pod_store::Terminated>| {
            t.is_some_and(|t| t.oom_killed && t.finished_at.is_some_and(|at| now - at <= DAY))
        };
        for s in p.statuses.iter() {
            f.ooms += i64::from(recent(&s.terminated) || recent(&s.last_terminated));
        }
    }
    f
}

/// Every VPA of the loop (indexed in the model), as the dashboard shows it, at `now`.
pub(crate) fn workloads(inputs: &Inputs<'_>, now: Nanos) -> Vec<Workload> {
    let mut out = Vec::with_capacity(inputs.vpas.len());
    // Most VPAs have the same conditions: one copy each.
    let mut shared: HashSet<Arc<[Condition]>> = HashSet::new();
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
        let mut w = workload(&vpa, facts, &usage);
        w.updater_actions = actions;
        match shared.get(&w.conditions) {
            Some(c) => w.conditions = c.clone(),
            None => {
                shared.insert(w.conditions.clone());
            }
        }
        out.push(w);
    }
    out
}

/// Per container: the recommendation's four rows, the pods' requests, and the model's usage.
fn containers(
    vpa: &WatchedVpa,
    facts: &PodFacts,
    usage: &BTreeMap<&str, UsagePair<'_>>,
) -> (Vec<Container>, bool) {
    let recommendation = vpa.status.as_ref().and_then(|s| s.recommendation());
    let mut containers: BTreeMap<String, Container> = BTreeMap::new();
    for r in recommendation
        .iter()
        .flat_map(|r| r.container_recommendations.iter().flatten())
    {
        let name = r.container_name.clone().unwrap_or_default();
        containers.insert(
            name.clone(),
            Container {
                name,
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
            name: name.clone(),
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

fn workload(vpa: &WatchedVpa, facts: PodFacts, usage: &BTreeMap<&str, UsagePair<'_>>) -> Workload {
    let (containers, recommended) = containers(vpa, &facts, usage);
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
    let mut flags = Vec::new();
    if facts.ooms > 0 {
        flags.push(Flag::Oom);
    }
    if holds("LowConfidence") {
        flags.push(Flag::LowConfidence);
    }
    if holds("UpdatesBlocked") {
        flags.push(Flag::UpdatesBlocked);
    }
    if admitted_unsized > 0 {
        flags.push(Flag::AdmittedUnsized);
    }
    if facts.running == 0 {
        flags.push(Flag::NoPods);
    }
    if !recommended {
        flags.push(Flag::NoRecommendation);
    }
    let m = &vpa.metadata;
    let target = vpa.spec.target_ref.as_ref();
    Workload {
        namespace: m.namespace.clone().unwrap_or_default(),
        vpa: m.name.clone().unwrap_or_default(),
        kind: target.map(|t| t.kind.clone()).unwrap_or_default(),
        name: target.map(|t| t.name.clone()).unwrap_or_default(),
        mode: mode.to_string(),
        profile: (m.annotations.as_ref())
            .and_then(|a| a.get(tailor_engine::profile::PROFILE_ANNOTATION))
            .cloned(),
        pods: facts.running,
        admitted_unsized,
        instance_family: (facts.families.into_iter())
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(f, _)| f),
        ooms_last_day: facts.ooms,
        containers,
        conditions,
        flags,
        explain: String::new(),
        updater_actions: Vec::new(),
    }
}
