//! The model's pod matching (`matching_pods`, `has_matching_pod`, `open_windows`), which walks pods grouped
//! by label set (each VPA keeping the groups its selector matches), agrees with matching every pod's labels
//! one by one, over arbitrary sequences of pod adds, relabels, deletes, garbage collections, selector changes
//! and VPAs replaced by new ones (added after their pods, on a reused index).

use std::collections::BTreeMap;

use proptest::prelude::*;
use tailor_engine::model::{
    AggregationsConfig, ClusterState, ContainerId, Labels, ModelError, PodPhase, Sample, Selector,
    VpaState,
};
use tailor_engine::units::Resource;

const NAMESPACES: [&str; 2] = ["a", "b"];
const SECOND: i64 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Add or update pod `pod` of namespace `ns` with labels `app=app-<app>` (and `tier=x` when `tier`).
    Upsert {
        ns: usize,
        pod: u8,
        app: u8,
        tier: bool,
    },
    Delete {
        ns: usize,
        pod: u8,
    },
    /// A memory sample for the pod's one container (opens a window).
    Sample {
        ns: usize,
        pod: u8,
    },
    Gc,
    /// Give VPA `vpa` (index into the test's list) selector `sel` of [`SELECTORS`].
    Reselect {
        vpa: usize,
        sel: usize,
    },
    /// Retire VPA `vpa` and add a new one with selector `sel` in the same namespace.
    Replace {
        vpa: usize,
        sel: usize,
    },
}

const SELECTORS: [&str; 4] = ["app=app-0", "app in (app-1, app-2),!tier", "tier", ""];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..12u8, 0..3u8, any::<bool>())
            .prop_map(|(ns, pod, app, tier)| Op::Upsert { ns, pod, app, tier }),
        2 => (0..2usize, 0..12u8).prop_map(|(ns, pod)| Op::Delete { ns, pod }),
        2 => (0..2usize, 0..12u8).prop_map(|(ns, pod)| Op::Sample { ns, pod }),
        1 => Just(Op::Gc),
        1 => (0..8usize, 0..4usize).prop_map(|(vpa, sel)| Op::Reselect { vpa, sel }),
        1 => (0..8usize, 0..4usize).prop_map(|(vpa, sel)| Op::Replace { vpa, sel }),
    ]
}

fn labels(app: u8, tier: bool) -> Labels {
    let mut l = Labels::new();
    l.insert("app".into(), format!("app-{app}"));
    if tier {
        l.insert("tier".into(), "x".into());
    }
    l
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn grouped_matching_agrees_with_matching_each_pod(ops in proptest::collection::vec(op(), 0..60)) {
        let mut cluster = ClusterState::new(AggregationsConfig::default(), 0);
        let mut vpas = Vec::new();
        for ns in NAMESPACES {
            for (i, s) in SELECTORS.iter().enumerate() {
                let v = VpaState::new(ns, &format!("v{i}"), Selector::parse(s).unwrap());
                vpas.push((cluster.add_vpa(v), ns, Selector::parse(s).unwrap()));
            }
        }
        // The reference: every live pod's labels, by (namespace, name).
        let mut pods: BTreeMap<(&str, String), Labels> = BTreeMap::new();
        let mut now = 1_700_000_000 * SECOND;
        for op in ops {
            now += SECOND;
            match op {
                Op::Upsert { ns, pod, app, tier } => {
                    let (ns, name, l) = (NAMESPACES[ns], format!("p{pod}"), labels(app, tier));
                    cluster.add_or_update_pod(ns, &name, &l, PodPhase::Running);
                    let id = ContainerId { namespace: ns, pod: &name, container: "c" };
                    cluster.add_or_update_container(id).unwrap();
                    pods.insert((ns, name), l);
                }
                Op::Delete { ns, pod } => {
                    let (ns, name) = (NAMESPACES[ns], format!("p{pod}"));
                    cluster.delete_pod(ns, &name);
                    pods.remove(&(ns, name));
                }
                Op::Sample { ns, pod } => {
                    let (ns, name) = (NAMESPACES[ns], format!("p{pod}"));
                    let id = ContainerId { namespace: ns, pod: &name, container: "c" };
                    let sample = Sample { time: now, resource: Resource::Memory, usage: 1 << 20 };
                    let _ = cluster.add_sample(id, sample);
                }
                Op::Gc => {
                    cluster.garbage_collect(now);
                }
                Op::Reselect { vpa, sel } => {
                    let (index, _, selector) = &mut vpas[vpa];
                    cluster.set_vpa_selector(*index, Selector::parse(SELECTORS[sel]).unwrap());
                    *selector = Selector::parse(SELECTORS[sel]).unwrap();
                }
                Op::Replace { vpa, sel } => {
                    let (index, ns, selector) = &mut vpas[vpa];
                    cluster.retire_vpa(*index);
                    let parsed = Selector::parse(SELECTORS[sel]).unwrap();
                    *index = cluster.add_vpa(VpaState::new(ns, &format!("r{vpa}"), parsed.clone()));
                    *selector = parsed;
                }
            }
            for (vpa, ns, selector) in &vpas {
                let want: Vec<String> = pods
                    .iter()
                    .filter(|((n, _), l)| n == ns && selector.matches(l))
                    .map(|((n, p), _)| format!("{n}/{p}"))
                    .collect();
                let mut got: Vec<String> = cluster
                    .matching_pods(*vpa)
                    .map(|(n, p)| format!("{n}/{p}"))
                    .collect();
                got.sort();
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(cluster.has_matching_pod(*vpa), !want.is_empty());
                for w in cluster.open_windows(*vpa, now) {
                    let key = format!("{ns}/{}", w.pod);
                    prop_assert!(want.contains(&key), "open window of unselected pod {}", key);
                }
            }
        }
    }
}

#[test]
fn a_container_ref_does_not_outlive_its_pod() {
    let mut m = ClusterState::new(AggregationsConfig::default(), 0);
    let id = ContainerId {
        namespace: "ns",
        pod: "p",
        container: "c",
    };
    let labels = Labels::default();
    m.add_or_update_pod("ns", "p", &labels, PodPhase::Running);
    m.add_or_update_container(id).expect("container");
    let c = m.container_ref(id).expect("ref");
    let sample = |time| Sample {
        time,
        resource: Resource::Cpu,
        usage: 100,
    };
    assert_eq!(m.add_sample_to(c, sample(1)), Ok(()));
    // Deleted, then another pod in its place: the old reference is refused.
    m.delete_pod("ns", "p");
    m.add_or_update_pod("ns", "q", &labels, PodPhase::Running);
    m.add_or_update_container(ContainerId { pod: "q", ..id })
        .expect("container");
    assert!(matches!(
        m.add_sample_to(c, sample(2)),
        Err(ModelError::PodNotFound(_))
    ));
}
