//! The dashboard in a real browser on the real control plane: 20 workloads in two namespaces, one of them
//! OOM-killed once; headless Chromium (hack/dashboard_browser.py) opens the fleet page and a workload page
//! through the chart's Service (the address `hack/cluster.sh status` prints) and checks them against `kubectl get tvpa` — the numbers,
//! the OOM on both pages, the usage chart with its target line, no console error, nothing loaded from
//! elsewhere — and keeps a screenshot of each under target/dashboard-e2e/. One workload runs in
//! `InPlaceOrRecreate`: its page must show the updater's in-place resizes (the events the updater records,
//! which the recommender watches), its pods as sized by Tailor, and their limits.

use super::*;

const PER_NAMESPACE: usize = 10;
/// The workload (`w1` of the first namespace) the updater resizes in place.
const RESIZED: usize = 1;

/// The kwok kubelet's switches for a pod using `cpu` and 120Mi, OOM-killed once when `oom`.
fn usage(cpu: &str, oom: bool) -> Value {
    let mut annotations =
        json!({"kwok.x-k8s.io/usage-cpu": cpu, "kwok.x-k8s.io/usage-memory": "120Mi"});
    if oom {
        annotations["tailor.dev/e2e-kubelet-oom"] = json!("once");
    }
    annotations
}

/// The dashboard's address through the chart's Service, as `hack/cluster.sh status` prints it: the API
/// server's service proxy (by `kubectl proxy`) to the Service, whose endpoint is the recommender process.
fn dashboard_url(env: &E2e) -> Result<String> {
    let Platform::HostProcesses(control) = &env.platform else {
        bail!("the dashboard test needs the local control plane (hack/e2e-local.sh)");
    };
    let out = std::process::Command::new(control)
        .arg("status")
        .output()
        .with_context(|| format!("running {} status", control.display()))?;
    let status = String::from_utf8_lossy(&out.stdout).into_owned();
    status
        .lines()
        .find_map(|l| l.strip_prefix("dashboard-service: "))
        .map(|u| u.trim().to_owned())
        .with_context(|| {
            format!(
                "no dashboard-service line in hack/cluster.sh status (the Service gets an endpoint only on a \
                 machine with an address besides loopback):\n{status}"
            )
        })
}

