//! Two VPAs on one workload (docs/decisions/conflicting-vpas.md), an `Initial` one and a `Recreate` one: with
//! the default `--skip-conflicting-vpas` the updater acts on neither (the webhook sizes pods from the oldest,
//! so evicting by the other would loop), says so on both (`UpdatesBlocked` with reason `ConflictingVPAs`, and a
//! `ConflictingVPAs` event), and the webhook warns the client that creates a pod of the workload, in the same
//! words.

use super::crds::kubectl;
use super::scope::{busy_deployment, vpa_event};
use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn two_vpas_on_one_deployment_evict_nothing_and_both_say_why() {
    let env = e2e("two_vpas_on_one_deployment_evict_nothing_and_both_say_why").await;
    let env = &env;
    in_namespace(env, "conflicts", |ns| async move {
        env.create_deployment_from(&ns, busy_deployment("web", 2)).await?;
        env.wait_running(&ns, "web", 2).await?;
        let original = env.live_uids(&ns, "web").await?;
        // The case: an `Initial` VPA and a `Recreate` one. The webhook sizes pods from the oldest
        // ("first": created first, and the smaller name wins a tie within a second), so evicting by the other
        // would bring the pods back the same, every iteration.
        for (name, mode) in [("first", "Initial"), ("second", "Recreate")] {
            let mut vpa = vpa_manifest(name, "web", mode);
            vpa["spec"]["updatePolicy"]["minReplicas"] = json!(1);
            env.create_vpa(&ns, vpa).await?;
        }
        let mut messages = Vec::new();
        for name in ["first", "second"] {
            let blocked = wait_for(
                &format!("UpdatesBlocked with reason ConflictingVPAs on {name}"),
                UPDATE_TIMEOUT,
                || async {
                    let c = condition(env, &ns, name, "UpdatesBlocked").await?;
                    Ok(c.filter(|c| {
                        c.status == "True" && c.reason.as_deref() == Some("ConflictingVPAs")
                    }))
                },
            )
            .await?;
            let message = blocked.message.unwrap_or_default();
            if !message.contains("first, second") || !message.contains(&format!("Deployment {ns}/web")) {
                bail!("{name}'s condition should name both VPAs and the Deployment: {message}");
            }
            let event = vpa_event(env, &ns, name, "ConflictingVPAs").await?;
            if event != message {
                bail!("{name}'s event and condition differ: {event:?} vs {message:?}");
            }
            messages.push(message);
        }
        // A recommendation far from the pods' requests, so that either VPA alone would evict them.
        for name in ["first", "second"] {
            wait_for(
                &format!("a recommendation of {name} far above the pods' requests"),
                RECOMMENDATION_TIMEOUT,
                || async {
                    Ok(first_recommendation(env, &ns, name)
                        .await?
                        .and_then(|(t, _)| t.get("cpu").cloned())
                        .filter(|cpu| milli_cpu(cpu).is_ok_and(|m| m >= 100)))
                },
            )
            .await?;
        }
        let since = Instant::now();
        // A pod of the workload, as its ReplicaSet would create it (a server-side dry run: the webhook answers,
        // nothing is stored): the client is warned.
        let rs = Api::<ReplicaSet>::namespaced(env.client.clone(), &ns)
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items
            .into_iter()
            .next()
            .context("the Deployment's ReplicaSet")?;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-extra", "namespace": ns, "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": rs.metadata.name.clone().unwrap_or_default(),
                    "uid": rs.metadata.uid.clone().unwrap_or_default(), "controller": true}]
            },
            "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {
                "requests": {"cpu": "10m", "memory": "20Mi"}, "limits": {"cpu": "20m", "memory": "40Mi"}}}]}
        });
        let out = kubectl(
            &["create", "--dry-run=server", "-o", "name", "-f", "-"],
            &pod.to_string(),
        )?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            bail!("kubectl create --dry-run=server failed: {stderr}");
        }
        let warning = stderr
            .lines()
            .find(|l| l.contains("conflicting VPAs"))
            .with_context(|| format!("no conflict warning from the webhook: {stderr:?}"))?
            .to_owned();
        if !warning.contains("first, second") || !warning.contains("oldest (first)") {
            bail!("the warning should name both VPAs and the one the pod is sized from: {warning}");
        }
        // At least two updater loops (10 s each) with the recommendations in place: still the same pods.
        let rest = Duration::from_secs(25).saturating_sub(since.elapsed());
        tokio::time::sleep(rest).await;
        let now = env.live_uids(&ns, "web").await?;
        if now != original {
            bail!("pods were replaced ({original:?} -> {now:?}) although two VPAs conflict");
        }
        if !env.pod_events(&ns, "EvictedByVPA").await?.is_empty() {
            bail!("an EvictedByVPA event although two VPAs conflict");
        }
        let audit = match tailor_disruptions(env, &ns)? {
            Some(requests) if !requests.is_empty() => {
                bail!("the audit log has Tailor's eviction or resize requests for {requests:?}")
            }
            Some(_) => "audit log: no eviction or resize request",
            None => "no audit log (kind)",
        };
        println!(
            "conflicts ({audit}): 0 evictions of 2 pods over 25 s (2 updater loops); both VPAs UpdatesBlocked: {}; \
             webhook: {warning}",
            messages[0]
        );
        Ok(())
    })
    .await;
}
