//! Usage reaches the recommender and becomes a recommendation (metrics.k8s.io, OOM events).

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn deployment_with_vpa_gets_a_recommendation() {
    let env = e2e("deployment_with_vpa_gets_a_recommendation").await;
    let env = &env;
    in_namespace(env, "recommend", |ns| async move {
        env.create_deployment(&ns, "web", 2).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        let target = env.recommendation(&ns, "web").await?;
        let (cpu, mem) = cpu_mem(&target)?;
        // The pod minimum (25m, 250Mi) split over one container is the floor of any recommendation.
        assert!(cpu >= 25, "cpu target {cpu}m below the minimum");
        assert!(
            mem >= 250 * 1024 * 1024,
            "memory target {mem} below the minimum"
        );
        let vpa = env.tailor_vpas(&ns).get("web").await?;
        let rec = vpa
            .status
            .and_then(|s| s.recommendation)
            .and_then(|r| r.container_recommendations);
        let rec = rec
            .into_iter()
            .flatten()
            .next()
            .context("no container recommendation")?;
        for (name, bound) in [
            ("lowerBound", rec.lower_bound),
            ("upperBound", rec.upper_bound),
        ] {
            let bound = bound.with_context(|| format!("no {name}"))?;
            cpu_mem(&bound).with_context(|| name.to_string())?;
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn an_oom_kill_bumps_the_memory_recommendation() {
    let env = e2e("an_oom_kill_bumps_the_memory_recommendation").await;
    let env = &env;
    in_namespace(env, "oom", |ns| async move {
        // The VPA first, known to the recommender before the pod exists, so that no OOM can come before it.
        env.create_vpa(&ns, vpa_manifest("oom", "oom", "Off")).await?;
        let vpas = env.tailor_vpas(&ns);
        wait_for("the recommender to take up VPA oom", POD_TIMEOUT, || async {
            let status = vpas.get("oom").await?.status;
            Ok(status.and_then(|s| s.conditions).filter(|c| !c.is_empty()).map(|_| ()))
        })
        .await?;
        // The container fills its 300Mi once (an OOM kill), then idles; the marker survives the restart.
        let script = "if [ -e /scratch/oomed ]; then exec sleep 100000; fi; touch /scratch/oomed; exec tail /dev/zero";
        env.create_deployment_from(&ns, json!({
            "metadata": {"name": "oom"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "oom"}},
                "template": {
                    // On kwok (no kubelet, no container) a Stage reports the same OOM kill
                    // (hack/cluster/kwok-kubelet.yaml); a kubelet ignores the annotation.
                    "metadata": {"labels": {"app": "oom"}, "annotations": {"tailor.dev/e2e-kubelet-oom": "once"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "app",
                            "image": BUSYBOX,
                            "command": ["sh", "-c", script],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "300Mi"},
                                "limits": {"memory": "300Mi"}
                            },
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                        }],
                        "volumes": [{"name": "scratch", "emptyDir": {}}]
                    }
                }
            }
        }))
        .await?;
        wait_for("the container of oom to be OOM-killed once and run again", POD_TIMEOUT, || async {
            let pods = env.running_pods(&ns, "oom").await?;
            Ok(pods.iter().find_map(|p| {
                let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
                let reason = status.last_state.as_ref()?.terminated.as_ref()?.reason.clone()?;
                (reason == "OOMKilled" && status.ready).then_some(())
            }))
        })
        .await?;
        // Upstream's bump: max(request × 1.2, request + 100Mi) = 400Mi; without the OOM the container's few
        // KiB of usage give the 250Mi minimum.
        let bump = 400 * MI;
        let waited = wait_for(
            &format!("a memory target of at least {bump} bytes after the OOM"),
            RECOMMENDATION_TIMEOUT,
            || async {
                let target = target_of(&vpas.get("oom").await?).map(|t| cpu_mem(&t)).transpose()?;
                Ok(target.filter(|&(_, mem)| mem >= bump))
            },
        )
        .await;
        if let Err(e) = waited {
            let last = vpas.get("oom").await.ok().and_then(|v| target_of(&v));
            bail!("{e:#}; last target {last:?}");
        }
        Ok(())
    })
    .await;
}
