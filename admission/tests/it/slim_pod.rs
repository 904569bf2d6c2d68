//! The review's slim pod decoder (`slim_pod::decode_pod`) against k8s-openapi's full one: on every pod of the
//! conformance vectors and on a production-shaped pod, the slim pod equals the full pod with the unread
//! fields left out, and the patch computed from it is the same, byte for byte.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, LimitRange, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use tailor_admission::pod::patch_pod;
use tailor_admission::slim_pod::decode_pod;
use tailor_core::sizing::PatchOptions;
use tailor_crds::VerticalPodAutoscaler;

use crate::conformance_support::load;

/// The full pod with only what the slim decoder reads.
fn projected(pod: &Pod) -> Pod {
    let container = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        restart_policy: c.restart_policy.clone(),
        ..Container::default()
    };
    let status = |s: &ContainerStatus| ContainerStatus {
        name: s.name.clone(),
        resources: s.resources.clone(),
        ..ContainerStatus::default()
    };
    let m = &pod.metadata;
    Pod {
        metadata: ObjectMeta {
            name: m.name.clone(),
            generate_name: m.generate_name.clone(),
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m.owner_references.clone(),
            ..ObjectMeta::default()
        },
        spec: pod.spec.as_ref().map(|s| PodSpec {
            containers: s.containers.iter().map(container).collect(),
            init_containers: s
                .init_containers
                .as_ref()
                .map(|l| l.iter().map(container).collect()),
            resources: s.resources.clone(),
            ..PodSpec::default()
        }),
        status: pod.status.as_ref().map(|s| PodStatus {
            container_statuses: s
                .container_statuses
                .as_ref()
                .map(|l| l.iter().map(status).collect()),
            init_container_statuses: s
                .init_container_statuses
                .as_ref()
                .map(|l| l.iter().map(status).collect()),
            ..PodStatus::default()
        }),
    }
}

/// Every object under `v` that looks like a pod (has `spec.containers`).
fn pods_in(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if m.get("spec").and_then(|s| s.get("containers")).is_some() {
                out.push(v.clone());
            }
            m.values().for_each(|x| pods_in(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| pods_in(x, out)),
        _ => {}
    }
}

/// A pod as the API server sends a Deployment's pod: most of it is fields sizing does not read.
fn production_pod() -> Value {
    let probe = json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7f9c-", "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": "7f9c"},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f9c", "uid": "u", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}}}]},
        "spec": {
            "initContainers": [
                {"name": "migrate", "image": "m", "command": ["migrate"], "resources": {"requests": {"cpu": "100m"}}},
                {"name": "proxy", "image": "p", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
            ],
            "containers": [
                {"name": "app", "image": "a", "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "livenessProbe": probe, "readinessProbe": probe,
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}},
                {"name": "sidecar", "image": "s", "resources": {"limits": {"memory": "128Mi"}}}
            ],
            "volumes": [{"name": "config", "configMap": {"name": "web"}}],
            "affinity": {"podAntiAffinity": {}}, "tolerations": [{"key": "k", "operator": "Exists"}]
        },
        "status": {"phase": "Pending", "containerStatuses": [{"name": "app", "image": "a", "imageID": "", "ready": false,
            "restartCount": 0, "resources": {"requests": {"cpu": "300m"}}}]}
    })
}

#[test]
fn the_slim_pod_is_the_full_pod_without_the_unread_fields() {
    let mut pods = vec![production_pod()];
    pods_in(
        &Value::Array(load("upstream-diff/admission-cases.json")),
        &mut pods,
    );
    pods_in(&Value::Array(load("admission/unit-cases.json")), &mut pods);
    assert!(pods.len() > 100, "{} pods", pods.len());
    let mut compared = 0;
    for pod in &pods {
        let text = pod.to_string();
        let Ok(full) = serde_json::from_str::<Pod>(&text) else {
            continue;
        };
        let slim = decode_pod(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(slim, projected(&full), "{text}");
        compared += 1;
    }
    assert!(compared > 100, "{compared} pods compared");
}

#[test]
fn the_slim_pod_gets_the_same_patch() {
    let options = [
        PatchOptions::default(),
        PatchOptions {
            native_sidecars: true,
            cpu_startup_boost: true,
            honor_max_limit_request_ratio: true,
            ..PatchOptions::default()
        },
    ];
    let mut cases = load("upstream-diff/admission-cases.json");
    // The production-shaped pod against the first case's VPA.
    let mut production = cases[0].clone();
    production["pod"] = production_pod();
    cases.push(production);
    let mut patched = 0;
    for case in &cases {
        let text = case["pod"].to_string();
        let full: Pod = serde_json::from_str(&text).unwrap();
        let slim = decode_pod(&text).unwrap();
        let mut vpa = case["vpa"].clone();
        vpa["apiVersion"] = json!("autoscaling.tailor.dev/v1");
        let vpa: VerticalPodAutoscaler = serde_json::from_value(vpa).unwrap();
        let lrs: Vec<LimitRange> = match &case["limitRange"] {
            Value::Null => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|i| serde_json::from_value(i.clone()).unwrap())
                .collect(),
            item => vec![serde_json::from_value(item.clone()).unwrap()],
        };
        for options in &options {
            let ours = patch_pod(&slim, &vpa, &lrs, options).map(|p| p.patch);
            let theirs = patch_pod(&full, &vpa, &lrs, options).map(|p| p.patch);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(
                        serde_json::to_string(&a).unwrap(),
                        serde_json::to_string(&b).unwrap(),
                        "{}",
                        case["id"]
                    );
                    patched += usize::from(!a.0.is_empty());
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{}", case["id"]),
                (a, b) => panic!("{}: slim {a:?}, full {b:?}", case["id"]),
            }
        }
    }
    assert!(patched > 100, "{patched} patches compared");
}
