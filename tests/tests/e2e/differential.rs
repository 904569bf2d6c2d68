//! Live differential (needs `hack/cluster.sh up --with-upstream`): twin Deployments with the same usage
//! schedule, one under a Tailor VPA and one under an upstream VPA; both recommenders run on the same loop
//! period (5 s, half metrics-server's 10 s resolution). Every distinct target (and uncapped target) either
//! writes must be written by the other too, in the same order, and the last recommendations must be equal in
//! every field; the test prints how many of the distinct recommendations were equal loop for loop. Midway both
//! recommenders are restarted from checkpoints holding the same samples, with metrics-server paused so that
//! neither reads a scrape the other does not, and Tailor's with `--restore-open-memory-windows=false`:
//! upstream leaves the current memory-peak window out of its checkpoint and loses it on restart, Tailor by
//! default continues it (README row "Checkpoint annotation `tailor.dev/open-memory-windows`"), which would
//! keep memory apart after the restart. Both run with upstream's rule for containers without samples
//! (Tailor's `--recommend-without-samples`): upstream publishes the pod minimum before the first sample, which
//! Tailor by default does not (DEVIATIONS.md), and the comparison starts at the twins' first pod. The last
//! recommendations must also be written alike, quantity string for quantity string.

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
/// The phase before which both recommenders are restarted.
const RESTART_BEFORE: usize = 3;
/// The README row that explains memory differences after a restart.
const OPEN_WINDOWS: &str = "README: Checkpoint annotation `tailor.dev/open-memory-windows`";

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

/// The quantity strings of container `app`'s recommendation, as written: `(field, resource, text)`.
fn quantity_strings(object: &Value) -> Vec<(String, String, String)> {
    let Some(rec) = object.pointer("/status/recommendation/containerRecommendations/0") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for f in FIELDS {
        for (resource, q) in rec[f].as_object().into_iter().flatten() {
            out.push((f.to_string(), resource.clone(), q.to_string()));
        }
    }
    out
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

/// (totalSamplesCount, lastSampleStart) of the checkpoint of VPA `twin`, container `app`, in `group`.
async fn checkpoint_samples(env: &E2e, ns: &str, group: &str) -> Result<Option<(i64, String)>> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        group,
        "v1",
        "VerticalPodAutoscalerCheckpoint",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &ar);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|c| {
            c.data.pointer("/spec/vpaObjectName") == Some(&json!("twin"))
                && c.data.pointer("/spec/containerName") == Some(&json!("app"))
        })
        .and_then(|c| {
            let n = c.data.pointer("/status/totalSamplesCount")?.as_i64()?;
            let last = c
                .data
                .pointer("/status/lastSampleStart")?
                .as_str()?
                .to_owned();
            Some((n, last))
        }))
}

