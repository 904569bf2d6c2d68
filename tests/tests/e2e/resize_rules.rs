//! The updater's reading of what the API server refuses of an in-place resize (docs/decisions/resize-precheck.md,
//! `tailor_updater::decisions::resize_check`), held against the real API server: for each case a bare pod is created,
//! the resize the updater would send is PATCHed to `pods/resize`, and the server's answer must be the
//! check's (refused exactly when the check refuses).

use super::*;
use json_patch::PatchOperation;
use tailor_updater::decisions::resize_check::{ResizeRules, refusal};
use tailor_updater::views::pods::CachedPod;

/// One case: the container's resources, extra pod spec fields, and the resize operations.
struct Case {
    name: &'static str,
    resources: Value,
    extra_spec: Value,
    ops: Value,
}

fn add(path: &str, value: Value) -> Value {
    json!({"op": "add", "path": format!("/spec/containers/0/resources{path}"), "value": value})
}

fn cases() -> Vec<Case> {
    let req_lim = |req_cpu: &str, req_mem: &str, lim_cpu: &str, lim_mem: &str| {
        json!({"requests": {"cpu": req_cpu, "memory": req_mem},
               "limits": {"cpu": lim_cpu, "memory": lim_mem}})
    };
    vec![
        Case {
            name: "besteffort-gains-requests",
            resources: json!({}),
            extra_spec: json!({}),
            ops: json!([
                add("/requests", json!({})),
                add("/requests/cpu", json!("250m"))
            ]),
        },
        Case {
            name: "guaranteed-requests-only",
            resources: req_lim("100m", "64Mi", "100m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([add("/requests/cpu", json!("50m"))]),
        },
        Case {
            name: "guaranteed-both",
            resources: req_lim("100m", "64Mi", "100m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([
                add("/requests/cpu", json!("50m")),
                add("/limits/cpu", json!("50m"))
            ]),
        },
        Case {
            name: "burstable-to-guaranteed",
            resources: req_lim("50m", "64Mi", "100m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([add("/requests/cpu", json!("100m"))]),
        },
        Case {
            name: "burstable-resize",
            resources: req_lim("10m", "32Mi", "20m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([
                add("/requests/cpu", json!("15m")),
                add("/limits/cpu", json!("30m"))
            ]),
        },
        Case {
            name: "memory-limit-cut",
            resources: req_lim("10m", "32Mi", "20m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([add("/limits/memory", json!("48Mi"))]),
        },
        Case {
            name: "pod-level-resources",
            resources: json!({"requests": {"cpu": "50m", "memory": "32Mi"}}),
            extra_spec: json!({"resources": {"limits": {"cpu": "200m", "memory": "128Mi"}}}),
            ops: json!([add("/requests/cpu", json!("60m"))]),
        },
        // What the limit policy's `unset` would need in place (docs/limit-policy.md): the updater keeps the
        // limit instead.
        Case {
            name: "limit-removed",
            resources: req_lim("10m", "32Mi", "20m", "64Mi"),
            extra_spec: json!({}),
            ops: json!([{"op": "remove", "path": "/spec/containers/0/resources/limits/cpu"}]),
        },
    ]
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn the_resize_check_agrees_with_the_api_server() {
    let env = e2e("the_resize_check_agrees_with_the_api_server").await;
    let env = &env;
    in_namespace(env, "resizerules", |ns| async move {
        let version = env.client.apiserver_version().await?;
        let rules = ResizeRules::for_version(&version.minor)
            .ok_or_else(|| anyhow!("server minor version {:?}", version.minor))?;
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
        for case in cases() {
            let mut spec = json!({
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": IMAGE, "resources": case.resources,
                    "resizePolicy": [
                        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                        {"resourceName": "memory", "restartPolicy": "NotRequired"}]}]
            });
            if let (Some(s), Some(extra)) = (spec.as_object_mut(), case.extra_spec.as_object()) {
                for (k, v) in extra {
                    s.insert(k.clone(), v.clone());
                }
            }
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": case.name, "labels": {"app": case.name}},
                "spec": spec
            }))?;
            pods.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {}", case.name))?;
        }
        let mut mismatches = Vec::new();
        let mut refused = Vec::new();
        for case in cases() {
            let running = env.wait_running(&ns, case.name, 1).await?;
            let pod = running
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("pod {} not running", case.name))?;
            let ops: Vec<PatchOperation> = serde_json::from_value(case.ops.clone())?;
            let ours = refusal(&CachedPod::from(pod), &ops, &rules);
            let answer = pods
                .patch_subresource(
                    "resize",
                    case.name,
                    &PatchParams::default(),
                    &Patch::<()>::Json(json_patch::Patch(ops)),
                )
                .await;
            let server_refused = match &answer {
                Ok(_) => false,
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 403 || s.code == 400 => true,
                Err(e) => bail!("{}: unexpected answer to the resize: {e}", case.name),
            };
            if server_refused {
                refused.push(case.name);
            }
            if server_refused != ours.is_some() {
                mismatches.push(format!(
                    "{}: server {} ({:?}), check {:?}",
                    case.name,
                    if server_refused {
                        "refused"
                    } else {
                        "accepted"
                    },
                    answer.err().map(|e| e.to_string()),
                    ours
                ));
            }
        }
        // Not vacuous: the server refuses the QoS changes, the pod-level case and the removed limit, and
        // accepts the rest (from 1.34 a memory limit cut under NotRequired is accepted).
        let expected = [
            "besteffort-gains-requests",
            "guaranteed-requests-only",
            "burstable-to-guaranteed",
            "pod-level-resources",
            "limit-removed",
        ];
        if refused != expected {
            mismatches.push(format!(
                "the server refused {refused:?}, expected {expected:?}"
            ));
        }
        if !mismatches.is_empty() {
            bail!(
                "Kubernetes 1.{}: the resize check disagrees with the API server:\n{}",
                version.minor,
                mismatches.join("\n")
            );
        }
        Ok(())
    })
    .await;
}
