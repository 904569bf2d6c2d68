//! HPA coherence (docs/decisions/hpa-coherence.md): with an HPA scaling a Deployment on CPU utilization, Tailor
//! sizes only its memory: the VPA publishes no CPU target, says why in `ResourcesLeftToHPA`, and the
//! replacement pods get the memory recommendation with their CPU request untouched.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_cpu_hpa_leaves_tailor_only_memory() {
    let env = e2e("a_cpu_hpa_leaves_tailor_only_memory").await;
    let env = &env;
    in_namespace(env, "hpa", |ns| async move {
        env.create_deployment_from(
            &ns,
            json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {
                            "kwok.x-k8s.io/usage-cpu": "400m", "kwok.x-k8s.io/usage-memory": "300Mi"}},
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "app", "image": IMAGE,
                                "resources": {"requests": {"cpu": "10m", "memory": "20Mi"},
                                              "limits": {"cpu": "20m", "memory": "40Mi"}}}]
                        }
                    }
                }
            }),
        )
        .await?;
        env.wait_running(&ns, "web", 1).await?;
        let original = env.live_uids(&ns, "web").await?;
        // maxReplicas 1: the HPA never changes the replica count here, only its metric matters.
        let hpa: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler =
            serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 1, "maxReplicas": 1,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70}}}]
                }
            }))?;
        Api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>::namespaced(
            env.client.clone(),
            &ns,
        )
        .create(&PostParams::default(), &hpa)
        .await?;
        let mut vpa = vpa_manifest("web", "web", "Recreate");
        vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
        env.create_vpa(&ns, vpa).await?;
        let (target, uncapped) = wait_for(
            "a memory-only target with the ResourcesLeftToHPA condition",
            RECOMMENDATION_TIMEOUT,
            || async {
                let c = condition(env, &ns, "web", "ResourcesLeftToHPA").await?;
                let Some(c) = c.filter(|c| c.status == "True") else {
                    return Ok(None);
                };
                println!("ResourcesLeftToHPA: {:?}", c.message);
                first_recommendation(env, &ns, "web").await
            },
        )
        .await?;
        if target.contains_key("cpu") || !target.contains_key("memory") {
            bail!("target {target:?}: memory only expected");
        }
        if !uncapped.contains_key("cpu") {
            bail!("uncappedTarget {uncapped:?} should still show the CPU Tailor would set");
        }
        let memory = bytes(&target["memory"])?;
        // The updater evicts the pod (its 20Mi are below the memory bounds); the replacement gets the memory
        // recommendation and keeps its CPU request.
        let fresh = env.wait_replaced(&ns, "web", &original).await?;
        let r = pod_resources(&fresh[0])?;
        if r.spec_requests.0 != 10 {
            bail!("the CPU request changed to {}m: it is the HPA's", r.spec_requests.0);
        }
        if r.spec_requests.1 <= 20 * MI {
            bail!("the memory request {} was not sized (target {memory})", r.spec_requests.1);
        }
        Ok(())
    })
    .await;
}
