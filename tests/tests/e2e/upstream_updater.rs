//! Upstream's updater e2e scenarios (`test/e2e/v1/updater.go` of kubernetes/autoscaler, VPA 1.7) about
//! downscaling and InPlace mode, re-expressed against Tailor's group; `tests/UPSTREAM_E2E.md` maps each
//! upstream case to the check here. As upstream's suite does, the pods run first and each VPA then gets a
//! fixed recommendation (200m/200Mi, written to its status under a recommender name nothing serves); unlike
//! it, Tailor's real webhook renews the status Lease the updater waits for. The five set-ups share one
//! namespace, each on its own Deployment of two pods (the updater's default `--min-replicas`; upstream runs
//! three). The written 200Mi lies below the pod floor (DEVIATIONS.md, Updater, "no lower bound";
//! docs/decisions/pod-floor.md), so resized
//! pods get 250Mi.

use super::*;

/// The recommender every VPA here names: none serves it, so the recommendation written stays.
const FIXED: &str = "upstream-e2e-fixed";

/// A Deployment `name` of two pods whose container `app` requests `(cpu, memory)`, limits twice that, and
/// resizes without restarts.
fn hamsters(name: &str, cpu: &str, memory: &str, limits: (&str, &str)) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "app", "image": IMAGE,
                    "resizePolicy": [
                        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                        {"resourceName": "memory", "restartPolicy": "NotRequired"}
                    ],
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory},
                        "limits": {"cpu": limits.0, "memory": limits.1}
                    }
                }]}
            }
        }
    })
}

/// Writes a recommendation of `(cpu, memory)` for container `app` (target and both bounds).
async fn recommend(env: &E2e, ns: &str, name: &str, cpu: &str, memory: &str) -> Result<()> {
    let r = json!({"cpu": cpu, "memory": memory});
    env.dynamic_vpas(ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"recommendation": {"containerRecommendations": [
                    {"containerName": "app", "target": r, "lowerBound": r, "upperBound": r}
                ]}}}),
            ),
        )
        .await?;
    Ok(())
}

/// A VPA on Deployment `name` in `mode`, served by no recommender, with `update` merged into its
/// updatePolicy, and its recommendation of 200m/200Mi.
async fn fixed_vpa(env: &E2e, ns: &str, name: &str, mode: &str, update: Value) -> Result<()> {
    let mut v = vpa_manifest(name, name, mode);
    v["spec"]["recommenders"] = json!([{"name": FIXED}]);
    for (k, val) in update.as_object().into_iter().flatten() {
        v["spec"]["updatePolicy"][k] = val.clone();
    }
    env.create_vpa(ns, v).await?;
    recommend(env, ns, name, "200m", "200Mi").await
}

