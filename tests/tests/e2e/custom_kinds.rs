//! A VPA whose target is a custom kind with a /scale subresource.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn custom_kind_with_scale_subresource() {
    let env = e2e("custom_kind_with_scale_subresource").await;
    let env = &env;
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let crd_name = "widgets.e2e.tailor.dev";
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": crd_name},
        "spec": {
            "group": "e2e.tailor.dev",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "selector": {"type": "string"}}}
                }}},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"
                }}
            }]
        }
    }))
    .expect("the Widget CRD");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the Widget CRD: {e}"),
    }
    in_namespace(env, "scale", |ns| async move {
        let result = async {
            wait_for("the Widget CRD to be established", POD_TIMEOUT, || async {
                let c = crds.get(crd_name).await?;
                Ok(c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(()))
            })
            .await?;
            let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("e2e.tailor.dev", "v1", "Widget"));
            let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar);
            let widget: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "e2e.tailor.dev/v1", "kind": "Widget",
                "metadata": {"name": "widget"}, "spec": {"replicas": 2}
            }))?;
            let widget = widgets.create(&PostParams::default(), &widget).await?;
            let uid = widget.metadata.uid.clone().context("widget uid")?;
            widgets
                .patch_status(
                    "widget",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"replicas": 2, "selector": "app=widget"}})),
                )
                .await?;
            let scale = widgets.get_scale("widget").await?;
            let selector = scale.status.and_then(|s| s.selector);
            if selector.as_deref() != Some("app=widget") {
                bail!("the Widget's /scale reports selector {selector:?}");
            }
            // We are the Widget's controller: its pods are ours to create.
            let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
            let widget_pod = |name: &str| -> Result<Pod> {
                Ok(serde_json::from_value(json!({
                    "metadata": {
                        "name": name,
                        "labels": {"app": "widget"},
                        "ownerReferences": [{"apiVersion": "e2e.tailor.dev/v1", "kind": "Widget",
                                             "name": "widget", "uid": uid, "controller": true}]
                    },
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": IMAGE, "resources": {
                            "requests": {"cpu": "10m", "memory": "20Mi"},
                            "limits": {"cpu": "20m", "memory": "40Mi"}}}]
                    }
                }))?)
            };
            for name in ["widget-0", "widget-1"] {
                pods.create(&PostParams::default(), &widget_pod(name)?).await?;
            }
            env.create_vpa(&ns, json!({
                "apiVersion": "autoscaling.tailor.dev/v1",
                "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "widget"},
                "spec": {
                    "targetRef": {"apiVersion": "e2e.tailor.dev/v1", "kind": "Widget", "name": "widget"},
                    "updatePolicy": {"updateMode": "Initial"}
                }
            }))
            .await?;
            // The recommender resolves the Widget through /scale and recommends for its pods.
            let before = cpu_mem(&env.recommendation(&ns, "widget").await?)?;
            // The webhook sizes a new pod of the Widget (it too resolves the owner through /scale, from a cache
            // filled in the background: as the README says, a pod of a target it has not looked up yet may be
            // admitted before the answer arrives — such a pod is deleted and another one created).
            let attempt = std::sync::atomic::AtomicUsize::new(2);
            let created = wait_for(
                "a new pod of the Widget sized by the webhook",
                POD_TIMEOUT,
                || async {
                    let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let name = format!("widget-{n}");
                    let created = pods.create(&PostParams::default(), &widget_pod(&name)?).await?;
                    let (requests, _) = container_resources(&created)?;
                    if cpu_mem(&requests)? != ORIGINAL_REQUESTS {
                        return Ok(Some(created));
                    }
                    pods.delete(&name, &DeleteParams::default().grace_period(0)).await?;
                    Ok(None)
                },
            )
            .await?;
            let after = cpu_mem(&env.recommendation(&ns, "widget").await?)?;
            let (requests, limits) = container_resources(&created)?;
            let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
            if requests != before && requests != after {
                bail!("the Widget's new pod has requests {requests:?}, not the recommendation ({before:?} or {after:?})");
            }
            if !limits_in_proportion(requests, limits) {
                bail!("limits {limits:?} are not twice the requests {requests:?}");
            }
            let annotations = created.metadata.annotations.clone().unwrap_or_default();
            if !annotations.contains_key("tailor.dev/updates") {
                bail!("the Widget's new pod lacks the tailor.dev/updates annotation: {annotations:?}");
            }
            Ok(())
        }
        .await;
        let _ = crds.delete(crd_name, &DeleteParams::background()).await;
        result
    })
    .await;
}
