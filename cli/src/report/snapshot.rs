//! `tailor report --snapshot`: the fleet of a cluster snapshot, read by the manifest reader `tailor plan`
//! reads its snapshot with ([`tailor_kube::manifests`]: YAML or JSON, `List`s, the files directly in a
//! directory, each object bounded). One workload per Tailor VPA and per upstream VPA; the rules are in
//! [`super`]'s documentation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tailor_core::quantity::Amount;
use tailor_crds::{ResourceList, VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};
use tailor_dashboard::model::{ApiGroup, Condition, Container, Flag, Resources, Usage, Workload};
use tailor_engine::histogram::{self, Histogram, HistogramOptions};
use tailor_engine::profile::PROFILE_ANNOTATION;
use tailor_kube::manifests::index_objects::{IndexObject, ManifestIndex};
use tailor_kube::manifests::{self, Keep, Object, Walk};
use tailor_updater::decisions::config::{FeatureGates, RestrictionConfig};
use tailor_updater::iteration::{Candidates, ClusterView};
use tailor_updater::preview::plan::SnapshotReplicas;
use tailor_updater::views::cache_view::CacheView;
use tailor_updater::views::pods::{self, CachedPod};

use crate::error::InputError;

/// How far back an OOM kill counts.
const DAY: SignedDuration = SignedDuration::from_hours(24);
/// Largest `totalWeight` a checkpoint's histogram is read with (a real one stays far below).
const MAX_TOTAL_WEIGHT: f64 = 1e60;

/// One pod: compact as the updater matches it to its VPA, with its phase and OOM kills.
struct SnapshotPod {
    compact: CachedPod,
    running: bool,
    /// The `finishedAt` of each `OOMKilled` termination (current state, then last state), per container
    /// status that has one.
    oom_kills: Vec<[Option<Timestamp>; 2]>,
}

impl SnapshotPod {
    fn of(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        let oom = |t: Option<&ContainerStateTerminated>| {
            t.filter(|t| t.reason.as_deref() == Some("OOMKilled"))
                .map(|t| t.finished_at.as_ref().map(|at| at.0))
        };
        let oom_kills = (status.and_then(|s| s.container_statuses.as_ref()))
            .into_iter()
            .flatten()
            .filter_map(|s| {
                let now = oom(s.state.as_ref().and_then(|s| s.terminated.as_ref()));
                let last = oom(s.last_state.as_ref().and_then(|s| s.terminated.as_ref()));
                (now.is_some() || last.is_some()).then(|| [now.flatten(), last.flatten()])
            })
            .collect();
        SnapshotPod {
            compact: CachedPod::new(pod),
            running: status.and_then(|s| s.phase.as_deref()) == Some("Running"),
            oom_kills,
        }
    }

