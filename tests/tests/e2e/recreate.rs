//! Recreate: the updater evicts through the Eviction API and the webhook sizes the replacement.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn recreate_replaces_pods_with_recommended_requests() {
    let env = e2e("recreate_replaces_pods_with_recommended_requests").await;
    let env = &env;
    in_namespace(env, "recreate", |ns| async move {
        env.create_deployment(&ns, "web", 2).await?;
        let original: BTreeSet<String> = env
            .wait_running(&ns, "web", 2)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate"))
            .await?;
        bounds_excluding_original(env, &ns).await?;
        // The updater evicts (one at a time: tolerance 0.5 of 2 replicas); the ReplicaSet recreates them and
        // the webhook gives the new pods the recommendation.
        let fresh = env.wait_replaced(&ns, "web", &original).await?;
        let bounds = bounds_of(&env.tailor_vpas(&ns).get("web").await?)?;
        for pod in &fresh {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let r = pod_resources(pod)?;
            if !within(r.spec_requests, bounds) {
                bail!(
                    "replacement pod {name} has requests {:?}, outside the recommended bounds {bounds:?}",
                    r.spec_requests
                );
            }
            if !limits_in_proportion(r.spec_requests, r.spec_limits) {
                bail!(
                    "replacement pod {name}: limits {:?} are not twice the requests {:?}",
                    r.spec_limits,
                    r.spec_requests
                );
            }
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            if !annotations.contains_key("tailor.dev/updates") {
                bail!("replacement pod {name} was not admitted by the webhook: {annotations:?}");
            }
        }
        Ok(())
    })
    .await;
}
