//! Node fit with Karpenter (docs/decisions/node-fit.md): a NodePool whose requirements allow a larger instance
//! than any node the pods can schedule on now raises the cap to that instance (named in `CappedToNodeSize`). The
//! NodePool API is a minimal CRD (`hack/cluster/nodepool-crd.yaml`, installed by `hack/cluster.sh up`, and
//! here when missing); the NodePool carries the test's own taint and label, so it counts for this test's
//! pods only.

use super::*;

async fn ensure_nodepool_crd(env: &E2e) -> Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    if crds.get_opt("nodepools.karpenter.sh").await?.is_none() {
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hack/cluster/nodepool-crd.yaml"),
        )?;
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)?;
        crds.create(&PostParams::default(), &crd).await?;
    }
    Ok(())
}

fn nodepools(env: &E2e) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"));
    Api::all_with(env.client.clone(), &ar)
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_nodepool_allowing_a_larger_instance_raises_the_cap() {
    let env = e2e("a_nodepool_allowing_a_larger_instance_raises_the_cap").await;
    let env = &env;
    in_namespace(env, "nodepool", |ns| async move {
        ensure_nodepool_crd(env).await?;
        let node = env.create_own_node(&ns, "4", "8Gi").await?;
        let pool = format!("e2e-{ns}");
        let result = async {
            env.create_deployment_from(&ns, deployment_on_own_node(&ns, "big", "12", "100Mi"))
                .await?;
            env.wait_running(&ns, "big", 1).await?;
            // Off: only the recommendation is looked at (no node of the NodePool's size exists here).
            env.create_vpa(&ns, vpa_manifest("big", "big", "Off")).await?;
            let capped = |by: String| {
                let ns = ns.clone();
                async move {
                    wait_for(&format!("a target capped to {by}"), RECOMMENDATION_TIMEOUT, || async {
                        let c = condition(env, &ns, "big", "CappedToNodeSize").await?;
                        let Some(c) = c.filter(|c| c.status == "True") else {
                            return Ok(None);
                        };
                        if !c.message.as_deref().unwrap_or_default().contains(&by) {
                            return Ok(None);
                        }
                        let Some((t, _)) = first_recommendation(env, &ns, "big").await? else {
                            return Ok(None);
                        };
                        println!("CappedToNodeSize: {:?}", c.message);
                        Ok(Some(milli_cpu(t.get("cpu").context("target without cpu")?)?))
                    })
                    .await
                }
            };
            let on_node = capped(format!("node {node}")).await?;
            if on_node > 4_000 {
                bail!("target {on_node}m does not fit the 4-core node");
            }
            // A NodePool that launches m6i.2xlarge (8 vCPUs, 7.91 allocatable) for these pods only.
            let np: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": pool},
                "spec": {
                    "template": {
                        "metadata": {"labels": {OWN_NODE_KEY: ns}},
                        "spec": {
                            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                            "taints": [{"key": OWN_NODE_KEY, "value": ns, "effect": "NoSchedule"}],
                            "requirements": [
                                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.2xlarge"]},
                                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                            ]
                        }
                    },
                    "limits": {"cpu": "100"}
                }
            }))?;
            nodepools(env).create(&PostParams::default(), &np).await?;
            let on_pool = capped(format!("NodePool {pool} (instance type m6i.2xlarge)")).await?;
            if on_pool <= on_node || on_pool > 7_910 {
                bail!("with the NodePool the target is {on_pool}m: not above the node's {on_node}m and within 7910m");
            }
            Ok(())
        }
        .await;
        let _ = nodepools(env).delete(&pool, &DeleteParams::background()).await;
        env.delete_node(&node).await;
        result
    })
    .await;
}
