//! The objects of the webhook benchmark, shared by `loadgen setup` and `admission/benches/review.rs`: N Tailor
//! VPAs, each with its Deployment and ReplicaSet, over namespaces with one container LimitRange each.

/// The namespace and name of workload `i`.
pub fn workload(i: usize, namespaces: usize) -> (String, String) {
    (format!("bench-{}", i % namespaces), format!("app-{i}"))
}

/// The manifests of `vpas` workloads in `namespaces` namespaces, as one multi-document YAML.
pub fn manifests(vpas: usize, namespaces: usize) -> String {
    let mut out = String::new();
    for i in 0..vpas {
        let (ns, name) = workload(i, namespaces);
        out.push_str(&format!(
            r#"---
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  updatePolicy: {{updateMode: Recreate}}
  resourcePolicy:
    containerPolicies:
      - {{containerName: "*", minAllowed: {{cpu: 10m, memory: 32Mi}}, maxAllowed: {{cpu: "4", memory: 8Gi}}}}
status:
  recommendation:
    containerRecommendations:
      - containerName: app
        target: {{cpu: {cpu}m, memory: {mem}Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, uid: d-{i}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: {name}-7f9c
  namespace: {ns}
  uid: rs-{i}
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: {name}, uid: d-{i}, controller: true}}]
spec:
  selector: {{matchLabels: {{app: {name}, pod-template-hash: 7f9c}}}}
  template:
    metadata: {{labels: {{app: {name}, pod-template-hash: 7f9c}}}}
    spec: {{containers: [{{name: app, image: nginx}}]}}
"#,
            cpu = 100 + i % 400,
            mem = 128 + i % 512,
        ));
    }
    for n in 0..namespaces {
        out.push_str(&format!(
            "---\napiVersion: v1\nkind: LimitRange\nmetadata: {{name: limits, namespace: bench-{n}}}\nspec:\n  limits:\n    - type: Container\n      max: {{cpu: \"8\", memory: 16Gi}}\n"
        ));
    }
    out
}