    /// Its containers OOM-killed in the day before `now`.
    fn ooms_last_day(&self, now: Timestamp) -> i64 {
        let recent = |at: &Option<Timestamp>| {
            at.is_some_and(|at| at <= now && now.duration_since(at) <= DAY)
        };
        let n = (self.oom_kills.iter())
            .filter(|kills| kills.iter().any(recent))
            .count();
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}

/// A checkpoint's histograms, with the VPA and container they belong to.
struct Checkpoint {
    upstream: bool,
    namespace: String,
    vpa: String,
    container: String,
    cpu: Option<tailor_crds::HistogramCheckpoint>,
    memory: Option<tailor_crds::HistogramCheckpoint>,
}

/// What the report keeps of one snapshot object.
enum Kept {
    Index(Box<IndexObject>),
    Pod(Box<SnapshotPod>),
    Upstream(Box<VerticalPodAutoscaler>),
    Checkpoint(Box<Checkpoint>),
    Other,
}

impl Keep for Kept {
    fn keep(o: Object) -> Result<Self, String> {
        let checkpoint = |upstream| -> Result<Kept, String> {
            let cp: VerticalPodAutoscalerCheckpoint = o.decode()?;
            let status = cp.status.unwrap_or_default();
            Ok(Kept::Checkpoint(Box::new(Checkpoint {
                upstream,
                namespace: cp.metadata.namespace.unwrap_or_default(),
                vpa: cp.spec.vpa_object_name.unwrap_or_default(),
                container: cp.spec.container_name.unwrap_or_default(),
                cpu: status.cpu_histogram,
                memory: status.memory_histogram,
            })))
        };
        Ok(match (o.group(), o.kind.as_str()) {
            ("", "Pod") => Kept::Pod(Box::new(SnapshotPod::of(&o.decode()?))),
            (tailor_crds::UPSTREAM_GROUP, "VerticalPodAutoscaler") => {
                // Field for field the schema of Tailor's (what `tailor convert` relies on).
                Kept::Upstream(Box::new(o.decode()?))
            }
            (tailor_crds::UPSTREAM_GROUP, "VerticalPodAutoscalerCheckpoint") => checkpoint(true)?,
            (tailor_crds::GROUP, "VerticalPodAutoscalerCheckpoint") => checkpoint(false)?,
            _ => match IndexObject::of(&o) {
                Some(object) => Kept::Index(Box::new(object?)),
                None => Kept::Other,
            },
        })
    }
}

/// The objects of a snapshot the report reads.
#[derive(Default)]
struct Read {
    index: ManifestIndex,
    pods: Vec<SnapshotPod>,
    upstream: Vec<VerticalPodAutoscaler>,
    checkpoints: Vec<Checkpoint>,
}

impl Read {
    fn add(&mut self, kept: Kept) {
        match kept {
            Kept::Index(object) => self.index.add(*object),
            Kept::Pod(pod) => self.pods.push(*pod),
            Kept::Upstream(vpa) => self.upstream.push(*vpa),
            Kept::Checkpoint(cp) => self.checkpoints.push(*cp),
            Kept::Other => {}
        }
    }

    fn load(paths: &[PathBuf]) -> Result<Self, InputError> {
        let error = |e: manifests::ManifestError| InputError(e.to_string());
        let mut read = Read::default();
        for file in manifests::manifest_files(paths, Walk::Flat).map_err(error)? {
            manifests::read_file(&file, |_, kept| read.add(kept)).map_err(error)?;
        }
        Ok(read)
    }
}

/// One workload per VPA of the snapshot at `paths`, Tailor's first, then upstream's; OOM kills count in the
/// day before `now`.
pub(super) fn workloads(paths: &[PathBuf], now: Timestamp) -> Result<Vec<Workload>, InputError> {
    let read = Read::load(paths)?;
    // The updater's matching (`tailor plan`'s): the pod's top-most controller, the VPA that targets it
    // (the oldest of several), the controller's selector.
    let mut view = CacheView::new(
        read.index.index(),
        SnapshotReplicas::default(),
        RestrictionConfig::default(),
        FeatureGates::default(),
        now,
    );
    let tailor: Vec<Arc<VerticalPodAutoscaler>> =
        read.index.vpas().iter().cloned().map(Arc::new).collect();
    let upstream = read.upstream.iter().cloned().map(Arc::new).collect();
    // By (upstream, namespace, VPA).
    let mut checkpoints: BTreeMap<(bool, &str, &str), Vec<&Checkpoint>> = BTreeMap::new();
    for c in &read.checkpoints {
        let key = (c.upstream, c.namespace.as_str(), c.vpa.as_str());
        checkpoints.entry(key).or_default().push(c);
    }
    let mut out = Vec::new();
    for (vpas, is_upstream) in [(tailor, false), (upstream, true)] {
        // The view remembers each controller's VPA for one iteration: one iteration per set of VPAs.
        view.begin_iteration(now);
        let candidates = Candidates::new(vpas);
        let mut selected: Vec<Vec<&SnapshotPod>> = vec![Vec::new(); candidates.vpas.len()];
        for pod in &read.pods {
            if let Some(i) = view.controlling_vpa(&pod.compact, &candidates)
                && let Some(list) = selected.get_mut(i)
            {
                list.push(pod);
            }
        }
        for (vpa, pods) in candidates.vpas.iter().zip(&selected) {
            let m = &vpa.metadata;
            let key = (
                is_upstream,
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
            );
            let its = checkpoints.get(&key).map(Vec::as_slice).unwrap_or_default();
            out.push(workload(vpa, is_upstream, pods, its, now));
        }
    }
    Ok(out)
}

/// CPU in millicores and memory in bytes of a resource list (unknown where absent or unreadable).
fn resources(list: Option<&ResourceList>) -> Resources {
    let amount = |resource: &str| {
        let a = Amount::parse(list?.get(resource)?).ok()?;
        i64::try_from(a.amount_i128(resource)?).ok()
    };
    Resources::of(amount("cpu"), amount("memory"))
}

/// Each resource's larger value (an unknown one is the smaller).
fn largest(a: &mut Resources, b: Resources) {
    *a = a.max(b);
}

fn container<'a>(containers: &'a mut BTreeMap<String, Container>, name: &str) -> &'a mut Container {
    containers
        .entry(name.to_owned())
        .or_insert_with(|| Container {
            name: name.into(),
            ..Container::default()
        })
}