/// Stops or starts a process beside Tailor: on the local control plane `hack/cluster.sh PREFIX… start|stop
/// NAME`, on kind its Deployment in kube-system scaled to 1 or 0.
async fn switch(
    env: &E2e,
    (prefix, name): (&[&str], &str),
    deployment: &str,
    on: bool,
) -> Result<()> {
    match &env.platform {
        Platform::HostProcesses(control) => {
            let verb = if on { "start" } else { "stop" };
            let out = std::process::Command::new(control)
                .args(prefix)
                .args([verb, name])
                .output()?;
            if !out.status.success() {
                bail!("{name} {verb}: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        Platform::Pods => {
            Api::<Deployment>::namespaced(env.client.clone(), "kube-system")
                .patch(
                    deployment,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": i32::from(on)}})),
                )
                .await?;
        }
    }
    Ok(())
}

/// Stops or starts upstream's recommender.
async fn upstream_recommender(env: &E2e, running: bool) -> Result<()> {
    switch(
        env,
        (&["upstream"], "recommender"),
        "vpa-recommender",
        running,
    )
    .await
}

/// Tailor's flag that restarts as upstream does (its default continues the open memory windows; README row
/// "Checkpoint annotation `tailor.dev/open-memory-windows`").
const UPSTREAM_RESTART: &str = "--restore-open-memory-windows=false";
/// Tailor's flag that recommends for containers without samples as upstream does (DEVIATIONS.md).
const UPSTREAM_EMPTY: &str = "--recommend-without-samples";
/// How long both recommenders get to agree once metrics-server is paused (their checkpoints are written within
/// a loop and `--checkpoints-max-age`, 20 s here), and how many pauses are tried.
const PAUSE_AGREEMENT: Duration = Duration::from_secs(90);
const PAUSE_TRIES: u32 = 3;

/// Returns 7 s after metrics-server's next scrape of namespace `ns`'s pods (its PodMetrics `timestamp` changes;
/// scrapes are 10 s apart, hack/cluster.sh): both recommenders poll every 5 s, so both have read that scrape and
/// neither the next. Pausing metrics-server at a random moment instead could fall between the two processes'
/// reads of one scrape, and the one that read it keeps a sample the other never gets.
async fn just_after_both_read_a_scrape(env: &E2e, ns: &str) -> Result<()> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "metrics.k8s.io",
        "v1beta1",
        "PodMetrics",
    ));
    let metrics: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &ar);
    let scraped = || async {
        Ok::<_, anyhow::Error>(
            metrics
                .list(&ListParams::default())
                .await?
                .items
                .first()
                .and_then(|m| m.data.get("timestamp")?.as_str().map(str::to_owned)),
        )
    };
    // Polled often (not every POLL): the scrape must be seen within a fraction of its 10 s.
    let first = scraped().await?;
    let started = Instant::now();
    while started.elapsed() < POD_TIMEOUT {
        let now = scraped().await?;
        if now.is_some() && now != first {
            tokio::time::sleep(Duration::from_secs(7)).await;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("no new metrics-server scrape of namespace {ns} within {POD_TIMEOUT:?}")
}

/// Stops or starts metrics-server: its host process (local control plane) or its Deployment (kind), and waits
/// until the metrics of namespace `ns`'s pods (of the nodes without `ns`) are gone or served.
async fn metrics_server(env: &E2e, ns: Option<&str>, serving: bool) -> Result<()> {
    switch(env, (&[], "metrics-server"), "metrics-server", serving).await?;
    let kind = if ns.is_some() {
        "PodMetrics"
    } else {
        "NodeMetrics"
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", kind));
    let metrics: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
        None => Api::all_with(env.client.clone(), &ar),
    };
    let what = if serving { "serving" } else { "gone" };
    wait_for(&format!("metrics-server {what}"), POD_TIMEOUT, || async {
        let served = metrics
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| !l.items.is_empty());
        Ok((served == serving).then_some(()))
    })
    .await
}

/// Stops Tailor's recommender and writes [`UPSTREAM_EMPTY`] (with `upstream_empty`) and
/// `--restore-open-memory-windows=false` (with `upstream_restart`) into the args of its Deployment (or takes
/// them out), which its next copy starts with: [`E2e::scale_component`] starts it (host processes read the
/// Deployment's args when started). Returns how many copies ran, to scale back to.
async fn stop_tailor_recommender_with(
    env: &E2e,
    upstream_empty: bool,
    upstream_restart: bool,
) -> Result<i32> {
    let running = env
        .instances("recommender")
        .await?
        .iter()
        .filter(|i| i.running)
        .count();
    env.scale_component("recommender", 0).await?;
    let deployment = env.component("recommender").await?;
    let container = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .context("the recommender Deployment has no container")?;
    let mut args: Vec<String> = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| {
            !a.starts_with("--restore-open-memory-windows") && !a.starts_with(UPSTREAM_EMPTY)
        })
        .collect();
    if upstream_empty {
        args.push(UPSTREAM_EMPTY.into());
    }
    if upstream_restart {
        args.push(UPSTREAM_RESTART.into());
    }
    Api::<Deployment>::namespaced(env.client.clone(), &env.system_namespace)
        .patch(
            &deployment.metadata.name.clone().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": container.name, "args": args}
            ]}}}})),
        )
        .await?;
    Ok(i32::try_from(running).unwrap_or(1).max(1))
}