/// Waits until every pod of `app` is one of `original`, running with `cpu` millicores requested in its spec
/// and actuated in its status (an in-place resize); fails at once if an original pod was replaced.
async fn wait_resized_in_place(
    env: &E2e,
    ns: &str,
    app: &str,
    original: &BTreeSet<String>,
    cpu: i64,
) -> Result<()> {
    wait_for(
        &format!("the pods of {app} resized in place to {cpu}m"),
        UPDATE_TIMEOUT,
        || async {
            let pods = env.all_pods(ns, app).await?;
            if let Some(p) = pods.iter().find(|p| {
                !p.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| original.contains(u))
            }) {
                return Ok(Some(Err(anyhow!(
                    "pod {:?} replaced an original one: evicted, not resized",
                    p.metadata.name
                ))));
            }
            let mut done = 0;
            for pod in &pods {
                let r = pod_resources(pod)?;
                if r.spec_requests.0 == cpu
                    && r.actual_requests == Some(r.spec_requests)
                    && r.restarts == 0
                {
                    done += 1;
                }
            }
            Ok((done == original.len()).then_some(Ok(())))
        },
    )
    .await?
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_updater_scenarios() {
    let env = e2e("upstream_updater_scenarios").await;
    let env = &env;
    in_namespace(env, "upupd", |ns| async move {
        let big = ("500m", "500Mi", ("1", "1000Mi"));
        let small = ("100m", "100Mi", ("200m", "200Mi"));
        let setups = [
            ("down", big),
            ("required", big),
            ("down-inplace", big),
            ("inplace", small),
            ("down-inplace-only", big),
        ];
        for (name, (cpu, memory, limits)) in setups {
            env.create_deployment_from(&ns, hamsters(name, cpu, memory, limits)).await?;
        }
        let mut original = BTreeMap::new();
        for (name, _) in setups {
            env.wait_running(&ns, name, 2).await?;
            original.insert(name, env.live_uids(&ns, name).await?);
        }
        let start = Instant::now();
        fixed_vpa(env, &ns, "down", "Recreate", json!({})).await?;
        fixed_vpa(
            env,
            &ns,
            "required",
            "Recreate",
            json!({"evictionRequirements": [{"resources": ["cpu"], "changeRequirement": "TargetHigherThanRequests"}]}),
        )
        .await?;
        fixed_vpa(env, &ns, "down-inplace", "InPlaceOrRecreate", json!({})).await?;
        fixed_vpa(env, &ns, "inplace", "InPlace", json!({})).await?;
        fixed_vpa(env, &ns, "down-inplace-only", "InPlace", json!({})).await?;

        let mut failures = Vec::new();
        let mut report = |upstream: &str, r: Result<()>| match r {
            Ok(()) => eprintln!("upstream case passed: {upstream}"),
            Err(e) => failures.push(format!("{upstream:?}: {e:#}")),
        };
        report(
            "evicts pods for downscaling",
            env.wait_replaced(&ns, "down", &original["down"]).await.map(drop),
        );
        report(
            "Does not evict pods for downscaling in-place",
            wait_resized_in_place(env, &ns, "down-inplace", &original["down-inplace"], 200).await,
        );
        let inplace = wait_resized_in_place(env, &ns, "inplace", &original["inplace"], 200).await;
        let resized = inplace.is_ok();
        report("In-place updates pods with InPlace mode when update succeeds", inplace);
        // A new recommendation: InPlace mode resizes again.
        let again = if resized {
            recommend(env, &ns, "inplace", "300m", "200Mi").await?;
            wait_resized_in_place(env, &ns, "inplace", &original["inplace"], 300).await
        } else {
            Err(anyhow!("the first in-place update did not happen"))
        };
        report("InPlace mode retries when recommendations change", again);
        // The others had their chance: as many updater loops as an eviction needs.
        if let Some(rest) = super::resilience::UPDATER_LOOPS.checked_sub(start.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        for (upstream, name) in [
            ("does not evict pods for downscaling when EvictionRequirement prevents it", "required"),
            ("does not evicts pods for downscaling with InPlace mode", "down-inplace-only"),
        ] {
            let now = env.live_uids(&ns, name).await?;
            report(
                upstream,
                if now == original[name] {
                    Ok(())
                } else {
                    Err(anyhow!("pods evicted: {:?} → {now:?}", original[name]))
                },
            );
        }
        if !failures.is_empty() {
            bail!("{} upstream cases failed:\n{}", failures.len(), failures.join("\n"));
        }
        Ok(())
    })
    .await;
}

/// A Deployment `name` of two pods whose container requests (and is limited to) 1Gi and is OOM-killed once,
/// `after` its start: on kind it sleeps that long, then fills its memory; on kwok the test annotates the
/// pods for the `tailor-pod-oom` stage (hack/cluster/kwok-kubelet.yaml), which dates the killed container's
/// start `after` before the kill.
fn ooming(name: &str, after: Duration) -> Value {
    let script = format!(
        "if [ -e /scratch/oomed ]; then exec sleep 100000; fi; sleep {}; touch /scratch/oomed; \
         exec tail /dev/zero",
        after.as_secs()
    );
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app", "image": BUSYBOX, "command": ["sh", "-c", script],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "1Gi"},
                            "limits": {"memory": "1Gi"}
                        },
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                    }],
                    "volumes": [{"name": "scratch", "emptyDir": {}}]
                }
            }
        }
    })
}

