//! The fleet as the dashboard shows it, built from what the recommender holds after a loop: each VPA's
//! stored status (its recommendation and conditions, as `kubectl` shows them), the pods the model matches
//! to it (from the pod cache: running pods, their requests, their OOM kills of the last day), and the
//! usage histograms of the model. No request to the API server.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::ObjectRef;
use tailor_core::quantity::Amount;
use tailor_dashboard::model::{Condition, Container, Distribution, Flag, Resources, Workload};
use tailor_engine::units::Nanos;

use tailor_engine::model::{AggregateContainerState, ClusterState, PodPhase};

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

/// Running pods, each container's largest request, and the OOM kills of the last day.
struct PodFacts {
    running: i64,
    requests: BTreeMap<String, Resources>,
    ooms: i64,
}

fn pod_facts<'a>(
    pods: impl Iterator<Item = std::sync::Arc<CompactPod>> + 'a,
    now: Nanos,
) -> PodFacts {
    let mut f = PodFacts {
        running: 0,
        requests: BTreeMap::new(),
        ooms: 0,
    };
    for p in pods {
        if p.phase == PodPhase::Running {
            f.running += 1;
        }
        for (name, req) in p.shape.iter().flat_map(|s| s.containers.iter()) {
            let r = f.requests.entry(name.to_string()).or_default();
            r.cpu_millicores = r.cpu_millicores.max(Some(req.cpu));
            r.memory_bytes = r.memory_bytes.max(Some(req.memory));
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

/// Every VPA of `vpas` (the loop's, indexed in `model`), as the dashboard shows it, at `now`.
pub(crate) fn workloads(
    model: &ClusterState,
    vpas: &BTreeMap<VpaKey, VpaEntry>,
    stores: &Stores,
    now: Nanos,
) -> Vec<Workload> {
    let mut out = Vec::with_capacity(vpas.len());
    for ((ns, name), entry) in vpas {
        let Some(vpa) = stores.vpas.get(&ObjectRef::new(name).within(ns)) else {
            continue;
        };
        let pods = (model.matching_pods(entry.index))
            .filter_map(|(pns, pname)| stores.pods.get(pns, pname));
        let facts = pod_facts(pods, now);
        let aggregates = model.aggregate_state_by_container_name(entry.index);
        out.push(workload(&vpa, facts, &aggregates));
    }
    out
}

/// Per container: the recommendation's four rows, the pods' requests, and the model's usage.
fn containers(
    vpa: &WatchedVpa,
    facts: &PodFacts,
    aggregates: &BTreeMap<String, AggregateContainerState>,
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
    }
    for (name, agg) in aggregates {
        if let Some(c) = containers.get_mut(name) {
            c.cpu_usage = Distribution::of(agg.cpu.histogram());
            c.memory_usage = Distribution::of(agg.memory.histogram());
        }
    }
    (containers.into_values().collect(), recommendation.is_some())
}

fn workload(
    vpa: &WatchedVpa,
    facts: PodFacts,
    aggregates: &BTreeMap<String, AggregateContainerState>,
) -> Workload {
    let (containers, recommended) = containers(vpa, &facts, aggregates);
    let conditions: Vec<Condition> = (vpa.conditions().iter())
        .map(|c| Condition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        })
        .collect();
    let holds = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
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
        mode: tailor_core::policy::update_mode(&vpa.spec).to_string(),
        profile: (m.annotations.as_ref())
            .and_then(|a| a.get(tailor_engine::profile::PROFILE_ANNOTATION))
            .cloned(),
        pods: facts.running,
        ooms_last_day: facts.ooms,
        containers,
        conditions,
        flags,
        explain: String::new(),
    }
}
