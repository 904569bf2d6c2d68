//! Live differential (needs `hack/cluster.sh up --with-upstream`): twin Deployments with the same usage
//! schedule, one under a Tailor VPA and one under an upstream VPA; both recommenders run on the same loop
//! period (5 s, half metrics-server's 10 s resolution, so each sees every sample once). Every distinct
//! recommendation either writes — target, lowerBound, upperBound, uncappedTarget — must be written by the
//! other too, in the same order.

use super::*;

/// The usage schedule: (cpu, memory, how long). Steady, a step up, a step down, a spike, steady.
/// Three metrics-server scrapes or more per phase.
const SCHEDULE: [(&str, &str, u64); 5] = [
    ("200m", "300Mi", 40),
    ("600m", "500Mi", 30),
    ("250m", "350Mi", 30),
    ("1500m", "900Mi", 20),
    ("250m", "350Mi", 30),
];
const FIELDS: [&str; 4] = ["target", "lowerBound", "upperBound", "uncappedTarget"];

/// One recommendation for container `app`: (cpu millicores, memory bytes) of each of [`FIELDS`].
type State = Vec<(i64, i64)>;

fn state_of(object: &Value) -> Result<Option<State>> {
    let Some(rec) = object.pointer("/status/recommendation/containerRecommendations/0") else {
        return Ok(None);
    };
    FIELDS
        .iter()
        .map(|f| {
            let list: BTreeMap<String, Quantity> =
                serde_json::from_value(rec[f].clone()).with_context(|| format!("{f} of {rec}"))?;
            cpu_mem(&list)
        })
        .collect::<Result<State>>()
        .map(Some)
}

fn twin(name: &str, usage: (&str, &str)) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "kwok.x-k8s.io/usage-cpu": usage.0,
                    "kwok.x-k8s.io/usage-memory": usage.1
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
async fn both_recommenders_write_the_same_recommendations_live() {
    let env = e2e("both_recommenders_write_the_same_recommendations_live").await;
    let env = &env;
    in_namespace(env, "differential", |ns| async move {
        // The VPAs first: both recommenders then see the pods' samples from the first one.
        env.create_vpa(&ns, vpa_manifest("twin", "twin-tailor", "Off")).await?;
        let mut upstream = vpa_manifest("twin", "twin-upstream", "Off");
        upstream["apiVersion"] = json!("autoscaling.k8s.io/v1");
        env.upstream_vpas(&ns)
            .create(&PostParams::default(), &serde_json::from_value(upstream)?)
            .await
            .context("upstream VPA's CRDs are not installed (hack/cluster.sh up --with-upstream)")?;
        let first = (SCHEDULE[0].0, SCHEDULE[0].1);
        env.create_deployment_from(&ns, twin("twin-tailor", first)).await?;
        env.create_deployment_from(&ns, twin("twin-upstream", first)).await?;
        let mut pods = Vec::new();
        for app in ["twin-tailor", "twin-upstream"] {
            let p = env.wait_running(&ns, app, 1).await?;
            pods.push(p[0].metadata.name.clone().context("pod without a name")?);
        }
        let pod_api = Api::<Pod>::namespaced(env.client.clone(), &ns);
        let tailor_api = env.dynamic_vpas(&ns);
        let upstream_api = env.upstream_vpas(&ns);
        let (mut ours, mut theirs): (Vec<State>, Vec<State>) = (Vec::new(), Vec::new());
        let record = |seq: &mut Vec<State>, s: Option<State>| {
            if let Some(s) = s
                && seq.last() != Some(&s)
            {
                seq.push(s);
            }
        };
        for (i, (cpu, memory, secs)) in SCHEDULE.iter().enumerate() {
            if i > 0 {
                let patch = json!({"metadata": {"annotations": {
                    "kwok.x-k8s.io/usage-cpu": cpu, "kwok.x-k8s.io/usage-memory": memory
                }}});
                for pod in &pods {
                    pod_api
                        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                }
            }
            let until = Instant::now() + Duration::from_secs(*secs);
            while Instant::now() < until {
                record(&mut ours, state_of(&tailor_api.get("twin").await?.data)?);
                record(&mut theirs, state_of(&upstream_api.get("twin").await?.data)?);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        // Let both finish their last loop on the last samples.
        tokio::time::sleep(Duration::from_secs(12)).await;
        record(&mut ours, state_of(&tailor_api.get("twin").await?.data)?);
        record(&mut theirs, state_of(&upstream_api.get("twin").await?.data)?);
        let equal = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        let total = theirs.len().max(ours.len());
        eprintln!("live differential: {equal}/{total} recommendations equal");
        if ours != theirs {
            let show = |seq: &[State]| {
                seq.iter()
                    .map(|s| format!("  {s:?}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            bail!(
                "the recommenders differ ({FIELDS:?}, each (millicores, bytes)):\ntailor:\n{}\nupstream:\n{}",
                show(&ours),
                show(&theirs)
            );
        }
        if total < SCHEDULE.len() {
            bail!("only {total} distinct recommendations over {} usage phases", SCHEDULE.len());
        }
        Ok(())
    })
    .await;
}
