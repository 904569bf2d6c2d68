//! Pods created by the real ReplicaSet controller are sized at admission by the API server calling the webhook.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn new_pods_get_recommended_requests_and_proportional_limits() {
    let env = e2e("new_pods_get_recommended_requests_and_proportional_limits").await;
    let env = &env;
    in_namespace(env, "admit", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        let before = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let after = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        let pod = &pods[0];
        let (requests, limits) = container_resources(pod)?;
        let (req_cpu, req_mem) = cpu_mem(&requests)?;
        let (lim_cpu, lim_mem) = cpu_mem(&limits)?;
        // The recommender may have moved between reading the status and admitting the pod.
        let matches = |(cpu, mem): (i64, i64)| req_cpu == cpu && req_mem == mem;
        if !matches(before) && !matches(after) {
            bail!("pod requests ({req_cpu}m, {req_mem}) are not the recommendation (before {before:?}, after {after:?})");
        }
        // The original limit/request ratio is 2 for both resources.
        if (lim_cpu - 2 * req_cpu).abs() > 1 || (lim_mem - 2 * req_mem).abs() > 1 {
            bail!("limits ({lim_cpu}m, {lim_mem}) are not twice the requests ({req_cpu}m, {req_mem})");
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the admitted pod lacks the tailor.dev/updates annotation: {annotations:?}");
        }
        if annotations.contains_key("vpaUpdates") {
            bail!("Tailor wrote the upstream vpaUpdates annotation");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn off_mode_leaves_pods_alone() {
    let env = e2e("off_mode_leaves_pods_alone").await;
    let env = &env;
    in_namespace(env, "off", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        // Wait for a recommendation so the webhook would have something to apply.
        env.recommendation(&ns, "web").await?;
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let (requests, limits) = container_resources(&pods[0])?;
        let got = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        let want = ((10, 20 * 1024 * 1024), (20, 40 * 1024 * 1024));
        if got != want {
            bail!("an Off VPA changed the pod: (requests, limits) {got:?}, expected {want:?}");
        }
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if annotations.contains_key("tailor.dev/updates") {
            bail!("an Off VPA annotated the pod: {annotations:?}");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn limit_range_caps_the_webhooks_requests() {
    let env = e2e("limit_range_caps_the_webhooks_requests").await;
    let env = &env;
    in_namespace(env, "limits", |ns| async move {
        // Below twice any recommendation (at least 25m and 250Mi): the proportional limits must be capped.
        let max = (40, 200 * MI);
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "caps"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "40m", "memory": "200Mi"}}]}
        }))?;
        Api::<LimitRange>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &lr)
            .await?;
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        let target = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        // A pod beyond the LimitRange's max would be rejected by the API server after the webhook.
        let pods = env.recreate_pods_explained(&ns, "web", 1).await?;
        let (requests, limits) = container_resources(&pods[0])?;
        let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        if limits.0 > max.0 || limits.1 > max.1 {
            bail!("limits {limits:?} exceed the LimitRange max {max:?}");
        }
        if requests.0 > limits.0 || requests.1 > limits.1 {
            bail!("requests {requests:?} above limits {limits:?}");
        }
        if requests == ORIGINAL_REQUESTS {
            bail!("the webhook left the pod at its original requests {requests:?}");
        }
        if requests.1 >= target.1 {
            bail!("memory request {} not capped below the recommendation {} although 2× it exceeds the max", requests.1, target.1);
        }
        if !limits_in_proportion(requests, limits) {
            bail!("capping broke the limit/request ratio of 2: requests {requests:?}, limits {limits:?}");
        }
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the capped pod lacks the tailor.dev/updates annotation: {annotations:?}");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn pod_level_resources_bound_the_webhooks_requests() {
    let env = e2e("pod_level_resources_bound_the_webhooks_requests").await;
    let env = &env;
    in_namespace(env, "podlevel", |ns| async move {
        // A pod-level budget below any recommendation (at least 25m and 250Mi for the one container).
        env.create_deployment_from(&ns, json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "resources": {
                            "requests": {"cpu": "20m", "memory": "64Mi"},
                            "limits": {"cpu": "40m", "memory": "128Mi"}
                        },
                        "containers": [{
                            "name": "app",
                            "image": IMAGE,
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "20Mi"},
                                "limits": {"cpu": "20m", "memory": "40Mi"}
                            }
                        }]
                    }
                }
            }
        }))
        .await?;
        let pods = env.wait_running(&ns, "web", 1).await?;
        if pods[0].spec.as_ref().and_then(|s| s.resources.as_ref()).is_none() {
            bail!(
                "the cluster dropped the pod-level spec.resources: it needs Kubernetes >= 1.34 or the \
                 PodLevelResources feature gate (hack/kind-e2e.sh sets it for older node images)"
            );
        }
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        env.recommendation(&ns, "web").await?;
        // Requests raised beyond the pod-level budget make the API server reject the pod after the webhook,
        // and the ReplicaSet could not create any.
        let pods = env.recreate_pods_explained(&ns, "web", 1).await?;
        let pod = &pods[0];
        let spec = pod.spec.as_ref().context("pod without spec")?;
        // The suite runs with podLevelResources.enabled (hack/cluster/values.yaml): the webhook may set the
        // VPA's pod-level envelope (docs/pod-level-resources.md), keeping its limit/request ratio of 2.
        let level = spec.resources.clone().unwrap_or_default();
        let (budget_requests, budget_limits) = (
            cpu_mem(&level.requests.unwrap_or_default())?,
            cpu_mem(&level.limits.unwrap_or_default())?,
        );
        let unchanged = (budget_requests, budget_limits) == ((20, 64 * MI), (40, 128 * MI));
        if !unchanged && !limits_in_proportion(budget_requests, budget_limits) {
            bail!("the pod-level resources lost their ratio of 2: {:?}", spec.resources);
        }
        let (requests, limits) = container_resources(pod)?;
        let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        if requests.0 > budget_requests.0 || requests.1 > budget_requests.1 {
            bail!("container requests {requests:?} exceed the pod-level requests {budget_requests:?}");
        }
        if limits.0 > budget_limits.0 || limits.1 > budget_limits.1 {
            bail!("container limits {limits:?} exceed the pod-level limits {budget_limits:?}");
        }
        // Sized within the budget, or left alone with the reason: either way the webhook says so.
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the pod lacks the tailor.dev/updates annotation saying what the webhook did: {annotations:?}");
        }
        Ok(())
    })
    .await;
}

