//! Property tests (proptest) over the input parser and the model: arbitrary input never panics, and the
//! recommendation respects its own minimum.

use proptest::prelude::*;
use tailor_engine::estimate::RecommenderConfig;
use tailor_engine::model::{
    AggregationsConfig, ClusterState, ContainerId, Labels, PodPhase, Sample, Selector, VpaState,
};
use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer, replay};
use tailor_engine::trace;
use tailor_engine::units::Resource;

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..64.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => -10.0f64..0.0,
        1 => 1e12f64..1e20,
        1 => Just(0.0),
    ]
}

fn time() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 1.7e9f64..1.7003e9,
        1 => -1e10f64..1e10,
        1 => Just(f64::NAN),
        1 => Just(1e300),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = trace::parse("fuzz", &data);
    }

    #[test]
    fn csv_parser_never_panics(rows in proptest::collection::vec(("[0-9.eE+-]{0,12}", "[a-z]{0,3}", "[a-z0-9-]{0,12}", "[a-z]{0,3}", "[0-9.NaIinf-]{0,8}", "[0-9.e-]{0,10}"), 0..20)) {
        let mut s = String::from("timestamp,namespace,pod,container,cpu_cores,memory_bytes\n");
        for r in rows {
            s.push_str(&format!("{},{},{},{},{},{}\n", r.0, r.1, r.2, r.3, r.4, r.5));
        }
        if let Ok(l) = trace::parse("fuzz.csv", s.as_bytes()) {
            for t in &l.traces {
                let _ = replay(t, &ReplayConfig::default(), true);
            }
        }
    }

    #[test]
    fn replay_never_panics(
        cpu in proptest::collection::vec((time(), value()), 0..60),
        mem in proptest::collection::vec((time(), value()), 0..60),
        ooms in proptest::collection::vec((time(), proptest::option::of(value())), 0..4),
        half_life in prop_oneof![Just(None), (1.0f64..1e7).prop_map(Some)],
    ) {
        let trace = Trace {
            id: "fuzz".into(),
            now: Some(1.7004e9),
            options: half_life.map(|h| tailor_engine::replay::TraceOptions {
                cpu_histogram_decay_half_life_seconds: Some(h),
                memory_aggregation_interval_seconds: Some(h),
                ..Default::default()
            }),
            containers: vec![TraceContainer {
                name: "c".into(),
                memory_request_bytes: Some(1e8),
                cpu_samples: cpu.iter().map(|(t, v)| [*t, *v]).collect(),
                memory_samples: mem.iter().map(|(t, v)| [*t, *v]).collect(),
                ooms: ooms.iter().map(|(t, v)| vec![Some(*t), *v]).collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let out = replay(&trace, &ReplayConfig::default(), true);
        if out.error.is_none() {
            let min = RecommenderConfig::default().min_resources(1);
            for r in &out.recommendations {
                prop_assert!(r.target.cpu >= min.cpu && r.target.memory >= min.memory);
                prop_assert!(r.lower_bound.cpu >= min.cpu && r.upper_bound.memory >= min.memory);
            }
        }
    }

    #[test]
    fn model_never_panics(ops in proptest::collection::vec((0u8..5, 0usize..3, -1_000_000_000_000i64..1_000_000_000_000i64, any::<i64>()), 0..200)) {
        let mut cluster = ClusterState::new(AggregationsConfig::default(), 3_600_000_000_000);
        let vpa = cluster.add_vpa(VpaState::new("ns", "v", Selector::everything()));
        let pods = ["p0", "p1", "p2"];
        let mut labels = Labels::new();
        labels.insert("app".into(), "x".into());
        for p in pods {
            cluster.add_or_update_pod("ns", p, &labels, PodPhase::Running);
            let _ = cluster.add_or_update_container(ContainerId { namespace: "ns", pod: p, container: "c" });
        }
        let base = 1_700_000_000_000_000_000i64;
        for (op, pod, dt, v) in ops {
            let id = ContainerId { namespace: "ns", pod: pods[pod], container: "c" };
            let time = base.saturating_add(dt);
            match op {
                0 => { let _ = cluster.add_sample(id, Sample { time, resource: Resource::Cpu, usage: v }); }
                1 => { let _ = cluster.add_sample(id, Sample { time, resource: Resource::Memory, usage: v }); }
                2 => { let _ = cluster.record_oom(id, time, v); }
                3 => { cluster.rate_limited_garbage_collect(time); }
                _ => { let _ = cluster.checkpoint_states(vpa, time); }
            }
        }
        let aggs = cluster.aggregate_state_by_container_name(vpa);
        // The dashboard's borrowed histograms are the merged aggregates' (same percentiles).
        let usage = cluster.usage_by_container_name(vpa);
        prop_assert_eq!(usage.len(), aggs.len());
        for (name, (cpu, memory)) in &usage {
            let agg = &aggs[*name];
            for p in [0.5, 0.9, 0.99] {
                let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
                prop_assert!(same(cpu.histogram().percentile(p), agg.cpu.histogram().percentile(p)));
                prop_assert!(same(memory.histogram().percentile(p), agg.memory.histogram().percentile(p)));
            }
        }
        let empty = Default::default();
        let r = tailor_engine::estimate::recommend(
            &RecommenderConfig::default(),
            &aggs,
            tailor_engine::estimate::VpaInput { policy: None, annotations: &empty, explain: true },
        );
        prop_assert!(r.is_ok());
    }
}
