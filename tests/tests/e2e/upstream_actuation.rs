//! Upstream's actuation e2e scenarios (`test/e2e/v1/actuation.go` of kubernetes/autoscaler, VPA 1.7) about
//! which controllers' pods the updater evicts and what the update modes Off and Initial do, re-expressed
//! against Tailor's group; `tests/UPSTREAM_E2E.md` maps each upstream case to the check here. Every
//! workload runs first at 100m/100Mi, then its VPA gets a fixed recommendation of 200m/200Mi (written to its
//! status under a recommender name nothing serves), which the pods' requests lie below: an updater that may
//! act evicts them. Job and CronJob are left out: kwok completes their pods at once.

use super::*;

/// The recommender every VPA here names: none serves it, so the recommendation written stays.
const FIXED: &str = "upstream-e2e-fixed";
/// How long an event the updater writes after an API call may take to be listed.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A workload of `kind` named `name` with `replicas` pods of one container `app` at 100m/100Mi.
fn workload(kind: &str, name: &str, replicas: i32) -> Value {
    let template = json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
            "name": "app", "image": IMAGE,
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}
        }]}
    });
    let (api_version, selector) = match kind {
        "ReplicationController" => ("v1", json!({"app": name})),
        _ => ("apps/v1", json!({"matchLabels": {"app": name}})),
    };
    let mut w = json!({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": selector, "template": template}
    });
    if kind == "StatefulSet" {
        w["spec"]["serviceName"] = json!(name);
        w["spec"]["podManagementPolicy"] = json!("Parallel");
    }
    w
}

fn api_version_of(kind: &str) -> &'static str {
    if kind == "ReplicationController" {
        "v1"
    } else {
        "apps/v1"
    }
}

async fn create_workload(env: &E2e, ns: &str, manifest: Value) -> Result<()> {
    let kind = manifest["kind"].as_str().unwrap_or_default().to_string();
    let (group, version) = match api_version_of(&kind) {
        "v1" => ("", "v1"),
        _ => ("apps", "v1"),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind));
    let obj: DynamicObject = serde_json::from_value(manifest)?;
    Api::<DynamicObject>::namespaced_with(env.client.clone(), ns, &ar)
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(())
}

