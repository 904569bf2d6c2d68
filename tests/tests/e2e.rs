//! End-to-end tests against a real cluster with Tailor installed (see `hack/kind-e2e.sh`).
//!
//! Every test is `#[ignore]`d (plain `cargo test` has no cluster) and fails unless `TAILOR_E2E_KUBECONFIG` names
//! a kubeconfig:
//!
//! ```sh
//! TAILOR_E2E_KUBECONFIG=target/e2e/kubeconfig cargo test -p tailor-tests --test e2e -- --ignored --test-threads=1
//! ```
//!
//! `TAILOR_E2E_NAMESPACE` (default `tailor-system`) and `TAILOR_E2E_RELEASE` (default `tailor`) locate the
//! installed chart. Each test works in its own namespace and deletes it at the end. Run them one at a time:
//! the webhook-down test scales the webhook to zero for a moment (and the updater pauses while the webhook's
//! status Lease is stale).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};
use tailor_crds::VerticalPodAutoscaler;

/// How long a recommendation may take: metrics-server needs a scrape or two, the recommender a loop.
const RECOMMENDATION_TIMEOUT: Duration = Duration::from_secs(300);
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the updater may take once a recommendation exists: a few 10 s loops (hack/kind-e2e.sh sets
/// `updater.interval`), one eviction per loop, and the replacement pods' start.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(240);
const POLL: Duration = Duration::from_secs(3);
const IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The installed chart.
struct E2e {
    client: Client,
    /// Namespace of the Tailor release.
    system_namespace: String,
    release: String,
}

/// Connects to the cluster named by `TAILOR_E2E_KUBECONFIG`. Without one the test fails, loudly: a green
/// e2e run that never met a cluster would be a lie.
async fn e2e(test: &str) -> E2e {
    let Some(path) = std::env::var_os("TAILOR_E2E_KUBECONFIG") else {
        panic!(
            "{test}: no cluster given. Set TAILOR_E2E_KUBECONFIG to a cluster with Tailor installed \
             (hack/kind-e2e.sh creates one and runs these tests)"
        );
    };
    let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "reading TAILOR_E2E_KUBECONFIG {}: {e}",
            PathBuf::from(&path).display()
        )
    });
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    let client = Client::try_from(config).expect("a Kubernetes client");
    E2e {
        client,
        system_namespace: std::env::var("TAILOR_E2E_NAMESPACE")
            .unwrap_or_else(|_| "tailor-system".into()),
        release: std::env::var("TAILOR_E2E_RELEASE").unwrap_or_else(|_| "tailor".into()),
    }
}

impl E2e {
    /// A fresh namespace for one test.
    async fn namespace(&self, test: &str) -> Result<String> {
        let suffix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
            % 1_000_000;
        let name = format!("e2e-{test}-{suffix}");
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(name)
    }

