//! Workloads of realistic size for benchmarks: a Deployment with its ReplicaSet revisions and a Tailor VPA
//! (`objects`), and a running pod of its newest revision (`pod`), shaped as `kubectl get -o json` shows
//! them — pod templates of several KB (containers with env, ports, probes, volume mounts), annotations
//! with the last-applied configuration, `managedFields` and status. Used by the webhook memory benchmark
//! (`examples/webhook_memory.rs`, through the stand-in) and the manifest reader benchmark
//! (`examples/manifest_files.rs`, written to files).

use serde_json::{Value, json};

/// A pod template of about `bytes` bytes of JSON: two containers with env, ports, probes and mounts.
pub fn template(app: &str, hash: &str, bytes: usize) -> Value {
    let env_count = (bytes / 2 / 90).max(1);
    let env: Vec<Value> = (0..env_count)
        .map(|i| json!({"name": format!("SETTING_{i:03}_{app}"), "value": format!("value-{i}-of-the-configuration-{app}")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name, "image": format!("registry.example.com/team/{app}/{name}:1.24.{hash}"),
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                              "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                               "periodSeconds": 5, "timeoutSeconds": 1, "failureThreshold": 3},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, {"name": "tmp", "mountPath": "/tmp"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
        })
    };
    json!({
        "metadata": {"labels": {"app": app, "pod-template-hash": hash, "team": "payments", "tier": "backend"},
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}},
        "spec": {
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}},
                        {"name": "tmp", "emptyDir": {}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app, "schedulerName": "default-scheduler", "securityContext": {}
        }
    })
}

pub fn managed_fields(manager: &str) -> Value {
    json!([{"manager": manager, "operation": "Update", "apiVersion": "apps/v1",
            "time": "2026-11-01T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:deployment.kubernetes.io/revision": {}},
                         "f:labels": {".": {}, "f:app": {}}},
                         "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:metadata": {}, "f:spec": {}}},
                         "f:status": {"f:availableReplicas": {}, "f:observedGeneration": {}, "f:replicas": {}}}}])
}

pub fn objects(ns: &str, i: usize, revisions: usize, template_bytes: usize) -> Vec<Value> {
    let app = format!("app-{i}");
    let mut out = vec![json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "uid": format!("d-{i}"), "generation": revisions,
            "labels": {"app": app},
            "annotations": {"deployment.kubernetes.io/revision": revisions.to_string(),
                            "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(template_bytes / 2)},
            "managedFields": managed_fields("kubectl-client-side-apply")},
        "spec": {"replicas": 3, "revisionHistoryLimit": revisions,
                 "selector": {"matchLabels": {"app": app}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": template(&app, "0", template_bytes)},
        "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 3,
                   "observedGeneration": revisions,
                   "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                                   "message": "Deployment has minimum availability.",
                                   "lastUpdateTime": "2026-11-01T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z"}]}
    })];
    for r in 0..revisions {
        let hash = revision_hash(i, r);
        let replicas = if r + 1 == revisions { 3 } else { 0 };
        out.push(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{app}-{hash}"), "namespace": ns, "uid": format!("rs-{i}-{r}"),
                "labels": {"app": app, "pod-template-hash": hash},
                "annotations": {"deployment.kubernetes.io/revision": (r + 1).to_string(),
                                "deployment.kubernetes.io/desired-replicas": "3",
                                "deployment.kubernetes.io/max-replicas": "4"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                                     "uid": format!("d-{i}"), "controller": true, "blockOwnerDeletion": true}],
                "managedFields": managed_fields("kube-controller-manager")},
            "spec": {"replicas": replicas,
                     "selector": {"matchLabels": {"app": app, "pod-template-hash": hash}},
                     "template": template(&app, &hash, template_bytes)},
            "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                       "fullyLabeledReplicas": replicas, "observedGeneration": 1}
        }));
    }
    out.push(json!({
        "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": app, "namespace": ns, "creationTimestamp": "2026-11-01T10:00:00Z"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                 "updatePolicy": {"updateMode": "Initial"}},
        "status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "250m", "memory": "300Mi"},
             "lowerBound": {"cpu": "200m", "memory": "250Mi"}, "upperBound": {"cpu": "1", "memory": "1Gi"}}]}}
    }));
    out
}

/// The hash of revision `r` of Deployment `i` (the ReplicaSet's `pod-template-hash`).
pub fn revision_hash(i: usize, r: usize) -> String {
    format!("{:08x}", i * 131 + r)
}

/// A running pod of the newest revision of Deployment `i` (as [`objects`] makes it), number `k`.
pub fn pod(ns: &str, i: usize, k: usize, revisions: usize, template_bytes: usize) -> Value {
    let app = format!("app-{i}");
    let hash = revision_hash(i, revisions.saturating_sub(1));
    let template = template(&app, &hash, template_bytes);
    let name = format!("{app}-{hash}-p{k:04}");
    let statuses: Vec<Value> = ["app", "sidecar"]
        .iter()
        .map(|c| {
            json!({"name": c, "ready": true, "restartCount": 0, "started": true,
                        "image": format!("registry.example.com/team/{app}/{c}:1.24.{hash}"),
                        "imageID": "registry.example.com/x@sha256:0123456789abcdef",
                        "containerID": format!("containerd://{name}-{c}"),
                        "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("pod-{i}-{k}"),
            "generateName": format!("{app}-{hash}-"), "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": template["metadata"]["labels"], "annotations": template["metadata"]["annotations"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                                 "uid": format!("rs-{i}-{}", revisions.saturating_sub(1)),
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields("kube-controller-manager")},
        "spec": template["spec"],
        "status": {"phase": "Running", "qosClass": "Burstable", "startTime": "2026-11-01T10:00:00Z",
                   "podIP": "10.0.0.1", "hostIP": "192.168.0.1",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T10:00:05Z"}],
                   "containerStatuses": statuses}
    })
}
