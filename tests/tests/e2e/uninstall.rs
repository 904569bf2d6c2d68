//! Uninstalling either autoscaler leaves the other working (docs/decisions/coexistence-with-upstream.md). Needs
//! upstream VPA beside Tailor (`hack/cluster.sh up --with-upstream`, or upstream's own install on kind).
//!
//! An uninstall, as each is uninstalled:
//! - upstream, as its `hack/vpa-down.sh` does: its three programs stopped, its webhook configuration
//!   `vpa-webhook-config` deleted (its `delete-webhook.sh`), its CRDs deleted (and with them every upstream VPA
//!   and checkpoint). Its RBAC stays: nothing acts with it once the programs are gone.
//! - Tailor, as `helm uninstall` does to what acts at run time: its three programs stopped (the chart's
//!   Deployments at zero on kind; the host processes of `hack/cluster.sh` here), its webhook configuration
//!   deleted. Its CRDs stay, as Helm never deletes a chart's `crds/`.
//!
//! Then the other, on a fresh Deployment, still recommends, evicts and sizes the replacements at admission.
//! Each test puts back what it removed, whatever happened, and waits until it serves again: the two tests
//! disturb what every test shares, so `hack/e2e-local.sh` runs them one at a time after the others.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::coexistence::{UPSTREAM_WEBHOOK, upstream_target, upstream_vpa_manifest};
use super::*;

/// Upstream's programs: the process names of `hack/cluster.sh upstream`, and their Deployments on kind
/// (namespace kube-system, upstream's deploy/).
const UPSTREAM_PROGRAMS: [(&str, &str); 3] = [
    ("admission-controller", "vpa-admission-controller"),
    ("recommender", "vpa-recommender"),
    ("updater", "vpa-updater"),
];
/// Upstream's CRDs (its deploy/vpa-v1-crd-gen.yaml).
const UPSTREAM_CRDS: [&str; 2] = [
    "verticalpodautoscalers.autoscaling.k8s.io",
    "verticalpodautoscalercheckpoints.autoscaling.k8s.io",
];

/// Starts or stops one of upstream's programs: `hack/cluster.sh upstream start|stop NAME`, or its Deployment
/// scaled to one or zero (kind).
async fn upstream_program(env: &E2e, (process, deployment): (&str, &str), run: bool) -> Result<()> {
    match &env.platform {
        Platform::HostProcesses(control) => {
            let verb = if run { "start" } else { "stop" };
            let out = std::process::Command::new(control)
                .args(["upstream", verb, process])
                .output()
                .with_context(|| {
                    format!("running {} upstream {verb} {process}", control.display())
                })?;
            if !out.status.success() {
                bail!(
                    "upstream {verb} {process}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Platform::Pods => {
            let replicas = i32::from(run);
            let deployments = Api::<Deployment>::namespaced(env.client.clone(), "kube-system");
            deployments
                .patch(
                    deployment,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
            wait_for(
                &format!("{deployment} at {replicas} ready replicas"),
                POD_TIMEOUT,
                || async {
                    let status = deployments
                        .get(deployment)
                        .await?
                        .status
                        .unwrap_or_default();
                    let total = status.replicas.unwrap_or(0);
                    let ready = status.ready_replicas.unwrap_or(0);
                    Ok((total == replicas && ready == replicas).then_some(()))
                },
            )
            .await?;
        }
    }
    Ok(())
}

/// An object as it is created again: its name, labels and annotations, none of what the server assigned.
fn fresh_metadata(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..ObjectMeta::default()
    }
}

/// Waits until an object is gone (deletion of a CRD waits for its objects to be removed).
async fn wait_gone<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} deleted"), POD_TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// What `hack/vpa-down.sh` removes, kept to put back.
struct UpstreamRemoved {
    crds: Vec<CustomResourceDefinition>,
}

async fn uninstall_upstream(env: &E2e) -> Result<UpstreamRemoved> {
    for program in UPSTREAM_PROGRAMS {
        upstream_program(env, program, false).await?;
    }
    let webhooks = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
    webhooks
        .delete(UPSTREAM_WEBHOOK, &DeleteParams::default())
        .await?;
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let mut removed = Vec::new();
    for name in UPSTREAM_CRDS {
        let crd = crds.get(name).await?;
        removed.push(CustomResourceDefinition {
            metadata: fresh_metadata(&crd.metadata),
            spec: crd.spec.clone(),
            status: None,
        });
        crds.delete(name, &DeleteParams::default()).await?;
    }
    for name in UPSTREAM_CRDS {
        wait_gone(&crds, name).await?;
    }
    wait_gone(&webhooks, UPSTREAM_WEBHOOK).await?;
    Ok(UpstreamRemoved { crds: removed })
}

/// Puts upstream back: its CRDs, then its programs; its admission controller registers its webhook again.
async fn reinstall_upstream(env: &E2e, removed: &UpstreamRemoved) -> Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    for crd in &removed.crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if crds.get_opt(&name).await?.is_none() {
            crds.create(&PostParams::default(), crd).await?;
        }
        wait_for(&format!("CRD {name} established"), POD_TIMEOUT, || async {
            let established = crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            Ok(established.then_some(()))
        })
        .await?;
    }
    for program in UPSTREAM_PROGRAMS {
        upstream_program(env, program, true).await?;
    }
    let webhooks = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
    wait_for(
        "upstream's admission controller registered again",
        POD_TIMEOUT,
        || async { Ok(webhooks.get_opt(UPSTREAM_WEBHOOK).await?.map(drop)) },
    )
    .await
}

