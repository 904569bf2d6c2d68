//! Fleet onboarding on the real control plane, driven with plain kubectl as an operator would: a refused
//! label, then `tailor.dev/vpa=Off` on a namespace of four kinds of workload, then `Recreate`, a deleted
//! Deployment, and the label removed. The user's Tailor VPA and an upstream VPA keep their workloads to
//! themselves throughout.

use super::*;

/// Usage the kwok kubelet reports for every pod of the test's workloads, far above the requests.
const USAGE: (&str, &str) = ("200m", "200Mi");

/// The test's workloads: four onboarded kinds, one covered by the user's VPA, one by an upstream VPA and
/// one opted out (pods of the CronJob keep running, as a long run would).
fn manifests(ns: &str) -> String {
    let pod = |app: &str, extra: &str| {
        format!(
            r#"
      metadata:
        labels: {{app: {app}}}
        annotations: {{kwok.x-k8s.io/usage-cpu: "{cpu}", kwok.x-k8s.io/usage-memory: "{mem}"{extra}}}
      spec:
        terminationGracePeriodSeconds: 0
        containers:
          - name: app
            image: {IMAGE}
            resources: {{requests: {{cpu: 10m, memory: 20Mi}}, limits: {{cpu: 20m, memory: 40Mi}}}}"#,
            cpu = USAGE.0,
            mem = USAGE.1,
        )
    };
    let deployment = |name: &str, replicas: u32, annotations: &str| {
        format!(
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}, \
             annotations: {{{annotations}}}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: \
             {{app: {name}}}}}\n  template:{}\n",
            pod(name, "")
        )
    };
    let mut out = String::new();
    out.push_str(&deployment("web", 2, ""));
    out.push_str(&deployment("mine", 1, ""));
    out.push_str(&deployment("legacy", 1, ""));
    out.push_str(&deployment("quiet", 1, "tailor.dev/vpa: \"false\""));
    out.push_str(&format!(
        "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db, namespace: {ns}}}\nspec:\n  \
         replicas: 1\n  serviceName: db\n  selector: {{matchLabels: {{app: db}}}}\n  template:{}\n",
        pod("db", "")
    ));
    out.push_str(&format!(
        "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: {ns}}}\nspec:\n  \
         selector: {{matchLabels: {{app: agent}}}}\n  template:{}\n",
        pod("agent", "")
    ));
    let job_pod =
        pod("nightly", ", tailor.dev/e2e-kubelet-job: run").replace("\n      ", "\n          ");
    out.push_str(&format!(
        "---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: nightly, namespace: {ns}}}\nspec:\n  \
         schedule: '*/1 * * * *'\n  concurrencyPolicy: Forbid\n  jobTemplate:\n    spec:\n      template:{}\n            \
         restartPolicy: Never\n",
        job_pod
    ));
    out.push_str(&format!(
        "---\napiVersion: autoscaling.tailor.dev/v1\nkind: VerticalPodAutoscaler\nmetadata: {{name: mine-vpa, \
         namespace: {ns}}}\nspec: {{targetRef: {{apiVersion: apps/v1, kind: Deployment, name: mine}}, \
         updatePolicy: {{updateMode: \"Off\"}}}}\n---\napiVersion: autoscaling.k8s.io/v1\nkind: \
         VerticalPodAutoscaler\nmetadata: {{name: legacy-upstream, namespace: {ns}}}\nspec: {{targetRef: \
         {{apiVersion: apps/v1, kind: Deployment, name: legacy}}, updatePolicy: {{updateMode: \"Off\"}}}}\n"
    ));
    out
}

fn kubectl_ok(args: &[&str], stdin: &str) -> Result<String> {
    let out = super::crds::kubectl(args, stdin)?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The names of the VPAs the fleet created in `ns` (label `app.kubernetes.io/managed-by=tailor`).
async fn created(env: &E2e, ns: &str) -> Result<BTreeMap<String, VerticalPodAutoscaler>> {
    let list = env
        .tailor_vpas(ns)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=tailor"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
        .collect())
}

/// Notes of the events.k8s.io events about namespace `ns` with `reason`.
async fn namespace_events(env: &E2e, ns: &str, reason: &str) -> Result<Vec<String>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ns))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect())
}

const ONBOARDED: [&str; 4] = [
    "agent-daemonset",
    "db-statefulset",
    "nightly-cronjob",
    "web-deployment",
];

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_labelled_namespace_is_onboarded_and_let_go_with_kubectl() {
    let env = e2e("a_labelled_namespace_is_onboarded_and_let_go_with_kubectl").await;
    let env = &env;
    in_namespace(env, "fleet", |ns| async move {
        kubectl_ok(&["apply", "-f", "-"], &manifests(&ns))?;
        kubectl_ok(
            &["annotate", "namespace", &ns, "tailor.dev/profile=cautious"],
            "",
        )?;
        // A label that names no mode: refused with a Warning on the namespace, nothing created.
        kubectl_ok(&["label", "namespace", &ns, "tailor.dev/vpa=Sometimes"], "")?;
        let refused = wait_for("the refusal event", POD_TIMEOUT, || async {
            let notes = namespace_events(env, &ns, "FleetPolicyRefused").await?;
            Ok((!notes.is_empty()).then_some(notes))
        })
        .await?;
        if !refused[0].contains("tailor.dev/vpa=\"Sometimes\" is not a mode") {
            bail!("refusal: {refused:?}");
        }
        if !created(env, &ns).await?.is_empty() {
            bail!("VPAs created from a refused policy");
        }
        onboard_off(env, &ns).await?;
        switch_to_recreate(env, &ns).await?;
        let_go(env, &ns).await
    })
    .await;
}

