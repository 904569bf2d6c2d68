//! InPlaceOrRecreate: running pods are resized through pods/resize, same UID.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn in_place_or_recreate_resizes_running_pods_without_restart() {
    let env = e2e("in_place_or_recreate_resizes_running_pods_without_restart").await;
    let env = &env;
    in_namespace(env, "inplace", |ns| async move {
        // Two replicas: the updater's default --min-replicas is 2.
        env.create_deployment(&ns, "web", 2).await?;
        let original: BTreeSet<String> = env
            .wait_running(&ns, "web", 2)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        // The VPA comes after the pods, so the webhook did not size them: they keep 10m/20Mi.
        env.create_vpa(&ns, vpa_manifest("web", "web", "InPlaceOrRecreate"))
            .await?;
        bounds_excluding_original(env, &ns).await?;
        let outcome = wait_for(
            "both pods of web resized in place (spec and status.containerStatuses[].resources)",
            UPDATE_TIMEOUT,
            || async {
                let pods = env.all_pods(&ns, "web").await?;
                // A pod that is not one of the originals means the updater evicted instead of resizing.
                if let Some(p) = pods.iter().find(|p| {
                    !p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|u| original.contains(u))
                }) {
                    return Ok(Some(Err(anyhow!(
                        "pod {:?} replaced an original one: the pods were recreated, not resized",
                        p.metadata.name
                    ))));
                }
                let mut resized = 0;
                for pod in &pods {
                    let r = pod_resources(pod)?;
                    if r.spec_requests != ORIGINAL_REQUESTS
                        && r.actual_requests == Some(r.spec_requests)
                    {
                        resized += 1;
                    }
                }
                Ok((resized == original.len()).then_some(Ok(pods)))
            },
        )
        .await?;
        let pods = outcome?;
        let bounds = bounds_of(&env.tailor_vpas(&ns).get("web").await?)?;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let r = pod_resources(pod)?;
            if r.restarts != 0 {
                bail!(
                    "pod {name} restarted {} times during the resize",
                    r.restarts
                );
            }
            if pod.metadata.deletion_timestamp.is_some() {
                bail!("pod {name} is being deleted");
            }
            if !within(r.spec_requests, bounds) {
                bail!(
                    "pod {name} was resized to {:?}, outside the recommended bounds {bounds:?}",
                    r.spec_requests
                );
            }
            if !limits_in_proportion(r.spec_requests, r.spec_limits) {
                bail!(
                    "pod {name}: limits {:?} are not twice the new requests {:?}",
                    r.spec_limits,
                    r.spec_requests
                );
            }
        }
        Ok(())
    })
    .await;
}
