//! Upstream VPA beside Tailor (`hack/cluster.sh up --with-upstream`): each autoscaler sizes, recommends for and
//! evicts only what its own VPAs cover — seen in the pods and, on the local control plane, in the API server's
//! audit log (`TAILOR_E2E_AUDIT_LOG`), request by request.

use std::io::BufRead;

use super::*;

/// Names of upstream VPA's ServiceAccounts (its deploy/ manifests, namespace kube-system).
const UPSTREAM_USERS: &str = "system:serviceaccount:kube-system:vpa-";
/// The webhook configuration upstream's admission controller registers.
pub(super) const UPSTREAM_WEBHOOK: &str = "vpa-webhook-config";

/// A request seen in the audit log.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) user: String,
    pub(super) verb: String,
    pub(super) group: String,
    pub(super) resource: String,
    pub(super) subresource: String,
    pub(super) name: String,
}

/// The requests of the audit log about objects in `ns` (each once: a request is logged at several stages).
pub(super) fn audited_requests(path: &std::path::Path, ns: &str) -> Result<Vec<Request>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("audit log {}", path.display()))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(event) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        let field = |p: &str| {
            event
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        if field("/objectRef/namespace") != ns || !seen.insert(field("/auditID")) {
            continue;
        }
        out.push(Request {
            user: field("/user/username"),
            verb: field("/verb"),
            group: field("/objectRef/apiGroup"),
            resource: field("/objectRef/resource"),
            subresource: field("/objectRef/subresource"),
            name: field("/objectRef/name"),
        });
    }
    Ok(out)
}

pub(super) fn upstream_vpa_manifest(name: &str, target: &str, mode: &str) -> Value {
    let mut v = vpa_manifest(name, target, mode);
    v["apiVersion"] = json!("autoscaling.k8s.io/v1");
    v
}