/// `tailor.dev/vpa=Off`: the four onboarded workloads get owned VPAs with the namespace's profile and
/// recommendations from real metrics; the covered and opted-out ones get none; nothing is evicted.
async fn onboard_off(env: &E2e, ns: &str) -> Result<()> {
    kubectl_ok(
        &[
            "label",
            "namespace",
            ns,
            "--overwrite",
            "tailor.dev/vpa=Off",
        ],
        "",
    )?;
    let vpas = wait_for("four VPAs created by the fleet", POD_TIMEOUT, || async {
        let vpas = created(env, ns).await?;
        Ok((vpas.keys().map(String::as_str).collect::<Vec<_>>() == ONBOARDED).then_some(vpas))
    })
    .await?;
    for (name, v) in &vpas {
        let owner = v.metadata.owner_references.clone().unwrap_or_default();
        let target = v.spec.target_ref.as_ref().context("targetRef")?;
        if owner.len() != 1 || owner[0].name != target.name || owner[0].uid.is_empty() {
            bail!("{name}: owner references {owner:?} for target {target:?}");
        }
        let annotations = v.metadata.annotations.clone().unwrap_or_default();
        if annotations.get("tailor.dev/profile").map(String::as_str) != Some("cautious") {
            bail!("{name}: the namespace's profile did not reach it: {annotations:?}");
        }
    }
    for name in ONBOARDED {
        env.recommendation(ns, name)
            .await
            .with_context(|| format!("{name}'s recommendation"))?;
    }
    let skipped = namespace_events(env, ns, "FleetSkipped").await?;
    for (workload, reason) in [
        ("Deployment mine", "TargetedByVPA"),
        ("Deployment legacy", "TargetedByUpstreamVPA"),
        ("Deployment quiet", "OptedOut"),
    ] {
        if !skipped
            .iter()
            .any(|n| n.contains(workload) && n.contains(reason))
        {
            bail!("no {reason} event for {workload}: {skipped:?}");
        }
    }
    if let Some(acted) = tailor_disruptions(env, ns)?
        && !acted.is_empty()
    {
        bail!("pods evicted or resized under mode Off: {acted:?}");
    }
    Ok(())
}

/// `tailor.dev/vpa=Recreate`: the created VPAs switch mode and `web`'s pods are replaced with sized ones;
/// the user's VPA is untouched.
async fn switch_to_recreate(env: &E2e, ns: &str) -> Result<()> {
    let mine_before = env.tailor_vpas(ns).get("mine-vpa").await?;
    let original = env.live_uids(ns, "web").await?;
    kubectl_ok(
        &[
            "label",
            "namespace",
            ns,
            "--overwrite",
            "tailor.dev/vpa=Recreate",
        ],
        "",
    )?;
    wait_for("the created VPAs in Recreate", POD_TIMEOUT, || async {
        let vpas = created(env, ns).await?;
        let modes: Vec<String> = vpas
            .values()
            .map(|v| tailor_core::policy::update_mode(&v.spec).to_string())
            .collect();
        Ok((modes.len() == 4 && modes.iter().all(|m| m == "Recreate")).then_some(()))
    })
    .await?;
    let fresh = env.wait_replaced(ns, "web", &original).await?;
    let bounds = bounds_of(&env.tailor_vpas(ns).get("web-deployment").await?)?;
    for pod in &fresh {
        let r = pod_resources(pod)?;
        if !within(r.spec_requests, bounds) {
            bail!(
                "web's replacement requests {:?} are outside {bounds:?}",
                r.spec_requests
            );
        }
    }
    // The recommender writes its status; nothing else of it changes.
    let mine_after = env.tailor_vpas(ns).get("mine-vpa").await?;
    let kept = |v: &VerticalPodAutoscaler| {
        (
            v.spec.clone(),
            v.metadata.labels.clone(),
            v.metadata.annotations.clone(),
            v.metadata.generation,
        )
    };
    if kept(&mine_after) != kept(&mine_before) {
        bail!("the user's VPA was changed: {:?}", mine_after.spec);
    }
    Ok(())
}

/// A deleted Deployment's VPA goes; the label removed, every created VPA goes and the user's stays.
async fn let_go(env: &E2e, ns: &str) -> Result<()> {
    kubectl_ok(
        &["-n", ns, "delete", "deployment", "web", "--wait=false"],
        "",
    )?;
    wait_for("web's VPA gone with web", POD_TIMEOUT, || async {
        Ok((!created(env, ns).await?.contains_key("web-deployment")).then_some(()))
    })
    .await?;
    kubectl_ok(&["label", "namespace", ns, "tailor.dev/vpa-"], "")?;
    wait_for("every created VPA gone", POD_TIMEOUT, || async {
        Ok(created(env, ns).await?.is_empty().then_some(()))
    })
    .await?;
    let users = env.tailor_vpas(ns).get("mine-vpa").await?;
    if tailor_core::policy::update_mode(&users.spec).to_string() != "Off" {
        bail!("the user's VPA changed: {:?}", users.spec);
    }
    Ok(())
}
