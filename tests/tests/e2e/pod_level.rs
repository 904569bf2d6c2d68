//! Pod-level resources (docs/pod-level-resources.md) on a real control plane, with `podLevelResources.enabled`
//! (hack/cluster/values.yaml): a Deployment whose pods declare `spec.resources` and two containers using
//! 300m + 200m CPU and 400Mi + 300Mi memory, under a Tailor VPA in `Recreate`. Its pods are always created
//! (the API server never refuses what the webhook returns), and the updater recreates them with a pod-level
//! envelope within 15 % of upstream's estimator applied to the pods' summed usage; they schedule on kwok nodes.

use super::*;

/// The reserved row of the envelope.
const POD_ROW: &str = "tailor.dev/pod";

/// Upstream's target for a constant usage `u` (docs/design/upstream-recommender.md §4): the 90th percentile of
/// CPU and of the memory peaks, plus the 15 % safety margin.
fn upstream_target(u: f64) -> f64 {
    u * 1.15
}

/// The pods' summed usage: 500m CPU and 700Mi memory.
const SUMMED: (i64, i64) = (500, 700 * MI);

/// The Deployment: pod-level requests far below the usage (so the first pods are outside the envelope's
/// bounds), containers `app` and `side` with small requests of their own and their usage in kwok's
/// per-container annotations (hack/cluster/kwok-usage.yaml).
fn deployment() -> Value {
    json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {
                    "tailor.dev/e2e-usage-cpu-app": "300m", "tailor.dev/e2e-usage-memory-app": "400Mi",
                    "tailor.dev/e2e-usage-cpu-side": "200m", "tailor.dev/e2e-usage-memory-side": "300Mi"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}},
                    "containers": [
                        {"name": "app", "image": IMAGE,
                         "resources": {"requests": {"cpu": "5m", "memory": "10Mi"}}},
                        {"name": "side", "image": IMAGE,
                         "resources": {"requests": {"cpu": "5m", "memory": "10Mi"}}}
                    ]
                }
            }
        }
    })
}

/// `(cpu millicores, memory bytes)` of the pod's pod-level requests.
fn pod_level(pod: &Pod) -> Result<(i64, i64)> {
    let requests = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.clone())
        .context("the pod has no pod-level requests")?;
    cpu_mem(&requests)
}

/// Whether `got` is within 15 % of `want`.
fn near(got: i64, want: f64) -> bool {
    (got as f64 - want).abs() <= 0.15 * want
}

/// The VPA's `tailor.dev/pod` target, once published.
async fn envelope(env: &E2e, ns: &str) -> Result<(i64, i64)> {
    let api = env.tailor_vpas(ns);
    wait_for(
        "the tailor.dev/pod envelope in the VPA's status",
        RECOMMENDATION_TIMEOUT,
        || async {
            let vpa = api.get("web").await?;
            let row = (vpa.status.as_ref())
                .and_then(|s| s.recommendation.as_ref())
                .and_then(|r| r.container_recommendations.as_ref())
                .and_then(|rows| {
                    rows.iter()
                        .find(|r| r.container_name.as_deref() == Some(POD_ROW))
                        .cloned()
                });
            match row {
                Some(r) if r.target.contains_key("cpu") && r.target.contains_key("memory") => {
                    Ok(Some(cpu_mem(&r.target)?))
                }
                _ => Ok(None),
            }
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn pods_with_pod_level_resources_are_recreated_with_their_envelope() {
    let env = e2e("pods_with_pod_level_resources_are_recreated_with_their_envelope").await;
    let env = &env;
    in_namespace(env, "podenvelope", |ns| async move {
        env.create_deployment_from(&ns, deployment()).await?;
        let pods = env.wait_running(&ns, "web", 2).await?;
        if pods[0].spec.as_ref().and_then(|s| s.resources.as_ref()).is_none() {
            bail!("the cluster dropped the pod-level spec.resources: it needs Kubernetes >= 1.34");
        }
        let original: BTreeSet<String> = pods.into_iter().filter_map(|p| p.metadata.uid).collect();
        env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate")).await?;
        let row = envelope(env, &ns).await?;
        let want = (upstream_target(SUMMED.0 as f64), upstream_target(SUMMED.1 as f64));
        if !near(row.0, want.0) || !near(row.1, want.1) {
            bail!("the envelope {row:?} is not within 15 % of upstream's estimate of the summed usage {want:?}");
        }
        let fresh = match env.wait_replaced(&ns, "web", &original).await {
            Ok(p) => p,
            Err(e) => bail!("{e:#}{}", env.replica_failures(&ns).await),
        };
        for pod in &fresh {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let got = pod_level(pod)?;
            if !near(got.0, want.0) || !near(got.1, want.1) {
                bail!("pod {name} was recreated with pod-level requests {got:?}, not within 15 % of {want:?}");
            }
            // The containers' own requests stay inside the envelope (here they are far below it: kept).
            let spec = pod.spec.as_ref().context("pod without spec")?;
            let mut sum = (0, 0);
            for c in &spec.containers {
                let r = c.resources.as_ref().and_then(|r| r.requests.clone()).unwrap_or_default();
                let (cpu, mem) = cpu_mem(&r)?;
                sum = (sum.0 + cpu, sum.1 + mem);
            }
            if sum.0 > got.0 || sum.1 > got.1 {
                bail!("pod {name}: container requests {sum:?} exceed the pod-level requests {got:?}");
            }
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                bail!("pod {name} runs without a node");
            }
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let updates = annotations.get("tailor.dev/updates").cloned().unwrap_or_default();
            if !updates.contains("pod cpu request") {
                bail!("pod {name}: the updates annotation does not name the envelope: {updates:?}");
            }
        }
        let failures = env.replica_failures(&ns).await;
        if !failures.is_empty() {
            bail!("the API server refused pods{failures}");
        }
        Ok(())
    })
    .await;
}