async fn uids(env: &E2e, ns: &str, app: &str, replicas: usize) -> Result<BTreeSet<String>> {
    Ok(env
        .wait_running(ns, app, replicas)
        .await?
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn each_autoscaler_sizes_and_evicts_only_its_own_pods() {
    let env = e2e("each_autoscaler_sizes_and_evicts_only_its_own_pods").await;
    let env = &env;
    in_namespace(env, "side-by-side", |ns| async move {
        env.upstream_vpas(&ns)
            .list(&ListParams::default())
            .await
            .context("upstream VPA's CRDs are not installed (hack/cluster.sh up --with-upstream)")?;
        Api::<MutatingWebhookConfiguration>::all(env.client.clone())
            .get(UPSTREAM_WEBHOOK)
            .await
            .context("upstream VPA's admission controller has not registered (hack/cluster.sh up --with-upstream)")?;
        env.create_deployment(&ns, "tailored", 2).await?;
        env.create_deployment(&ns, "upstreamed", 2).await?;
        let tailored = uids(env, &ns, "tailored", 2).await?;
        let upstreamed = uids(env, &ns, "upstreamed", 2).await?;
        env.create_vpa(&ns, vpa_manifest("tailored", "tailored", "Recreate"))
            .await?;
        env.upstream_vpas(&ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(upstream_vpa_manifest("upstreamed", "upstreamed", "Recreate"))?,
            )
            .await?;
        // Both updaters evict (each one pod at a time of two), both webhooks size the replacements.
        let ours = env.wait_replaced(&ns, "tailored", &tailored).await?;
        let theirs = env.wait_replaced(&ns, "upstreamed", &upstreamed).await?;
        for (pods, own, other) in [
            (&ours, "tailor.dev/updates", "vpaUpdates"),
            (&theirs, "vpaUpdates", "tailor.dev/updates"),
        ] {
            for pod in pods {
                let annotations = pod.metadata.annotations.clone().unwrap_or_default();
                if !annotations.contains_key(own) || annotations.contains_key(other) {
                    bail!(
                        "pod {:?}: expected {own} and not {other}: {annotations:?}",
                        pod.metadata.name
                    );
                }
                if pod_resources(pod)?.spec_requests == ORIGINAL_REQUESTS {
                    bail!("pod {:?} kept its original requests", pod.metadata.name);
                }
            }
        }
        // Each VPA has its own recommender's status, and no other.
        if target_of(&env.tailor_vpas(&ns).get("tailored").await?).is_none() {
            bail!("the Tailor VPA has no recommendation");
        }
        let upstream = env.upstream_vpas(&ns).get("upstreamed").await?;
        if upstream.data.pointer("/status/recommendation").is_none() {
            bail!("the upstream VPA has no recommendation: {:?}", upstream.data.get("status"));
        }

        let Some(audit) = std::env::var_os("TAILOR_E2E_AUDIT_LOG") else {
            eprintln!(
                "no TAILOR_E2E_AUDIT_LOG (kind): who wrote what is checked from the objects only, not request by request"
            );
            return Ok(());
        };
        let requests = audited_requests(std::path::Path::new(&audit), &ns)?;
        let tailor_user = format!("system:serviceaccount:{}:{}-", env.system_namespace, env.release);
        let writes = |r: &&Request| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete");
        let mut evictions = BTreeMap::<&str, Vec<&str>>::new();
        for r in requests.iter().filter(writes) {
            let tailor = r.user.starts_with(&tailor_user);
            let upstream = r.user.starts_with(UPSTREAM_USERS);
            if (tailor && r.group == "autoscaling.k8s.io") || (upstream && r.group == "autoscaling.tailor.dev") {
                bail!("{} wrote the other autoscaler's {} {} ({})", r.user, r.resource, r.name, r.verb);
            }
            if r.subresource == "eviction" || r.subresource == "resize" {
                let who = if tailor { "tailor" } else if upstream { "upstream" } else { continue };
                let own = if tailor { "tailored-" } else { "upstreamed-" };
                if !r.name.starts_with(own) {
                    bail!("{} {}d pod {}, which the other autoscaler covers", r.user, r.subresource, r.name);
                }
                evictions.entry(who).or_default().push(&r.name);
            }
        }
        if evictions.get("tailor").is_none_or(Vec::is_empty) || evictions.get("upstream").is_none_or(Vec::is_empty) {
            bail!("the audit log lacks an eviction by one of the updaters: {evictions:?}");
        }
        let status_writes = |user: &str, group: &str| {
            requests
                .iter()
                .filter(writes)
                .filter(|r| r.user.starts_with(user) && r.group == group && r.resource == "verticalpodautoscalers")
                .count()
        };
        if status_writes(&tailor_user, "autoscaling.tailor.dev") == 0
            || status_writes(UPSTREAM_USERS, "autoscaling.k8s.io") == 0
        {
            bail!("each recommender should have written its own VPA's status (audit log)");
        }
        eprintln!("audit log: evictions {evictions:?}; no write crossed over");
        Ok(())
    })
    .await;
}

/// A Deployment both cover: upstream sizes its pods, Tailor's webhook withdraws its annotations, Tailor's
/// updater leaves the pods alone and its VPA says why.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_workload_both_cover_is_sized_by_upstream_alone() {
    let env = e2e("a_workload_both_cover_is_sized_by_upstream_alone").await;
    let env = &env;
    in_namespace(env, "both-cover", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.wait_running(&ns, "web", 1).await?;
        env.upstream_vpas(&ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(upstream_vpa_manifest("web", "web", "Initial"))?,
            )
            .await?;
        // Tailor's in Recreate: its updater must leave upstream's pods alone and say why.
        env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate"))
            .await?;
        env.recommendation(&ns, "web").await?;
        let upstream_target = wait_for(
            "upstream's recommendation for web",
            RECOMMENDATION_TIMEOUT,
            || async {
                let vpa = env.upstream_vpas(&ns).get("web").await?;
                let target = vpa
                    .data
                    .pointer("/status/recommendation/containerRecommendations/0/target")
                    .cloned();
                Ok(target.map(serde_json::from_value::<BTreeMap<String, Quantity>>))
            },
        )
        .await??;
        // Tailor's webhook runs first (`tailor-admission` < `vpa-webhook-config`), upstream's after it, then
        // Tailor's again (reinvocationPolicy IfNeeded), which withdraws its annotations.
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let pod = &pods[0];
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("vpaUpdates")
            || annotations.keys().any(|k| k.starts_with("tailor.dev/"))
        {
            bail!("expected upstream's annotations alone on the pod: {annotations:?}");
        }
        let requests = pod_resources(pod)?.spec_requests;
        // Upstream's webhook sets the requests to its target (constant usage: the target does not move).
        let wanted = cpu_mem(&upstream_target)?;
        if requests != wanted {
            bail!("pod requests {requests:?}, upstream's target {wanted:?}");
        }
        // The Tailor VPA says why its updater leaves the pod alone: a condition and an event.
        let condition = wait_for(
            "UpdatesBlocked on the Tailor VPA",
            UPDATE_TIMEOUT,
            || async {
                let vpa = env.tailor_vpas(&ns).get("web").await?;
                Ok(vpa
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "UpdatesBlocked" && c.status == "True"))
            },
        )
        .await?;
        if condition.reason.as_deref() != Some("SizedByUpstreamVPA") {
            bail!("UpdatesBlocked for another reason: {condition:?}");
        }
        let events = Api::<Event>::namespaced(env.client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        if !events.items.iter().any(|e| {
            e.reason.as_deref() == Some("SizedByUpstreamVPA")
                && e.involved_object.kind.as_deref() == Some("VerticalPodAutoscaler")
        }) {
            bail!("no SizedByUpstreamVPA event on the Tailor VPA");
        }
        Ok(())
    })
    .await;
}

