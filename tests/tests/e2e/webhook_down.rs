//! The webhook down: pods are still created (failurePolicy Ignore).

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn webhook_down_does_not_block_pod_creation() {
    let env = e2e("webhook_down_does_not_block_pod_creation").await;
    let env = &env;
    let replicas = env.running_webhooks().await;
    in_namespace(env, "down", |ns| async move {
        env.scale_webhook(0).await?;
        let result = async {
            env.create_deployment(&ns, "web", 1).await?;
            env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
            let start = Instant::now();
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "bare", "labels": {"app": "bare"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "app", "image": IMAGE}]}
            }))?;
            Api::<Pod>::namespaced(env.client.clone(), &ns).create(&PostParams::default(), &pod).await?;
            // failurePolicy Ignore with a 5 s timeout: the create returns, at worst after the timeout.
            if start.elapsed() > Duration::from_secs(15) {
                bail!("creating a pod took {:?} with the webhook down", start.elapsed());
            }
            wait_for("the Deployment's pod to run without the webhook", POD_TIMEOUT, || async {
                Ok((!env.running_pods(&ns, "web").await?.is_empty()).then_some(()))
            })
            .await
        }
        .await;
        // Always bring the webhook back for the tests that follow.
        env.scale_webhook(replicas).await?;
        result
    })
    .await;
}

/// Status writes of Tailor's recommender to VPAs of namespace `ns` that the API server refused (a webhook's
/// denial among them), from the audit log; `None` without one (kind).
fn refused_status_writes(ns: &str) -> Result<Option<Vec<String>>> {
    let Some(audit) = std::env::var_os("TAILOR_E2E_AUDIT_LOG") else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&audit).with_context(|| format!("audit log {audit:?}"))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let at = |p: &str| event.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let code = event
            .pointer("/responseStatus/code")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if at("/objectRef/namespace") == ns
            && at("/objectRef/resource") == "verticalpodautoscalers"
            && at("/objectRef/subresource") == "status"
            && at("/stage") == "ResponseComplete"
            && code >= 400
        {
            out.push(format!("{} {} {code}", at("/verb"), at("/objectRef/name")));
        }
    }
    Ok(Some(out))
}

/// A VPA whose `minAllowed` is above its `maxAllowed`, applied while the webhook was down (failurePolicy
/// Ignore lets it in): once the webhook is back, the recommender keeps writing its status, with
/// `ConfigUnsupported` naming the field, and no status write is refused.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_vpa_admitted_while_the_webhook_was_down_keeps_its_status_written() {
    let env = e2e("a_vpa_admitted_while_the_webhook_was_down_keeps_its_status_written").await;
    let env = &env;
    let replicas = env.running_webhooks().await;
    in_namespace(env, "down-invalid", |ns| async move {
        env.create_deployment_from(
            &ns,
            json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {
                            "kwok.x-k8s.io/usage-cpu": "300m",
                            "kwok.x-k8s.io/usage-memory": "300Mi"
                        }},
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                            "name": "app", "image": IMAGE,
                            "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}}
                        }]}
                    }
                }
            }),
        )
        .await?;
        let mut bad = vpa_manifest("web", "web", "Off");
        bad["spec"]["resourcePolicy"] = json!({"containerPolicies": [{
            "containerName": "app", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}
        }]});
        env.scale_webhook(0).await?;
        let created = env.create_vpa(&ns, bad).await;
        env.scale_webhook(replicas).await?;
        created?;
        let field = "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]";
        let c = wait_for(
            "ConfigUnsupported naming the bad field",
            RECOMMENDATION_TIMEOUT,
            || async {
                Ok(condition(env, &ns, "web", "ConfigUnsupported")
                    .await?
                    .filter(|c| c.message.as_deref().unwrap_or_default().contains(field)))
            },
        )
        .await?;
        if c.reason.as_deref() != Some("InvalidSpec") {
            bail!("ConfigUnsupported reason {:?}, not InvalidSpec", c.reason);
        }
        let before = env.recommendation(&ns, "web").await?;
        // More memory: the recommender's next writes must carry it, with the webhook up.
        let pods = env.wait_running(&ns, "web", 1).await?;
        let pod = pods[0]
            .metadata
            .name
            .clone()
            .context("a pod without a name")?;
        Api::<Pod>::namespaced(env.client.clone(), &ns)
            .patch(
                &pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "kwok.x-k8s.io/usage-memory": "900Mi"
                }}})),
            )
            .await?;
        let (_, memory_before) = cpu_mem(&before)?;
        let api = env.tailor_vpas(&ns);
        let after = wait_for(
            "the status written again with the new usage",
            RECOMMENDATION_TIMEOUT,
            || async {
                let Some(t) = target_of(&api.get("web").await?) else {
                    return Ok(None);
                };
                Ok((cpu_mem(&t)?.1 > memory_before).then_some(t))
            },
        )
        .await?;
        if let Some(refused) = refused_status_writes(&ns)?
            && !refused.is_empty()
        {
            bail!("status writes refused: {refused:?}");
        }
        eprintln!(
            "status kept being written: target {before:?} then {after:?}; ConfigUnsupported: {c:?}"
        );
        Ok(())
    })
    .await;
}
