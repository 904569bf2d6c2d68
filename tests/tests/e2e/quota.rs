//! Quota fit (docs/decisions/quota-fit.md): in a namespace whose ResourceQuota leaves little CPU headroom, a
//! VPA whose recommendation wants more than that still gets its pods created — the webhook cuts the raise to the
//! headroom instead of letting the quota refuse the pod — and says so in the pod's `tailor.dev/updates`
//! annotation, in a `QuotaFit` Event on the VPA and in `tailor_admission_quota_fit_pods_total`. Where the
//! quota leaves nothing, the updater does not evict a pod that would come back the same, and the VPA's
//! `UpdatesBlocked` condition says why.

use k8s_openapi::api::core::v1::ResourceQuota;

use super::*;

/// The quota's `requests.cpu`: the first pod asks 10m, so 490m are left for the second.
const HARD_CPU_MILLIS: i64 = 500;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_quota_with_little_headroom_gets_pods_created_with_the_reason_recorded() {
    let env = e2e("a_quota_with_little_headroom_gets_pods_created_with_the_reason_recorded").await;
    let env = &env;
    in_namespace(env, "quota", |ns| async move {
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "compute"},
            "spec": {"hard": {"requests.cpu": format!("{HARD_CPU_MILLIS}m"), "pods": "10"}}
        }))?;
        let quotas = Api::<ResourceQuota>::namespaced(env.client.clone(), &ns);
        quotas.create(&PostParams::default(), &quota).await?;
        // Two cores of usage: the recommendation wants far more than the 490m left.
        env.create_deployment_from(&ns, hungry_deployment("q")).await?;
        env.wait_running(&ns, "q", 1).await?;
        let before = scaled_count(env).await.unwrap_or(0);
        // Mode Initial: only new pods are sized, so the test decides when one is created.
        env.create_vpa(&ns, vpa_manifest("q", "q", "Initial")).await?;
        let target = wait_for("a recommendation above the headroom", RECOMMENDATION_TIMEOUT, || async {
            Ok(first_recommendation(env, &ns, "q")
                .await?
                .and_then(|(t, _)| t.get("cpu").cloned())
                .filter(|cpu| milli_cpu(cpu).is_ok_and(|m| m > HARD_CPU_MILLIS)))
        })
        .await?;
        println!("target cpu {target:?}; quota requests.cpu {HARD_CPU_MILLIS}m");
        Api::<Deployment>::namespaced(env.client.clone(), &ns)
            .patch("q", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}})))
            .await?;
        let running = wait_for("two running pods", POD_TIMEOUT, || async {
            let pods = env.running_pods(&ns, "q").await?;
            Ok((pods.len() == 2).then_some(pods))
        })
        .await;
        let pods = match running {
            Ok(pods) => pods,
            Err(e) => bail!("{e:#}; ReplicaSet failures: {}", env.replica_failures(&ns).await),
        };
        let sized = pods
            .iter()
            .find(|p| annotation(p).is_some_and(|a| a.contains("ResourceQuota compute")))
            .with_context(|| format!("no pod names the quota: {:?}", pods.iter().map(annotation).collect::<Vec<_>>()))?;
        let note = annotation(sized).unwrap_or_default();
        println!("{note}");
        let total: i64 = pods
            .iter()
            .map(|p| pod_resources(p).map(|r| r.spec_requests.0))
            .sum::<Result<i64>>()?;
        let own = pod_resources(sized)?.spec_requests.0;
        if total > HARD_CPU_MILLIS || own <= 10 {
            bail!("the sized pod asks {own}m, both {total}m: should be raised, within {HARD_CPU_MILLIS}m");
        }
        let used = quotas.get("compute").await?.status.and_then(|s| s.used).unwrap_or_default();
        println!("quota used: {used:?}");
        let event = wait_for("a QuotaFit Event on the VPA", POD_TIMEOUT, || async {
            let events = Api::<Event>::namespaced(env.client.clone(), &ns)
                .list(&ListParams::default())
                .await?;
            Ok(events.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("QuotaFit")
                    && e.involved_object.kind.as_deref() == Some("VerticalPodAutoscaler")
                    && e.involved_object.name.as_deref() == Some("q")
            }))
        })
        .await?;
        println!("event: {:?}", event.message);
        if !event.message.unwrap_or_default().contains("ResourceQuota compute") {
            bail!("the Event should name the quota");
        }
        let after = scaled_count(env).await?;
        if after <= before {
            bail!("tailor_admission_quota_fit_pods_total{{outcome=\"scaled\"}} stayed at {after}");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_full_quota_stops_evictions_that_would_bring_the_same_pod_back() {
    let env = e2e("a_full_quota_stops_evictions_that_would_bring_the_same_pod_back").await;
    let env = &env;
    in_namespace(env, "quotafull", |ns| async move {
        // The pod's own 10m and 20Mi are all the quota allows: a replacement could not be raised at all.
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "compute"},
            "spec": {"hard": {"requests.cpu": "10m", "requests.memory": "20Mi"}}
        }))?;
        Api::<ResourceQuota>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &quota)
            .await?;
        env.create_deployment_from(&ns, hungry_deployment("full"))
            .await?;
        env.wait_running(&ns, "full", 1).await?;
        let original = env.live_uids(&ns, "full").await?;
        let mut vpa = vpa_manifest("full", "full", "Recreate");
        // One replica: without the quota the updater would evict it (the recreate test's setting).
        vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
        env.create_vpa(&ns, vpa).await?;
        let blocked = wait_for(
            "UpdatesBlocked with reason QuotaFit",
            RECOMMENDATION_TIMEOUT + UPDATE_TIMEOUT,
            || async {
                let c = condition(env, &ns, "full", "UpdatesBlocked").await?;
                Ok(c.filter(|c| c.status == "True" && c.reason.as_deref() == Some("QuotaFit")))
            },
        )
        .await?;
        let message = blocked.message.unwrap_or_default();
        println!("UpdatesBlocked: {message}");
        if !message.contains("ResourceQuota compute") {
            bail!("the condition should name the quota: {message}");
        }
        // Another updater loop or two (10 s on the local cluster): still the same pod.
        tokio::time::sleep(Duration::from_secs(25)).await;
        let now = env.live_uids(&ns, "full").await?;
        if now != original {
            bail!(
                "the pod was replaced ({original:?} -> {now:?}) although the quota leaves no room"
            );
        }
        Ok(())
    })
    .await;
}

/// One pod of 10m/20Mi (limits twice that) using two cores.
fn hungry_deployment(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "kwok.x-k8s.io/usage-cpu": "2", "kwok.x-k8s.io/usage-memory": "30Mi"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app", "image": IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"},
                                      "limits": {"cpu": "20m", "memory": "40Mi"}}
                    }]
                }
            }
        }
    })
}

fn annotation(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("tailor.dev/updates"))
        .map(String::as_str)
}

/// `tailor_admission_quota_fit_pods_total{outcome="scaled"}` over the webhook's copies.
async fn scaled_count(env: &E2e) -> Result<u64> {
    let texts = webhook_metrics(env).await?;
    Ok(texts
        .iter()
        .flat_map(|t| t.lines())
        .filter(|l| l.starts_with(r#"tailor_admission_quota_fit_pods_total{outcome="scaled"}"#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}