/// Per container: the status's recommendation, the running pods' largest requests and limits, the
/// checkpoints' usage; and whether there is a recommendation.
fn containers(
    vpa: &VerticalPodAutoscaler,
    pods: &[&SnapshotPod],
    checkpoints: &[&Checkpoint],
    notes: &mut Vec<String>,
) -> (Vec<Container>, bool) {
    let mut out = BTreeMap::new();
    // The pod-level envelope's row is not a container: counted as one, it would add to the pod's cost.
    let recommended = (vpa.status.iter())
        .filter_map(|s| s.recommendation.as_ref())
        .flat_map(|r| r.container_recommendations.iter().flatten())
        .filter(|r| r.container_name.as_deref() != Some(tailor_core::sizing::POD_ROW));
    let mut any = false;
    for r in recommended {
        any = true;
        let c = container(&mut out, r.container_name.as_deref().unwrap_or_default());
        c.target = resources(Some(&r.target));
        c.lower_bound = resources(r.lower_bound.as_ref());
        c.upper_bound = resources(r.upper_bound.as_ref());
        c.uncapped_target = resources(r.uncapped_target.as_ref());
    }
    for pod in pods.iter().filter(|p| p.running) {
        for info in pods::containers(&pod.compact) {
            let c = container(&mut out, &info.name);
            largest(
                &mut c.requests,
                resources(info.requests.as_deref().map(|a| a.list())),
            );
            largest(
                &mut c.limits,
                resources(info.limits.as_deref().map(|a| a.list())),
            );
        }
    }
    for cp in checkpoints {
        let c = container(&mut out, &cp.container);
        match (
            usage(cp.cpu.as_ref(), true),
            usage(cp.memory.as_ref(), false),
        ) {
            (Ok(cpu), Ok(memory)) => (c.cpu_usage, c.memory_usage) = (cpu, memory),
            (Err(e), _) | (_, Err(e)) => notes.push(format!(
                "The checkpoint of container {:?} is not shown: {e}",
                cp.container
            )),
        }
    }
    (out.into_values().collect(), any)
}

/// The distribution of a checkpoint's histogram, loaded as the recommender restores it.
fn usage(
    cp: Option<&tailor_crds::HistogramCheckpoint>,
    cpu: bool,
) -> Result<Option<Usage>, String> {
    let Some(cp) = cp else {
        return Ok(None);
    };
    if !(cp.total_weight.is_finite() && cp.total_weight <= MAX_TOTAL_WEIGHT) {
        return Err(format!(
            "totalWeight {} is larger than any histogram holds",
            cp.total_weight
        ));
    }
    let options = if cpu {
        HistogramOptions::vpa_cpu()
    } else {
        HistogramOptions::vpa_memory()
    };
    let mut h = Histogram::new(options);
    let loaded = histogram::HistogramCheckpoint {
        reference_timestamp: None,
        bucket_weights: (cp.bucket_weights.iter())
            .map(|(&b, &w)| (i64::from(b), w))
            .collect(),
        total_weight: cp.total_weight,
    };
    h.load_from_checkpoint(Some(&loaded))
        .map_err(|e| e.to_string())?;
    Ok(Usage::of(&h))
}

