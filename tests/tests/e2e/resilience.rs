//! Tailor under the cluster's own disturbances: a PodDisruptionBudget the disruption controller keeps, the
//! API server restarted mid-loop, and the webhook gone while the updater runs.

use super::*;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// The webhook's status Lease (chart value `admission.statusLease.name`).
pub(super) const ADMISSION_LEASE: &str = "tailor-admission";
/// The updater's `--admission-controller-status-lease-timeout` (chart value
/// `updater.admissionControllerStatus.leaseTimeout`, 10 s), plus a margin as long again.
const ADMISSION_LEASE_STALE: Duration = Duration::from_secs(10 + 10);
/// Updater loops (10 s) long enough that an eviction would have happened.
pub(super) const UPDATER_LOOPS: Duration = Duration::from_secs(35);

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_pod_disruption_budget_holds_the_updater_back() {
    let env = e2e("a_pod_disruption_budget_holds_the_updater_back").await;
    let env = &env;
    in_namespace(env, "pdb", |ns| async move {
        env.create_deployment(&ns, "web", 3).await?;
        env.wait_running(&ns, "web", 3).await?;
        let original = env.live_uids(&ns, "web").await?;
        let pdbs = Api::<PodDisruptionBudget>::namespaced(env.client.clone(), &ns);
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}
        }))?;
        pdbs.create(&PostParams::default(), &pdb).await?;
        // The disruption controller computes the budget: no disruption allowed with all three needed.
        wait_for(
            "the disruption controller's status of PDB web",
            POD_TIMEOUT,
            || async {
                let status = pdbs.get("web").await?.status.unwrap_or_default();
                Ok((status.current_healthy == 3 && status.disruptions_allowed == 0).then_some(()))
            },
        )
        .await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate"))
            .await?;
        bounds_excluding_original(env, &ns).await?;
        // The updater wants every pod gone (their requests are below the lower bound); the Eviction API
        // refuses each (429) while the budget allows none.
        tokio::time::sleep(UPDATER_LOOPS).await;
        let left = env.live_uids(&ns, "web").await?;
        if left != original {
            bail!(
                "pods were evicted although PDB web allowed no disruption: {original:?} → {left:?}"
            );
        }
        // One disruption allowed: the updater replaces them all, one at a time.
        pdbs.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
        )
        .await?;
        env.wait_replaced(&ns, "web", &original).await.map(drop)?;
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn without_the_webhook_the_updater_evicts_nothing() {
    let env = e2e("without_the_webhook_the_updater_evicts_nothing").await;
    let env = &env;
    let replicas = env.running_webhooks().await;
    in_namespace(env, "nowebhook", |ns| async move {
        env.scale_webhook(0).await?;
        let result = async {
            // The webhook's status Lease goes stale: the updater must not evict pods nobody would size.
            let leases = Api::<Lease>::namespaced(env.client.clone(), &env.system_namespace);
            wait_for(
                "the webhook's status Lease to go stale",
                ADMISSION_LEASE_STALE * 3,
                || async {
                    let renewed = leases
                        .get(ADMISSION_LEASE)
                        .await?
                        .spec
                        .and_then(|s| s.renew_time)
                        .map(|t| t.0);
                    let stale = renewed.is_none_or(|t| {
                        Timestamp::now().duration_since(t).as_secs()
                            > ADMISSION_LEASE_STALE.as_secs() as i64
                    });
                    Ok(stale.then_some(()))
                },
            )
            .await?;
            env.create_deployment(&ns, "web", 2).await?;
            env.wait_running(&ns, "web", 2).await?;
            let original = env.live_uids(&ns, "web").await?;
            env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate"))
                .await?;
            bounds_excluding_original(env, &ns).await?;
            tokio::time::sleep(UPDATER_LOOPS).await;
            let left = env.live_uids(&ns, "web").await?;
            if left != original {
                bail!(
                    "the updater evicted pods while the webhook was down: {original:?} → {left:?}"
                );
            }
            // The webhook back: its Lease is renewed and the updater acts.
            env.scale_webhook(replicas).await?;
            env.wait_replaced(&ns, "web", &original).await.map(drop)
        }
        .await;
        env.scale_webhook(replicas).await?;
        result
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn an_api_server_restart_loses_nothing() {
    let env = e2e("an_api_server_restart_loses_nothing").await;
    let env = &env;
    in_namespace(env, "apirestart", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        let before = env.recommendation(&ns, "web").await?;
        let checkpoints = env.checkpoints(&ns);
        let samples_before = wait_for("checkpoint web.app", RECOMMENDATION_TIMEOUT, || async {
            Ok(checkpoints.get_opt("web.app").await?.as_ref().and_then(samples_of))
        })
        .await?;
        let running_before = env.running_copies().await?;

        let restarted = Timestamp::now();
        env.restart_api_server()?;

        // The recommender's watches and writes resume: its checkpoint is written again, with no sample lost.
        let samples_after = env.checkpoint_written_after(&ns, "web.app", restarted).await?;
        if samples_after < samples_before {
            bail!("the checkpoint holds {samples_after} samples after the restart, {samples_before} before");
        }
        // The webhook still sizes new pods (the API server reconnects to it).
        let pods = env.recreate_pods_explained(&ns, "web", 1).await?;
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("a pod created after the restart was not sized by the webhook: {annotations:?}");
        }
        // The webhook renews its status Lease again (the updater's gate).
        let leases = Api::<Lease>::namespaced(env.client.clone(), &env.system_namespace);
        wait_for("the webhook's status Lease renewed after the restart", POD_TIMEOUT, || async {
            let renewed = leases.get(ADMISSION_LEASE).await?.spec.and_then(|s| s.renew_time);
            Ok(renewed.filter(|t| t.0 > restarted).map(|_| ()))
        })
        .await?;
        // Every copy runs again (one whose leader lease expired while the API server was away exits and is
        // restarted, as the kubelet restarts it), and the recommendation is still there.
        let restarts: Vec<String> = [
            env.instances("recommender").await?,
            env.instances("updater").await?,
            env.instances("admission").await?,
        ]
        .into_iter()
        .flatten()
        .filter(|i| i.restarts > 0)
        .map(|i| format!("{} restarted {} time(s)", i.name, i.restarts))
        .collect();
        eprintln!("across the API server restart: {restarts:?}");
        let running_after = env.running_copies().await?;
        if running_after != running_before {
            bail!("Tailor's copies running before the restart {running_before:?} are not all running after it: {running_after:?}");
        }
        let after = target_of(&env.tailor_vpas(&ns).get("web").await?);
        if after.is_none() {
            bail!("the recommendation {before:?} is gone after the restart");
        }
        Ok(())
    })
    .await;
}
