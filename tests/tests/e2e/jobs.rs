//! Jobs and CronJobs (docs/jobs.md) on a real control plane: a CronJob whose pods need more memory than their
//! limit is OOM-killed (kwok's `tailor-job-oom` stage, hack/cluster/kwok-kubelet.yaml), the Job controller
//! retries with a new pod, and the webhook admits each retry with the killed attempt's memory bumped, until a
//! run completes (the VPA names a recommender nothing serves, so no new recommendation gets there first); each raise is an `OOMRetryBump` Event on the VPA, and no pod gets more than `maxAllowed`.

use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::events::v1::Event as EventV1;

use super::*;

/// What a run's pods use: above the 256Mi they are created with.
const USAGE: i64 = 600 * MI;
/// The VPA's `maxAllowed` memory: below the third bump (864Mi), above the usage.
const MAX_ALLOWED: i64 = 800 * MI;

fn cron_job() -> Result<CronJob> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 6,
                "template": {
                    "metadata": {"labels": {"app": "nightly"}, "annotations": {
                        // kwok: run on (not completed at once), then fail OOM-killed while the memory
                        // limit is below the usage, complete otherwise.
                        "tailor.dev/e2e-kubelet-job": "run",
                        "tailor.dev/e2e-kubelet-job-memory": USAGE.to_string(),
                        "kwok.x-k8s.io/usage-memory": "600Mi"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "task", "image": IMAGE,
                            "resources": {"requests": {"cpu": "50m", "memory": "256Mi"},
                                          "limits": {"memory": "256Mi"}}
                        }]
                    }
                }
            }}
        }
    }))?)
}

/// (Job name, pod phase, memory request, memory limit) of every pod of the namespace.
async fn job_pods(env: &E2e, ns: &str) -> Result<Vec<(String, String, i64, i64)>> {
    let pods = Api::<Pod>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default().labels("app=nightly"))
        .await?;
    let mut out = Vec::new();
    for p in &pods.items {
        let job = (p.metadata.owner_references.iter().flatten())
            .find(|o| o.kind == "Job")
            .map(|o| o.name.clone())
            .unwrap_or_default();
        let phase = (p.status.as_ref().and_then(|s| s.phase.clone())).unwrap_or_default();
        let (requests, limits) = container_resources(p)?;
        let memory = |l: &BTreeMap<String, Quantity>| l.get("memory").map_or(Ok(0), bytes);
        out.push((job, phase, memory(&requests)?, memory(&limits)?));
    }
    Ok(out)
}

/// Notes of the `OOMRetryBump` Events on VPA `nightly` in `ns`.
async fn bump_notes(env: &E2e, ns: &str) -> Result<Vec<String>> {
    let events = Api::<EventV1>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("OOMRetryBump"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("nightly"))
        .filter_map(|e| e.note)
        .collect())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_cronjob_whose_runs_are_oom_killed_gets_more_memory_until_a_run_completes() {
    let env =
        e2e("a_cronjob_whose_runs_are_oom_killed_gets_more_memory_until_a_run_completes").await;
    let env = &env;
    in_namespace(env, "cronjobs", |ns| async move {
        let mut vpa = vpa_manifest("nightly", "nightly", "Recreate");
        // No recommender serves it: every raise is the webhook's retry bump, not a new recommendation.
        vpa["spec"]["recommenders"] = json!([{"name": "e2e-fixed"}]);
        vpa["spec"]["targetRef"] = json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"});
        // A larger bump than the default (x1.2 or +100Mi) so that the test needs three retries, not five.
        vpa["spec"]["resourcePolicy"] = json!({"containerPolicies": [{"containerName": "*",
            "maxAllowed": {"memory": "800Mi"}, "oomBumpUpRatio": "1.5"}]});
        env.create_vpa(&ns, vpa).await?;
        Api::<CronJob>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &cron_job()?)
            .await?;
        // The first run starts at the next minute; its retries wait 10 s, 20 s, 40 s, … in the Job controller.
        let pods = wait_for(
            "a run of the CronJob completed with memory above its usage",
            Duration::from_secs(420),
            || async {
                let pods = job_pods(env, &ns).await?;
                let done = pods.iter().any(|(_, phase, _, limit)| phase == "Succeeded" && *limit >= USAGE);
                Ok(done.then_some(pods))
            },
        )
        .await?;
        let jobs: BTreeSet<&str> = pods.iter().map(|(job, ..)| job.as_str()).collect();
        let done: BTreeSet<&str> = (pods.iter())
            .filter(|(_, phase, ..)| phase == "Succeeded")
            .map(|(job, ..)| job.as_str())
            .collect();
        let first_done = done.iter().next().copied().unwrap_or_default();
        let runs_before = jobs.iter().filter(|j| **j <= first_done).count();
        if runs_before > 3 {
            bail!("the first completed run was run {runs_before} of the CronJob, not within three: {pods:?}");
        }
        if let Some(p) = pods.iter().find(|(.., request, limit)| *request > MAX_ALLOWED || *limit > MAX_ALLOWED) {
            bail!("a pod got more memory than maxAllowed (800Mi): {p:?}");
        }
        let killed = pods.iter().filter(|(_, phase, ..)| phase == "Failed").count();
        if killed == 0 {
            bail!("no run was OOM-killed, the test tested nothing: {pods:?}");
        }
        // Each retry that got more than 256Mi was raised, and said so.
        let raised: BTreeSet<String> = (pods.iter())
            .filter(|(.., request, _)| *request > 256 * MI)
            .map(|(.., request, _)| format!("-> {}Mi", request / MI))
            .collect();
        let notes = wait_for("an OOMRetryBump Event for every raise", Duration::from_secs(30), || async {
            let notes = bump_notes(env, &ns).await?;
            let all = raised.iter().all(|r| notes.iter().any(|n| n.contains(r.as_str())));
            Ok(all.then_some(notes))
        })
        .await
        .with_context(|| format!("raised pods {raised:?}"))?;
        if notes.len() < raised.len() {
            bail!("{} raises but {} Events: {notes:?}", raised.len(), notes.len());
        }
        if !notes.iter().any(|n| n.contains("held at maxAllowed 800Mi")) {
            bail!("no Event says the bump stopped at maxAllowed: {notes:?}");
        }
        Ok(())
    })
    .await;
}
