//! The pod-CREATE AdmissionReviews the load generator sends, as the API server sends them when ReplicaSet
//! `app-N-7f9c` creates a pod: a small pod (one container, ≈ 1.7 KB of review) and a realistic one
//! (≈ 8 KB: an init container, two containers, env, probes, volumes and mounts, the projected service-account
//! volume the API server adds, affinity, the labels and annotations of a Deployment's pod template, and
//! `metadata.managedFields` as the API server records them before admission).

use hyper::body::Bytes;
use serde_json::{Value, json};

use crate::workload;

/// Which pod the reviews carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodShape {
    /// One container, resources and the API server's defaults (≈ 1.7 KB of review).
    Small,
    /// A Deployment's pod as it looks in production (≈ 8 KB of review).
    Realistic,
}

impl PodShape {
    /// The label of the shape in the figures.
    pub fn as_str(self) -> &'static str {
        match self {
            PodShape::Small => "small",
            PodShape::Realistic => "realistic",
        }
    }
}

/// The review of the small pod of workload `i`.
pub fn review_body(i: usize, namespaces: usize) -> Bytes {
    review_body_of(PodShape::Small, i, namespaces)
}

/// The review of a pod of `shape` for workload `i` (its namespace and owner as `setup` writes them).
pub fn review_body_of(shape: PodShape, i: usize, namespaces: usize) -> Bytes {
    let (ns, name) = workload(i, namespaces);
    let object = match shape {
        PodShape::Small => small_pod(i, &ns, &name),
        PodShape::Realistic => realistic_pod(i, &ns, &name),
    };
    let pod_kind = json!({"group": "", "version": "v1", "kind": "Pod"});
    let pods = json!({"group": "", "version": "v1", "resource": "pods"});
    let review = Review {
        kind: "AdmissionReview",
        api_version: "admission.k8s.io/v1",
        request: Request {
            uid: format!("bench-{i}"),
            kind: pod_kind.clone(),
            resource: pods.clone(),
            request_kind: pod_kind,
            request_resource: pods,
            name: "",
            namespace: ns,
            operation: "CREATE",
            user_info: json!({"username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"]}),
            object,
            old_object: Value::Null,
            dry_run: false,
            options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
        },
    };
    Bytes::from(serde_json::to_vec(&review).unwrap_or_default())
}

/// An AdmissionReview as the API server writes it: its fields in the order of Go's types (`json!` would
/// sort them, putting `object` before `resource`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    kind: &'static str,
    api_version: &'static str,
    request: Request,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    kind: Value,
    resource: Value,
    request_kind: Value,
    request_resource: Value,
    name: &'static str,
    namespace: String,
    operation: &'static str,
    user_info: Value,
    object: Value,
    old_object: Value,
    dry_run: bool,
    options: Value,
}

fn owner(i: usize, name: &str) -> Value {
    json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-7f9c"),
        "uid": format!("rs-{i}"), "controller": true, "blockOwnerDeletion": true}])
}

fn tolerations() -> Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ])
}

fn small_pod(i: usize, ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-7f9c-"), "namespace": ns,
            "labels": {"app": name, "pod-template-hash": "7f9c"},
            "ownerReferences": owner(i, name)
        },
        "spec": {
            "containers": [{
                "name": "app", "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": tolerations(),
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {}
    })
}

fn probe(path: &str, initial: u32, period: u32) -> Value {
    json!({"httpGet": {"path": path, "port": "http", "scheme": "HTTP"}, "initialDelaySeconds": initial,
        "timeoutSeconds": 2, "periodSeconds": period, "successThreshold": 1, "failureThreshold": 3})
}

const SECRET_KEYS: [&str; 2] = ["DATABASE_PASSWORD", "API_TOKEN"];

fn app_container() -> Value {
    let mut env = vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}),
        json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}),
        json!({"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1"}}}),
        json!({"name": "LOG_LEVEL", "value": "info"}),
        json!({"name": "LOG_FORMAT", "value": "json"}),
        json!({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc:4317"}),
        json!({"name": "DATABASE_URL", "value": "postgres://checkout@postgres.data.svc:5432/checkout?sslmode=require"}),
    ];
    env.extend(SECRET_KEYS.iter().map(|k| {
        json!({"name": k, "valueFrom": {"secretKeyRef": {"name": "checkout-secrets", "key": k.to_lowercase()}}})
    }));
    json!({
        "name": "app", "image": "registry.example.com/shop/checkout:v2.14.3",
        "args": ["--config=/etc/checkout/config.yaml", "--listen=:8080"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "envFrom": [{"configMapRef": {"name": "checkout-env"}}],
        "env": env,
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/checkout", "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "livenessProbe": probe("/healthz", 10, 10),
        "readinessProbe": probe("/readyz", 5, 5),
        "startupProbe": probe("/healthz", 0, 2),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "runAsUser": 10001, "capabilities": {"drop": ["ALL"]}}
    })
}

