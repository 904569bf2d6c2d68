//! Upstream's recommender e2e scenarios (`test/e2e/v1/recommender.go` of kubernetes/autoscaler, VPA 1.7)
//! that need no restart, re-expressed against Tailor's group; `tests/UPSTREAM_E2E.md` maps each upstream case
//! to the check here (the restart ones are in `restart.rs`). The four set-ups share one namespace, each on its
//! own Deployment of one pod, and are checked once Tailor's recommender has served them. The VPAs are in mode
//! Off (upstream's builder default, Recreate, would have Tailor's updater act on recommendations made absurd
//! on purpose: 10000 cores).

use super::*;

/// A Deployment `name` of one pod with the containers `names`, each 100m/100Mi.
fn hamsters(name: &str, names: &[&str]) -> Value {
    let containers: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"name": n, "image": IMAGE,
                   "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}})
        })
        .collect();
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": containers}
            }
        }
    })
}

/// A Tailor VPA in mode Off on Deployment `name` with `policies` as its container policies.
fn vpa(name: &str, policies: Value) -> Value {
    let mut v = vpa_manifest(name, name, "Off");
    v["spec"]["resourcePolicy"] = json!({"containerPolicies": policies});
    v
}

/// The container recommendations of VPA `name` once the recommender has provided any.
async fn recommendations(env: &E2e, ns: &str, name: &str) -> Result<Vec<Value>> {
    let api = env.dynamic_vpas(ns);
    wait_for(
        &format!("a recommendation in VPA {ns}/{name}"),
        RECOMMENDATION_TIMEOUT,
        || async {
            let vpa = api.get(name).await?;
            Ok(vpa
                .data
                .pointer("/status/recommendation/containerRecommendations")
                .and_then(Value::as_array)
                .filter(|r| !r.is_empty())
                .cloned())
        },
    )
    .await
}

