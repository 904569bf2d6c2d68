//! Node fit (docs/decisions/node-fit.md): a VPA whose usage history wants more CPU than the largest node its
//! pods may schedule on gets a target that fits that node (`uncappedTarget` keeps the wish, `CappedToNodeSize`
//! names the node), and the replacement pods the webhook sizes from it are scheduled and run.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_target_larger_than_the_largest_node_is_capped_and_the_pods_schedule() {
    let env = e2e("a_target_larger_than_the_largest_node_is_capped_and_the_pods_schedule").await;
    let env = &env;
    in_namespace(env, "nodefit", |ns| async move {
        // The pods may only land on their own 4-core node: it is the largest they can schedule on.
        let node = env.create_own_node(&ns, "4", "8Gi").await?;
        let result = async {
            env.create_deployment_from(&ns, deployment_on_own_node(&ns, "big", "6", "100Mi"))
                .await?;
            env.wait_running(&ns, "big", 1).await?;
            let original = env.live_uids(&ns, "big").await?;
            let mut vpa = vpa_manifest("big", "big", "Recreate");
            // One replica: let the updater evict it.
            vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
            env.create_vpa(&ns, vpa).await?;
            let (target, uncapped) = wait_for(
                "a target capped to the node, with the CappedToNodeSize condition",
                RECOMMENDATION_TIMEOUT,
                || async {
                    let Some((t, u)) = first_recommendation(env, &ns, "big").await? else {
                        return Ok(None);
                    };
                    let c = condition(env, &ns, "big", "CappedToNodeSize").await?;
                    Ok(c.filter(|c| c.status == "True").map(|c| (t, u, c)))
                },
            )
            .await
            .map(|(t, u, c)| {
                println!("CappedToNodeSize: {:?}", c.message);
                (t, u)
            })?;
            let cpu = milli_cpu(target.get("cpu").context("target without cpu")?)?;
            let wanted = milli_cpu(uncapped.get("cpu").context("uncappedTarget without cpu")?)?;
            if cpu > 4_000 || wanted <= 4_000 {
                bail!("target cpu {cpu}m should fit the 4-core node and uncappedTarget {wanted}m exceed it");
            }
            let c = condition(env, &ns, "big", "CappedToNodeSize")
                .await?
                .context("condition gone")?;
            let message = c.message.unwrap_or_default();
            if c.reason.as_deref() != Some("LargestNode") || !message.contains(&format!("node {node}")) {
                bail!("the condition should name node {node}: {:?} {message}", c.reason);
            }
            // The updater evicts pods whose requests are outside the bounds; the webhook gives the
            // replacement the capped target, and the scheduler places it on the node.
            let pod = wait_for(
                "a running pod requesting the capped target on the node",
                UPDATE_TIMEOUT,
                || async {
                    for p in env.running_pods(&ns, "big").await? {
                        let r = pod_resources(&p)?;
                        let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
                        if r.spec_requests.0 == cpu && on.as_deref() == Some(node.as_str()) {
                            return Ok(Some((p, r)));
                        }
                    }
                    Ok(None)
                },
            )
            .await?;
            if original.contains(pod.0.metadata.uid.as_deref().unwrap_or_default()) {
                bail!("the original pod was never replaced");
            }
            println!("running pod requests {:?} on {node}", pod.1.spec_requests);
            Ok(())
        }
        .await;
        env.delete_node(&node).await;
        result
    })
    .await;
}
