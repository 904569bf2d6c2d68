//! A VPA whose target is a custom kind with a /scale subresource: the webhook sizes its new pods (mode
//! `Initial`), and the updater binary evicts them (mode `Recreate`, docs/decisions/scale-lookups.md) within the
//! replica budget it reads from /scale.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn custom_kind_with_scale_subresource() {
    let env = e2e("custom_kind_with_scale_subresource").await;
    let env = &env;
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let crd_name = "widgets.e2e.tailor.dev";
    let crd = scalable_crd("Widget", "widgets");
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

/// CRD `<plural>.e2e.tailor.dev` of kind `kind` with a /scale subresource (`.spec.replicas`,
/// `.status.replicas`, `.status.selector`). Each test has a kind of its own: a test deletes its CRD at the end.
fn scalable_crd(kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.e2e.tailor.dev")},
        "spec": {
            "group": "e2e.tailor.dev",
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_lowercase()},
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
    .expect("a CRD with a /scale subresource")
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn the_updater_evicts_pods_of_a_custom_kind_within_its_replica_budget() {
    let env = e2e("the_updater_evicts_pods_of_a_custom_kind_within_its_replica_budget").await;
    let env = &env;
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let crd_name = "gadgets.e2e.tailor.dev";
    match crds
        .create(&PostParams::default(), &scalable_crd("Gadget", "gadgets"))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the Gadget CRD: {e}"),
    }
    in_namespace(env, "scaleevict", |ns| async move {
        let result = gadget_evictions(env, &crds, crd_name, &ns).await;
        let _ = crds.delete(crd_name, &DeleteParams::background()).await;
        result
    })
    .await;
}

async fn gadget_evictions(
    env: &E2e,
    crds: &Api<CustomResourceDefinition>,
    crd_name: &str,
    ns: &str,
) -> Result<()> {
    wait_for("the Gadget CRD to be established", POD_TIMEOUT, || async {
        let c = crds.get(crd_name).await?;
        Ok(c.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(()))
    })
    .await?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("e2e.tailor.dev", "v1", "Gadget"));
    let gadgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &ar);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.tailor.dev/v1", "kind": "Gadget",
        "metadata": {"name": "gadget"}, "spec": {"replicas": 2}
    }))?;
    let uid = gadgets
        .create(&PostParams::default(), &gadget)
        .await?
        .metadata
        .uid
        .context("gadget uid")?;
    gadgets
        .patch_status(
            "gadget",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "selector": "app=gadget"}})),
        )
        .await?;
    // We are the Gadget's controller: its pods are ours to create (and to replace). Each uses half a core, so
    // the recommendation is far above the 10m they ask.
    let pods = Api::<Pod>::namespaced(env.client.clone(), ns);
    let gadget_pod = |name: &str| -> Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {"app": "gadget"},
                "annotations": {"kwok.x-k8s.io/usage-cpu": "500m", "kwok.x-k8s.io/usage-memory": "30Mi"},
                "ownerReferences": [{"apiVersion": "e2e.tailor.dev/v1", "kind": "Gadget",
                                     "name": "gadget", "uid": uid, "controller": true}]
            },
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": IMAGE, "resources": {
                    "requests": {"cpu": "10m", "memory": "20Mi"},
                    "limits": {"cpu": "20m", "memory": "40Mi"}}}]
            }
        }))?)
    };
    for name in ["gadget-0", "gadget-1"] {
        pods.create(&PostParams::default(), &gadget_pod(name)?)
            .await?;
    }
    env.wait_running(ns, "gadget", 2).await?;
    let original = env.live_uids(ns, "gadget").await?;
    // Default minReplicas (2) and tolerance (0.5): one of the two may go, and none while only one runs.
    env.create_vpa(ns, json!({
        "apiVersion": "autoscaling.tailor.dev/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "gadget"},
        "spec": {
            "targetRef": {"apiVersion": "e2e.tailor.dev/v1", "kind": "Gadget", "name": "gadget"},
            "updatePolicy": {"updateMode": "Recreate"}
        }
    }))
    .await?;
    let first = wait_for(
        "the updater to evict one pod of the Gadget",
        RECOMMENDATION_TIMEOUT + UPDATE_TIMEOUT,
        || async {
            let live = env.live_uids(ns, "gadget").await?;
            Ok((live.len() < original.len()).then_some(live))
        },
    )
    .await?;
    let evicted_at = Instant::now();
    if first.len() != 1 {
        bail!(
            "{} of 2 pods were evicted at once: {first:?}",
            2 - first.len()
        );
    }
    let events = env.pod_events(ns, "EvictedByVPA").await?;
    if !events
        .iter()
        .any(|(uid, _)| original.contains(uid) && !first.contains(uid))
    {
        bail!("the pod that went has no EvictedByVPA event: {events:?}");
    }
    // Two more updater loops with one pod of two running: the budget holds the other one.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let held = env.live_uids(ns, "gadget").await?;
    if held != first {
        bail!("with one pod of two running the updater went on: {first:?} -> {held:?}");
    }
    let held_for = evicted_at.elapsed();
    // As the Gadget's controller, replace the evicted pod; the webhook sizes the replacement (retried while
    // its owner lookup of the Gadget is not cached yet).
    let attempt = std::sync::atomic::AtomicUsize::new(2);
    let replacement = wait_for(
        "a replacement sized by the webhook",
        POD_TIMEOUT,
        || async {
            let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("gadget-{n}");
            let created = pods
                .create(&PostParams::default(), &gadget_pod(&name)?)
                .await?;
            let (requests, _) = container_resources(&created)?;
            if cpu_mem(&requests)? != ORIGINAL_REQUESTS {
                return Ok(Some(created));
            }
            pods.delete(&name, &DeleteParams::default().grace_period(0))
                .await?;
            Ok(None)
        },
    )
    .await?;
    let (sized, _) = container_resources(&replacement)?;
    // Two pods run again: the last original one goes too.
    wait_for("the other original pod evicted", UPDATE_TIMEOUT, || async {
        let live = env.live_uids(ns, "gadget").await?;
        Ok(live.iter().all(|u| !original.contains(u)).then_some(()))
    })
    .await?;
    println!(
        "custom kind: updater evicted 1 of 2 Gadget pods, held the other {:.0}s (budget: 1 of 2 running), \
         evicted it once a replacement sized {sized:?} ran",
        held_for.as_secs_f64()
    );
    Ok(())
}
