//! The VPA's limit policy (docs/limit-policy.md) on a real control plane: pods the API server creates get
//! the policy's limits from the webhook (a CPU limit removed, memory = request + 256Mi), and the updater's
//! in-place resize keeps that relation.

use super::*;

/// The policy under test.
const POLICY: &str = "memory=request+256Mi,cpu=unset";

/// `(cpu millicores, memory bytes)` of the requests, the memory limit, and whether a CPU limit is set, of a
/// pod's container `app` as specified.
fn sized(pod: &Pod) -> Result<((i64, i64), i64, bool)> {
    let (requests, limits) = container_resources(pod)?;
    let memory_limit = bytes(limits.get("memory").context("no memory limit")?)?;
    Ok((
        cpu_mem(&requests)?,
        memory_limit,
        limits.contains_key("cpu"),
    ))
}

/// The requests the kubelet reports actuated for container `app` (`status.containerStatuses[].resources`),
/// and its restarts.
fn actuated(pod: &Pod) -> Result<(Option<(i64, i64)>, i32)> {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "app"))
        .context("no status of container app")?;
    let requests = match status.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(r) => Some(cpu_mem(r)?),
        None => None,
    };
    Ok((requests, status.restart_count))
}

/// Writes `target` (as target and both bounds) into the VPA's status: the VPA names a recommender nothing
/// serves, so the recommendation stays as written.
async fn recommend(env: &E2e, ns: &str, target: Value) -> Result<()> {
    env.dynamic_vpas(ns)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"recommendation": {"containerRecommendations": [
                {"containerName": "app", "target": target, "lowerBound": target, "upperBound": target}
            ]}}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_limit_policy_sizes_new_pods_and_survives_an_in_place_resize() {
    let env = e2e("a_limit_policy_sizes_new_pods_and_survives_an_in_place_resize").await;
    let env = &env;
    in_namespace(env, "limitpolicy", |ns| async move {
        let mut v = vpa_manifest("web", "web", "Initial");
        v["metadata"]["annotations"] = json!({"tailor.dev/limit-policy": POLICY});
        v["spec"]["recommenders"] = json!([{"name": "e2e-fixed"}]);
        env.create_vpa(&ns, v).await?;
        recommend(env, &ns, json!({"cpu": "300m", "memory": "300Mi"})).await?;
        // The webhook's VPA watch delivers the status within milliseconds; leave it a moment.
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Two replicas (the updater's default --min-replicas), created 10m/20Mi with limits 20m/40Mi. The
        // recommendations are above the webhook's pod floor (docs/decisions/pod-floor.md).
        env.create_deployment(&ns, "web", 2).await?;
        let pods = env.wait_running(&ns, "web", 2).await?;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let got = sized(pod)?;
            if got != ((300, 300 * MI), 556 * MI, false) {
                bail!(
                    "pod {name} was admitted with (requests, memory limit, has a CPU limit) {got:?}, \
                     not ((300m, 300Mi), 556Mi, false)"
                );
            }
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let updates = annotations.get("tailor.dev/updates").cloned().unwrap_or_default();
            if !updates.contains("cpu limit removed") {
                bail!("pod {name}: the updates annotation does not say the CPU limit was removed: {updates:?}");
            }
        }
        let original: BTreeSet<String> = pods.into_iter().filter_map(|p| p.metadata.uid).collect();
        // A new recommendation outside the pods' requests, and a mode that resizes in place.
        recommend(env, &ns, json!({"cpu": "400m", "memory": "400Mi"})).await?;
        env.dynamic_vpas(&ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"updatePolicy": {"updateMode": "InPlaceOrRecreate"}}})),
            )
            .await?;
        let pods = wait_for(
            "both pods of web resized in place to 400m/400Mi (spec and status)",
            UPDATE_TIMEOUT,
            || async {
                let pods = env.all_pods(&ns, "web").await?;
                if let Some(p) = pods.iter().find(|p| {
                    !p.metadata.uid.as_ref().is_some_and(|u| original.contains(u))
                }) {
                    return Ok(Some(Err(anyhow!(
                        "pod {:?} replaced an original one: the pods were recreated, not resized",
                        p.metadata.name
                    ))));
                }
                let resized = pods
                    .iter()
                    .filter(|p| {
                        let want = (400, 400 * MI);
                        let spec = sized(p).is_ok_and(|(requests, _, _)| requests == want);
                        spec && actuated(p).is_ok_and(|(actual, _)| actual == Some(want))
                    })
                    .count();
                Ok((resized == original.len()).then_some(Ok(pods)))
            },
        )
        .await??;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let got = sized(pod)?;
            if got != ((400, 400 * MI), 656 * MI, false) {
                bail!(
                    "pod {name} was resized to (requests, memory limit, has a CPU limit) {got:?}, not \
                     ((400m, 400Mi), 656Mi, false): the resize did not keep the policy's relation"
                );
            }
            let (_, restarts) = actuated(pod)?;
            if restarts != 0 {
                bail!("pod {name} restarted {restarts} times during the resize");
            }
        }
        Ok(())
    })
    .await;
}