/// "Updater with PerVPAConfig": a VPA in mode Recreate whose memory recommendation (target 2Gi, bounds
/// 500Mi–3Gi) holds the pods' 1Gi, so only a quick OOM (one within `evictAfterOOMSeconds` of the container's
/// start) makes the updater evict: with 600 s it evicts, with 1 s (the kill comes 5 s after the start) not.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_updater_oom_scenarios() {
    let env = e2e("upstream_updater_oom_scenarios").await;
    let env = &env;
    in_namespace(env, "upoom", |ns| async move {
        let after = Duration::from_secs(5);
        let cases = [("oom-quick", 600), ("oom-slow", 1)];
        // The pods first, at 1Gi: a VPA already holding its 2Gi would have the webhook size them to it.
        for (name, _) in cases {
            env.create_deployment_from(&ns, ooming(name, after)).await?;
        }
        let mut original = BTreeMap::new();
        for (name, _) in cases {
            env.wait_running(&ns, name, 2).await?;
            original.insert(name, env.live_uids(&ns, name).await?);
        }
        for (name, seconds) in cases {
            let mut v = vpa_manifest(name, name, "Recreate");
            v["spec"]["recommenders"] = json!([{"name": FIXED}]);
            v["spec"]["updatePolicy"]["evictAfterOOMSeconds"] = json!(seconds);
            env.create_vpa(&ns, v).await?;
            env.dynamic_vpas(&ns)
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"recommendation": {"containerRecommendations": [{
                        "containerName": "app", "target": {"memory": "2Gi"},
                        "lowerBound": {"memory": "500Mi"}, "upperBound": {"memory": "3Gi"}
                    }]}}})),
                )
                .await?;
        }
        tokio::time::sleep(after).await;
        let pod_api = Api::<Pod>::namespaced(env.client.clone(), &ns);
        for (name, _) in cases {
            for pod in env.running_pods(&ns, name).await? {
                let pod = pod.metadata.name.context("pod without a name")?;
                let started = Timestamp::now() - after;
                let patch = json!({"metadata": {"annotations": {
                    "tailor.dev/e2e-kubelet-oom": "once",
                    "tailor.dev/e2e-kubelet-oom-started": started.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
                }}});
                pod_api.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
        }
        // oom-slow's kills must have happened before its pods count as left alone; oom-quick's pods may
        // already be on their way out (the updater acts within a loop of the kill).
        let name = "oom-slow";
        wait_for(&format!("the pods of {name} OOM-killed once"), POD_TIMEOUT, || async {
            let pods = env.running_pods(&ns, name).await?;
            let killed = pods.len() == 2 && pods.iter().all(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .and_then(|c| c.last_state.as_ref()?.terminated.as_ref()?.reason.clone())
                    .is_some_and(|r| r == "OOMKilled")
            });
            Ok(killed.then_some(()))
        })
        .await?;
        let start = Instant::now();
        env.wait_replaced(&ns, "oom-quick", &original["oom-quick"]).await?;
        eprintln!("upstream case passed: Updater with PerVPAConfig / evicts pods when OOM occurs within threshold");
        if let Some(rest) = super::resilience::UPDATER_LOOPS.checked_sub(start.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        let now = env.live_uids(&ns, "oom-slow").await?;
        if now != original["oom-slow"] {
            bail!("oom-slow: pods evicted although their OOM came after the threshold: {:?} → {now:?}", original["oom-slow"]);
        }
        eprintln!("upstream case passed: Updater with PerVPAConfig / does not evict pods when OOM duration exceeds threshold");
        Ok(())
    })
    .await;
}