    async fn drop_namespace(&self, name: &str) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(name, &DeleteParams::background())
            .await;
    }

    fn tailor_vpas(&self, ns: &str) -> Api<VerticalPodAutoscaler> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Tailor VPAs as untyped objects, so tests can send what the typed API would not.
    fn dynamic_vpas(&self, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "autoscaling.tailor.dev",
            "v1",
            "VerticalPodAutoscaler",
        ));
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    fn upstream_vpas(&self, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "autoscaling.k8s.io",
            "v1",
            "VerticalPodAutoscaler",
        ));
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    async fn create_vpa(&self, ns: &str, manifest: Value) -> Result<DynamicObject> {
        let obj: DynamicObject = serde_json::from_value(manifest)?;
        Ok(self
            .dynamic_vpas(ns)
            .create(&PostParams::default(), &obj)
            .await?)
    }

    /// A Deployment of `replicas` pause containers with requests 10m/20Mi and limits twice that. The container
    /// states the default resize policy (no restart for CPU or memory) so an in-place resize keeps it running.
    async fn create_deployment(&self, ns: &str, name: &str, replicas: i32) -> Result<()> {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "app",
                            "image": IMAGE,
                            "resizePolicy": [
                                {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                {"resourceName": "memory", "restartPolicy": "NotRequired"}
                            ],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "20Mi"},
                                "limits": {"cpu": "20m", "memory": "40Mi"}
                            }
                        }]
                    }
                }
            }
        }))?;
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &d)
            .await?;
        Ok(())
    }

    async fn running_pods(&self, ns: &str, app: &str) -> Result<Vec<Pod>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect())
    }

    /// Every pod of `app`, terminating or not.
    async fn all_pods(&self, ns: &str, app: &str) -> Result<Vec<Pod>> {
        Ok(Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?
            .items)
    }

    /// Waits until `replicas` pods of `app` run and returns them.
    async fn wait_running(&self, ns: &str, app: &str, replicas: usize) -> Result<Vec<Pod>> {
        wait_for(
            &format!("{replicas} running pods of {app}"),
            POD_TIMEOUT,
            || async {
                let pods = self.running_pods(ns, app).await?;
                Ok((pods.len() == replicas).then_some(pods))
            },
        )
        .await
    }

    /// Deletes the Deployment's pods and returns their replacements once they run.
    async fn recreate_pods(&self, ns: &str, app: &str, replicas: usize) -> Result<Vec<Pod>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        let old: Vec<String> = self
            .running_pods(ns, app)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        for name in &old {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await?;
        }
        wait_for(
            &format!("{replicas} new running pods of {app}"),
            POD_TIMEOUT,
            || async {
                let fresh: Vec<Pod> = self
                    .running_pods(ns, app)
                    .await?
                    .into_iter()
                    .filter(|p| p.metadata.name.as_ref().is_some_and(|n| !old.contains(n)))
                    .collect();
                Ok((fresh.len() >= replicas).then_some(fresh))
            },
        )
        .await
    }

    /// Waits until the VPA has a recommendation for container `app` and returns its target.
    async fn recommendation(&self, ns: &str, vpa: &str) -> Result<BTreeMap<String, Quantity>> {
        let api = self.tailor_vpas(ns);
        wait_for(
            &format!("a recommendation in VPA {ns}/{vpa}"),
            RECOMMENDATION_TIMEOUT,
            || async { Ok(target_of(&api.get(vpa).await?)) },
        )
        .await
    }

    async fn scale_webhook(&self, replicas: i32) -> Result<()> {
        let deployments =
            Api::<Deployment>::namespaced(self.client.clone(), &self.system_namespace);
        let name = format!("{}-admission", self.release);
        deployments
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await?;
        wait_for(
            &format!("{name} at {replicas} ready replicas"),
            POD_TIMEOUT,
            || async {
                let d = deployments.get(&name).await?;
                let status = d.status.unwrap_or_default();
                let ready = status.ready_replicas.unwrap_or(0);
                let total = status.replicas.unwrap_or(0);
                Ok((ready == replicas && total == replicas).then_some(()))
            },
        )
        .await
    }
}

/// The target of the recommendation for container `app`, when the recommender has provided one.
fn target_of(vpa: &VerticalPodAutoscaler) -> Option<BTreeMap<String, Quantity>> {
    let status = vpa.status.as_ref()?;
    let provided = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "RecommendationProvided" && c.status == "True");
    let rec = status
        .recommendation
        .as_ref()?
        .container_recommendations
        .iter()
        .flatten()
        .find(|r| r.container_name.as_deref() == Some("app"))?;
    (provided && rec.target.contains_key("cpu") && rec.target.contains_key("memory"))
        .then(|| rec.target.clone())
}

/// (cpu millicores, memory bytes) of the recommendation's lowerBound and upperBound for container `app`.
fn bounds_of(vpa: &VerticalPodAutoscaler) -> Result<((i64, i64), (i64, i64))> {
    let rec = vpa
        .status
        .as_ref()
        .and_then(|s| s.recommendation.as_ref())
        .and_then(|r| r.container_recommendations.as_ref())
        .and_then(|rs| {
            rs.iter()
                .find(|r| r.container_name.as_deref() == Some("app"))
        })
        .context("no recommendation for container app")?;
    let lower = rec.lower_bound.as_ref().context("no lowerBound")?;
    let upper = rec.upper_bound.as_ref().context("no upperBound")?;
    Ok((cpu_mem(lower)?, cpu_mem(upper)?))
}

/// Whether both resources of `x` lie within [lower, upper].
fn within(x: (i64, i64), (lower, upper): ((i64, i64), (i64, i64))) -> bool {
    (lower.0..=upper.0).contains(&x.0) && (lower.1..=upper.1).contains(&x.1)
}

