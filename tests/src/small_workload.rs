//! The stand-in tests' small workload, as YAML the stand-in loads: a Deployment `app` in namespace `shop`
//! with its ReplicaSet and two running pods (`{app}-7c9f-0`, `{app}-7c9f-1`) requesting 100m and 128Mi, and
//! their PodMetrics. Shared by the integration tests and the examples that drive the real binaries.

/// The Deployment `app` in `shop`, its ReplicaSet and its two running pods.
pub fn deployment_with_pods(app: &str) -> String {
    let mut out = format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: shop, uid: dep-{app}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
status: {{replicas: 2}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: {app}-7c9f
  namespace: shop
  uid: rs-{app}
  labels: {{app: {app}, pod-template-hash: 7c9f}}
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: {app}, uid: dep-{app}, controller: true}}]
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {app}, pod-template-hash: 7c9f}}}}
  template:
    metadata: {{labels: {{app: {app}, pod-template-hash: 7c9f}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
status: {{replicas: 2}}
"#
    );
    for i in 0..2 {
        let owner = Owner {
            api_version: "apps/v1",
            kind: "ReplicaSet",
            name: &format!("{app}-7c9f"),
            uid: &format!("rs-{app}"),
        };
        let labels = format!("app: {app}, pod-template-hash: 7c9f");
        let name = format!("{app}-7c9f-{i}");
        out.push_str(&running_pod(
            "shop",
            &name,
            &format!("pod-{app}-{i}"),
            &labels,
            &owner,
        ));
    }
    out
}

/// The controller a pod names in its owner references.
pub struct Owner<'a> {
    /// `apiVersion`.
    pub api_version: &'a str,
    /// `kind`.
    pub kind: &'a str,
    /// `name`.
    pub name: &'a str,
    /// `uid`.
    pub uid: &'a str,
}

/// A running pod `name` in `ns` (uid `uid`, labels `labels` as YAML flow-map entries) of `owner`, on
/// `node-1`, with one container `app` requesting 100m and 128Mi.
pub fn running_pod(ns: &str, name: &str, uid: &str, labels: &str, owner: &Owner<'_>) -> String {
    let Owner {
        api_version,
        kind,
        name: owner_name,
        uid: owner_uid,
    } = owner;
    format!(
        r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  uid: {uid}
  labels: {{{labels}}}
  ownerReferences: [{{apiVersion: {api_version}, kind: {kind}, name: {owner_name}, uid: {owner_uid}, controller: true}}]
spec:
  nodeName: node-1
  containers:
    - name: app
      image: nginx
      resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}
status:
  phase: Running
  startTime: "2026-01-01T00:00:00Z"
  containerStatuses:
    - name: app
      ready: true
      restartCount: 0
      image: nginx
      imageID: ""
      state: {{running: {{startedAt: "2026-01-01T00:00:00Z"}}}}
"#
    )
}

/// The PodMetrics of pod `i` of `app` in `shop`: one container `app` using `cpu` and `memory`.
pub fn pod_metrics(app: &str, i: usize, cpu: &str, memory: &str) -> String {
    format!(
        r#"
---
apiVersion: metrics.k8s.io/v1beta1
kind: PodMetrics
metadata: {{name: {app}-7c9f-{i}, namespace: shop}}
timestamp: "2026-01-01T00:00:00Z"
window: 30s
containers: [{{name: app, usage: {{cpu: {cpu}, memory: {memory}}}}}]
"#
    )
}