/// Millicores of `field` (`target`, `uncappedTarget`, …) of a container recommendation.
fn cpu_of(rec: &Value, field: &str) -> Result<i64> {
    let q = rec
        .pointer(&format!("/{field}/cpu"))
        .and_then(Value::as_str)
        .with_context(|| format!("no {field}.cpu in {rec}"))?;
    milli_cpu(&Quantity(q.to_string()))
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_recommender_scenarios() {
    let env = e2e("upstream_recommender_scenarios").await;
    let env = &env;
    in_namespace(env, "uprec", |ns| async move {
        const MIN_MILLI_CPU: i64 = 10_000 * 1000;
        const MAX_MILLI_CPU: i64 = 1;
        env.create_deployment_from(&ns, hamsters("min", &["hamster"])).await?;
        env.create_deployment_from(&ns, hamsters("max", &["hamster"])).await?;
        env.create_deployment_from(&ns, hamsters("both", &["hamster", "hamster2"])).await?;
        env.create_deployment_from(&ns, hamsters("optout", &["hamster", "hamster2"])).await?;
        env.create_vpa(&ns, vpa("min", json!([{"containerName": "hamster", "minAllowed": {"cpu": "10000"}}])))
            .await?;
        env.create_vpa(&ns, vpa("max", json!([{"containerName": "hamster", "maxAllowed": {"cpu": "1m"}}])))
            .await?;
        env.create_vpa(
            &ns,
            vpa("both", json!([{"containerName": "hamster", "mode": "Auto"}, {"containerName": "hamster2", "mode": "Auto"}])),
        )
        .await?;
        env.create_vpa(
            &ns,
            vpa("optout", json!([{"containerName": "hamster", "mode": "Off"}, {"containerName": "hamster2", "mode": "Auto"}])),
        )
        .await?;
        let mut failures = Vec::new();
        let mut report = |upstream: &str, r: Result<()>| match r {
            Ok(()) => eprintln!("upstream case passed: {upstream}"),
            Err(e) => failures.push(format!("{upstream:?}: {e:#}")),
        };

        let recs = recommendations(env, &ns, "min").await?;
        report("respects min allowed recommendation", (|| {
            let [rec] = recs.as_slice() else { bail!("{} container recommendations, expected 1", recs.len()) };
            let (target, uncapped) = (cpu_of(rec, "target")?, cpu_of(rec, "uncappedTarget")?);
            if target < MIN_MILLI_CPU || uncapped >= MIN_MILLI_CPU {
                bail!("target {target}m (expected >= {MIN_MILLI_CPU}m), uncappedTarget {uncapped}m (expected below)");
            }
            Ok(())
        })());

        let recs = recommendations(env, &ns, "max").await?;
        report("respects max allowed recommendation", (|| {
            let [rec] = recs.as_slice() else { bail!("{} container recommendations, expected 1", recs.len()) };
            let (target, uncapped) = (cpu_of(rec, "target")?, cpu_of(rec, "uncappedTarget")?);
            if target > MAX_MILLI_CPU || uncapped <= MAX_MILLI_CPU {
                bail!("target {target}m (expected <= {MAX_MILLI_CPU}m), uncappedTarget {uncapped}m (expected above)");
            }
            Ok(())
        })());

        let recs = recommendations(env, &ns, "both").await?;
        report("with no containers opted out all containers get recommendations", (|| {
            let mut names: Vec<&str> = recs.iter().filter_map(|r| r["containerName"].as_str()).collect();
            names.sort_unstable();
            if names != ["hamster", "hamster2"] {
                bail!("recommendations for {names:?}, expected hamster and hamster2");
            }
            Ok(())
        })());

        let recs = recommendations(env, &ns, "optout").await?;
        report("only containers not-opted-out get recommendations", (|| {
            let names: Vec<&str> = recs.iter().filter_map(|r| r["containerName"].as_str()).collect();
            if names != ["hamster2"] {
                bail!("recommendations for {names:?}, expected hamster2 alone (hamster has mode Off)");
            }
            Ok(())
        })());

        if !failures.is_empty() {
            bail!("{} upstream cases failed:\n{}", failures.len(), failures.join("\n"));
        }
        Ok(())
    })
    .await;
}

/// How long a VPA a recommender must leave alone is watched after that recommender served another: three of
/// its loops (5 s each on the local control plane).
const LEFT_ALONE_FOR: Duration = Duration::from_secs(15);

/// `integration/recommender.go`'s "Flags": a recommender started with `--vpa-object-namespace` serves the VPAs
/// of that namespace only, one started with `--ignored-vpa-object-namespaces` every namespace but those. Each
/// case runs a second recommender of its own name beside the chart's (the VPAs name it in
/// `spec.recommenders`, so the chart's leaves them alone), on a Deployment of one pod in each of two
/// namespaces.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_recommender_flag_scenarios() {
    let env = e2e("upstream_recommender_flag_scenarios").await;
    let env = &env;
    in_namespace(env, "recommender-flags", |ns| async move {
        let other = env.namespace("recommender-flags-other").await?;
        let result = flag_cases(env, &ns, &other).await;
        env.drop_namespace(&other).await;
        result
    })
    .await;
}

async fn flag_cases(env: &E2e, ns: &str, other: &str) -> Result<()> {
    let cases = [
        ("e2e-only-namespace", format!("--vpa-object-namespace={ns}")),
        (
            "e2e-ignoring",
            format!("--ignored-vpa-object-namespaces={other}"),
        ),
    ];
    for n in [ns, other] {
        env.create_deployment_from(n, hamsters("hamster", &["hamster"]))
            .await?;
        for (recommender, _) in &cases {
            let mut v = vpa(recommender, json!([]));
            v["spec"]["targetRef"]["name"] = json!("hamster");
            v["spec"]["recommenders"] = json!([{"name": recommender}]);
            env.create_vpa(n, v).await?;
        }
        env.wait_running(n, "hamster", 1).await?;
    }
    for (recommender, flag) in &cases {
        env.start_named_recommender(recommender, std::slice::from_ref(flag))
            .await?;
        let result = async {
            recommendations(env, ns, recommender).await?;
            tokio::time::sleep(LEFT_ALONE_FOR).await;
            let status = env.dynamic_vpas(other).get(recommender).await?.data["status"].clone();
            if !status.is_null() && status != json!({}) {
                bail!("recommender {recommender} ({flag}) wrote the status of {other}/{recommender}: {status}");
            }
            eprintln!("upstream case passed: starts recommender with {flag}");
            Ok(())
        }
        .await;
        env.stop_named_recommender(recommender).await?;
        result?;
    }
    Ok(())
}
