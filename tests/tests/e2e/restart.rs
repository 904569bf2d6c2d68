//! The recommender restarted (checkpoints) and replicated (leader election failover).

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn recommender_restart_restores_from_checkpoints() {
    let env = e2e("recommender_restart_restores_from_checkpoints").await;
    let env = &env;
    in_namespace(env, "restart", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off")).await?;
        let checkpoints = env.checkpoints(&ns);
        let before = wait_for(
            &format!("checkpoint web.app with at least {MIN_SAMPLES} samples"),
            RECOMMENDATION_TIMEOUT,
            || async {
                let cp = checkpoints.get_opt("web.app").await?;
                Ok(cp.as_ref().and_then(samples_of).filter(|&n| n >= MIN_SAMPLES))
            },
        )
        .await?;
        // SIGTERM to every recommender: final checkpoints, lease released; new ones start from the API.
        let running: Vec<Instance> = env
            .instances("recommender")
            .await?
            .into_iter()
            .filter(|i| i.running)
            .collect();
        if running.is_empty() {
            bail!("no recommender to restart");
        }
        for instance in &running {
            env.replace_instance("recommender", instance).await?;
        }
        let old: Vec<String> = running.into_iter().map(|i| i.name).collect();
        let (leader, acquired) = env.wait_for_new_leader(&old, LEADER_TIMEOUT).await?;
        // Only the new leader writes after it acquired the lease (the old one released it first).
        let after = env.checkpoint_written_after(&ns, "web.app", acquired).await?;
        if after < before {
            bail!(
                "the restarted recommender {leader} checkpointed {after} samples, fewer than the {before} \
                 checkpointed before the restart: it did not restore from the checkpoints"
            );
        }
        let vpa = env.tailor_vpas(&ns).get("web").await?;
        if target_of(&vpa).is_none() {
            bail!("the recommendation is gone after the restart: {:?}", vpa.status);
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn two_recommender_replicas_fail_over() {
    let env = e2e("two_recommender_replicas_fail_over").await;
    let env = &env;
    let recommender = env
        .component("recommender")
        .await
        .expect("the recommender Deployment");
    let args = recommender
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--leader-elect"),
        "the recommender runs without --leader-elect (hack/kind-values.yaml sets recommender.leaderElection.enabled): {args:?}"
    );
    in_namespace(env, "failover", |ns| async move {
        env.scale_component("recommender", 2).await?;
        let result = async {
            env.create_deployment(&ns, "web", 1).await?;
            env.create_vpa(&ns, vpa_manifest("web", "web", "Off")).await?;
            env.recommendation(&ns, "web").await?;
            let spec = env.recommender_lease().await?.spec.unwrap_or_default();
            let leader = spec
                .holder_identity
                .filter(|h| !h.is_empty())
                .context("nobody holds the recommender lease")?;
            let transitions = spec.lease_transitions.unwrap_or(0);
            let instances = env.instances("recommender").await?;
            let names: Vec<&str> = instances.iter().map(|i| i.name.as_str()).collect();
            let Some(holder) = instances.iter().find(|i| i.name == leader) else {
                bail!("the lease holder {leader} is not a recommender ({names:?})");
            };
            if !instances.iter().any(|i| i.running && i.name != leader) {
                bail!("no standby recommender runs next to the leader {leader}: {names:?}");
            }
            let start = Instant::now();
            env.replace_instance("recommender", holder).await?;
            let (next, acquired) = env
                .wait_for_new_leader(std::slice::from_ref(&leader), LEADER_TIMEOUT)
                .await?;
            let took = start.elapsed();
            if took > FAILOVER_LIMIT {
                bail!("{next} took the lease {took:?} after {leader} was deleted (limit {FAILOVER_LIMIT:?})");
            }
            let now = env.recommender_lease().await?.spec.unwrap_or_default();
            if now.lease_transitions.unwrap_or(0) <= transitions {
                bail!(
                    "leaseTransitions did not increase ({transitions} → {:?}) when {next} took over",
                    now.lease_transitions
                );
            }
            // The new leader works: it writes the checkpoint after it acquired the lease.
            env.checkpoint_written_after(&ns, "web.app", acquired).await?;
            eprintln!("{next} took over from {leader} after {took:?}");
            Ok(())
        }
        .await;
        env.scale_component("recommender", 1).await?;
        result
    })
    .await;
}