/// A new ReplicaSet's pods all at once (docs/decisions/unsized-admissions.md): the webhook's caches have not
/// seen the ReplicaSet when its pods arrive, so it reads it live — one read the burst waits on, not one per
/// pod, and no pod of the burst is admitted unsized.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_new_replica_sets_burst_of_pods_is_sized_whole() {
    let env = e2e("a_new_replica_sets_burst_of_pods_is_sized_whole").await;
    let env = &env;
    in_namespace(env, "burst", |ns| async move {
        const REPLICAS: usize = 8;
        // A recommendation written by hand, under a recommender nothing serves, so it stays as written.
        let mut v = vpa_manifest("burst", "burst", "Initial");
        v["spec"]["recommenders"] = json!([{"name": "e2e-fixed"}]);
        env.create_vpa(&ns, v).await?;
        let r = json!({"cpu": "300m", "memory": "300Mi"});
        env.dynamic_vpas(&ns)
            .patch_status(
                "burst",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"recommendation": {"containerRecommendations": [
                    {"containerName": "app", "target": r, "lowerBound": r, "upperBound": r}
                ]}}})),
            )
            .await?;
        // The webhook's VPA watch delivers the status within milliseconds; leave it a moment.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (copies, hits_before) = memo_hits(env).await?;
        env.create_deployment(&ns, "burst", REPLICAS as i32).await?;
        let pods = env.wait_running(&ns, "burst", REPLICAS).await?;
        let mut unsized_pods = Vec::new();
        for pod in &pods {
            let (requests, _) = container_resources(pod)?;
            if cpu_mem(&requests)? != (300, 300 * MI) {
                unsized_pods.push(format!("{:?}: {requests:?}", pod.metadata.name));
            }
        }
        if !unsized_pods.is_empty() {
            bail!(
                "{} of {REPLICAS} pods of a new ReplicaSet were admitted without the recommendation: {unsized_pods:?}",
                unsized_pods.len()
            );
        }
        // The pods share one template and the VPA one version, so a pod reviewed after another on the same
        // webhook copy is answered from the patch memo. The ReplicaSet controller creates them in batches
        // of 1, 2, 4 and 1, each after the one before, and pods of one batch may be reviewed at once (all
        // missing): with at most two copies, the last batch's pod is a hit whatever the spread.
        let (_, hits_after) = memo_hits(env).await?;
        let hits = hits_after.saturating_sub(hits_before);
        if hits == 0 && copies <= 2 {
            bail!("none of {REPLICAS} pods of one ReplicaSet was answered from the patch memo ({copies} webhook copies)");
        }
        println!("burst: all {REPLICAS} pods of a new ReplicaSet sized at 300m / 300Mi, {hits} from the patch memo");
        Ok(())
    })
    .await;
}

/// The webhook copies and `tailor_admission_patch_memo_hits_total` summed over them.
async fn memo_hits(env: &E2e) -> Result<(u64, u64)> {
    let texts = webhook_metrics(env).await?;
    let hits = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.strip_prefix("tailor_admission_patch_memo_hits_total "))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum();
    Ok((texts.len() as u64, hits))
}
