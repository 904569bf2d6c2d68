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
//! installed chart, installed with hack/kind-values.yaml (leader election on, the webhook's feature gates).
//! Each test works in its own namespace and deletes it at the end. Run them one at a time: some disturb
//! Tailor itself for a moment — the webhook-down test scales the webhook to zero (and the updater pauses while
//! the webhook's status Lease is stale), the restart and failover tests delete recommender pods, the
//! certificate test rotates the webhook's certificate — and each restores what it changed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
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
/// A shell for the OOM test's container.
const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1";
/// The recommender's leader Lease (chart value `recommender.leaderElection.leaseName`).
const RECOMMENDER_LEASE: &str = "tailor-recommender";
/// How long a recommender pod may take to start and take the lease (image, caches, a retry period).
const LEADER_TIMEOUT: Duration = Duration::from_secs(180);
/// Failover after the leader's pod is deleted: the lease is released on SIGTERM and taken within a retry
/// period (2 s); were it not released, within the lease duration (15 s). Plus the poll interval.
const FAILOVER_LIMIT: Duration = Duration::from_secs(15 + 5);
/// Samples a checkpoint must hold before the restart test restarts the recommender (a recommender starting
/// from nothing has one or two after its first loop).
const MIN_SAMPLES: i64 = 4;
const MI: i64 = 1024 * 1024;

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
        self.scale_component("admission", replicas).await
    }

    /// The Deployment of a Tailor component (`recommender`, `updater`, `admission`).
    async fn component(&self, component: &str) -> Result<Deployment> {
        let name = format!("{}-{component}", self.release);
        Api::<Deployment>::namespaced(self.client.clone(), &self.system_namespace)
            .get(&name)
            .await
            .with_context(|| format!("Deployment {}/{name}", self.system_namespace))
    }

    /// Scales a Tailor component and waits until exactly `replicas` pods are ready.
    async fn scale_component(&self, component: &str, replicas: i32) -> Result<()> {
        let deployments =
            Api::<Deployment>::namespaced(self.client.clone(), &self.system_namespace);
        let name = format!("{}-{component}", self.release);
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

    /// The pods of a Tailor component (by its Deployment's selector), terminating ones included.
    async fn component_pods(&self, component: &str) -> Result<Vec<Pod>> {
        let d = self.component(component).await?;
        let selector = d
            .spec
            .and_then(|s| s.selector.match_labels)
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        Ok(
            Api::<Pod>::namespaced(self.client.clone(), &self.system_namespace)
                .list(&ListParams::default().labels(&selector))
                .await?
                .items,
        )
    }

    /// The recommender's leader Lease.
    async fn recommender_lease(&self) -> Result<Lease> {
        Api::<Lease>::namespaced(self.client.clone(), &self.system_namespace)
            .get(RECOMMENDER_LEASE)
            .await
            .with_context(|| {
                format!(
                    "the recommender's leader Lease {}/{RECOMMENDER_LEASE} (hack/kind-values.yaml turns \
                     leader election on)",
                    self.system_namespace
                )
            })
    }

    /// Waits until a running recommender other than those in `not` holds the lease; returns its name and
    /// when it acquired the lease.
    async fn wait_for_new_leader(
        &self,
        not: &[String],
        timeout: Duration,
    ) -> Result<(String, Timestamp)> {
        wait_for(
            &format!("a recommender other than {not:?} holding the leader lease"),
            timeout,
            || async {
                let spec = self.recommender_lease().await?.spec.unwrap_or_default();
                let holder = spec.holder_identity.unwrap_or_default();
                if holder.is_empty() || not.contains(&holder) {
                    return Ok(None);
                }
                let running =
                    self.component_pods("recommender").await?.iter().any(|p| {
                        p.metadata.name.as_deref() == Some(holder.as_str()) && is_running(p)
                    });
                Ok(running
                    .then_some(spec.acquire_time)
                    .flatten()
                    .map(|t| (holder.clone(), t.0)))
            },
        )
        .await
    }

    /// Tailor checkpoints as untyped objects.
    fn checkpoints(&self, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "autoscaling.tailor.dev",
            "v1",
            "VerticalPodAutoscalerCheckpoint",
        ));
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    /// Waits until checkpoint `name` was written after `after` (by its `lastUpdateTime`); returns its sample
    /// count.
    async fn checkpoint_written_after(
        &self,
        ns: &str,
        name: &str,
        after: Timestamp,
    ) -> Result<i64> {
        let checkpoints = self.checkpoints(ns);
        wait_for(
            &format!("checkpoint {ns}/{name} written after {after}"),
            Duration::from_secs(120),
            || async {
                let Some(cp) = checkpoints.get_opt(name).await? else {
                    return Ok(None);
                };
                Ok(last_update_of(&cp)
                    .filter(|t| *t > after)
                    .and_then(|_| samples_of(&cp)))
            },
        )
        .await
    }

    /// Creates a Deployment from a manifest.
    async fn create_deployment_from(&self, ns: &str, manifest: Value) -> Result<()> {
        let d: Deployment = serde_json::from_value(manifest)?;
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &d)
            .await?;
        Ok(())
    }

    /// Why ReplicaSets of the namespace cannot create pods (their `ReplicaFailure` conditions), for error
    /// messages.
    async fn replica_failures(&self, ns: &str) -> String {
        let Ok(list) = Api::<ReplicaSet>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default())
            .await
        else {
            return String::new();
        };
        let failures: Vec<String> = list
            .items
            .iter()
            .flat_map(|rs| {
                let name = rs.metadata.name.clone().unwrap_or_default();
                rs.status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .filter(|c| c.type_ == "ReplicaFailure" && c.status == "True")
                    .map(move |c| format!("{name}: {}", c.message.clone().unwrap_or_default()))
            })
            .collect();
        if failures.is_empty() {
            String::new()
        } else {
            format!(" (ReplicaSet failures: {})", failures.join("; "))
        }
    }

    /// [`E2e::recreate_pods`], naming why the ReplicaSet could not create the new pods when it times out.
    async fn recreate_pods_explained(
        &self,
        ns: &str,
        app: &str,
        replicas: usize,
    ) -> Result<Vec<Pod>> {
        match self.recreate_pods(ns, app, replicas).await {
            Ok(pods) => Ok(pods),
            Err(e) => {
                let why = self.replica_failures(ns).await;
                Err(anyhow!("{e:#}{why}"))
            }
        }
    }
}

fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// `status.totalSamplesCount` of a checkpoint.
fn samples_of(cp: &DynamicObject) -> Option<i64> {
    cp.data.pointer("/status/totalSamplesCount")?.as_i64()
}

/// `status.lastUpdateTime` of a checkpoint.
fn last_update_of(cp: &DynamicObject) -> Option<Timestamp> {
    cp.data
        .pointer("/status/lastUpdateTime")?
        .as_str()?
        .parse()
        .ok()
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

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn recommender_restart_restores_from_checkpoints() {
    let env = e2e("recommender_restart_restores_from_checkpoints").await;
    let env = &env;
    in_namespace(env, "restart", |ns| async move {
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Off")).await?;
        let checkpoints = env.checkpoints(&ns);
        let before = wait_for(
            &format!("checkpoint web-app with at least {MIN_SAMPLES} samples"),
            RECOMMENDATION_TIMEOUT,
            || async {
                let cp = checkpoints.get_opt("web-app").await?;
                Ok(cp.as_ref().and_then(samples_of).filter(|&n| n >= MIN_SAMPLES))
            },
        )
        .await?;
        // SIGTERM to every recommender: final checkpoints, lease released; new pods start from the API.
        let old: Vec<String> = env
            .component_pods("recommender")
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        if old.is_empty() {
            bail!("no recommender pod to restart");
        }
        let pods = Api::<Pod>::namespaced(env.client.clone(), &env.system_namespace);
        for name in &old {
            pods.delete(name, &DeleteParams::default()).await?;
        }
        let (leader, acquired) = env.wait_for_new_leader(&old, LEADER_TIMEOUT).await?;
        // Only the new leader writes after it acquired the lease (the old one released it first).
        let after = env.checkpoint_written_after(&ns, "web-app", acquired).await?;
        if after < before {
            bail!(
                "the restarted recommender {leader} checkpointed {after} samples, fewer than the {before} \
                 checkpointed before the restart: it did not restore from the checkpoints"
            );
        }
        let vpa = env.tailor_vpas(&ns).get("web").await?;
        if target_of(&vpa).is_none() {
            bail!("the recommendation is gone after the restart: {:?}", vpa.status);
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn two_recommender_replicas_fail_over() {
    let env = e2e("two_recommender_replicas_fail_over").await;
    let env = &env;
    let recommender = env
        .component("recommender")
        .await
        .expect("the recommender Deployment");
    let args = recommender
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--leader-elect"),
        "the recommender runs without --leader-elect (hack/kind-values.yaml sets recommender.leaderElection.enabled): {args:?}"
    );
    in_namespace(env, "failover", |ns| async move {
        env.scale_component("recommender", 2).await?;
        let result = async {
            env.create_deployment(&ns, "web", 1).await?;
            env.create_vpa(&ns, vpa_manifest("web", "web", "Off")).await?;
            env.recommendation(&ns, "web").await?;
            let spec = env.recommender_lease().await?.spec.unwrap_or_default();
            let leader = spec
                .holder_identity
                .filter(|h| !h.is_empty())
                .context("nobody holds the recommender lease")?;
            let transitions = spec.lease_transitions.unwrap_or(0);
            let pods = env.component_pods("recommender").await?;
            let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
            if !names.contains(&leader) {
                bail!("the lease holder {leader} is not a recommender pod ({names:?})");
            }
            if !pods.iter().any(|p| is_running(p) && p.metadata.name.as_ref() != Some(&leader)) {
                bail!("no standby recommender runs next to the leader {leader}: {names:?}");
            }
            let start = Instant::now();
            Api::<Pod>::namespaced(env.client.clone(), &env.system_namespace)
                .delete(&leader, &DeleteParams::default())
                .await?;
            let (next, acquired) = env
                .wait_for_new_leader(std::slice::from_ref(&leader), LEADER_TIMEOUT)
                .await?;
            let took = start.elapsed();
            if took > FAILOVER_LIMIT {
                bail!("{next} took the lease {took:?} after {leader} was deleted (limit {FAILOVER_LIMIT:?})");
            }
            let now = env.recommender_lease().await?.spec.unwrap_or_default();
            if now.lease_transitions.unwrap_or(0) <= transitions {
                bail!(
                    "leaseTransitions did not increase ({transitions} → {:?}) when {next} took over",
                    now.lease_transitions
                );
            }
            // The new leader works: it writes the checkpoint after it acquired the lease.
            env.checkpoint_written_after(&ns, "web-app", acquired).await?;
            eprintln!("{next} took over from {leader} after {took:?}");
            Ok(())
        }
        .await;
        env.scale_component("recommender", 1).await?;
        result
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn webhook_certificate_rotation() {
    let env = e2e("webhook_certificate_rotation").await;
    let env = &env;
    in_namespace(env, "rotation", |ns| async move {
        let secrets = Api::<Secret>::namespaced(env.client.clone(), &env.system_namespace);
        let secret_name = format!("{}-admission-tls", env.release);
        let pem = |s: &Secret, key: &str| -> Result<Vec<u8>> {
            s.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.clone())
                .with_context(|| format!("secret {secret_name} has no {key}"))
        };
        let old = secrets
            .get(&secret_name)
            .await
            .with_context(|| format!("the self-managed certificate Secret {secret_name}"))?;
        let (old_crt, old_ca) = (pem(&old, "tls.crt")?, pem(&old, "ca.crt")?);

        // Expiring within the renewal window (30 days): the webhook must replace its CA and certificate.
        let soon = (Timestamp::now().as_second() + 86_400).to_string();
        secrets
            .patch(
                &secret_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "tailor.dev/certificate-expiry-unix": soon}}})),
            )
            .await?;
        let new_ca = wait_for(
            "a new CA and certificate in the Secret",
            POD_TIMEOUT,
            || async {
                let s = secrets.get(&secret_name).await?;
                let (crt, ca) = (pem(&s, "tls.crt")?, pem(&s, "ca.crt")?);
                Ok((crt != old_crt && ca != old_ca).then_some(ca))
            },
        )
        .await?;

        // The new CA is published in every webhook's caBundle.
        let configs = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
        let config_name = format!("{}-admission", env.release);
        let ca_text = String::from_utf8_lossy(&new_ca).trim().to_string();
        let names = wait_for("the new CA in every caBundle", POD_TIMEOUT, || async {
            let webhooks = configs
                .get(&config_name)
                .await?
                .webhooks
                .unwrap_or_default();
            let published = webhooks.iter().all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(&ca_text))
            });
            Ok((published && !webhooks.is_empty())
                .then(|| webhooks.into_iter().map(|w| w.name).collect::<Vec<_>>()))
        })
        .await?;
        // Trust the new CA alone: only a webhook serving the new certificate can answer from now on.
        let encoded = json!(k8s_openapi::ByteString(new_ca.clone()));
        let patch = json!({"webhooks": names.iter().map(|n| json!({
            "name": n, "clientConfig": {"caBundle": encoded}})).collect::<Vec<_>>()});
        configs
            .patch(
                &config_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await?;

        // failurePolicy is Ignore: an unreachable webhook lets an invalid VPA through. Every replica must
        // deny it (several in a row, so that each replica behind the Service is hit).
        let mut invalid = vpa_manifest("invalid", "web", "Recreate");
        invalid["spec"]["updatePolicy"]["minReplicas"] = json!(0);
        let invalid: DynamicObject = serde_json::from_value(invalid)?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let denials = std::sync::atomic::AtomicU32::new(0);
        let (denials, invalid, dry_run, ns) = (&denials, &invalid, &dry_run, &ns);
        wait_for(
            "8 denials in a row of an invalid VPA by the webhook with the rotated certificate",
            POD_TIMEOUT,
            || async move {
                use std::sync::atomic::Ordering;
                match env.dynamic_vpas(ns).create(dry_run, invalid).await {
                    Err(e) if format!("{e:#}").contains("denied the request") => {
                        Ok((denials.fetch_add(1, Ordering::Relaxed) + 1 >= 8).then_some(()))
                    }
                    Ok(_) => {
                        denials.store(0, Ordering::Relaxed);
                        Err(anyhow!(
                            "an invalid VPA was accepted: the API server did not reach the webhook"
                        ))
                    }
                    Err(e) => {
                        denials.store(0, Ordering::Relaxed);
                        Err(anyhow!("unexpected answer: {e:#}"))
                    }
                }
            },
        )
        .await
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn limit_range_caps_the_webhooks_requests() {
    let env = e2e("limit_range_caps_the_webhooks_requests").await;
    let env = &env;
    in_namespace(env, "limits", |ns| async move {
        // Below twice any recommendation (at least 25m and 250Mi): the proportional limits must be capped.
        let max = (40, 200 * MI);
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "caps"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "40m", "memory": "200Mi"}}]}
        }))?;
        Api::<LimitRange>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &lr)
            .await?;
        env.create_deployment(&ns, "web", 1).await?;
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        let target = cpu_mem(&env.recommendation(&ns, "web").await?)?;
        // A pod beyond the LimitRange's max would be rejected by the API server after the webhook.
        let pods = env.recreate_pods_explained(&ns, "web", 1).await?;
        let (requests, limits) = container_resources(&pods[0])?;
        let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        if limits.0 > max.0 || limits.1 > max.1 {
            bail!("limits {limits:?} exceed the LimitRange max {max:?}");
        }
        if requests.0 > limits.0 || requests.1 > limits.1 {
            bail!("requests {requests:?} above limits {limits:?}");
        }
        if requests == ORIGINAL_REQUESTS {
            bail!("the webhook left the pod at its original requests {requests:?}");
        }
        if requests.1 >= target.1 {
            bail!("memory request {} not capped below the recommendation {} although 2× it exceeds the max", requests.1, target.1);
        }
        if !limits_in_proportion(requests, limits) {
            bail!("capping broke the limit/request ratio of 2: requests {requests:?}, limits {limits:?}");
        }
        let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the capped pod lacks the tailor.dev/updates annotation: {annotations:?}");
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
                    "metadata": {"labels": {"app": "oom"}},
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

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn custom_kind_with_scale_subresource() {
    let env = e2e("custom_kind_with_scale_subresource").await;
    let env = &env;
    let crds = Api::<CustomResourceDefinition>::all(env.client.clone());
    let crd_name = "widgets.e2e.tailor.dev";
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": crd_name},
        "spec": {
            "group": "e2e.tailor.dev",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "selector": {"type": "string"}}}
                }}},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"
                }}
            }]
        }
    }))
    .expect("the Widget CRD");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the Widget CRD: {e}"),
    }
    in_namespace(env, "scale", |ns| async move {
        let result = async {
            wait_for("the Widget CRD to be established", POD_TIMEOUT, || async {
                let c = crds.get(crd_name).await?;
                Ok(c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(()))
            })
            .await?;
            let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("e2e.tailor.dev", "v1", "Widget"));
            let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar);
            let widget: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "e2e.tailor.dev/v1", "kind": "Widget",
                "metadata": {"name": "widget"}, "spec": {"replicas": 2}
            }))?;
            let widget = widgets.create(&PostParams::default(), &widget).await?;
            let uid = widget.metadata.uid.clone().context("widget uid")?;
            widgets
                .patch_status(
                    "widget",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"replicas": 2, "selector": "app=widget"}})),
                )
                .await?;
            let scale = widgets.get_scale("widget").await?;
            let selector = scale.status.and_then(|s| s.selector);
            if selector.as_deref() != Some("app=widget") {
                bail!("the Widget's /scale reports selector {selector:?}");
            }
            // We are the Widget's controller: its pods are ours to create.
            let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
            let widget_pod = |name: &str| -> Result<Pod> {
                Ok(serde_json::from_value(json!({
                    "metadata": {
                        "name": name,
                        "labels": {"app": "widget"},
                        "ownerReferences": [{"apiVersion": "e2e.tailor.dev/v1", "kind": "Widget",
                                             "name": "widget", "uid": uid, "controller": true}]
                    },
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": IMAGE, "resources": {
                            "requests": {"cpu": "10m", "memory": "20Mi"},
                            "limits": {"cpu": "20m", "memory": "40Mi"}}}]
                    }
                }))?)
            };
            for name in ["widget-0", "widget-1"] {
                pods.create(&PostParams::default(), &widget_pod(name)?).await?;
            }
            env.create_vpa(&ns, json!({
                "apiVersion": "autoscaling.tailor.dev/v1",
                "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "widget"},
                "spec": {
                    "targetRef": {"apiVersion": "e2e.tailor.dev/v1", "kind": "Widget", "name": "widget"},
                    "updatePolicy": {"updateMode": "Initial"}
                }
            }))
            .await?;
            // The recommender resolves the Widget through /scale and recommends for its pods.
            let before = cpu_mem(&env.recommendation(&ns, "widget").await?)?;
            // The webhook sizes a new pod of the Widget (it too resolves the owner through /scale).
            let created = pods.create(&PostParams::default(), &widget_pod("widget-2")?).await?;
            let after = cpu_mem(&env.recommendation(&ns, "widget").await?)?;
            let (requests, limits) = container_resources(&created)?;
            let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
            if requests == ORIGINAL_REQUESTS {
                bail!("the webhook admitted a new pod of the Widget (a custom kind with /scale) unchanged");
            }
            if requests != before && requests != after {
                bail!("the Widget's new pod has requests {requests:?}, not the recommendation ({before:?} or {after:?})");
            }
            if !limits_in_proportion(requests, limits) {
                bail!("limits {limits:?} are not twice the requests {requests:?}");
            }
            let annotations = created.metadata.annotations.clone().unwrap_or_default();
            if !annotations.contains_key("tailor.dev/updates") {
                bail!("the Widget's new pod lacks the tailor.dev/updates annotation: {annotations:?}");
            }
            Ok(())
        }
        .await;
        let _ = crds.delete(crd_name, &DeleteParams::background()).await;
        result
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn pod_level_resources_bound_the_webhooks_requests() {
    let env = e2e("pod_level_resources_bound_the_webhooks_requests").await;
    let env = &env;
    in_namespace(env, "podlevel", |ns| async move {
        // A pod-level budget below any recommendation (at least 25m and 250Mi for the one container).
        let (budget_requests, budget_limits) = ((20, 64 * MI), (40, 128 * MI));
        env.create_deployment_from(&ns, json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "resources": {
                            "requests": {"cpu": "20m", "memory": "64Mi"},
                            "limits": {"cpu": "40m", "memory": "128Mi"}
                        },
                        "containers": [{
                            "name": "app",
                            "image": IMAGE,
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "20Mi"},
                                "limits": {"cpu": "20m", "memory": "40Mi"}
                            }
                        }]
                    }
                }
            }
        }))
        .await?;
        let pods = env.wait_running(&ns, "web", 1).await?;
        if pods[0].spec.as_ref().and_then(|s| s.resources.as_ref()).is_none() {
            bail!(
                "the cluster dropped the pod-level spec.resources: it needs Kubernetes >= 1.34 or the \
                 PodLevelResources feature gate (hack/kind-e2e.sh sets it for older node images)"
            );
        }
        env.create_vpa(&ns, vpa_manifest("web", "web", "Initial")).await?;
        env.recommendation(&ns, "web").await?;
        // Requests raised beyond the pod-level budget make the API server reject the pod after the webhook,
        // and the ReplicaSet could not create any.
        let pods = env.recreate_pods_explained(&ns, "web", 1).await?;
        let pod = &pods[0];
        let spec = pod.spec.as_ref().context("pod without spec")?;
        let level = spec.resources.clone().unwrap_or_default();
        if cpu_mem(&level.requests.unwrap_or_default())? != budget_requests
            || cpu_mem(&level.limits.unwrap_or_default())? != budget_limits
        {
            bail!("the pod-level resources were changed: {:?}", spec.resources);
        }
        let (requests, limits) = container_resources(pod)?;
        let (requests, limits) = (cpu_mem(&requests)?, cpu_mem(&limits)?);
        if requests.0 > budget_requests.0 || requests.1 > budget_requests.1 {
            bail!("container requests {requests:?} exceed the pod-level requests {budget_requests:?}");
        }
        if limits.0 > budget_limits.0 || limits.1 > budget_limits.1 {
            bail!("container limits {limits:?} exceed the pod-level limits {budget_limits:?}");
        }
        // Sized within the budget, or left alone with the reason: either way the webhook says so.
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.contains_key("tailor.dev/updates") {
            bail!("the pod lacks the tailor.dev/updates annotation saying what the webhook did: {annotations:?}");
        }
        Ok(())
    })
    .await;
}
