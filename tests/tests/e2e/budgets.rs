//! Disruption budgets (docs/decisions/disruption-budgets.md): an evicted Job pod counts against the Job's
//! `backoffLimit`, so with the chart's default `updater.evictJobPods: false` (`--evict-job-pods=false`) the
//! updater leaves the pods of a Job alone under a `Recreate` VPA, while a Deployment beside it under the same
//! kind of VPA is updated.

use k8s_openapi::api::batch::v1::Job;

use super::scope::busy_deployment;
use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_jobs_pods_are_not_evicted_by_default() {
    let env = e2e("a_jobs_pods_are_not_evicted_by_default").await;
    let env = &env;
    in_namespace(env, "jobpods", |ns| async move {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "batch"},
            "spec": {
                "parallelism": 2, "completions": 2,
                "template": {
                    "metadata": {"labels": {"app": "batch"}, "annotations": {
                        "kwok.x-k8s.io/usage-cpu": "500m", "kwok.x-k8s.io/usage-memory": "30Mi",
                        // kwok completes Job pods at once unless told to run on (hack/cluster.sh).
                        "tailor.dev/e2e-kubelet-job": "run"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "app", "image": IMAGE,
                            "resources": {"requests": {"cpu": "10m", "memory": "20Mi"},
                                          "limits": {"cpu": "20m", "memory": "40Mi"}}
                        }]
                    }
                }
            }
        }))?;
        Api::<Job>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &job)
            .await?;
        // The control: a Deployment of the same pods, which the updater does evict.
        env.create_deployment_from(&ns, busy_deployment("control", 2))
            .await?;
        env.wait_running(&ns, "batch", 2).await?;
        env.wait_running(&ns, "control", 2).await?;
        let original = env.live_uids(&ns, "batch").await?;
        let control = env.live_uids(&ns, "control").await?;
        let mut vpa = vpa_manifest("batch", "batch", "Recreate");
        vpa["spec"]["targetRef"] = json!({"apiVersion": "batch/v1", "kind": "Job", "name": "batch"});
        vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
        env.create_vpa(&ns, vpa).await?;
        let mut vpa = vpa_manifest("control", "control", "Recreate");
        vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
        env.create_vpa(&ns, vpa).await?;
        let target = wait_for(
            "a recommendation for the Job far above its pods' requests",
            RECOMMENDATION_TIMEOUT,
            || async {
                Ok(first_recommendation(env, &ns, "batch")
                    .await?
                    .and_then(|(t, _)| t.get("cpu").cloned())
                    .filter(|cpu| milli_cpu(cpu).is_ok_and(|m| m >= 100)))
            },
        )
        .await?;
        // The updater acts in this namespace: a pod of the control Deployment goes.
        wait_for(
            "the updater to evict a pod of the control Deployment",
            UPDATE_TIMEOUT,
            || async {
                let live = env.live_uids(&ns, "control").await?;
                Ok((!control.is_subset(&live)).then_some(()))
            },
        )
        .await?;
        // Two more updater loops: the Job's pods stay.
        tokio::time::sleep(Duration::from_secs(25)).await;
        let now = env.live_uids(&ns, "batch").await?;
        if now != original {
            bail!("the Job's pods were replaced ({original:?} -> {now:?}) with --evict-job-pods=false");
        }
        let evicted = env.pod_events(&ns, "EvictedByVPA").await?;
        if evicted.iter().any(|(uid, _)| original.contains(uid)) {
            bail!("an EvictedByVPA event on a pod of the Job: {evicted:?}");
        }
        let failed = Api::<Job>::namespaced(env.client.clone(), &ns)
            .get("batch")
            .await?
            .status
            .and_then(|s| s.failed)
            .unwrap_or(0);
        if failed != 0 {
            bail!("the Job counts {failed} failed pods");
        }
        let audit = match tailor_disruptions(env, &ns)? {
            Some(requests) => {
                if requests.iter().any(|p| p.starts_with("batch-")) {
                    bail!("the audit log has Tailor's eviction or resize requests for Job pods: {requests:?}");
                }
                if !requests.iter().any(|p| p.starts_with("control-")) {
                    bail!("the audit log lacks the control Deployment's eviction: {requests:?}");
                }
                format!("audit log: Tailor's requests only for {requests:?}")
            }
            None => "no audit log (kind)".to_owned(),
        };
        println!(
            "job pods ({audit}): 0 of 2 evicted (target cpu {}) over 25 s after the control Deployment's eviction \
             ({} EvictedByVPA events there); Job failed=0",
            target.0,
            evicted.len()
        );
        Ok(())
    })
    .await;
}