/// The conditions of the VPA's status.
fn conditions(vpa: &VerticalPodAutoscaler) -> Vec<Condition> {
    (vpa.status.iter())
        .flat_map(|s| s.conditions.iter().flatten())
        .map(|c| {
            Condition::new(
                &c.type_,
                &c.status,
                c.reason.as_deref(),
                c.message.as_deref(),
            )
        })
        .collect()
}

/// The page's workload of one VPA and the pods it selects.
fn workload(
    vpa: &VerticalPodAutoscaler,
    upstream: bool,
    pods: &[&SnapshotPod],
    checkpoints: &[&Checkpoint],
    now: Timestamp,
) -> Workload {
    let mut notes = Vec::new();
    if upstream {
        notes.push(format!(
            "An upstream VPA ({}): its recommendation is upstream's recommender's.",
            tailor_crds::UPSTREAM_GROUP
        ));
    }
    let target = vpa.spec.target_ref.as_ref();
    if target.is_none() {
        notes.push("The VPA has no targetRef: it selects no pod.".to_owned());
    }
    let (containers, recommended) = containers(vpa, pods, checkpoints, &mut notes);
    let conditions = conditions(vpa);
    let holds = |t: &str| (conditions.iter()).any(|c| c.type_ == t && c.status == "True");
    let running = pods.iter().filter(|p| p.running).count();
    let running = i64::try_from(running).unwrap_or(i64::MAX);
    let ooms = (pods.iter()).fold(0i64, |n, p| n.saturating_add(p.ooms_last_day(now)));
    let flags = [
        (Flag::Oom, ooms > 0),
        (
            Flag::LowConfidence,
            holds(tailor_crds::condition::LOW_CONFIDENCE),
        ),
        (
            Flag::UpdatesBlocked,
            holds(tailor_crds::condition::UPDATES_BLOCKED),
        ),
        (Flag::NoPods, running == 0),
        (Flag::NoRecommendation, !recommended),
    ];
    let m = &vpa.metadata;
    let mode = (vpa.spec.update_policy.as_ref()).and_then(|p| p.update_mode.as_ref());
    Workload {
        namespace: m.namespace.as_deref().unwrap_or_default().into(),
        vpa: m.name.as_deref().unwrap_or_default().into(),
        api_group: match upstream {
            true => ApiGroup::Upstream,
            false => ApiGroup::Tailor,
        },
        kind: target.map_or("", |t| &t.kind).into(),
        name: target.map_or("", |t| &t.name).into(),
        // Each project's default when unset: upstream's evicts as `Auto`, Tailor's as `Recreate`.
        mode: match (mode, upstream) {
            (Some(mode), _) => mode.to_string().into(),
            (None, true) => "Auto".into(),
            (None, false) => tailor_core::policy::update_mode(&vpa.spec)
                .to_string()
                .into(),
        },
        profile: (m.annotations.as_ref())
            .and_then(|a| a.get(PROFILE_ANNOTATION))
            .filter(|_| !upstream)
            .map(|p| p.trim().into()),
        pods: running,
        ooms_last_day: ooms,
        containers: containers.into(),
        conditions: conditions.into(),
        flags: (flags.into_iter())
            .filter(|(_, on)| *on)
            .map(|(f, _)| f)
            .collect(),
        explain: notes.join("\n").into(),
        ..Workload::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tailor_testkit::fixtures::PodFixture;

    use super::*;

    fn pod(pod: PodFixture) -> SnapshotPod {
        SnapshotPod::of(&pod.build())
    }

    fn killed(name: &str, reason: &str, finished: Option<&str>) -> serde_json::Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": true, "restartCount": 1,
               "lastState": {"terminated": {"exitCode": 137, "reason": reason, "finishedAt": finished}}})
    }

    #[test]
    fn oom_kills_count_per_container_in_the_day_before_now() {
        let now: Timestamp = "2026-01-10T12:00:00Z".parse().expect("time");
        let mut twice = killed("a", "OOMKilled", Some("2026-01-10T10:00:00Z"));
        twice["state"] = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                               "finishedAt": "2026-01-10T11:00:00Z"}});
        let p = pod(PodFixture::new("ns", "p")
            .phase("Running")
            .container_status(twice)
            .container_status(killed("b", "OOMKilled", Some("2026-01-09T11:00:00Z")))
            .container_status(killed("c", "Error", Some("2026-01-10T11:00:00Z")))
            .container_status(killed("d", "OOMKilled", None)));
        assert!(p.running);
        // a: two kills, one container; b: a day and an hour before; c: not an OOM kill; d: no time.
        assert_eq!(p.ooms_last_day(now), 1);
        assert_eq!(p.oom_kills.len(), 3);
        // Kills after `now` are not of the day before it: at 10:30, a's earlier kill and b's.
        let at = |t: &str| p.ooms_last_day(t.parse().expect("time"));
        assert_eq!(at("2026-01-10T10:30:00Z"), 2);
        assert_eq!(at("2026-01-09T12:00:00Z"), 1);
        assert_eq!(at("2026-01-08T00:00:00Z"), 0);
        let bare = pod(PodFixture::new("ns", "q"));
        assert!(!bare.running && bare.oom_kills.is_empty());
        assert!(pods::containers(&bare.compact).is_empty());
    }

    #[test]
    fn a_checkpoint_that_cannot_be_read_is_an_error_not_a_panic() {
        let cp = |buckets: &[(u32, u32)], total: f64| tailor_crds::HistogramCheckpoint {
            reference_timestamp: None,
            bucket_weights: buckets.iter().copied().collect(),
            total_weight: total,
        };
        let d = usage(Some(&cp(&[(10, 10_000), (12, 5_000)], 3.0)), true)
            .expect("loads")
            .expect("not empty");
        let d = d.distribution();
        assert_eq!(d.buckets.len(), 2);
        assert!((d.buckets.iter().map(|b| b.weight).sum::<f64>() - 3.0).abs() < 1e-9);
        assert_eq!(usage(None, true), Ok(None));
        assert_eq!(usage(Some(&cp(&[], 0.0)), false), Ok(None));
        for bad in [
            cp(&[(10_000, 1)], 1.0),
            cp(&[(10, 1)], f64::INFINITY),
            cp(&[(10, 1)], f64::NAN),
            cp(&[(10, 1)], -1.0),
        ] {
            assert!(usage(Some(&bad), false).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_vpa_without_status_or_target_is_a_workload_without_pods() {
        let vpa: VerticalPodAutoscaler =
            serde_saphyr::from_str("metadata: {name: v, namespace: ns}\nspec: {}\n")
                .expect("a VPA");
        let now = Timestamp::UNIX_EPOCH;
        let w = workload(&vpa, false, &[], &[], now);
        assert_eq!((&*w.kind, &*w.name, w.pods), ("", "", 0));
        assert_eq!(
            w.flags,
            tailor_dashboard::model::Flags::from([Flag::NoPods, Flag::NoRecommendation])
        );
        assert!(w.explain.contains("no targetRef"), "{}", w.explain);
        let w = workload(&vpa, true, &[], &[], now);
        assert_eq!(&*w.mode, "Auto");
    }
}

#[cfg(test)]
mod envelope_tests {
    use serde_json::json;

    use super::*;

    /// The pod-level envelope's row is not listed as a container, so it adds nothing to the pod's cost.
    #[test]
    fn the_pod_level_envelope_row_is_not_a_container() {
        let rec = |name: &str, cpu: &str| json!({"containerName": name, "target": {"cpu": cpu, "memory": "100Mi"}});
        let vpa: VerticalPodAutoscaler = serde_json::from_value(json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
            "status": {"recommendation": {"containerRecommendations": [
                rec("app", "300m"), rec("sidecar", "200m"), rec(tailor_core::sizing::POD_ROW, "450m")]}}
        }))
        .expect("a VPA");
        let (containers, recommended) = containers(&vpa, &[], &[], &mut Vec::new());
        let names: Vec<&str> = containers.iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["app", "sidecar"]);
        assert!(recommended);
    }
}