/// (cpu millicores, memory bytes) of the first container's target in an upstream VPA's status.
pub(super) fn upstream_target(vpa: &DynamicObject) -> Result<Option<(i64, i64)>> {
    vpa.data
        .pointer("/status/recommendation/containerRecommendations/0/target")
        .map(|t| cpu_mem(&serde_json::from_value(t.clone())?))
        .transpose()
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn moving_a_workload_from_upstream_evicts_nothing() {
    let env = e2e("moving_a_workload_from_upstream_evicts_nothing").await;
    let env = &env;
    in_namespace(env, "migrate", |ns| async move {
        env.create_deployment_from(
            &ns,
            json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {
                            "kwok.x-k8s.io/usage-cpu": "300m", "kwok.x-k8s.io/usage-memory": "400Mi"
                        }},
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                            "name": "app", "image": IMAGE,
                            "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}}
                        }]}
                    }
                }
            }),
        )
        .await?;
        env.wait_running(&ns, "web", 2).await?;
        // Off until upstream's target reflects the usage (its first recommendation is its minimum, 25m and
        // 250Mi, and pods sized with that would sit within its bounds for hours), then Recreate.
        env.upstream_vpas(&ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(upstream_vpa_manifest("web", "web", "Off"))?,
            )
            .await?;
        wait_for(
            "upstream's target above the usage",
            RECOMMENDATION_TIMEOUT,
            || async {
                let target = upstream_target(&env.upstream_vpas(&ns).get("web").await?)?;
                Ok(target.filter(|(cpu, memory)| *cpu >= 300 && *memory >= 400 * MI))
            },
        )
        .await?;
        env.upstream_vpas(&ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"updatePolicy": {"updateMode": "Recreate"}}})),
            )
            .await?;
        // Upstream at work: its updater replaces both pods, its webhook sizes them.
        wait_for(
            "both pods of web sized by upstream",
            UPDATE_TIMEOUT,
            || async {
                let Some(target) = upstream_target(&env.upstream_vpas(&ns).get("web").await?)?
                else {
                    return Ok(None);
                };
                let pods = env.running_pods(&ns, "web").await?;
                let sized = pods.iter().filter(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("vpaUpdates"))
                        && container_resources(p)
                            .and_then(|(requests, _)| cpu_mem(&requests))
                            .is_ok_and(|r| r == target)
                });
                Ok((sized.count() == 2 && pods.len() == 2).then_some(()))
            },
        )
        .await?;

        // The move, as the README says: read the upstream VPAs, convert them offline, apply.
        let got = super::crds::kubectl(&["-n", &ns, "get", "vpa", "-o", "yaml"], "")?;
        if !got.status.success() {
            bail!("kubectl get vpa: {}", String::from_utf8_lossy(&got.stderr));
        }
        let mut convert = std::process::Command::new(super::recommendation::tailor_cli())
            .arg("convert")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running tailor convert")?;
        {
            use std::io::Write as _;
            convert
                .stdin
                .take()
                .context("stdin")?
                .write_all(&got.stdout)?;
        }
        let converted = convert.wait_with_output()?;
        if !converted.status.success() {
            bail!(
                "tailor convert: {}",
                String::from_utf8_lossy(&converted.stderr)
            );
        }
        let applied = super::crds::kubectl(
            &["apply", "-f", "-"],
            &String::from_utf8_lossy(&converted.stdout),
        )?;
        if !applied.status.success() {
            bail!(
                "kubectl apply: {}",
                String::from_utf8_lossy(&applied.stderr)
            );
        }
        // Tailor's twin agrees with upstream once it has samples: Tailor's model holds only pods some Tailor
        // VPA selects (--memory-saver, on by default, README), so its first recommendation is the minimum
        // and its bounds are wider than upstream's (less history) — the target is the same at constant usage.
        wait_for(
            "Tailor's target equal to upstream's",
            RECOMMENDATION_TIMEOUT,
            || async {
                let ours = target_of(&env.tailor_vpas(&ns).get("web").await?)
                    .map(|t| cpu_mem(&t))
                    .transpose()?;
                let theirs = upstream_target(&env.upstream_vpas(&ns).get("web").await?)?;
                Ok(ours.filter(|o| Some(*o) == theirs))
            },
        )
        .await?;
        let before: BTreeSet<String> = env
            .running_pods(&ns, "web")
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        env.upstream_vpas(&ns)
            .delete("web", &DeleteParams::default())
            .await?;
        // Tailor's updater now owns the workload: the pods upstream sized are within its bounds.
        tokio::time::sleep(super::resilience::UPDATER_LOOPS).await;
        let after = env.live_uids(&ns, "web").await?;
        if after != before {
            bail!("pods changed after the move: {before:?} → {after:?}");
        }
        Ok(())
    })
    .await;
}