/// Restarts both recommenders so that they count the same samples. metrics-server is stopped first; once
/// both checkpoints hold the same samples (its last scrape) and both VPAs the same recommendation (failing the
/// test if they never do), upstream's recommender is stopped and Tailor's restarted with [`UPSTREAM_RESTART`];
/// metrics-server is started again and upstream's recommender as soon as it serves. Neither checkpoint records
/// a container's last CPU sample, so a first loop after a restart that read the scrape before it would count
/// it twice, one process and not the other. And upstream's first loop must see samples: in a run where
/// upstream restarted while the metrics API was down, its recommendation followed usage for two loops after
/// the API came back and then stopped changing (its checkpoints kept being written; no error in its log).
/// Returns the recommendation both held before the restart.
async fn restart_both_in_step(
    env: &E2e,
    ns: &str,
    ours: &Api<DynamicObject>,
    theirs: &Api<DynamicObject>,
) -> Result<State> {
    // A pause can fall between the two processes' reads of the last scrape: then neither can catch up, and
    // metrics-server runs one scrape more before the next try.
    let mut tries = 0;
    let (agreed, paused) = loop {
        tries += 1;
        just_after_both_read_a_scrape(env, ns).await?;
        metrics_server(env, Some(ns), false).await?;
        let paused = Instant::now();
        let last_report = std::cell::Cell::new(paused);
        let agreed = wait_for(
            "both checkpoints holding the same samples and both VPAs the same recommendation",
            PAUSE_AGREEMENT,
            || async {
                let a = checkpoint_samples(env, ns, "autoscaling.tailor.dev").await?;
                let b = checkpoint_samples(env, ns, "autoscaling.k8s.io").await?;
                let (ours, theirs) = (
                    state_of(&ours.get("twin").await?.data)?,
                    state_of(&theirs.get("twin").await?.data)?,
                );
                let same = a.is_some() && a == b && ours.is_some() && ours == theirs;
                if !same && last_report.get().elapsed() > Duration::from_secs(30) {
                    last_report.set(Instant::now());
                    eprintln!(
                        "{:.0}s after pausing metrics-server, not yet the same: checkpointed samples (tailor, \
                         upstream) {:?}, recommendations {ours:?} and {theirs:?}",
                        paused.elapsed().as_secs_f64(),
                        (a, b)
                    );
                }
                Ok(if same { ours } else { None })
            },
        )
        .await;
        match agreed {
            Ok(agreed) => break (agreed, paused),
            Err(e) if tries >= PAUSE_TRIES => return Err(e),
            Err(e) => {
                eprintln!("pause {tries}: {e:#}; one more scrape and again");
                metrics_server(env, Some(ns), true).await?;
                tokio::time::sleep(Duration::from_secs(12)).await;
            }
        }
    };
    eprintln!(
        "both agreed {:.0}s after pausing metrics-server: restarting both",
        paused.elapsed().as_secs_f64()
    );
    upstream_recommender(env, false).await?;
    let replicas = stop_tailor_recommender_with(env, true, true).await?;
    metrics_server(env, Some(ns), true).await?;
    env.scale_component("recommender", replicas).await?;
    upstream_recommender(env, true).await?;
    Ok(agreed)
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn both_recommenders_write_the_same_recommendations_live() {
    let env = e2e("both_recommenders_write_the_same_recommendations_live").await;
    let env = &env;
    in_namespace(env, "differential", |ns| async move {
        let result = match stop_tailor_recommender_with(env, true, false).await {
            Ok(replicas) => match env.scale_component("recommender", replicas).await {
                Ok(()) => run_twins(env, ns.clone()).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // Whatever happened, the later tests get Tailor's recommender with its own flags again, and
        // metrics-server.
        let restored = match stop_tailor_recommender_with(env, false, false).await {
            Ok(replicas) => env.scale_component("recommender", replicas).await,
            Err(e) => Err(e),
        };
        let serving = metrics_server(env, None, true).await;
        result.and(restored).and(serving)
    })
    .await;
}

/// The twins under both VPAs through the usage schedule, with a restart of both recommenders.
async fn run_twins(env: &E2e, ns: String) -> Result<()> {
    {
        // The VPAs first: both recommenders then see the pods' samples from the first one.
        env.create_vpa(&ns, vpa_manifest("twin", "twin-tailor", "Off"))
            .await?;
        let mut upstream = vpa_manifest("twin", "twin-upstream", "Off");
        upstream["apiVersion"] = json!("autoscaling.k8s.io/v1");
        env.upstream_vpas(&ns)
            .create(&PostParams::default(), &serde_json::from_value(upstream)?)
            .await
            .context(
                "upstream VPA's CRDs are not installed (hack/cluster.sh up --with-upstream)",
            )?;
        let first = (SCHEDULE[0].0, SCHEDULE[0].1);
        env.create_deployment_from(&ns, twin("twin-tailor", first))
            .await?;
        env.create_deployment_from(&ns, twin("twin-upstream", first))
            .await?;
        let mut pods = Vec::new();
        for app in ["twin-tailor", "twin-upstream"] {
            let p = env.wait_running(&ns, app, 1).await?;
            pods.push(p[0].metadata.name.clone().context("pod without a name")?);
        }
        let pod_api = Api::<Pod>::namespaced(env.client.clone(), &ns);
        let tailor_api = env.dynamic_vpas(&ns);
        let upstream_api = env.upstream_vpas(&ns);
        let (mut ours, mut theirs): (Vec<State>, Vec<State>) = (Vec::new(), Vec::new());
        // Lengths of both sequences when the recommenders were restarted.
        let mut restart_at = (0, 0);
        let record = |seq: &mut Vec<State>, s: Option<State>| {
            if let Some(s) = s
                && seq.last() != Some(&s)
            {
                seq.push(s);
            }
        };
        for (i, (cpu, memory, secs)) in SCHEDULE.iter().enumerate() {
            if i == RESTART_BEFORE {
                // Recorded as both held it when their checkpoints agreed: the old Tailor leader may finish
                // one more loop while it is replaced, and that loop counts as after the restart.
                let agreed = restart_both_in_step(env, &ns, &tailor_api, &upstream_api).await?;
                record(&mut ours, Some(agreed.clone()));
                record(&mut theirs, Some(agreed));
                restart_at = (ours.len(), theirs.len());
            }
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
                record(
                    &mut theirs,
                    state_of(&upstream_api.get("twin").await?.data)?,
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        // Let both finish their last loop on the last samples, still recording.
        let until = Instant::now() + Duration::from_secs(12);
        while Instant::now() < until {
            record(&mut ours, state_of(&tailor_api.get("twin").await?.data)?);
            record(
                &mut theirs,
                state_of(&upstream_api.get("twin").await?.data)?,
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let show = |seq: &[State]| {
            seq.iter()
                .map(|s| format!("  {s:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let differ = |why: &str| {
            anyhow!(
                "{why} ({FIELDS:?}, each (millicores, bytes); restart after {restart_at:?}):\ntailor:\n{}\nupstream:\n{}",
                show(&ours),
                show(&theirs)
            )
        };
        // Before the restart: the targets (target, uncappedTarget), state by state. The bounds follow the
        // samples' count and span, and each process reads metrics.k8s.io on its own clock: a scrape one reads
        // a loop later than the other moves its bounds a loop later (seen about once in ten loops), so the
        // bounds are counted, and must agree again by the restart.
        let targets = |seq: &[State]| {
            let mut out: Vec<[(i64, i64); 2]> = Vec::new();
            for s in seq {
                let t = [s[0], s[3]];
                if out.last() != Some(&t) {
                    out.push(t);
                }
            }
            out
        };
        let (before_ours, before_theirs) = (&ours[..restart_at.0], &theirs[..restart_at.1]);
        if targets(before_ours) != targets(before_theirs) {
            return Err(differ("the targets differ before the restart"));
        }
        // After it both start from the same checkpoints and read the same scrapes (Tailor's recommender
        // restarted with UPSTREAM_RESTART): the targets again state by state, and every field at the end.
        let (after_ours, after_theirs) = (&ours[restart_at.0..], &theirs[restart_at.1..]);
        if targets(after_ours) != targets(after_theirs) {
            return Err(differ("the targets differ after the restart"));
        }
        if ours.last() != theirs.last() {
            return Err(differ("the last recommendations differ"));
        }
        let (ours_text, theirs_text) = (
            quantity_strings(&tailor_api.get("twin").await?.data),
            quantity_strings(&upstream_api.get("twin").await?.data),
        );
        if ours_text != theirs_text {
            bail!(
                "the last recommendations are written differently: tailor {ours_text:?}, upstream {theirs_text:?}"
            );
        }
        // Loop for loop where both wrote as many recommendations, else the common prefix.
        let equal = if ours.len() == theirs.len() {
            ours.iter().zip(&theirs).filter(|(a, b)| a == b).count()
        } else {
            ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count()
        };
        let total = theirs.len().max(ours.len());
        eprintln!(
            "live differential: {equal}/{total} recommendations equal (a restart of both included; Tailor's with \
             {UPSTREAM_RESTART}, without which memory may differ after it where {OPEN_WINDOWS} says)"
        );
        if equal != total {
            let samples = (
                checkpoint_samples(env, &ns, "autoscaling.tailor.dev").await?,
                checkpoint_samples(env, &ns, "autoscaling.k8s.io").await?,
            );
            eprintln!("tailor:\n{}\nupstream:\n{}", show(&ours), show(&theirs));
            eprintln!("{}", sample_count_explained(&samples));
        }
        if total < SCHEDULE.len() {
            bail!(
                "only {total} distinct recommendations over {} usage phases",
                SCHEDULE.len()
            );
        }
        Ok(())
    }
}

/// A checkpoint's (totalSamplesCount, lastSampleStart).
type Samples = (i64, String);

/// Why the bounds may stay a sample apart after the restart, from both checkpoints' (totalSamplesCount,
/// lastSampleStart). Neither checkpoint keeps a container's last CPU sample time (upstream's
/// `ContainerState.lastCPUSampleStart`, Tailor's `last_cpu_sample_start`: both start from zero in a new
/// process), only the aggregate's: a recommender whose first loop after the restart comes before
/// metrics-server's next scrape reads the last scrape before the restart again and counts it a second time,
/// and the bounds follow the sample count. The two restart a few seconds apart, so one may do so and not the
/// other: then the counts differ by one and the last sample is the same.
fn sample_count_explained(samples: &(Option<Samples>, Option<Samples>)) -> String {
    match samples {
        (Some((ours, our_last)), Some((theirs, their_last))) if our_last != their_last => format!(
            "the checkpoints were last written at different scrapes (tailor {ours} samples to {our_last}, \
             upstream {theirs} to {their_last}): their counts cannot say whether a scrape was counted twice"
        ),
        (Some((ours, last)), Some((theirs, _))) if ours == theirs => {
            format!(
                "checkpointed samples equal ({ours}, last {last}): no sample-count difference to explain"
            )
        }
        (Some((ours, our_last)), Some((theirs, their_last)))
            if our_last == their_last && (ours - theirs).abs() == 1 =>
        {
            let who = if theirs > ours { "upstream" } else { "Tailor" };
            format!(
                "explained: {who} counted one scrape twice across the restart (samples tailor {ours}, upstream \
                 {theirs}, the same last sample {our_last}): its first loop after the restart re-read the last \
                 scrape before it, which no checkpoint marks as read per container"
            )
        }
        other => format!(
            "not explained by a re-read scrape: checkpointed samples (tailor, upstream) {other:?}"
        ),
    }
}