fn sidecar_container() -> Value {
    json!({
        "name": "envoy", "image": "envoyproxy/envoy:v1.31.2",
        "args": ["-c", "/etc/envoy/envoy.yaml", "--service-cluster", "checkout"],
        "ports": [{"name": "envoy-admin", "containerPort": 9901, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [
            {"name": "envoy-config", "mountPath": "/etc/envoy", "readOnly": true},
            {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 9901, "scheme": "HTTP"}, "timeoutSeconds": 1,
            "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": false, "runAsUser": 101}
    })
}

fn init_container() -> Value {
    json!({
        "name": "migrate", "image": "registry.example.com/shop/checkout:v2.14.3",
        "command": ["/app/checkout", "migrate", "--wait-for-db=60s"],
        "env": [{"name": "DATABASE_URL", "value": "postgres://checkout@postgres.data.svc:5432/checkout?sslmode=require"},
            {"name": "DATABASE_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "checkout-secrets", "key": "database_password"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
    })
}

fn volumes() -> Value {
    json!([
        {"name": "config", "configMap": {"name": "checkout-config", "defaultMode": 420}},
        {"name": "envoy-config", "configMap": {"name": "checkout-envoy", "defaultMode": 420}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]}}
    ])
}

/// What the replicaset-controller's create records in `metadata.managedFields` (fieldsV1 mirrors the pod).
fn managed_fields(i: usize) -> Value {
    let c = |name: &str| format!("k:{{\"name\":\"{name}\"}}");
    let container = json!({".": {}, "f:args": {}, "f:env": {".": {}, "k:{\"name\":\"LOG_LEVEL\"}": {".": {}, "f:name": {}, "f:value": {}},
            "k:{\"name\":\"POD_NAME\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
        "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}},
        "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
        "f:readinessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}}},
        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:securityContext": {".": {}, "f:allowPrivilegeEscalation": {}, "f:capabilities": {".": {}, "f:drop": {}}},
        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/etc/checkout\"}": {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}}});
    json!([{
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-26T08:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:annotations": {".": {}, "f:checksum/config": {}, "f:kubectl.kubernetes.io/restartedAt": {}, "f:prometheus.io/port": {}, "f:prometheus.io/scrape": {}},
                "f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:app.kubernetes.io/name": {}, "f:app.kubernetes.io/version": {}, "f:pod-template-hash": {}},
                "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"rs-{i}\"}}"): {}}},
            "f:spec": {"f:affinity": {".": {}, "f:podAntiAffinity": {}},
                "f:containers": {c("app"): container.clone(), c("envoy"): {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}},
                "f:initContainers": {c("migrate"): {".": {}, "f:command": {}, "f:image": {}, "f:name": {}}},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {}, "f:topologySpreadConstraints": {},
                "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {}, "f:name": {}}, "k:{\"name\":\"tmp\"}": {".": {}, "f:emptyDir": {}, "f:name": {}}}}
        }
    }])
}

fn realistic_pod(i: usize, ns: &str, name: &str) -> Value {
    let labels = json!({"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop",
        "app.kubernetes.io/version": "v2.14.3", "team": "checkout", "pod-template-hash": "7f9c"});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-7f9c-"), "namespace": ns,
            "labels": labels,
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T10:15:00Z",
                "checksum/config": "9f2c1e0b7a4d3c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6"},
            "ownerReferences": owner(i, name),
            "managedFields": managed_fields(i)
        },
        "spec": {
            "initContainers": [init_container()],
            "containers": [app_container(), sidecar_container()],
            "volumes": volumes(),
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 45, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "checkout", "serviceAccount": "checkout",
            "securityContext": {"fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}}]}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": name}}}],
            "schedulerName": "default-scheduler",
            "tolerations": tolerations(),
            "priorityClassName": "shop-critical", "priority": 100000,
            "enableServiceLinks": false, "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    })
}
