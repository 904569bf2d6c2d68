//! Usage reaches the recommender and becomes a recommendation (metrics.k8s.io, OOM events).

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn deployment_with_vpa_gets_a_recommendation() {
    let env = e2e("deployment_with_vpa_gets_a_recommendation").await;
    let env = &env;
    in_namespace(env, "recommend", |ns| async move {
        env.create_deployment(&ns, "web", 2).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        let target = env.recommendation(&ns, "web").await?;
        let (cpu, mem) = cpu_mem(&target)?;
        // The pod minimum (25m, 250Mi) split over one container is the floor of any recommendation.
        assert!(cpu >= 25, "cpu target {cpu}m below the minimum");
        assert!(
            mem >= 250 * 1024 * 1024,
            "memory target {mem} below the minimum"
        );
        let vpa = env.tailor_vpas(&ns).get("web").await?;
        let rec = vpa
            .status
            .and_then(|s| s.recommendation)
            .and_then(|r| r.container_recommendations);
        let rec = rec
            .into_iter()
            .flatten()
            .next()
            .context("no container recommendation")?;
        for (name, bound) in [
            ("lowerBound", rec.lower_bound),
            ("upperBound", rec.upper_bound),
        ] {
            let bound = bound.with_context(|| format!("no {name}"))?;
            cpu_mem(&bound).with_context(|| name.to_string())?;
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn an_oom_kill_bumps_the_memory_recommendation() {
    let env = e2e("an_oom_kill_bumps_the_memory_recommendation").await;
    let env = &env;
    in_namespace(env, "oom", |ns| async move {
        // The VPA first, known to the recommender before the pod exists, so that no OOM can come before it.
        env.create_vpa(&ns, vpa_manifest("oom", "oom", "Off")).await?;
        let vpas = env.tailor_vpas(&ns);
        wait_for("the recommender to take up VPA oom", POD_TIMEOUT, || async {
            let status = vpas.get("oom").await?.status;
            Ok(status.and_then(|s| s.conditions).filter(|c| !c.is_empty()).map(|_| ()))
        })
        .await?;
        // The container fills its 300Mi once (an OOM kill), then idles; the marker survives the restart.
        let script = "if [ -e /scratch/oomed ]; then exec sleep 100000; fi; touch /scratch/oomed; exec tail /dev/zero";
        env.create_deployment_from(&ns, json!({
            "metadata": {"name": "oom"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "oom"}},
                "template": {
                    // On kwok (no kubelet, no container) a Stage reports the same OOM kill
                    // (hack/cluster/kwok-kubelet.yaml); a kubelet ignores the annotation.
                    "metadata": {"labels": {"app": "oom"}, "annotations": {"tailor.dev/e2e-kubelet-oom": "once"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "app",
                            "image": BUSYBOX,
                            "command": ["sh", "-c", script],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "300Mi"},
                                "limits": {"memory": "300Mi"}
                            },
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                        }],
                        "volumes": [{"name": "scratch", "emptyDir": {}}]
                    }
                }
            }
        }))
        .await?;
        wait_for("the container of oom to be OOM-killed once and run again", POD_TIMEOUT, || async {
            let pods = env.running_pods(&ns, "oom").await?;
            Ok(pods.iter().find_map(|p| {
                let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
                let reason = status.last_state.as_ref()?.terminated.as_ref()?.reason.clone()?;
                (reason == "OOMKilled" && status.ready).then_some(())
            }))
        })
        .await?;
        // Upstream's bump: max(request × 1.2, request + 100Mi) = 400Mi; without the OOM the container's few
        // KiB of usage give the 250Mi minimum.
        let bump = 400 * MI;
        let waited = wait_for(
            &format!("a memory target of at least {bump} bytes after the OOM"),
            RECOMMENDATION_TIMEOUT,
            || async {
                let target = target_of(&vpas.get("oom").await?).map(|t| cpu_mem(&t)).transpose()?;
                Ok(target.filter(|&(_, mem)| mem >= bump))
            },
        )
        .await;
        if let Err(e) = waited {
            let last = vpas.get("oom").await.ok().and_then(|v| target_of(&v));
            bail!("{e:#}; last target {last:?}");
        }
        Ok(())
    })
    .await;
}

