//! Checkpoints as users and other tools leave them (docs/decisions/checkpoints.md): a checkpoint the CRD schema
//! admits but the recommender cannot decode, applied with kubectl, costs only its own VPA's history; two VPAs
//! whose names and container names join to upstream's same checkpoint name each get an object of their own.

use super::crds::kubectl;
use super::scope::busy_deployment;
use super::*;

/// `kubectl` with `stdin`, failing with its stderr unless it succeeds; returns its stdout.
fn kubectl_ok(args: &[&str], stdin: &str) -> Result<String> {
    let out = kubectl(args, stdin)?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_checkpoint_the_schema_admits_but_no_decoder_reads_costs_only_its_own_vpa() {
    let env =
        e2e("a_checkpoint_the_schema_admits_but_no_decoder_reads_costs_only_its_own_vpa").await;
    let env = &env;
    in_namespace(env, "badcp", |ns| async move {
        // A bucket key that is no bucket index: the schema cannot constrain map keys, the decoder refuses it.
        // The checkpoint CRD has no status subresource (as upstream's): the status is applied with the rest.
        let now = Timestamp::now().to_string();
        let checkpoint = json!({
            "apiVersion": "autoscaling.tailor.dev/v1", "kind": "VerticalPodAutoscalerCheckpoint",
            "metadata": {"name": "bad.app", "namespace": ns},
            "spec": {"vpaObjectName": "bad", "containerName": "app"},
            "status": {
                "version": "v3",
                "lastUpdateTime": now, "firstSampleStart": now, "lastSampleStart": now,
                "totalSamplesCount": 10,
                "cpuHistogram": {"bucketWeights": {"not-a-bucket": 10000}, "totalWeight": 1.0},
                "memoryHistogram": {"bucketWeights": {"3": 10000}, "totalWeight": 1.0}
            }
        });
        kubectl_ok(&["apply", "-f", "-"], &checkpoint.to_string())?;
        // Stored as applied: the API server admitted it.
        let stored = env.checkpoints(&ns).get("bad.app").await?;
        if stored.data.pointer("/status/cpuHistogram/bucketWeights/not-a-bucket").is_none() {
            bail!("the API server did not keep the bad bucket key: {:?}", stored.data.get("status"));
        }
        for name in ["bad", "good"] {
            env.create_deployment_from(&ns, busy_deployment(name, 1)).await?;
        }
        for name in ["bad", "good"] {
            env.create_vpa(&ns, vpa_manifest(name, name, "Off")).await?;
        }
        let skipped = wait_for(
            "the CheckpointSkipped condition on VPA bad",
            RECOMMENDATION_TIMEOUT,
            || async {
                Ok(condition(env, &ns, "bad", "CheckpointSkipped")
                    .await?
                    .filter(|c| c.status == "True"))
            },
        )
        .await?;
        let message = skipped.message.unwrap_or_default();
        if !message.contains("bad.app") {
            bail!("the condition should name the checkpoint object: {message}");
        }
        let since = Timestamp::now();
        // The other VPA: recommended for and checkpointed, after the bad object was read, as if it were not there.
        env.recommendation(&ns, "good").await?;
        let samples = written_with_samples(env, &ns, "good.app", since).await?;
        if let Some(c) = condition(env, &ns, "good", "CheckpointSkipped").await? {
            bail!("VPA good has a CheckpointSkipped condition too: {c:?}");
        }
        // The bad VPA itself still gets a recommendation from live samples.
        env.recommendation(&ns, "bad").await?;
        println!(
            "bad checkpoint: VPA bad CheckpointSkipped: {message}; VPA good recommended and checkpoint good.app \
             written after it ({samples} samples)"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn vpa_and_container_names_that_join_alike_get_a_checkpoint_each() {
    let env = e2e("vpa_and_container_names_that_join_alike_get_a_checkpoint_each").await;
    let env = &env;
    in_namespace(env, "cpnames", |ns| async move {
        // web + api-app and web-api + app: upstream names both checkpoints "web-api-app".
        for (name, container) in [("web", "api-app"), ("web-api", "app")] {
            let mut d = busy_deployment(name, 1);
            d["spec"]["template"]["spec"]["containers"][0]["name"] = json!(container);
            env.create_deployment_from(&ns, d).await?;
            env.create_vpa(&ns, vpa_manifest(name, name, "Off")).await?;
        }
        let checkpoints = env.checkpoints(&ns);
        let mut seen = Vec::new();
        for (vpa, container) in [("web", "api-app"), ("web-api", "app")] {
            let name = format!("{vpa}.{container}");
            let cp = wait_for(
                &format!("checkpoint {name}"),
                RECOMMENDATION_TIMEOUT,
                || async {
                    Ok(checkpoints
                        .get_opt(&name)
                        .await?
                        .filter(|cp| samples_of(cp).is_some()))
                },
            )
            .await?;
            let owner = (
                cp.data
                    .pointer("/spec/vpaObjectName")
                    .and_then(Value::as_str),
                cp.data
                    .pointer("/spec/containerName")
                    .and_then(Value::as_str),
            );
            if owner != (Some(vpa), Some(container)) {
                bail!("checkpoint {name} belongs to {owner:?}");
            }
            seen.push(name);
        }
        // Both are rewritten with their own history (max age 20 s on the local cluster) and stay apart; no
        // shared legacy object.
        let since = Timestamp::now();
        let mut rewritten = Vec::new();
        for name in ["web.api-app", "web-api.app"] {
            let samples = written_with_samples(env, &ns, name, since).await?;
            rewritten.push(format!("{name}: {samples} samples"));
        }
        let names: Vec<String> = checkpoints
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        if names.len() != 2 || names.iter().any(|n| n == "web-api-app") {
            bail!("the namespace's checkpoints are {names:?}, not one per VPA and container");
        }
        println!(
            "checkpoint names: {} written, then rewritten with their own history ({}); objects {names:?}",
            seen.join(" and "),
            rewritten.join(", ")
        );
        Ok(())
    })
    .await;
}

/// Waits until checkpoint `name` was written after `after` with samples in it (a first write may come before
/// any sample); returns its sample count.
async fn written_with_samples(env: &E2e, ns: &str, name: &str, after: Timestamp) -> Result<i64> {
    let checkpoints = env.checkpoints(ns);
    wait_for(
        &format!("checkpoint {ns}/{name} written after {after} with samples"),
        Duration::from_secs(120),
        || async {
            let Some(cp) = checkpoints.get_opt(name).await? else {
                return Ok(None);
            };
            Ok(last_update_of(&cp)
                .filter(|t| *t > after)
                .and_then(|_| samples_of(&cp))
                .filter(|n| *n > 0))
        },
    )
    .await
}
