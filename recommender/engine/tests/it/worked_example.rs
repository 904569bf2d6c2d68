//! The worked example of docs/design/upstream-recommender.md §4.2: one container, default flags, 250m every
//! minute for 24h and a constant 500 MiB → 296m/295m/592m and 628694953/627438575/1257826803 bytes.

use tailor_engine::replay::{ReplayConfig, Trace, TraceContainer, replay};

#[test]
fn spec_worked_example() {
    let t0 = 1_717_200_000.0;
    let samples = |v: f64| {
        (0..1440)
            .map(|k| [t0 + 60.0 * k as f64, v])
            .collect::<Vec<_>>()
    };
    let trace = Trace {
        id: "worked".into(),
        containers: vec![TraceContainer {
            name: "app".into(),
            cpu_samples: samples(0.25),
            memory_samples: samples(524_288_000.0),
            ..Default::default()
        }],
        ..Default::default()
    };
    let out = replay(&trace, &ReplayConfig::default(), false);
    let r = &out.recommendations[0];
    assert_eq!(
        (r.target.cpu, r.lower_bound.cpu, r.upper_bound.cpu),
        (Some(296), Some(295), Some(592))
    );
    assert_eq!(
        (r.target.memory, r.lower_bound.memory, r.upper_bound.memory),
        (Some(628_694_953), Some(627_438_575), Some(1_257_826_803))
    );
}
