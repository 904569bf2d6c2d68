//! The pod-level envelope at admission (docs/pod-level-resources.md): set from the VPA's `tailor.dev/pod`
//! row behind `--pod-level-resources`, container requests scaled into it, refusals, and the gate off.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use tailor_core::sizing::{POD_ROW, PatchOptions, UPDATES_ANNOTATION};
use tailor_crds::VerticalPodAutoscaler;
use tailor_testkit::fixtures::{PodFixture, VpaFixture};

use super::*;

fn options() -> PatchOptions {
    PatchOptions {
        pod_level_resources: true,
        ..Default::default()
    }
}

fn vpa(pod_row: Value) -> VerticalPodAutoscaler {
    VpaFixture::new("default", "web-vpa")
        .uid("u1")
        .target("Deployment", "web")
        .mode("Recreate")
        .recommendation("app", "300m", "400Mi")
        .recommendation("sidecar", "200m", "300Mi")
        .recommendation_target(POD_ROW, pod_row)
        .build()
}

fn pod_json(pod_resources: Value, app: Value, sidecar: Value) -> Value {
    PodFixture::generated("default", "web-abc-")
        .annotations(json!({}))
        .pod_resources(pod_resources)
        .container_resources("app", app)
        .container_resources("sidecar", sidecar)
        .json()
}

fn patched(p: &Value, v: &VerticalPodAutoscaler, o: &PatchOptions) -> (Value, PodPatch) {
    let pod: Pod = serde_json::from_value(p.clone()).unwrap();
    let result = patch_pod(&pod, v, &[], o).unwrap();
    let mut doc = p.clone();
    json_patch::patch(&mut doc, &result.patch.0).unwrap();
    (doc, result)
}

#[test]
fn the_envelope_is_set_and_container_requests_scaled_into_it() {
    let p = pod_json(
        json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
        json!({"requests": {"cpu": "600m", "memory": "512Mi"}}),
        json!({"requests": {"cpu": "200m", "memory": "256Mi"}}),
    );
    let v = vpa(json!({"cpu": "400m", "memory": "512Mi"}));
    let (doc, result) = patched(&p, &v, &options());
    assert_eq!(result.envelope_refused, None);
    assert!(result.pod_level.is_empty(), "{:?}", result.pod_level);
    let pod = &doc["spec"]["resources"];
    assert_eq!(pod["requests"]["cpu"], "400m");
    assert_eq!(pod["requests"]["memory"], "512Mi");
    // Limits keep the pod's ratio (2:1).
    assert_eq!(pod["limits"]["cpu"], "800m");
    assert_eq!(pod["limits"]["memory"], "1Gi");
    // 800m of containers into 400m: each halved; 768Mi into 512Mi: each by two thirds.
    let c = &doc["spec"]["containers"];
    assert_eq!(c[0]["resources"]["requests"]["cpu"], "300m");
    assert_eq!(c[1]["resources"]["requests"]["cpu"], "100m");
    let mem = |i: usize| {
        let q = Quantity(
            c[i]["resources"]["requests"]["memory"]
                .as_str()
                .unwrap()
                .into(),
        );
        tailor_core::quantity::amount("memory", &q).unwrap()
    };
    assert!(mem(0) + mem(1) <= 512 << 20, "{} + {}", mem(0), mem(1));
    assert!(mem(0) > 2 * mem(1) - 2 && mem(0) < 2 * mem(1) + 2);
    let note = doc["metadata"]["annotations"][UPDATES_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(note.contains("pod cpu request 400m"), "{note}");
}

#[test]
fn container_requests_inside_the_envelope_are_kept() {
    let p = pod_json(
        json!({"requests": {"cpu": "1"}}),
        json!({"requests": {"cpu": "100m"}}),
        json!({}),
    );
    let v = vpa(json!({"cpu": "500m", "memory": "700Mi"}));
    let (doc, result) = patched(&p, &v, &options());
    assert_eq!(doc["spec"]["resources"]["requests"]["cpu"], "500m");
    assert!(doc["spec"]["resources"].get("limits").is_none());
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
    // Memory is not set at pod level: sized per container, as without the flag.
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "400Mi"
    );
    assert!(result.pod_level.is_empty());
}

#[test]
fn a_container_limit_above_the_new_pod_limit_refuses_the_envelope() {
    let p = pod_json(
        json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}),
        json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "900m"}}),
        json!({}),
    );
    let v = vpa(json!({"cpu": "500m"}));
    let (doc, result) = patched(&p, &v, &options());
    assert!(matches!(
        result.envelope_refused,
        Some(EnvelopeRefused::ContainerLimit { .. })
    ));
    // Left as without the flag: pod-level CPU untouched everywhere.
    assert_eq!(doc["spec"]["resources"], p["spec"]["resources"]);
    assert_eq!(
        doc["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
    assert_eq!(result.pod_level, ["cpu"]);
}

#[test]
fn a_request_that_follows_its_limit_cannot_be_scaled() {
    let p = pod_json(
        json!({"requests": {"memory": "1Gi"}}),
        json!({"limits": {"memory": "800Mi"}}),
        json!({}),
    );
    let v = vpa(json!({"memory": "512Mi"}));
    let (doc, result) = patched(&p, &v, &options());
    assert!(matches!(
        result.envelope_refused,
        Some(EnvelopeRefused::Unscalable { .. })
    ));
    assert_eq!(doc["spec"]["resources"]["requests"]["memory"], "1Gi");
}

#[test]
fn the_gate_off_is_exactly_todays_patch() {
    let p = pod_json(
        json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
        json!({"requests": {"cpu": "600m"}}),
        json!({}),
    );
    let v = vpa(json!({"cpu": "400m", "memory": "512Mi"}));
    let pod: Pod = serde_json::from_value(p.clone()).unwrap();
    let off = patch_pod(&pod, &v, &[], &PatchOptions::default()).unwrap();
    let mut without_row = v.clone();
    if let Some(rows) = without_row
        .status
        .as_mut()
        .and_then(|s| s.recommendation.as_mut())
        .and_then(|r| r.container_recommendations.as_mut())
    {
        rows.retain(|r| r.container_name.as_deref() != Some(POD_ROW));
    }
    let before = patch_pod(&pod, &without_row, &[], &PatchOptions::default()).unwrap();
    assert_eq!(off, before);
    assert_eq!(off.pod_level, ["cpu", "memory"]);
    // The gate on but no row: the same as well.
    let no_row = patch_pod(&pod, &without_row, &[], &options()).unwrap();
    assert_eq!(no_row.patch, before.patch);
}