/// Tailor's VPA (Recreate) on a fresh Deployment of two pods: the recommendation, both pods evicted, and the
/// replacements sized by Tailor's webhook alone.
async fn tailor_recommends_evicts_and_sizes(env: &E2e, ns: &str) -> Result<()> {
    env.create_deployment(ns, "web", 2).await?;
    let original = env.wait_running(ns, "web", 2).await?;
    let original: BTreeSet<String> = original
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    env.create_vpa(ns, vpa_manifest("web", "web", "Recreate"))
        .await?;
    bounds_excluding_original(env, ns).await?;
    let fresh = env.wait_replaced(ns, "web", &original).await?;
    let bounds = bounds_of(&env.tailor_vpas(ns).get("web").await?)?;
    for pod in &fresh {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") || annotations.contains_key("vpaUpdates")
        {
            bail!(
                "pod {:?}: expected Tailor's annotation alone: {annotations:?}",
                pod.metadata.name
            );
        }
        let requests = pod_resources(pod)?.spec_requests;
        if !within(requests, bounds) {
            bail!(
                "pod {:?}: requests {requests:?} outside the bounds {bounds:?}",
                pod.metadata.name
            );
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn uninstalling_upstream_leaves_tailor_working() {
    let env = e2e("uninstalling_upstream_leaves_tailor_working").await;
    let env = &env;
    let webhooks = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
    webhooks
        .get(UPSTREAM_WEBHOOK)
        .await
        .expect("upstream VPA beside Tailor (hack/cluster.sh up --with-upstream)");
    in_namespace(env, "no-upstream", |ns| async move {
        let removed = uninstall_upstream(env).await?;
        let result = async {
            // Upstream's API is gone with its CRDs; Tailor's is not.
            if env
                .upstream_vpas(&ns)
                .list(&ListParams::default())
                .await
                .is_ok()
            {
                bail!("upstream's VPA API still served after its CRDs were deleted");
            }
            tailor_recommends_evicts_and_sizes(env, &ns).await
        }
        .await;
        // Always put upstream back for the tests that follow.
        reinstall_upstream(env, &removed).await?;
        result
    })
    .await;
}

/// What stopping Tailor removed, kept to put back.
struct TailorRemoved {
    webhooks: Vec<MutatingWebhookConfiguration>,
    /// Running copies per component before.
    replicas: Vec<(&'static str, i32)>,
    /// The recommender copies before (a new one must lead afterwards).
    recommenders: Vec<String>,
}

async fn uninstall_tailor(env: &E2e) -> Result<TailorRemoved> {
    let mut replicas = Vec::new();
    let mut recommenders = Vec::new();
    for component in ["admission", "recommender", "updater"] {
        let instances = env.instances(component).await?;
        let running = instances.iter().filter(|i| i.running).count();
        replicas.push((component, i32::try_from(running).unwrap_or(1).max(1)));
        if component == "recommender" {
            recommenders.extend(instances.into_iter().map(|i| i.name));
        }
    }
    for component in ["updater", "recommender", "admission"] {
        env.scale_component(component, 0).await?;
    }
    let api = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
    let selector = format!("app.kubernetes.io/instance={}", env.release);
    let mut webhooks = Vec::new();
    for config in api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        let name = config.metadata.name.clone().unwrap_or_default();
        webhooks.push(MutatingWebhookConfiguration {
            metadata: fresh_metadata(&config.metadata),
            webhooks: config.webhooks.clone(),
        });
        api.delete(&name, &DeleteParams::default()).await?;
        wait_gone(&api, &name).await?;
    }
    if webhooks.is_empty() {
        bail!("no webhook configuration labelled {selector}");
    }
    Ok(TailorRemoved {
        webhooks,
        replicas,
        recommenders,
    })
}

/// Puts Tailor back: its webhook configuration, then its programs; waits until the webhook's status Lease is
/// renewed (the updater acts again) and a new recommender leads.
async fn reinstall_tailor(env: &E2e, removed: &TailorRemoved) -> Result<()> {
    let api = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
    for config in &removed.webhooks {
        let name = config.metadata.name.clone().unwrap_or_default();
        if api.get_opt(&name).await?.is_none() {
            api.create(&PostParams::default(), config).await?;
        }
    }
    let restarted = Timestamp::now();
    for (component, replicas) in &removed.replicas {
        env.scale_component(component, *replicas).await?;
    }
    let leases = Api::<Lease>::namespaced(env.client.clone(), &env.system_namespace);
    wait_for(
        "the webhook's status Lease renewed",
        LEADER_TIMEOUT,
        || async {
            let renewed = leases
                .get(super::resilience::ADMISSION_LEASE)
                .await?
                .spec
                .and_then(|s| s.renew_time)
                .map(|t| t.0);
            Ok(renewed.filter(|t| *t > restarted).map(drop))
        },
    )
    .await?;
    env.wait_for_new_leader(&removed.recommenders, LEADER_TIMEOUT)
        .await
        .map(drop)
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn uninstalling_tailor_leaves_upstream_working() {
    let env = e2e("uninstalling_tailor_leaves_upstream_working").await;
    let env = &env;
    in_namespace(env, "no-tailor", |ns| async move {
        env.create_deployment(&ns, "web", 2).await?;
        let original = env.wait_running(&ns, "web", 2).await?;
        let original: BTreeSet<String> = original
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        let removed = uninstall_tailor(env).await?;
        let result = async {
            // Upstream alone: it recommends, evicts both pods (their requests lie below its minimum) and sizes
            // the replacements; nothing of Tailor's is on them.
            env.upstream_vpas(&ns)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(upstream_vpa_manifest("web", "web", "Recreate"))?,
                )
                .await?;
            let fresh = env.wait_replaced(&ns, "web", &original).await?;
            let target = upstream_target(&env.upstream_vpas(&ns).get("web").await?)?
                .context("upstream's VPA has no recommendation")?;
            for pod in &fresh {
                let annotations = pod.metadata.annotations.clone().unwrap_or_default();
                if !annotations.contains_key("vpaUpdates")
                    || annotations.keys().any(|k| k.starts_with("tailor.dev/"))
                {
                    bail!(
                        "pod {:?}: expected upstream's annotation alone: {annotations:?}",
                        pod.metadata.name
                    );
                }
                let requests = pod_resources(pod)?.spec_requests;
                if requests == ORIGINAL_REQUESTS {
                    bail!(
                        "pod {:?} kept its original requests (upstream's target {target:?})",
                        pod.metadata.name
                    );
                }
            }
            Ok(())
        }
        .await;
        // Always put Tailor back for the tests that follow.
        reinstall_tailor(env, &removed).await?;
        result
    })
    .await;
}
