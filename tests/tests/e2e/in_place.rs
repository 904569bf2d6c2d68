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

/// More CPU than any node has (kwok's fake nodes have 32 cores, kind's far fewer): the kubelet can never
/// actuate a resize to it, and the scheduler can place no pod asking for it.
const MORE_CPU_THAN_ANY_NODE: &str = "1000";

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn an_infeasible_resize_falls_back_to_eviction() {
    let env = e2e("an_infeasible_resize_falls_back_to_eviction").await;
    let env = &env;
    in_namespace(env, "infeasible", |ns| async move {
        // The VPA's minAllowed CPU is more than any node has: a real kubelet (kind) reports the resize
        // Infeasible; kwok's stand-in kubelet does so for pods with this annotation
        // (hack/cluster/kwok-kubelet.yaml).
        env.create_annotated_deployment(
            &ns,
            "web",
            2,
            json!({"tailor.dev/e2e-kubelet-resize": "infeasible"}),
        )
        .await?;
        let original: BTreeSet<String> = env
            .wait_running(&ns, "web", 2)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        let mut vpa = vpa_manifest("web", "web", "InPlaceOrRecreate");
        vpa["spec"]["resourcePolicy"] = json!({"containerPolicies": [
            {"containerName": "*", "minAllowed": {"cpu": MORE_CPU_THAN_ANY_NODE}}
        ]});
        env.create_vpa(&ns, vpa).await?;
        bounds_excluding_original(env, &ns).await?;
        // The updater tries to resize in place; the resize is refused; the updater evicts the pod. Its
        // replacement, sized by the webhook, cannot be scheduled, so the second pod stays where it is (one
        // disruption at a time of two replicas).
        let (evicted, replacement) = wait_for(
            "an original pod of web evicted after its resize, and its replacement",
            UPDATE_TIMEOUT,
            || async {
                let pods = env.all_pods(&ns, "web").await?;
                let replacement = pods
                    .into_iter()
                    .find(|p| !p.metadata.uid.as_ref().is_some_and(|u| original.contains(u)));
                let evictions = env.pod_events(&ns, "EvictedByVPA").await?;
                let evicted = evictions.into_iter().find(|(uid, _)| original.contains(uid));
                Ok(evicted.zip(replacement))
            },
        )
        .await?;
        let (evicted_uid, evicted_at) = evicted;
        // Who refuses the resize depends on the API server: from Kubernetes 1.36 its PodResizeValidator
        // admission plugin answers the PATCH with Forbidden (node capacity) and the updater evicts in the same
        // iteration; before, the PATCH is accepted, the kubelet reports PodResizePending/Infeasible, and the
        // next iteration evicts.
        let minor = env.server_minor().await?;
        let resizes = env.pod_events(&ns, "InPlaceResizedByVPA").await?;
        let resized_at = resizes
            .iter()
            .find(|(uid, _)| *uid == evicted_uid)
            .map(|(_, at)| *at);
        match resized_at {
            Some(at) if at > evicted_at => {
                bail!("pod {evicted_uid} was resized at {at}, after its eviction at {evicted_at}")
            }
            Some(at) => eprintln!(
                "pod {evicted_uid}: resized at {at}, reported infeasible, evicted at {evicted_at}"
            ),
            None if minor < 36 => bail!(
                "pod {evicted_uid} was evicted without a resize first (Kubernetes 1.{minor} accepts the \
                 PATCH; resize events: {resizes:?}): InPlaceOrRecreate evicts only after the kubelet \
                 refused the resize"
            ),
            None => eprintln!(
                "pod {evicted_uid}: the API server (1.{minor}) refused the resize, evicted at {evicted_at}"
            ),
        }
        let name = replacement.metadata.name.clone().unwrap_or_default();
        let annotations = replacement.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("replacement pod {name} was not admitted by the webhook: {annotations:?}");
        }
        // Pending: no container status yet, so the spec's requests only.
        let (requests, _) = container_resources(&replacement)?;
        let cpu = requests.get("cpu").map(milli_cpu).transpose()?;
        let wanted = milli_cpu(&Quantity(MORE_CPU_THAN_ANY_NODE.into()))?;
        if cpu != Some(wanted) {
            bail!("replacement pod {name} requests {cpu:?} millicores, not the VPA's minAllowed {wanted}");
        }
        if is_running(&replacement) {
            bail!("replacement pod {name} runs with {wanted}m CPU: no node should fit it");
        }
        Ok(())
    })
    .await;
}