/// `(cpu millicores, memory bytes)` of the first container's target in the VPA's status.
fn status_target(v: &VerticalPodAutoscaler) -> Result<(i64, i64)> {
    cpu_mem(&target_of(v).context("no target yet")?)
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn the_dashboard_shows_the_fleet_in_a_real_browser() {
    let env = e2e("the_dashboard_shows_the_fleet_in_a_real_browser").await;
    let env = &env;
    in_namespace(env, "dash", |ns| async move {
        let other = format!("{ns}-b");
        let created: Namespace = serde_json::from_value(json!({"metadata": {"name": other}}))?;
        Api::<Namespace>::all(env.client.clone())
            .create(&PostParams::default(), &created)
            .await?;
        let result = run(env, &ns, &other).await;
        env.drop_namespace(&other).await;
        result
    })
    .await;
}

async fn run(env: &E2e, ns: &str, other: &str) -> Result<()> {
    let url = dashboard_url(env)?;
    let mut all = Vec::new();
    for (n, namespace) in [ns, other].iter().enumerate() {
        for i in 0..PER_NAMESPACE {
            let name = format!("w{i}");
            let cpu = format!("{}m", 50 + 20 * i + 100 * n);
            let oom = n == 0 && i == 0;
            // One workload the updater resizes in place (two replicas: its default minimum), so its
            // page shows the updater's actions, read from the events it records.
            let resized = n == 0 && i == RESIZED;
            let (replicas, mode) = if resized {
                (2, "InPlaceOrRecreate")
            } else {
                (1, "Off")
            };
            env.create_annotated_deployment(namespace, &name, replicas, usage(&cpu, oom))
                .await?;
            env.create_vpa(namespace, vpa_manifest(&name, &name, mode))
                .await?;
            all.push((namespace.to_string(), name));
        }
    }
    for (namespace, name) in &all {
        env.recommendation(namespace, name).await?;
    }
    // The dashboard follows each loop: wait until its JSON twin shows every status target and the OOM.
    let api = format!("{url}api/v1/fleet?q={ns}");
    let all = &all;
    let api = &api;
    let expect = wait_for("the dashboard to show every status target and the OOM", RECOMMENDATION_TIMEOUT, || async move {
        let mut expect = Vec::new();
        for (namespace, name) in all {
            let (cpu, memory) = status_target(&env.tailor_vpas(namespace).get(name).await?)?;
            expect.push(json!({"namespace": namespace, "vpa": name, "cpuMillicores": cpu, "memoryBytes": memory}));
        }
        let answer = fleet_json(api)?;
        let shown = answer["workloads"].as_array().cloned().unwrap_or_default();
        let same = expect.iter().all(|e| {
            shown.iter().any(|w| {
                w["namespace"] == e["namespace"] && w["vpa"] == e["vpa"]
                    && w["containers"][0]["target"]["cpuMillicores"] == e["cpuMillicores"]
                    && w["containers"][0]["target"]["memoryBytes"] == e["memoryBytes"]
            })
        });
        let oom = shown.iter().any(|w| w["namespace"] == ns && w["vpa"] == "w0" && w["oomsLastDay"].as_i64() >= Some(1));
        Ok((same && oom).then_some(expect))
    })
    .await?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let shots = root.join("target/dashboard-e2e");
    let expect_file = shots.join("expect.json");
    std::fs::create_dir_all(&shots)?;
    let open = json!({"namespace": ns, "vpa": "w3"});
    let doc = json!({"filter": ns, "workloads": expect, "oom": {"namespace": ns, "vpa": "w0"}, "open": open});
    std::fs::write(&expect_file, serde_json::to_vec_pretty(&doc)?)?;
    let out = std::process::Command::new(root.join("target/venv/bin/python"))
        .arg(root.join("hack/dashboard_browser.py"))
        .args(["--url", url.trim_end_matches('/'), "--expect"])
        .arg(&expect_file)
        .arg("--screenshots")
        .arg(&shots)
        .output()
        .context("running hack/dashboard_browser.py (hack/install-deps.sh installs its Python and Chromium)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    if !out.status.success() {
        bail!("the browser check failed:\n{text}");
    }
    // After the browser, which compares the pages with the status targets just read: the resize takes
    // longer, and the targets move on meanwhile.
    resized_workload_shows_its_actions(api, ns).await
}

/// The resized workload's JSON: once the updater has resized its pods in place, its last actions name the
/// resize (from the events the updater recorded, watched by the recommender), its pods count as sized, and
/// the pods' limits kept the Deployment's ratio to the requests.
async fn resized_workload_shows_its_actions(api: &str, ns: &str) -> Result<()> {
    let name = format!("w{RESIZED}");
    let name = &name;
    let shown = wait_for(
        "the resized workload's updater actions on the dashboard",
        UPDATE_TIMEOUT,
        || async move {
            let answer = fleet_json(api)?;
            let w = (answer["workloads"].as_array().into_iter().flatten())
                .find(|w| w["namespace"] == ns && w["vpa"] == name.as_str())
                .cloned();
            let resized = w.as_ref().is_some_and(|w| {
                (w["updaterActions"].as_array().into_iter().flatten())
                    .any(|a| a["reason"] == "InPlaceResizedByVPA")
            });
            Ok(w.filter(|_| resized))
        },
    )
    .await?;
    // Resized in place: sized by Tailor, though admitted before their VPA.
    let sized = wait_for(
        "the resized pods to count as sized",
        UPDATE_TIMEOUT,
        || async move {
            let answer = fleet_json(api)?;
            let done = (answer["workloads"].as_array().into_iter().flatten()).any(|w| {
                w["namespace"] == ns && w["vpa"] == name.as_str() && w["admittedUnsized"] == 0
            });
            Ok(done.then_some(answer))
        },
    )
    .await?;
    // The limits kept their ratio to the requests (2:1 in the Deployment) through the resize.
    let w = (sized["workloads"].as_array().into_iter().flatten())
        .find(|w| w["namespace"] == ns && w["vpa"] == name.as_str())
        .context("the resized workload")?;
    let (requests, limits) = (
        &w["containers"][0]["requests"],
        &w["containers"][0]["limits"],
    );
    for r in ["cpuMillicores", "memoryBytes"] {
        let (req, lim) = (requests[r].as_i64(), limits[r].as_i64());
        if req.is_none() || lim != req.map(|q| 2 * q) {
            bail!("{r}: limit {lim:?} for request {req:?}, not twice it: {w}");
        }
    }
    let on_pod = (shown["updaterActions"].as_array().into_iter().flatten()).any(|a| {
        a["reason"] == "InPlaceResizedByVPA"
            && a["object"].as_str().is_some_and(|o| o.starts_with("Pod/"))
    });
    if !on_pod {
        bail!("the resize is recorded on a pod: {shown}");
    }
    Ok(())
}

/// The dashboard's JSON answer at `url`.
fn fleet_json(url: &str) -> Result<Value> {
    let response = http_get(&url_host(url)?, &url_path(url)?)?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(serde_json::from_str(body)?)
}

/// `host:port` of an `http://` URL.
fn url_host(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").context("an http:// URL")?;
    Ok(rest.split('/').next().unwrap_or_default().to_owned())
}

/// The path (and query) of an `http://` URL.
fn url_path(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").context("an http:// URL")?;
    Ok(rest.find('/').map_or("/".into(), |i| rest[i..].to_owned()))
}