/// How long Tailor's updater is watched beside an upstream VPA: a dozen of its loops and two of upstream's
/// (upstream's updater at its default 1 m interval, as on kind).
const STAND_DOWN_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);
/// The same on the local control plane, where upstream's updater loops every 10 s as Tailor's does
/// (hack/cluster.sh, hack/cluster/values.yaml): six loops of each, three times the two that prove neither
/// an eviction nor a resize nor a second event would have come.
const STAND_DOWN_WINDOW_LOCAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Both autoscalers on one Deployment in `mode`, with different targets: Tailor's VPA sets a `minAllowed`
/// far above the usage upstream's target follows. Over [`STAND_DOWN_WINDOW`] ([`STAND_DOWN_WINDOW_LOCAL`] on
/// the local control plane) from the Tailor VPA's
/// creation, Tailor's updater neither resizes nor evicts a pod of the workload (the audit log, request by
/// request), its VPA's `UpdatesBlocked` names the upstream VPA, and one event carries the same text.
async fn tailor_stands_down_beside_upstream(env: &E2e, ns: &str, mode: &str) -> Result<()> {
    env.create_deployment_from(
        ns,
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {
                        "kwok.x-k8s.io/usage-cpu": "300m", "kwok.x-k8s.io/usage-memory": "400Mi"
                    }},
                    "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                        "name": "app", "image": IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}}
                    }]}
                }
            }
        }),
    )
    .await?;
    env.wait_running(ns, "web", 2).await?;
    env.upstream_vpas(ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(upstream_vpa_manifest("web-upstream", "web", mode))?,
        )
        .await?;
    let mut ours = vpa_manifest("web", "web", mode);
    ours["spec"]["resourcePolicy"] = json!({"containerPolicies": [
        {"containerName": "*", "minAllowed": {"cpu": "700m", "memory": "800Mi"}}
    ]});
    env.create_vpa(ns, ours).await?;
    let created = Instant::now();
    let condition = wait_for(
        "UpdatesBlocked on the Tailor VPA",
        UPDATE_TIMEOUT,
        || async {
            let vpa = env.tailor_vpas(ns).get("web").await?;
            Ok(vpa
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "UpdatesBlocked" && c.status == "True"))
        },
    )
    .await?;
    let message = condition.message.clone().unwrap_or_default();
    if condition.reason.as_deref() != Some("SizedByUpstreamVPA")
        || !message.starts_with(&format!("upstream VPA {ns}/web-upstream "))
    {
        bail!("UpdatesBlocked does not name the upstream VPA: {condition:?}");
    }
    // Tailor has something to do: its recommendation (at least minAllowed) is far from the pods' requests.
    env.recommendation(ns, "web").await?;
    let window = match env.platform {
        Platform::HostProcesses(_) => STAND_DOWN_WINDOW_LOCAL,
        Platform::Pods => STAND_DOWN_WINDOW,
    };
    tokio::time::sleep(window.saturating_sub(created.elapsed())).await;
    let events: Vec<Event> = Api::<Event>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("SizedByUpstreamVPA")
                && e.involved_object.kind.as_deref() == Some("VerticalPodAutoscaler")
                && e.involved_object.name.as_deref() == Some("web")
        })
        .collect();
    let repeats = |e: &Event| {
        e.series
            .as_ref()
            .and_then(|s| s.count)
            .unwrap_or(1)
            .max(e.count.unwrap_or(1))
    };
    if events.len() != 1 || repeats(&events[0]) != 1 {
        bail!("expected one SizedByUpstreamVPA event, recorded once: {events:#?}");
    }
    if events[0].message.as_deref() != Some(message.as_str()) {
        bail!(
            "the event says {:?}, the condition {message:?}",
            events[0].message
        );
    }
    let still = env.tailor_vpas(ns).get("web").await?;
    let now_blocked = (still.status.and_then(|s| s.conditions).unwrap_or_default())
        .into_iter()
        .find(|c| c.type_ == "UpdatesBlocked");
    if now_blocked.and_then(|c| c.message) != Some(message.clone()) {
        bail!("UpdatesBlocked changed during the window");
    }
    let Some(audit) = std::env::var_os("TAILOR_E2E_AUDIT_LOG") else {
        eprintln!(
            "no TAILOR_E2E_AUDIT_LOG: Tailor's resizes and evictions are not checked request by request"
        );
        return Ok(());
    };
    let requests = audited_requests(std::path::Path::new(&audit), ns)?;
    let tailor_user = format!(
        "system:serviceaccount:{}:{}-",
        env.system_namespace, env.release
    );
    let acts = |r: &&Request| {
        (r.subresource == "eviction" || r.subresource == "resize")
            && matches!(r.verb.as_str(), "create" | "update" | "patch")
    };
    let by_tailor: Vec<String> = (requests.iter().filter(acts))
        .filter(|r| r.user.starts_with(&tailor_user))
        .map(|r| format!("{} {}", r.subresource, r.name))
        .collect();
    let by_upstream = (requests.iter().filter(acts))
        .filter(|r| r.user.starts_with(UPSTREAM_USERS))
        .count();
    if !by_tailor.is_empty() {
        bail!("Tailor's updater acted beside the upstream VPA ({mode}): {by_tailor:?}");
    }
    eprintln!(
        "{mode}: in {}s Tailor made 0 resizes and 0 evictions, upstream {by_upstream}; UpdatesBlocked and its one event: {message}",
        created.elapsed().as_secs()
    );
    Ok(())
}

/// `InPlaceOrRecreate` on both: without the stand-down both updaters resized the same pods every loop.
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn tailor_stands_down_beside_an_upstream_vpa_in_place() {
    let env = e2e("tailor_stands_down_beside_an_upstream_vpa_in_place").await;
    let env = &env;
    in_namespace(env, "beside-in-place", |ns| async move {
        tailor_stands_down_beside_upstream(env, &ns, "InPlaceOrRecreate").await
    })
    .await;
}

/// `Recreate` on both: Tailor evicts nothing (before, both evicted in the first minute).
#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn tailor_stands_down_beside_an_upstream_vpa_recreate() {
    let env = e2e("tailor_stands_down_beside_an_upstream_vpa_recreate").await;
    let env = &env;
    in_namespace(env, "beside-recreate", |ns| async move {
        tailor_stands_down_beside_upstream(env, &ns, "Recreate").await
    })
    .await;
}
