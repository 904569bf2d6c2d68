//! Tailor's CRDs on a real API server: the examples apply, invalid VPAs are refused with upstream's message, and upstream's CRDs beside ours change nothing.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn crds_accept_the_examples() {
    let env = e2e("crds_accept_the_examples").await;
    let env = &env;
    in_namespace(env, "examples", |ns| async move {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        let mut accepted = 0;
        for file in &files {
            let text = std::fs::read_to_string(file)?;
            for doc in text.split("\n---").filter(|d| !d.trim().is_empty()) {
                let value: Value = serde_saphyr::from_str(doc)
                    .with_context(|| format!("parsing {}", file.display()))?;
                let Some(api_version) = value.get("apiVersion").and_then(Value::as_str) else {
                    continue;
                };
                if !api_version.starts_with("autoscaling.tailor.dev/") {
                    continue;
                }
                let kind = value["kind"].as_str().context("kind")?.to_string();
                let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "autoscaling.tailor.dev",
                    "v1",
                    &kind,
                ));
                let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar);
                let mut obj: DynamicObject = serde_json::from_value(value)?;
                obj.metadata.namespace = None;
                // Server-side dry run: the CRD schema and the webhook both see it, nothing is stored.
                let pp = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                api.create(&pp, &obj).await.with_context(|| {
                    format!("{} {kind} {:?}", file.display(), obj.metadata.name)
                })?;
                accepted += 1;
            }
        }
        if accepted == 0 {
            bail!(
                "no autoscaling.tailor.dev objects found in {}",
                dir.display()
            );
        }
        eprintln!("{accepted} example objects accepted");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn invalid_vpa_is_rejected_with_upstreams_message() {
    let env = e2e("invalid_vpa_is_rejected_with_upstreams_message").await;
    let env = &env;
    in_namespace(env, "invalid", |ns| async move {
        let cases = [
            (
                json!({"updatePolicy": {"updateMode": "Auto", "minReplicas": 0}}),
                "spec.updatePolicy.minReplicas: Invalid value: 0: minReplicas has to be positive",
            ),
            (
                json!({"updatePolicy": {"updateMode": "Off"}, "resourcePolicy": {"containerPolicies": [{
                    "containerName": "app", "minAllowed": {"cpu": "500m"}, "maxAllowed": {"cpu": "100m"}}]}}),
                "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]: Invalid value: \"100m\": max resource for cpu is lower than min of \"500m\"",
            ),
        ];
        for (i, (extra, message)) in cases.into_iter().enumerate() {
            let mut manifest = vpa_manifest(&format!("invalid-{i}"), "web", "Off");
            for (k, v) in extra.as_object().context("object")? {
                manifest["spec"][k] = v.clone();
            }
            match env.create_vpa(&ns, manifest).await {
                Ok(_) => bail!("invalid VPA {i} was accepted; expected {message:?}"),
                Err(e) => {
                    let text = format!("{e:#}");
                    if !text.contains(message) {
                        bail!("invalid VPA {i} rejected with {text:?}, expected it to contain {message:?}");
                    }
                    if !text.contains("denied the request") {
                        bail!("invalid VPA {i} was not rejected by the webhook: {text}");
                    }
                }
            }
        }
        // Defaulting: a VPA without updatePolicy gets upstream's default mode.
        let mut manifest = vpa_manifest("defaulted", "web", "Off");
        manifest["spec"].as_object_mut().context("spec")?.remove("updatePolicy");
        let created = env.create_vpa(&ns, manifest).await?;
        let mode = created.data.pointer("/spec/updatePolicy/updateMode").and_then(Value::as_str);
        if mode != Some("Recreate") {
            bail!("a VPA without updatePolicy was stored with updateMode {mode:?}, expected Recreate");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn tailor_and_upstream_vpa_crds_do_not_interfere() {
    let env = e2e("tailor_and_upstream_vpa_crds_do_not_interfere").await;
    let env = &env;
    in_namespace(env, "coexist", |ns| async move {
        // The short names stay apart: `vpa` is upstream's, `tvpa` is Tailor's.
        let ours = env
            .client
            .list_api_group_resources("autoscaling.tailor.dev/v1")
            .await?;
        let theirs = env
            .client
            .list_api_group_resources("autoscaling.k8s.io/v1")
            .await
            .context("the upstream VPA CRDs are not installed (hack/kind-e2e.sh installs them)")?;
        let short = |list: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
                     plural: &str| {
            list.resources
                .iter()
                .find(|r| r.name == plural)
                .and_then(|r| r.short_names.clone())
                .unwrap_or_default()
        };
        let (ours, theirs) = (
            short(&ours, "verticalpodautoscalers"),
            short(&theirs, "verticalpodautoscalers"),
        );
        if !ours.contains(&"tvpa".to_string()) || ours.iter().any(|s| theirs.contains(s)) {
            bail!("short names collide: tailor {ours:?}, upstream {theirs:?}");
        }

        env.create_deployment(&ns, "web", 1).await?;
        // Mode Off: this test is about the objects; who sizes and evicts what is coexistence.rs's.
        let upstream: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling.k8s.io/v1",
            "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "updatePolicy": {"updateMode": "Off"}
            }
        }))?;
        env.upstream_vpas(&ns)
            .create(&PostParams::default(), &upstream)
            .await?;
        // Same name, same target, other group: both objects exist side by side, and Tailor's gets its
        // recommendation.
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        env.recommendation(&ns, "web").await?;
        env.upstream_vpas(&ns).get("web").await?;
        // And no Tailor checkpoint is named after anything but Tailor VPAs.
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "autoscaling.tailor.dev",
            "v1",
            "VerticalPodAutoscalerCheckpoint",
        ));
        let checkpoints: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar);
        for cp in checkpoints.list(&ListParams::default()).await?.items {
            let vpa = cp
                .data
                .pointer("/spec/vpaObjectName")
                .and_then(Value::as_str);
            if vpa != Some("web") {
                bail!("unexpected checkpoint {:?} for {vpa:?}", cp.metadata.name);
            }
        }
        Ok(())
    })
    .await;
}