/// A VPA on `kind`/`name` in `mode`, served by no recommender, with `update` merged into its updatePolicy,
/// and its recommendation of `cpu`/200Mi.
async fn fixed_vpa(
    env: &E2e,
    ns: &str,
    (kind, name): (&str, &str),
    mode: &str,
    update: Value,
    cpu: &str,
) -> Result<()> {
    let mut v = vpa_manifest(name, name, mode);
    v["spec"]["targetRef"] =
        json!({"apiVersion": api_version_of(kind), "kind": kind, "name": name});
    v["spec"]["recommenders"] = json!([{"name": FIXED}]);
    for (k, val) in update.as_object().into_iter().flatten() {
        v["spec"]["updatePolicy"][k] = val.clone();
    }
    env.create_vpa(ns, v).await?;
    let r = json!({"cpu": cpu, "memory": "200Mi"});
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

/// One set-up: the upstream case, the workload, its VPA's mode and updatePolicy additions, and whether the
/// updater must evict its pods.
struct Setup {
    upstream: String,
    kind: &'static str,
    name: String,
    replicas: i32,
    mode: &'static str,
    update: Value,
    evicts: bool,
}

fn setups() -> Vec<Setup> {
    let mut out = Vec::new();
    for (kind, short) in [
        ("Deployment", "deploy"),
        ("ReplicationController", "rc"),
        ("ReplicaSet", "rs"),
        ("StatefulSet", "sts"),
    ] {
        if kind != "Deployment" {
            // The Deployment's case is recreate::recreate_replaces_pods_with_recommended_requests.
            out.push(Setup {
                upstream: format!("evicts pods in a multiple-replica {kind}"),
                kind,
                name: format!("{short}-multi"),
                replicas: 2,
                mode: "Recreate",
                update: json!({}),
                evicts: true,
            });
        }
        out.push(Setup {
            upstream: format!("by default does not evict pods in a 1-Pod {kind}"),
            kind,
            name: format!("{short}-single"),
            replicas: 1,
            mode: "Recreate",
            update: json!({}),
            evicts: false,
        });
        out.push(Setup {
            upstream: format!("when configured, evicts pods in a 1-Pod {kind}"),
            kind,
            name: format!("{short}-single-min1"),
            replicas: 1,
            mode: "Recreate",
            update: json!({"minReplicas": 1}),
            evicts: true,
        });
    }
    for (mode, name) in [("Off", "off"), ("Initial", "initial")] {
        out.push(Setup {
            upstream: format!("mode {mode}"),
            kind: "Deployment",
            name: name.into(),
            replicas: 2,
            mode,
            update: json!({}),
            evicts: false,
        });
    }
    out
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_actuation_scenarios() {
    let env = e2e("upstream_actuation_scenarios").await;
    let env = &env;
    in_namespace(env, "upact", |ns| async move {
        let setups = setups();
        for s in &setups {
            create_workload(env, &ns, workload(s.kind, &s.name, s.replicas)).await?;
        }
        let mut original = BTreeMap::new();
        for s in &setups {
            let n = usize::try_from(s.replicas)?;
            env.wait_running(&ns, &s.name, n).await?;
            original.insert(s.name.clone(), env.live_uids(&ns, &s.name).await?);
        }
        let start = Instant::now();
        for s in &setups {
            fixed_vpa(
                env,
                &ns,
                (s.kind, &s.name),
                s.mode,
                s.update.clone(),
                "200m",
            )
            .await?;
        }
        let mut failures = Vec::new();
        for s in setups.iter().filter(|s| s.evicts) {
            match env.wait_replaced(&ns, &s.name, &original[&s.name]).await {
                Ok(_) => eprintln!("upstream case passed: {}", s.upstream),
                Err(e) => failures.push(format!("{:?}: {e:#}", s.upstream)),
            }
        }
        if let Some(rest) = super::resilience::UPDATER_LOOPS.checked_sub(start.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        for s in setups.iter().filter(|s| !s.evicts) {
            let now = env.live_uids(&ns, &s.name).await?;
            if now == original[&s.name] {
                if s.kind != "Deployment" || s.replicas == 1 {
                    eprintln!("upstream case passed: {}", s.upstream);
                }
            } else {
                failures.push(format!(
                    "{:?}: pods evicted: {:?} → {now:?}",
                    s.upstream, original[&s.name]
                ));
            }
        }
        // Off and Initial: no eviction (above); a pod deleted by hand comes back at its old requests (Off)
        // or at the recommendation (Initial).
        for (upstream, name, want) in [
            (
                "never applies recommendations when update mode is Off",
                "off",
                100,
            ),
            (
                "applies recommendations only on restart when update mode is Initial",
                "initial",
                200,
            ),
        ] {
            let pods = env.recreate_pods(&ns, name, 2).await?;
            let got: Vec<i64> = pods
                .iter()
                .map(|p| cpu_mem(&container_resources(p)?.0).map(|r| r.0))
                .collect::<Result<_>>()?;
            if got.iter().all(|&cpu| cpu == want) {
                eprintln!("upstream case passed: {upstream}");
            } else {
                failures.push(format!(
                    "{upstream:?}: recreated pods request {got:?} millicores, expected {want}"
                ));
            }
        }
        if !failures.is_empty() {
            bail!(
                "{} upstream cases failed:\n{}",
                failures.len(),
                failures.join("\n")
            );
        }
        Ok(())
    })
    .await;
}

/// The CPU requests (millicores) in the specs of the running pods of `app`.
async fn cpu_requests(env: &E2e, ns: &str, app: &str) -> Result<Vec<i64>> {
    env.running_pods(ns, app)
        .await?
        .iter()
        .map(|p| cpu_mem(&container_resources(p)?.0).map(|r| r.0))
        .collect()
}

/// "still applies recommendations on restart when update mode is InPlaceOrRecreate": the updater resizes
/// the pods in place (no eviction over its loops), and a pod deleted by hand comes back at the
/// recommendation, so every pod then requests it.
async fn restart_in_place_or_recreate(env: &E2e, ns: &str) -> Result<()> {
    let name = "ipor-restart";
    create_workload(env, ns, workload("Deployment", name, 2)).await?;
    env.wait_running(ns, name, 2).await?;
    let original = env.live_uids(ns, name).await?;
    fixed_vpa(
        env,
        ns,
        ("Deployment", name),
        "InPlaceOrRecreate",
        json!({}),
        "200m",
    )
    .await?;
    tokio::time::sleep(super::resilience::UPDATER_LOOPS).await;
    let now = env.live_uids(ns, name).await?;
    if now != original {
        bail!("pods evicted in mode InPlaceOrRecreate: {original:?} → {now:?}");
    }
    let killed = original.iter().next().context("no pod")?;
    let pod = env
        .running_pods(ns, name)
        .await?
        .into_iter()
        .find(|p| p.metadata.uid.as_ref() == Some(killed))
        .and_then(|p| p.metadata.name)
        .context("the pod to kill")?;
    Api::<Pod>::namespaced(env.client.clone(), ns)
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await?;
    wait_for(
        &format!("both pods of {name} at 200m, one of them new"),
        POD_TIMEOUT,
        || async {
            let uids = env.live_uids(ns, name).await?;
            let cpu = cpu_requests(env, ns, name).await?;
            let kept = uids.intersection(&original).count();
            Ok((cpu.len() == 2 && cpu.iter().all(|&c| c == 200) && kept == 1).then_some(()))
        },
    )
    .await
}

/// "stops when pods get pending": a recommendation of 9999 cores in mode Recreate; the updater evicts one pod,
/// its replacement asks for 9999 cores and stays Pending, and the updater evicts no other pod while it is.
async fn stops_when_pods_get_pending(env: &E2e, ns: &str) -> Result<()> {
    let name = "pending";
    create_workload(env, ns, workload("Deployment", name, 2)).await?;
    env.wait_running(ns, name, 2).await?;
    let original = env.live_uids(ns, name).await?;
    fixed_vpa(env, ns, ("Deployment", name), "Recreate", json!({}), "9999").await?;
    let pending = || async {
        let all = env.all_pods(ns, name).await?;
        Ok::<_, anyhow::Error>(
            all.iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
                .count(),
        )
    };
    wait_for(
        "one pod Pending at 9999 cores",
        RECOMMENDATION_TIMEOUT,
        || async { Ok((pending().await? == 1).then_some(())) },
    )
    .await?;
    // For three more updater loops: still exactly one Pending, and the other original pod still running.
    let until = Instant::now() + super::resilience::UPDATER_LOOPS;
    while Instant::now() < until {
        let kept = env
            .live_uids(ns, name)
            .await?
            .intersection(&original)
            .count();
        let waiting = pending().await?;
        if kept != 1 || waiting != 1 {
            bail!(
                "{kept} original pods running and {waiting} Pending: the updater went on evicting"
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_actuation_restart_and_pending_scenarios() {
    let env = e2e("upstream_actuation_restart_and_pending_scenarios").await;
    let env = &env;
    in_namespace(env, "upact-more", |ns| async move {
        let (a, b) = tokio::join!(
            restart_in_place_or_recreate(env, &ns),
            stops_when_pods_get_pending(env, &ns)
        );
        a.context("still applies recommendations on restart when update mode is InPlaceOrRecreate")?;
        eprintln!("upstream case passed: still applies recommendations on restart when update mode is InPlaceOrRecreate");
        b.context("stops when pods get pending")?;
        eprintln!("upstream case passed: stops when pods get pending");
        Ok(())
    })
    .await;
}

/// How long the updater waits on a Deferred resize before it evicts: its Deployment's
/// `--in-place-deferred-timeout` (the e2e values set 1 minute), else the flag's default, upstream's
/// `DeferredResizeUpdateTimeout` of 5 minutes.
async fn deferred_timeout(env: &E2e) -> Result<Duration> {
    let args = env
        .component("updater")
        .await?
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    match args
        .iter()
        .rev()
        .find_map(|a| a.strip_prefix("--in-place-deferred-timeout="))
    {
        Some(v) => {
            humantime::parse_duration(v).with_context(|| format!("--in-place-deferred-timeout={v}"))
        }
        None => Ok(Duration::from_secs(5 * 60)),
    }
}

/// "falls back to evicting pods when resize is Deferred and more than 5 minute has elapsed since last in-place
/// update when update mode is InPlaceOrRecreate": kwok's stand-in kubelet reports the resize Deferred (pods
/// annotated `tailor.dev/e2e-kubelet-resize: deferred`, hack/cluster/kwok-kubelet.yaml), as a kubelet on a
/// node full for now does; the updater keeps the pods for its deferred timeout after the resize (upstream's five
/// minutes, shortened by the e2e values), then evicts.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn upstream_actuation_deferred_resize_falls_back_to_eviction() {
    let env = e2e("upstream_actuation_deferred_resize_falls_back_to_eviction").await;
    let env = &env;
    in_namespace(env, "deferred", |ns| async move {
        let name = "deferred";
        let annotations = json!({"tailor.dev/e2e-kubelet-resize": "deferred"});
        env.create_annotated_deployment(&ns, name, 2, annotations).await?;
        env.wait_running(&ns, name, 2).await?;
        let original = env.live_uids(&ns, name).await?;
        let timeout = deferred_timeout(env).await?;
        fixed_vpa(env, &ns, ("Deployment", name), "InPlaceOrRecreate", json!({}), "300m").await?;
        wait_for("a resize reported Deferred", UPDATE_TIMEOUT, || async {
            let pods = env.all_pods(&ns, name).await?;
            Ok(pods.iter().any(|p| {
                p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Deferred")
                    })
                })
            })
            .then_some(()))
        })
        .await?;
        // The updater's clock starts at its resize: its event's time (whole seconds, so a margin of a few).
        // The event is written after the resize call returns, so the kubelet's condition can be seen first.
        let resized_at = wait_for(
            "the InPlaceResizedByVPA event of a resize reported Deferred",
            EVENT_TIMEOUT,
            || async {
                Ok(env
                    .pod_events(&ns, "InPlaceResizedByVPA")
                    .await?
                    .into_iter()
                    .filter(|(uid, _)| original.contains(uid))
                    .map(|(_, at)| at)
                    .min())
            },
        )
        .await?;
        let margin = Duration::from_secs(5);
        eprintln!("deferred: resized at {resized_at}; waiting out the updater's {timeout:?}");
        while Timestamp::now() < resized_at + (timeout - margin) {
            let now = env.live_uids(&ns, name).await?;
            if now != original {
                bail!(
                    "pods evicted before {timeout:?} after the resize at {resized_at}: {original:?} → {now:?}"
                );
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let evicted_at = wait_for("an original pod evicted after the timeout", UPDATE_TIMEOUT, || async {
            let evictions = env.pod_events(&ns, "EvictedByVPA").await?;
            Ok(evictions
                .into_iter()
                .filter(|(uid, _)| original.contains(uid))
                .map(|(_, at)| at)
                .min())
        })
        .await?;
        if evicted_at < resized_at + (timeout - margin) {
            bail!("evicted at {evicted_at}, before {timeout:?} after the resize at {resized_at}");
        }
        eprintln!(
            "upstream case passed: falls back to evicting pods when resize is Deferred and more than 5 minute has \
             elapsed since last in-place update when update mode is InPlaceOrRecreate (resized at {resized_at}, \
             evicted at {evicted_at})"
        );
        Ok(())
    })
    .await;
}
