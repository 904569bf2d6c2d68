//! What a VPA may say, and what Tailor publishes before it knows anything: quantities no recommender can honour
//! are refused at admission with the field's path, a target of an unknown kind gets the API server's plain
//! words, and a new workload's pods are never sized to the pod minimum computed from no sample at all.

use super::*;

/// The pod minimum the recommender publishes for a container with no usage under upstream's rule (25m and
/// 250Mi for a one-container pod).
const POD_MINIMUM: (i64, i64) = (25, 250 * MI);

fn bounded_vpa(name: &str, target: &str, min: Value, max: Value) -> Value {
    let mut v = vpa_manifest(name, target, "Off");
    let mut policy = json!({"containerName": "app"});
    if !min.is_null() {
        policy["minAllowed"] = min;
    }
    if !max.is_null() {
        policy["maxAllowed"] = max;
    }
    v["spec"]["resourcePolicy"] = json!({"containerPolicies": [policy]});
    v
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn vpas_no_recommender_can_honour_are_refused_with_the_field() {
    let env = e2e("vpas_no_recommender_can_honour_are_refused_with_the_field").await;
    let env = &env;
    in_namespace(env, "validity", |ns| async move {
        let cases = [
            (
                bounded_vpa("huge", "web", Value::Null, json!({"cpu": "1e30"})),
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]",
            ),
            (
                bounded_vpa("negative", "web", json!({"memory": "-1"}), Value::Null),
                "spec.resourcePolicy.containerPolicies[0].minAllowed[memory]",
            ),
        ];
        for (manifest, field) in cases {
            let name = manifest["metadata"]["name"].clone();
            match env.create_vpa(&ns, manifest).await {
                Ok(_) => bail!("VPA {name} was admitted"),
                Err(e) => {
                    let text = format!("{e:#}");
                    if !text.contains(field) {
                        bail!("VPA {name} refused without naming {field}: {text}");
                    }
                }
            }
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_target_of_an_unknown_kind_gets_a_plain_condition() {
    let env = e2e("a_target_of_an_unknown_kind_gets_a_plain_condition").await;
    let env = &env;
    in_namespace(env, "unknown-kind", |ns| async move {
        let mut manifest = vpa_manifest("widget", "w", "Off");
        manifest["spec"]["targetRef"] =
            json!({"apiVersion": "widgets.example.com/v1", "kind": "Widget", "name": "w"});
        env.create_vpa(&ns, manifest).await?;
        let c = wait_for(
            "ConfigUnsupported on the VPA",
            RECOMMENDATION_TIMEOUT,
            || async { condition(env, &ns, "widget", "ConfigUnsupported").await },
        )
        .await?;
        let message = c.message.unwrap_or_default();
        let want = "no matches for kind \"Widget\" in group \"widgets.example.com\"";
        if !message.contains(want) || message.contains("Status {") || message.contains("ApiError") {
            bail!("ConfigUnsupported says {message:?}, not {want:?} alone");
        }
        if c.reason.as_deref().unwrap_or_default().is_empty() {
            bail!("ConfigUnsupported has no reason: {message:?}");
        }
        Ok(())
    })
    .await;
}

/// The requests of every pod of `app` in `ns` seen so far, by pod name.
async fn record_requests(
    env: &E2e,
    ns: &str,
    app: &str,
    seen: &mut BTreeMap<String, (i64, i64)>,
) -> Result<()> {
    for p in env.all_pods(ns, app).await? {
        let name = p.metadata.name.clone().unwrap_or_default();
        if seen.contains_key(&name) {
            continue;
        }
        let (requests, _) = container_resources(&p)?;
        seen.insert(name, cpu_mem(&requests)?);
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_new_workload_is_never_sized_to_the_pod_minimum() {
    let env = e2e("a_new_workload_is_never_sized_to_the_pod_minimum").await;
    let env = &env;
    in_namespace(env, "first-status", |ns| async move {
        // Deployment and VPA together, as `kubectl apply -f dir/` sends them; the pods use 400m and 600Mi.
        env.create_annotated_deployment(
            &ns,
            "web",
            1,
            json!({"kwok.x-k8s.io/usage-cpu": "400m", "kwok.x-k8s.io/usage-memory": "600Mi"}),
        )
        .await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial"))
            .await?;
        let vpas = env.tailor_vpas(&ns);
        let mut seen = BTreeMap::new();
        let mut first: Option<BTreeMap<String, Quantity>> = None;
        let started = Instant::now();
        let mut scaled = false;
        // Watch every pod and the VPA's first recommendation until it is there and the scaled-up pods ran.
        while started.elapsed() < RECOMMENDATION_TIMEOUT {
            record_requests(env, &ns, "web", &mut seen).await?;
            if first.is_none() {
                first = target_of(&vpas.get("web").await?);
            }
            if !scaled && started.elapsed() >= Duration::from_secs(10) {
                Api::<Deployment>::namespaced(env.client.clone(), &ns)
                    .patch(
                        "web",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": 4}})),
                    )
                    .await?;
                scaled = true;
            }
            if first.is_some() && seen.len() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let first = first.context("no recommendation within the timeout")?;
        let (cpu, memory) = cpu_mem(&first)?;
        if cpu <= POD_MINIMUM.0 || memory <= POD_MINIMUM.1 {
            bail!("the first recommendation is the pod minimum, not the usage: {first:?}");
        }
        // One more scale-up once the recommendation is there: those pods are sized by it.
        Api::<Deployment>::namespaced(env.client.clone(), &ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 6}})),
            )
            .await?;
        let until = Instant::now() + POD_TIMEOUT;
        while Instant::now() < until && seen.len() < 6 {
            record_requests(env, &ns, "web", &mut seen).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let at_minimum: Vec<&String> = seen
            .iter()
            .filter(|(_, r)| **r == POD_MINIMUM)
            .map(|(name, _)| name)
            .collect();
        if !at_minimum.is_empty() {
            bail!("pods admitted at the pod minimum: {at_minimum:?} (all: {seen:?})");
        }
        // Pods created after the recommendation are sized by the webhook (away from the template's requests).
        let sized = seen.values().filter(|r| **r != ORIGINAL_REQUESTS).count();
        if sized == 0 {
            bail!("no pod was sized by the recommendation {first:?}: {seen:?}");
        }
        eprintln!(
            "first recommendation {cpu}m / {memory} bytes; {} pods seen, {sized} sized to it, none at the \
             minimum",
            seen.len()
        );
        Ok(())
    })
    .await;
}
