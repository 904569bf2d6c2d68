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
