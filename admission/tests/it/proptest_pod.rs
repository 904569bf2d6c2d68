//! Property test of the pod patch: for random pods, VPAs and LimitRanges the computation never panics and
//! its patch always applies to the pod.

use k8s_openapi::api::core::v1::{LimitRange, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};
use tailor_admission::pod::patch_pod;
use tailor_core::sizing::PatchOptions;
use tailor_crds::VerticalPodAutoscaler;

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        10 => (0u64..5000).prop_map(|n| format!("{n}m")),
        10 => (0u64..64).prop_map(|n| n.to_string()),
        10 => (0u64..4096).prop_map(|n| format!("{n}Mi")),
        2 => (1u64..8).prop_map(|n| format!("{n}Ei")),
        5 => (0u64..1000).prop_map(|n| format!("{n}k")),
        3 => Just("0".to_owned()),
        2 => Just("0.5".to_owned()),
        2 => Just("1e3".to_owned()),
        2 => Just("9223372036854775807".to_owned()),
        2 => Just("187500u".to_owned()),
        1 => Just("-1".to_owned()),
        1 => Just("garbage".to_owned()),
    ]
}

fn resources() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("cpu"),
        Just("memory"),
        Just("nvidia.com/gpu"),
        Just("")
    ];
    prop::option::of(prop::collection::btree_map(name, quantity(), 0..3)).prop_map(|m| match m {
        Some(m) => json!(m),
        None => Value::Null,
    })
}

fn container(name: String) -> impl Strategy<Value = Value> {
    (resources(), resources(), any::<bool>()).prop_map(move |(req, lim, has_res)| {
        let mut c = json!({"name": name});
        if has_res {
            let mut r = json!({});
            if !req.is_null() {
                r["requests"] = req;
            }
            if !lim.is_null() {
                r["limits"] = lim;
            }
            c["resources"] = r;
        }
        c
    })
}

fn pod() -> impl Strategy<Value = Value> {
    (1usize..4, any::<bool>(), any::<bool>())
        .prop_flat_map(|(n, annotations, sidecar)| {
            let containers: Vec<_> = (0..n).map(|i| container(format!("c{i}"))).collect();
            (containers, Just(annotations), Just(sidecar), container("side".into()))
        })
        .prop_map(|(containers, annotations, sidecar, mut side)| {
            let mut p = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": containers}});
            if annotations {
                p["metadata"]["annotations"] = json!({"a": "b"});
            }
            if sidecar {
                side["restartPolicy"] = json!("Always");
                p["spec"]["initContainers"] = json!([side]);
            }
            p
        })
}

fn rec_list() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop_oneof![Just("cpu"), Just("memory"), Just("")],
        quantity(),
        0..3,
    )
    .prop_map(|m| json!(m))
}

fn vpa() -> impl Strategy<Value = Value> {
    let rec = (
        0usize..5,
        rec_list(),
        prop::option::of(rec_list()),
        prop::option::of(rec_list()),
    )
        .prop_map(|(i, target, lower, upper)| {
            let mut r = json!({"containerName": format!("c{i}"), "target": target});
            if let Some(l) = lower {
                r["lowerBound"] = l;
            }
            if let Some(u) = upper {
                r["upperBound"] = u;
            }
            r
        });
    let policy = (
        prop_oneof![Just("*"), Just("c0"), Just("c1")],
        prop::option::of(rec_list()),
        prop::option::of(rec_list()),
        prop_oneof![Just("RequestsAndLimits"), Just("RequestsOnly")],
        prop_oneof![Just("Auto"), Just("Off")],
    )
        .prop_map(|(name, min, max, cv, mode)| {
            let mut p = json!({"containerName": name, "controlledValues": cv, "mode": mode});
            if let Some(m) = min {
                p["minAllowed"] = m;
            }
            if let Some(m) = max {
                p["maxAllowed"] = m;
            }
            p
        });
    (
        prop::collection::vec(rec, 0..4),
        prop::collection::vec(policy, 0..3),
        prop_oneof![Just("Recreate"), Just("Off"), Just("Initial")],
        prop::option::of((1i32..4, quantity())),
    )
        .prop_map(|(recs, policies, mode, boost)| {
            let mut v = json!({
                "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "v", "namespace": "default"},
                "spec": {"targetRef": {"kind": "Deployment", "name": "d"}, "updatePolicy": {"updateMode": mode},
                         "resourcePolicy": {"containerPolicies": policies}},
                "status": {"recommendation": {"containerRecommendations": recs}}
            });
            if let Some((factor, q)) = boost {
                v["spec"]["startupBoost"] = json!({"cpu": {"type": if factor > 2 { "Quantity" } else { "Factor" },
                    "factor": factor, "quantity": q}});
            }
            v
        })
}

fn limit_range() -> impl Strategy<Value = Value> {
    let item = (
        prop_oneof![Just("Container"), Just("Pod")],
        prop::option::of(rec_list()),
        prop::option::of(rec_list()),
        prop::option::of(rec_list()),
        prop::option::of(rec_list()),
    )
        .prop_map(|(t, min, max, default, ratio)| {
            let mut i = json!({"type": t});
            for (k, v) in [
                ("min", min),
                ("max", max),
                ("default", default),
                ("maxLimitRequestRatio", ratio),
            ] {
                if let Some(v) = v {
                    i[k] = v;
                }
            }
            i
        });
    prop::collection::vec(item, 0..3).prop_map(|items| {
        json!({"metadata": {"name": "lr", "namespace": "default"}, "spec": {"limits": items}})
    })
}

proptest! {
    // A few percent of generated pods are refused by the sizing (an unparsable quantity, say) and skipped;
    // the skip budget grows with the case count so that long runs (hack/fuzz.sh) are not cut off by it.
    #![proptest_config(ProptestConfig {
        cases: crate::fuzz::cases(512),
        max_global_rejects: crate::fuzz::cases(512).max(1024),
        ..ProptestConfig::default()
    })]

    #[test]
    fn patch_always_applies(
        pod_json in pod(),
        vpa_json in vpa(),
        lr_json in limit_range(),
        boost in any::<bool>(),
        ratio in any::<bool>(),
        sidecars in any::<bool>(),
    ) {
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let vpa: VerticalPodAutoscaler = serde_json::from_value(vpa_json).unwrap();
        let lr: LimitRange = serde_json::from_value(lr_json).unwrap();
        let options = PatchOptions {
            cpu_startup_boost: boost,
            max_allowed_cpu_boost: None,
            honor_max_limit_request_ratio: ratio,
            native_sidecars: sidecars,
            floor: None,
            pod_level_resources: false,
        };
        let outcome = patch_pod(&pod, &vpa, &[lr], &options);
        prop_assume!(outcome.is_ok());
        if let Ok(result) = outcome {
            let mut doc = serde_json::to_value(&pod).unwrap();
            json_patch::patch(&mut doc, &result.patch.0).map_err(|e| {
                TestCaseError::fail(format!("patch does not apply: {e}: {}", serde_json::to_string(&result.patch).unwrap()))
            })?;
            // The patched pod is still a valid Pod.
            let _: Pod = serde_json::from_value(doc).unwrap();
        }
    }
}