/// Requests the test Deployment's pods are created with (before any VPA applies).
const ORIGINAL_REQUESTS: (i64, i64) = (10, 20 * 1024 * 1024);

/// Waits for the recommendation and checks that the original requests lie outside its bounds, so the updater
/// acts on the pods whatever their age. Returns the bounds.
async fn bounds_excluding_original(env: &E2e, ns: &str) -> Result<((i64, i64), (i64, i64))> {
    env.recommendation(ns, "web").await?;
    let bounds = bounds_of(&env.tailor_vpas(ns).get("web").await?)?;
    if within(ORIGINAL_REQUESTS, bounds) {
        bail!(
            "the original requests {ORIGINAL_REQUESTS:?} lie within the recommended bounds {bounds:?}: \
             the updater would wait for the pods to age, and this test would prove nothing"
        );
    }
    Ok(bounds)
}

/// Requests and limits (cpu millicores, memory bytes) of a pod's first container: as specified, and as the
/// kubelet reports them actuated in `status.containerStatuses[].resources`.
struct PodResources {
    spec_requests: (i64, i64),
    spec_limits: (i64, i64),
    actual_requests: Option<(i64, i64)>,
    restarts: i32,
}

fn pod_resources(pod: &Pod) -> Result<PodResources> {
    let (requests, limits) = container_resources(pod)?;
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "app"))
        .context("no status of container app")?;
    let actual_requests = match status.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(r) => Some(cpu_mem(r)?),
        None => None,
    };
    Ok(PodResources {
        spec_requests: cpu_mem(&requests)?,
        spec_limits: cpu_mem(&limits)?,
        actual_requests,
        restarts: status.restart_count,
    })
}

/// The original limit/request ratio of the test Deployment is 2 for both resources; updates keep it.
fn limits_in_proportion(requests: (i64, i64), limits: (i64, i64)) -> bool {
    (limits.0 - 2 * requests.0).abs() <= 1 && (limits.1 - 2 * requests.1).abs() <= 1
}

/// Polls `probe` until it yields a value or `timeout` passes; probe errors are retried, the last one reported.
async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if start.elapsed() > timeout {
            let why = last_error
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            bail!("timed out after {timeout:?} waiting for {what}{why}");
        }
        tokio::time::sleep(POLL).await;
    }
}

fn milli_cpu(q: &Quantity) -> Result<i64> {
    tailor_crds::quantity::milli_value(q).map_err(|e| anyhow!("cpu {q:?}: {e}"))
}

fn bytes(q: &Quantity) -> Result<i64> {
    tailor_crds::quantity::value(q).map_err(|e| anyhow!("memory {q:?}: {e}"))
}

/// (cpu millicores, memory bytes) of a resource list.
fn cpu_mem(list: &BTreeMap<String, Quantity>) -> Result<(i64, i64)> {
    let cpu = list.get("cpu").context("no cpu")?;
    let mem = list.get("memory").context("no memory")?;
    Ok((milli_cpu(cpu)?, bytes(mem)?))
}

fn container_resources(
    pod: &Pod,
) -> Result<(BTreeMap<String, Quantity>, BTreeMap<String, Quantity>)> {
    let c = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .context("pod without containers")?;
    let r = c.resources.clone().unwrap_or_default();
    Ok((r.requests.unwrap_or_default(), r.limits.unwrap_or_default()))
}

fn vpa_manifest(name: &str, target: &str, mode: &str) -> Value {
    json!({
        "apiVersion": "autoscaling.tailor.dev/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "updatePolicy": {"updateMode": mode}
        }
    })
}

/// Runs the body, deletes the namespace whatever happened, then fails with the body's error.
async fn in_namespace<F, Fut>(env: &E2e, test: &str, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let ns = env
        .namespace(test)
        .await
        .expect("creating the test namespace");
    let result = body(ns.clone()).await;
    env.drop_namespace(&ns).await;
    if let Err(e) = result {
        panic!("{test} failed in namespace {ns}: {e:#}");
    }
}

