//! W1 sanity value (docs/design/bench-workload.md): container 123 alone in its VPA, default estimator chain,
//! after one and after seven days → target 7117m / 5527335984 bytes.

use std::collections::BTreeMap;

use tailor_engine::bench_workload::{TICKS_PER_DAY, W1};
use tailor_engine::estimate::{RecommenderConfig, VpaInput, recommend};
use tailor_engine::model::{AggregateContainerState, AggregationsConfig, ContainerState};
use tailor_engine::units::{cpu_amount_from_cores, memory_amount_from_bytes};

fn target_after(days: usize) -> (i64, i64) {
    let w = W1::new();
    let config = AggregationsConfig::default();
    let mut c = ContainerState::default();
    let mut agg = AggregateContainerState::new(&config, 0);
    let i = 123;
    for k in 0..days * TICKS_PER_DAY {
        let t = W1::time(k);
        c.add_cpu_sample(
            t,
            cpu_amount_from_cores(w.cpu(i, k, W1::diurnal(k))),
            &mut agg,
        )
        .expect("cpu sample");
        c.add_memory_sample(t, memory_amount_from_bytes(w.mem(i, k)), &config, &mut agg)
            .expect("memory sample");
    }
    let aggs = BTreeMap::from([("c".to_string(), agg)]);
    let empty = BTreeMap::new();
    let rec = recommend(
        &RecommenderConfig::default(),
        &aggs,
        VpaInput {
            policy: None,
            annotations: &empty,
            explain: false,
        },
    )
    .expect("recommend");
    let t = rec.containers[0].target;
    (t.cpu.unwrap_or_default(), t.memory.unwrap_or_default())
}

#[test]
fn w1_container_123_sanity_value() {
    assert_eq!(target_after(1), (7117, 5527335984));
    assert_eq!(target_after(7), (7117, 5527335984));
}

#[test]
fn cluster_links_aggregates_to_namespace_vpa() {
    use tailor_engine::model::{ClusterState, ContainerId, Labels, PodPhase, Selector, VpaState};
    let mut cluster = ClusterState::new(AggregationsConfig::default(), 1);
    let v = cluster.add_vpa(VpaState::new("ns-0", "vpa", Selector::everything()));
    let labels: Labels = [("app".to_string(), "a".to_string())].into_iter().collect();
    cluster.add_or_update_pod("ns-0", "pod-0", &labels, PodPhase::Running);
    cluster
        .add_or_update_container(ContainerId {
            namespace: "ns-0",
            pod: "pod-0",
            container: "c",
        })
        .expect("container");
    assert_eq!(cluster.aggregate_state_by_container_name(v).len(), 1);
    // Freed pod and aggregate slots are reused, so the model does not grow with churn.
    assert_eq!(cluster.pod_slots(), 1);
    assert!(
        cluster.label_set_count() <= 8 * 24 + 2,
        "{}",
        cluster.label_set_count()
    );
    assert!(
        cluster.aggregate_slots() <= 8 * 24 + 2,
        "{}",
        cluster.aggregate_slots()
    );
}

#[test]
fn pod_and_aggregate_churn_is_reclaimed() {
    use tailor_engine::model::{
        ClusterState, ContainerId, Labels, PodPhase, Sample, Selector, VpaState,
    };
    use tailor_engine::units::Resource;
    const H: i64 = 3_600_000_000_000;
    let mut cluster = ClusterState::new(AggregationsConfig::default(), H);
    let v = cluster.add_vpa(VpaState::new("ns", "vpa", Selector::everything()));
    // A new pod (and label set) every hour for 30 days, each deleted after its sample.
    for hour in 0..24 * 30 {
        let t = 1_700_000_000_000_000_000 + hour * H;
        let pod = format!("job-{hour}");
        let labels: Labels = [("job-name".to_string(), pod.clone())]
            .into_iter()
            .collect();
        cluster.add_or_update_pod("ns", &pod, &labels, PodPhase::Running);
        let id = ContainerId {
            namespace: "ns",
            pod: &pod,
            container: "c",
        };
        cluster.add_or_update_container(id).expect("container");
        cluster
            .add_sample(
                id,
                Sample {
                    time: t,
                    resource: Resource::Cpu,
                    usage: 100,
                },
            )
            .expect("sample");
        cluster.delete_pod("ns", &pod);
        cluster.rate_limited_garbage_collect(t);
    }
    // Only the last 8 days of aggregates are alive, and the VPA links only live ones.
    assert!(
        cluster.aggregate_count() <= 8 * 24 + 1,
        "{}",
        cluster.aggregate_count()
    );
    assert_eq!(cluster.vpa_aggregates(v).len(), cluster.aggregate_count());
    assert_eq!(cluster.aggregate_state_by_container_name(v).len(), 1);
    // Freed pod and aggregate slots are reused, so the model does not grow with churn.
    assert_eq!(cluster.pod_slots(), 1);
    assert!(
        cluster.label_set_count() <= 8 * 24 + 2,
        "{}",
        cluster.label_set_count()
    );
    assert!(
        cluster.aggregate_slots() <= 8 * 24 + 2,
        "{}",
        cluster.aggregate_slots()
    );
}