/// `kubectl` as a user runs it: `TAILOR_E2E_KUBECTL`, else the one on `PATH` (`hack/cluster.sh up` prints the
/// `PATH` of the one it built), against the e2e cluster's kubeconfig.
pub(super) fn kubectl(args: &[&str], stdin: &str) -> Result<std::process::Output> {
    use std::io::Write as _;
    let program = std::env::var_os("TAILOR_E2E_KUBECTL").unwrap_or_else(|| "kubectl".into());
    let kubeconfig = std::env::var_os("TAILOR_E2E_KUBECONFIG").context("TAILOR_E2E_KUBECONFIG")?;
    let mut child = std::process::Command::new(&program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("running {program:?} (set TAILOR_E2E_KUBECTL or put kubectl on PATH)")
        })?;
    child
        .stdin
        .take()
        .context("kubectl's stdin")?
        .write_all(stdin.as_bytes())?;
    Ok(child.wait_with_output()?)
}

/// The manifests a user applies from `examples/` (Tailor VPAs with their workloads), with every
/// `namespace:` moved to `ns`. `plan/` holds cluster snapshots, `broken/` what must be refused.
fn example_manifests(ns: &str) -> Result<Vec<(PathBuf, String)>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("modes"), root.join("patch")] {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.extension().is_some_and(|x| x == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)?;
        if !text.contains("apiVersion: autoscaling.tailor.dev/") {
            continue;
        }
        let moved: Vec<String> = text
            .lines()
            .map(|l| match l.split_once("namespace:") {
                Some((indent, _)) if indent.trim().is_empty() => format!("{indent}namespace: {ns}"),
                _ => l.to_string(),
            })
            .collect();
        out.push((path, moved.join("\n")));
    }
    Ok(out)
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn kubectl_applies_every_example_and_refuses_a_broken_vpa() {
    let env = e2e("kubectl_applies_every_example_and_refuses_a_broken_vpa").await;
    let env = &env;
    in_namespace(env, "kubectl", |ns| async move {
        let manifests = example_manifests(&ns)?;
        if manifests.len() < 3 {
            bail!(
                "only {} example manifests with a Tailor VPA found",
                manifests.len()
            );
        }
        // Client-side apply creates every object; server-side apply then takes them over (a second field
        // manager, as when a team moves to GitOps); both must pass the CRD schema and the webhook.
        for apply in [
            vec!["apply", "-f", "-"],
            vec!["apply", "--server-side", "--force-conflicts", "-f", "-"],
        ] {
            for (path, text) in &manifests {
                let out = kubectl(&apply, text)?;
                if !out.status.success() {
                    bail!(
                        "kubectl {} of {} failed: {}",
                        apply.join(" "),
                        path.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
        // Two examples may describe one object in two states (examples/patch/vpa.yaml and vpa-hpa.yaml):
        // every distinct VPA name must be listed.
        let mut wanted = BTreeSet::new();
        for (path, text) in &manifests {
            for doc in text.split("\n---").filter(|d| !d.trim().is_empty()) {
                let value: Value = serde_saphyr::from_str(doc)
                    .with_context(|| format!("parsing {}", path.display()))?;
                if value["kind"] == "VerticalPodAutoscaler"
                    && let Some(name) = value.pointer("/metadata/name").and_then(Value::as_str)
                {
                    wanted.insert(format!("verticalpodautoscaler.autoscaling.tailor.dev/{name}"));
                }
            }
        }
        let listed = kubectl(&["get", "tvpa", "-n", &ns, "-o", "name"], "")?;
        let listed: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        let missing: Vec<&String> = wanted.difference(&listed).collect();
        if wanted.len() < 3 || !missing.is_empty() {
            bail!(
                "after applying {} files naming {} VPAs, kubectl get tvpa lacks {missing:?} (lists {listed:?})",
                manifests.len(),
                wanted.len()
            );
        }

        // The broken example: refused. Its `memory: lots` cannot be decoded, and the webhook refuses that first
        // with upstream's own message (a conformance vector); with that one field fixed, the CRD schema names
        // every other field at fault.
        let broken =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/broken/vpa-invalid.yaml");
        let text = std::fs::read_to_string(&broken)?
            .replace("namespace: demo", &format!("namespace: {ns}"));
        let decodable = text.replace("memory: lots", "memory: 1Gi");
        let cases = [
            (
                text.as_str(),
                vec!["is invalid", "quantities must match the regular expression"],
            ),
            (
                decodable.as_str(),
                vec![
                    "spec.updatePolicy.updateMode: Unsupported value: \"Sometimes\"",
                    "spec.resourcePolicy.containerPolicies[0].mode: Unsupported value: \"Maybe\"",
                ],
            ),
        ];
        for (manifest, expected) in cases {
            for apply in [
                vec!["apply", "-f", "-"],
                vec!["apply", "--server-side", "-f", "-"],
            ] {
                let out = kubectl(&apply, manifest)?;
                let stderr = String::from_utf8_lossy(&out.stderr);
                if out.status.success() {
                    bail!(
                        "kubectl {} accepted a broken VPA ({})",
                        apply.join(" "),
                        broken.display()
                    );
                }
                if let Some(missing) = expected.iter().find(|e| !stderr.contains(*e)) {
                    bail!(
                        "kubectl {}: the refusal does not say {missing:?}: {stderr}",
                        apply.join(" ")
                    );
                }
            }
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn the_checkpoint_crd_refuses_weights_the_recommender_cannot_read() {
    let env = e2e("the_checkpoint_crd_refuses_weights_the_recommender_cannot_read").await;
    let env = &env;
    in_namespace(env, "checkpoints", |ns| async move {
        let checkpoint = |weights: &str| {
            format!(
                "apiVersion: autoscaling.tailor.dev/v1\nkind: VerticalPodAutoscalerCheckpoint\n\
                 metadata:\n  name: web.app\n  namespace: {ns}\n\
                 spec:\n  vpaObjectName: web\n  containerName: app\n\
                 status:\n  version: v3\n  cpuHistogram:\n    totalWeight: 2.5\n    \
                 referenceTimestamp: \"2026-11-01T00:00:00Z\"\n    bucketWeights: {weights}\n"
            )
        };
        // What no recommender writes (docs/decisions/checkpoints.md): refused by the API server, named.
        for weights in [r#"{"16": -1}"#, r#"{"16": 10001}"#, r#"{"16": 0.5}"#] {
            let out = kubectl(&["apply", "-f", "-"], &checkpoint(weights))?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                bail!("a checkpoint with bucketWeights {weights} was accepted");
            }
            if !stderr.contains("bucketWeights") {
                bail!("the refusal of bucketWeights {weights} does not name the field: {stderr}");
            }
        }
        // What it writes: accepted. The map is atomic: a server-side apply by another manager replaces it
        // whole (a key it does not name does not survive).
        let out = kubectl(
            &["apply", "-f", "-"],
            &checkpoint(r#"{"3": 7, "16": 10000}"#),
        )?;
        if !out.status.success() {
            bail!(
                "a valid checkpoint was refused: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager",
                "tailor-recommender",
                "-f",
                "-",
            ],
            &checkpoint(r#"{"5": 10000}"#),
        )?;
        if !out.status.success() {
            bail!(
                "server-side apply failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let got = kubectl(
            &["get", "tvpacheckpoint", "web.app", "-n", &ns, "-o", "json"],
            "",
        )?;
        let stored: Value = serde_json::from_slice(&got.stdout)?;
        let weights = &stored["status"]["cpuHistogram"]["bucketWeights"];
        if *weights != json!({"5": 10000}) {
            bail!("bucketWeights after the apply: {weights}, expected only the applied map");
        }
        Ok(())
    })
    .await;
}