// ------------------------------------------------------------------------------------------------------

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
async fn new_pods_get_recommended_requests_and_proportional_limits() {
    let env = e2e("new_pods_get_recommended_requests_and_proportional_limits").await;
    let env = &env;
    in_namespace(env, "admit", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        let before = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let after = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        let pod = &pods[0];
        let (requests, limits) = container_resources(pod)?;
        let (req_cpu, req_mem) = cpu_mem(&requests)?;
        let (lim_cpu, lim_mem) = cpu_mem(&limits)?;
        // The recommender may have moved between reading the status and admitting the pod.
        let matches = |(cpu, mem): (i64, i64)| req_cpu == cpu && req_mem == mem;
        if !matches(before) && !matches(after) {
            bail!("pod requests ({req_cpu}m, {req_mem}) are not the recommendation (before {before:?}, after {after:?})");
        }
        // The original limit/request ratio is 2 for both resources.
        if (lim_cpu - 2 * req_cpu).abs() > 1 || (lim_mem - 2 * req_mem).abs() > 1 {
            bail!("limits ({lim_cpu}m, {lim_mem}) are not twice the requests ({req_cpu}m, {req_mem})");
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the admitted pod lacks the tailor.dev/updates annotation: {annotations:?}");
        }
        if annotations.contains_key("vpaUpdates") {
            bail!("Tailor wrote the upstream vpaUpdates annotation");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn off_mode_leaves_pods_alone() {
    let env = e2e("off_mode_leaves_pods_alone").await;
    let env = &env;
    in_namespace(env, "off", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off"))
            .await?;
        // Wait for a recommendation so the webhook would have something to apply.
        env.recommendation(&ns, "web").await?;
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let (requests, limits) = container_resources(&pods[0])?;
        let got = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        let want = ((10, 20 * 1024 * 1024), (20, 40 * 1024 * 1024));
        if got != want {
            bail!("an Off VPA changed the pod: (requests, limits) {got:?}, expected {want:?}");
        }
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if annotations.contains_key("tailor.dev/updates") {
            bail!("an Off VPA annotated the pod: {annotations:?}");
        }
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
        let upstream: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling.k8s.io/v1",
            "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "updatePolicy": {"updateMode": "Initial"}
            }
        }))?;
        env.upstream_vpas(&ns)
            .create(&PostParams::default(), &upstream)
            .await?;
        // Same name, same target, other group: both objects exist side by side.
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial"))
            .await?;
        env.recommendation(&ns, "web").await?;
        let pods = env.recreate_pods(&ns, "web", 1).await?;
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") || annotations.contains_key("vpaUpdates")
        {
            bail!("expected only Tailor's annotation on the admitted pod: {annotations:?}");
        }
        // Tailor never writes upstream objects: the upstream VPA has no status (no upstream recommender runs).
        let upstream = env.upstream_vpas(&ns).get("web").await?;
        if upstream
            .data
            .get("status")
            .is_some_and(|s| !s.is_null() && s != &json!({}))
        {
            bail!(
                "the upstream VPA got a status: {:?}",
                upstream.data["status"]
            );
        }
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

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn webhook_down_does_not_block_pod_creation() {
    let env = e2e("webhook_down_does_not_block_pod_creation").await;
    let env = &env;
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), &env.system_namespace);
    let name = format!("{}-admission", env.release);
    let replicas = deployments
        .get(&name)
        .await
        .expect("the admission Deployment")
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(2);
    in_namespace(env, "down", |ns| async move {
        env.scale_webhook(0).await?;
        let result = async {
            env.create_deployment(&ns, "web", 1).await?;
            env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
            let start = Instant::now();
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "bare", "labels": {"app": "bare"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "app", "image": IMAGE}]}
            }))?;
            Api::<Pod>::namespaced(env.client.clone(), &ns).create(&PostParams::default(), &pod).await?;
            // failurePolicy Ignore with a 5 s timeout: the create returns, at worst after the timeout.
            if start.elapsed() > Duration::from_secs(15) {
                bail!("creating a pod took {:?} with the webhook down", start.elapsed());
            }
            wait_for("the Deployment's pod to run without the webhook", POD_TIMEOUT, || async {
                Ok((!env.running_pods(&ns, "web").await?.is_empty()).then_some(()))
            })
            .await
        }
        .await;
        // Always bring the webhook back for the tests that follow.
        env.scale_webhook(replicas).await?;
        result
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn in_place_or_recreate_resizes_running_pods_without_restart() {
    let env = e2e("in_place_or_recreate_resizes_running_pods_without_restart").await;
    let env = &env;
    in_namespace(env, "inplace", |ns| async move {
        // Two replicas: the updater's default --min-replicas is 2.
        env.create_deployment(&ns, "web", 2).await?;
        let original: BTreeSet<String> = env
            .wait_running(&ns, "web", 2)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        // The VPA comes after the pods, so the webhook did not size them: they keep 10m/20Mi.
        env.create_vpa(&ns, vpa_manifest("web", "web", "InPlaceOrRecreate"))
            .await?;
        bounds_excluding_original(env, &ns).await?;
        let outcome = wait_for(
            "both pods of web resized in place (spec and status.containerStatuses[].resources)",
            UPDATE_TIMEOUT,
            || async {
                let pods = env.all_pods(&ns, "web").await?;
                // A pod that is not one of the originals means the updater evicted instead of resizing.
                if let Some(p) = pods.iter().find(|p| {
                    !p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|u| original.contains(u))
                }) {
                    return Ok(Some(Err(anyhow!(
                        "pod {:?} replaced an original one: the pods were recreated, not resized",
                        p.metadata.name
                    ))));
                }
                let mut resized = 0;
                for pod in &pods {
                    let r = pod_resources(pod)?;
                    if r.spec_requests != ORIGINAL_REQUESTS
                        && r.actual_requests == Some(r.spec_requests)
                    {
                        resized += 1;
                    }
                }
                Ok((resized == original.len()).then_some(Ok(pods)))
            },
        )
        .await?;
        let pods = outcome?;
        let bounds = bounds_of(&env.tailor_vpas(&ns).get("web").await?)?;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let r = pod_resources(pod)?;
            if r.restarts != 0 {
                bail!(
                    "pod {name} restarted {} times during the resize",
                    r.restarts
                );
            }
            if pod.metadata.deletion_timestamp.is_some() {
                bail!("pod {name} is being deleted");
            }
            if !within(r.spec_requests, bounds) {
                bail!(
                    "pod {name} was resized to {:?}, outside the recommended bounds {bounds:?}",
                    r.spec_requests
                );
            }
            if !limits_in_proportion(r.spec_requests, r.spec_limits) {
                bail!(
                    "pod {name}: limits {:?} are not twice the new requests {:?}",
                    r.spec_limits,
                    r.spec_requests
                );
            }
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn recreate_replaces_pods_with_recommended_requests() {
    let env = e2e("recreate_replaces_pods_with_recommended_requests").await;
    let env = &env;
    in_namespace(env, "recreate", |ns| async move {
        env.create_deployment(&ns, "web", 2).await?;
        let original: BTreeSet<String> = env
            .wait_running(&ns, "web", 2)
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        env.create_vpa(&ns, vpa_manifest("web", "web", "Recreate"))
            .await?;
        bounds_excluding_original(env, &ns).await?;
        // The updater evicts (one at a time: tolerance 0.5 of 2 replicas); the ReplicaSet recreates them and
        // the webhook gives the new pods the recommendation.
        let fresh = wait_for(
            "both original pods of web replaced by running pods",
            UPDATE_TIMEOUT,
            || async {
                let pods = env.all_pods(&ns, "web").await?;
                let originals_left = pods
                    .iter()
                    .any(|p| p.metadata.uid.as_ref().is_some_and(|u| original.contains(u)));
                let fresh: Vec<Pod> = env
                    .running_pods(&ns, "web")
                    .await?
                    .into_iter()
                    .filter(|p| !p.metadata.uid.as_ref().is_some_and(|u| original.contains(u)))
                    .collect();
                Ok((!originals_left && fresh.len() == original.len()).then_some(fresh))
            },
        )
        .await?;
        let bounds = bounds_of(&env.tailor_vpas(&ns).get("web").await?)?;
        for pod in &fresh {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let r = pod_resources(pod)?;
            if !within(r.spec_requests, bounds) {
                bail!(
                    "replacement pod {name} has requests {:?}, outside the recommended bounds {bounds:?}",
                    r.spec_requests
                );
            }
            if !limits_in_proportion(r.spec_requests, r.spec_limits) {
                bail!(
                    "replacement pod {name}: limits {:?} are not twice the requests {:?}",
                    r.spec_limits,
                    r.spec_requests
                );
            }
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            if !annotations.contains_key("tailor.dev/updates") {
                bail!("replacement pod {name} was not admitted by the webhook: {annotations:?}");
            }
        }
        Ok(())
    })
    .await;
}
