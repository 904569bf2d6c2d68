//! Webhook scope (docs/decisions/webhook-scope.md): the chart keeps the pods of `kube-system` (and of the
//! release namespace and `admission.webhook.excludeNamespaces`) away from the webhook, so an evicted pod there
//! would come back with its old requests, to be evicted again forever. A `Recreate` VPA there evicts nothing,
//! and the VPA says why: the `UpdatesBlocked` condition and an `OutsideWebhookScope` event.

use super::*;

/// A namespace the chart's webhook never serves, whatever the values (the chart always excludes it).
const EXCLUDED: &str = "kube-system";

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_recreate_vpa_outside_the_webhooks_scope_evicts_nothing_and_says_why() {
    let env = e2e("a_recreate_vpa_outside_the_webhooks_scope_evicts_nothing_and_says_why").await;
    let env = &env;
    // kube-system is shared: the test's objects get a name of their own there and are deleted at the end.
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 1_000_000)
        .unwrap_or_default();
    let name = format!("e2e-scope-{suffix}");
    let started = Instant::now();
    let result = outside_scope(env, &name).await;
    eprintln!("scope: {:.0}s", started.elapsed().as_secs_f64());
    let _ = env
        .dynamic_vpas(EXCLUDED)
        .delete(&name, &DeleteParams::background())
        .await;
    let _ = Api::<Deployment>::namespaced(env.client.clone(), EXCLUDED)
        .delete(&name, &DeleteParams::background())
        .await;
    if let Err(e) = result {
        panic!("scope failed in namespace {EXCLUDED} ({name}): {e:#}");
    }
}

async fn outside_scope(env: &E2e, name: &str) -> Result<()> {
    let ns = EXCLUDED;
    env.create_deployment_from(ns, busy_deployment(name, 2))
        .await?;
    env.wait_running(ns, name, 2).await?;
    let original = env.live_uids(ns, name).await?;
    let mut vpa = vpa_manifest(name, name, "Recreate");
    vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
    env.create_vpa(ns, vpa).await?;
    // A recommendation far from the pods' 10m: inside the webhook's scope they would be evicted at once.
    let target = wait_for(
        "a recommendation far above the pods' requests",
        RECOMMENDATION_TIMEOUT,
        || async {
            Ok(first_recommendation(env, ns, name)
                .await?
                .and_then(|(t, _)| t.get("cpu").cloned())
                .filter(|cpu| milli_cpu(cpu).is_ok_and(|m| m >= 100)))
        },
    )
    .await?;
    let blocked = wait_for(
        "UpdatesBlocked with reason OutsideWebhookScope",
        UPDATE_TIMEOUT,
        || async {
            let c = condition(env, ns, name, "UpdatesBlocked").await?;
            Ok(c.filter(|c| {
                c.status == "True" && c.reason.as_deref() == Some("OutsideWebhookScope")
            }))
        },
    )
    .await?;
    let message = blocked.message.unwrap_or_default();
    if !message.contains(&format!("namespace {ns}")) {
        bail!("the condition should name the namespace the webhook does not serve: {message}");
    }
    let event = vpa_event(env, ns, name, "OutsideWebhookScope").await?;
    // Two more updater loops (10 s each on the local cluster) with the recommendation in place.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let now = env.live_uids(ns, name).await?;
    if now != original {
        bail!(
            "pods were replaced ({original:?} -> {now:?}) in a namespace the webhook never serves"
        );
    }
    let evicted = env.pod_events(ns, "EvictedByVPA").await?;
    let ours: Vec<_> = evicted
        .iter()
        .filter(|(uid, _)| original.contains(uid))
        .collect();
    if !ours.is_empty() {
        bail!("EvictedByVPA events on the pods: {ours:?}");
    }
    let audit = match tailor_disruptions(env, ns)? {
        Some(requests) => {
            let ours: Vec<&String> = requests.iter().filter(|p| p.starts_with(name)).collect();
            if !ours.is_empty() {
                bail!("the audit log has Tailor's eviction or resize requests for {ours:?}");
            }
            "audit log: no eviction or resize request"
        }
        None => "no audit log (kind)",
    };
    println!(
        "scope ({audit}): 0 evictions of 2 pods over 25 s (2 updater loops) after UpdatesBlocked, target cpu {}; \
         UpdatesBlocked: {message}; event: {event}",
        target.0
    );
    Ok(())
}

/// A Deployment `name` of `replicas` pods of 10m/20Mi (limits twice that) each using half a core and 30Mi
/// (kwok's usage annotations): a recommendation far above the requests.
pub(super) fn busy_deployment(name: &str, replicas: i32) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "kwok.x-k8s.io/usage-cpu": "500m", "kwok.x-k8s.io/usage-memory": "30Mi"}},
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

/// Waits for a Warning Event with `reason` on VPA `vpa` and returns its message.
pub(super) async fn vpa_event(env: &E2e, ns: &str, vpa: &str, reason: &str) -> Result<String> {
    wait_for(
        &format!("a {reason} Event on VPA {ns}/{vpa}"),
        UPDATE_TIMEOUT,
        || async {
            let events = Api::<Event>::namespaced(env.client.clone(), ns)
                .list(&ListParams::default())
                .await?;
            Ok(events.items.into_iter().find_map(|e| {
                (e.reason.as_deref() == Some(reason)
                    && e.involved_object.kind.as_deref() == Some("VerticalPodAutoscaler")
                    && e.involved_object.name.as_deref() == Some(vpa))
                .then(|| e.message.unwrap_or_default())
            }))
        },
    )
    .await
}