/// The offline CLI: `TAILOR_E2E_TAILOR`, else `target/debug/tailor` (hack/e2e-local.sh builds it).
pub(super) fn tailor_cli() -> PathBuf {
    std::env::var_os("TAILOR_E2E_TAILOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/tailor"))
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn constant_usage_gives_the_numbers_of_tailor_recommend() {
    let env = e2e("constant_usage_gives_the_numbers_of_tailor_recommend").await;
    let env = &env;
    in_namespace(env, "constant", |ns| async move {
        // Usage set by annotation: kwok serves it as the kubelet's /metrics/resource (on kind the pause
        // container's own, nearly constant, usage is what metrics-server reports).
        env.create_deployment_from(
            &ns,
            json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {
                            "kwok.x-k8s.io/usage-cpu": "400m",
                            "kwok.x-k8s.io/usage-memory": "600Mi"
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
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        // What metrics.k8s.io reports for the container: the samples the recommender reads.
        let metrics = Api::<DynamicObject>::namespaced_with(
            env.client.clone(),
            &ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "metrics.k8s.io",
                "v1beta1",
                "PodMetrics",
            )),
        );
        let (cpu_cores, memory_bytes) =
            wait_for("PodMetrics of web", RECOMMENDATION_TIMEOUT, || async {
                let list = metrics.list(&ListParams::default()).await?;
                let Some(usage) = list
                    .items
                    .first()
                    .map(|m| m.data["containers"][0]["usage"].clone())
                else {
                    return Ok(None);
                };
                let q =
                    |k: &str| -> Result<Quantity> { Ok(serde_json::from_value(usage[k].clone())?) };
                Ok(Some((
                    milli_cpu(&q("cpu")?)? as f64 / 1000.0,
                    bytes(&q("memory")?)?,
                )))
            })
            .await?;
        // From here the recommender can read a sample: its next loop writes the status.
        let sample_seen = Instant::now();
        // The same samples through the offline CLI: constant usage puts every sample in one histogram bucket,
        // so the target does not depend on how many samples the recommender has seen.
        let csv: String =
            std::iter::once("timestamp,namespace,pod,container,cpu_cores,memory_bytes".to_string())
                .chain((0..10).map(|i| {
                    format!(
                        "{},{ns},web-0,app,{cpu_cores},{memory_bytes}",
                        1_717_200_000 + i * 10
                    )
                }))
                .collect::<Vec<_>>()
                .join("\n");
        let cli = tailor_cli();
        let mut child = std::process::Command::new(&cli)
            .args(["recommend", "-i", "-", "-o", "json"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("running {} (cargo build -p tailor-cli)", cli.display()))?;
        {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .context("stdin")?
                .write_all(csv.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "tailor recommend failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let offline: Value = serde_json::from_slice(&out.stdout)?;
        let rec = &offline[0]["recommendations"][0];
        let expected = |key: &str| -> Result<(i64, i64)> {
            Ok((
                rec[key]["cpu"]
                    .as_i64()
                    .with_context(|| format!("{key}.cpu in {offline}"))?,
                rec[key]["memory"]
                    .as_i64()
                    .with_context(|| format!("{key}.memory in {offline}"))?,
            ))
        };
        let (target, uncapped) = (expected("target")?, expected("uncappedTarget")?);
        // The live recommendation, once it reflects the usage (the first loops may precede the first sample).
        let vpas = env.tailor_vpas(&ns);
        let live = wait_for(
            &format!("the target of VPA web to reach tailor recommend's {target:?}"),
            RECOMMENDATION_TIMEOUT,
            || async {
                let vpa = vpas.get("web").await?;
                let Some(rec) = vpa
                    .status
                    .and_then(|s| s.recommendation)
                    .and_then(|r| r.container_recommendations)
                    .and_then(|c| c.into_iter().next())
                else {
                    return Ok(None);
                };
                let live_target = Some(cpu_mem(&rec.target)?);
                let live_uncapped = rec.uncapped_target.as_ref().map(cpu_mem).transpose()?;
                Ok((live_target == Some(target)).then_some((live_target, live_uncapped)))
            },
        )
        .await?;
        // Within two recommender intervals of the first sample metrics.k8s.io served
        // (docs/decisions/real-control-plane.md), plus the
        // test's own polling and API round trips.
        let interval = recommender_interval()?;
        let took = sample_seen.elapsed();
        println!(
            "recommendation {:.1}s after the first sample was served (recommender interval {}s)",
            took.as_secs_f64(),
            interval.as_secs()
        );
        if took > 2 * interval + Duration::from_secs(2) {
            bail!(
                "the recommendation took {took:?} after the first sample, over two recommender intervals ({interval:?})"
            );
        }
        if live.1 != Some(uncapped) {
            bail!(
                "uncappedTarget {:?} live, {uncapped:?} from tailor recommend",
                live.1
            );
        }
        Ok(())
    })
    .await;
}

/// A Deployment `name` of one pod whose container uses `cpu` and `memory` (kwok's usage annotations).
pub(super) fn deployment_using(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "kwok.x-k8s.io/usage-cpu": cpu,
                    "kwok.x-k8s.io/usage-memory": memory
                }},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "app", "image": IMAGE,
                    "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}}
                }]}
            }
        }
    })
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn a_vpa_moved_to_another_workload_drops_the_old_ones_history() {
    let env = e2e("a_vpa_moved_to_another_workload_drops_the_old_ones_history").await;
    let env = &env;
    in_namespace(env, "retarget", |ns| async move {
        env.create_deployment_from(&ns, deployment_using("big", "2", "1Gi"))
            .await?;
        env.create_deployment_from(&ns, deployment_using("small", "10m", "40Mi"))
            .await?;
        env.create_vpa(&ns, vpa_manifest("web", "big", "Off"))
            .await?;
        env.create_vpa(&ns, vpa_manifest("fresh", "small", "Off"))
            .await?;
        let vpas = env.tailor_vpas(&ns);
        wait_for(
            "a recommendation of VPA web for big",
            RECOMMENDATION_TIMEOUT,
            || async {
                let target = target_of(&vpas.get("web").await?);
                Ok(target
                    .map(|t| cpu_mem(&t))
                    .transpose()?
                    .filter(|(cpu, _)| *cpu >= 1000))
            },
        )
        .await?;
        // Its checkpoint holds the big Deployment's history.
        let checkpoints = env.checkpoints(&ns);
        wait_for("checkpoint web.app", RECOMMENDATION_TIMEOUT, || async {
            Ok(checkpoints.get_opt("web.app").await?.map(|_| ()))
        })
        .await?;
        // Moved to the small Deployment: it soon recommends what the VPA created on it does.
        env.dynamic_vpas(&ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"targetRef": {
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "small"}}})),
            )
            .await?;
        let (web, fresh) = wait_for(
            "VPA web to recommend for small what VPA fresh does",
            RECOMMENDATION_TIMEOUT,
            || async {
                let (Some(web), Some(fresh)) = (
                    target_of(&vpas.get("web").await?),
                    target_of(&vpas.get("fresh").await?),
                ) else {
                    return Ok(None);
                };
                let (web, fresh) = (cpu_mem(&web)?, cpu_mem(&fresh)?);
                Ok((web.0 < 1000).then_some((web, fresh)))
            },
        )
        .await?;
        if web.0 > 2 * fresh.0 {
            bail!("after the move VPA web recommends {web:?}, a fresh VPA on small {fresh:?}");
        }
        Ok(())
    })
    .await;
}

/// The recommender's interval on the test cluster: `recommender.interval` of `hack/cluster/values.yaml`
/// (seconds or minutes, as the file writes it).
fn recommender_interval() -> Result<Duration> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hack/cluster/values.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let section = text
        .split_once("\nrecommender:\n")
        .context("no recommender: section in hack/cluster/values.yaml")?
        .1;
    let value = section
        .lines()
        .take_while(|l| l.starts_with(' ') || l.is_empty())
        .find_map(|l| l.trim().strip_prefix("interval:"))
        .context("no recommender.interval in hack/cluster/values.yaml")?
        .trim();
    let parse = |n: &str| {
        n.parse::<u64>()
            .with_context(|| format!("interval {value:?}"))
    };
    if let Some(n) = value.strip_suffix('s') {
        Ok(Duration::from_secs(parse(n)?))
    } else if let Some(n) = value.strip_suffix('m') {
        Ok(Duration::from_secs(60 * parse(n)?))
    } else {
        bail!("recommender.interval {value:?}: expected seconds or minutes")
    }
}
