//! End-to-end tests against a real cluster with Tailor installed (see `hack/kind-e2e.sh`).
//!
//! Every test is `#[ignore]`d (plain `cargo test` has no cluster) and fails unless `TAILOR_E2E_KUBECONFIG` names
//! a kubeconfig:
//!
//! ```sh
//! TAILOR_E2E_KUBECONFIG=target/e2e/kubeconfig cargo test -p tailor-tests --test e2e -- --ignored --test-threads=1
//! ```
//!
//! `TAILOR_E2E_AUDIT_LOG` names the API server's audit log where the tests can read it (the local control plane:
//! `hack/e2e-local.sh` sets it); the coexistence test then checks who wrote what request by request.
//! `TAILOR_E2E_NAMESPACE` (default `tailor-system`) and `TAILOR_E2E_RELEASE` (default `tailor`) locate the
//! installed chart, installed with hack/kind-values.yaml (leader election on, the webhook's feature gates).
//! Each test works in its own namespace and deletes it at the end. Some disturb what all share for a moment —
//! the webhook-down tests scale the webhook to zero (and the updater pauses while the webhook's status Lease
//! is stale), the restart, failover and live-differential tests restart recommenders, the certificate test
//! rotates the webhook's certificate, one test restarts the API server, the uninstall tests take either
//! autoscaler away — and each restores what it changed:
//! run those one at a time, after the others (`hack/e2e-local.sh` runs the others four at a time first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

mod admission;
mod budgets;
mod certificates;
mod checkpoints;
mod coexistence;
mod conflicts;
mod crds;
mod custom_kinds;
mod dashboard;
mod differential;
mod fleet;
mod hpa;
mod in_place;
mod jobs;
mod limit_policy;
mod node_fit;
mod node_pool;
mod pod_level;
mod quota;
mod readme;
mod recommendation;
mod recreate;
mod resilience;
mod resize_rules;
mod restart;
mod scope;
mod uninstall;
mod upstream_actuation;
mod upstream_admission;
mod upstream_boost;
mod upstream_recommender;
mod upstream_updater;
mod validity;
mod webhook_down;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, LimitRange, Namespace, Pod, Secret};
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
/// The `hack/cluster.sh tailor` slot of [`E2e::start_named_recommender`]'s process.
const NAMED_RECOMMENDER_SLOT: &str = "9";
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

/// Where Tailor's programs run.
enum Platform {
    /// As the chart's Deployments (kind): restarting one deletes its pod.
    Pods,
    /// As host processes of the local control plane, controlled by `hack/cluster.sh tailor` (the path in
    /// `TAILOR_E2E_CONTROL`).
    HostProcesses(PathBuf),
}

/// One copy of a Tailor component: a pod, or a host process.
struct Instance {
    /// The pod's name, or the process's `POD_NAME` (its leader-election identity).
    name: String,
    running: bool,
    /// The process's slot in `hack/cluster.sh tailor` (host processes only).
    slot: Option<String>,
    /// Restarts after an exit (the container's `restartCount`; the supervisor's count for a process).
    restarts: u32,
}

/// The installed chart.
struct E2e {
    client: Client,
    platform: Platform,
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
    // The binaries' client: kube's own retries a 503 (an aggregated API whose server is down) for minutes.
    let client = tailor_kube::client::build_client(config).expect("a Kubernetes client");
    let platform = match std::env::var_os("TAILOR_E2E_CONTROL") {
        Some(path) => Platform::HostProcesses(PathBuf::from(path)),
        None => Platform::Pods,
    };
    E2e {
        client,
        platform,
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
        self.create_annotated_deployment(ns, name, replicas, json!({}))
            .await
    }

    /// [`Self::create_deployment`] with `annotations` on the pod template (the kwok kubelet stand-in's
    /// switches, `tailor.dev/e2e-kubelet-*`).
    async fn create_annotated_deployment(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
        annotations: Value,
    ) -> Result<()> {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}, "annotations": annotations},
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

    /// The UIDs of the pods of `app` that are not being deleted.
    async fn live_uids(&self, ns: &str, app: &str) -> Result<BTreeSet<String>> {
        Ok(self
            .all_pods(ns, app)
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid)
            .collect())
    }

    /// Waits until none of `original` is left among the pods of `app` and as many new pods run; returns
    /// those (an updater evicted the originals, their ReplicaSet replaced them).
    async fn wait_replaced(
        &self,
        ns: &str,
        app: &str,
        original: &BTreeSet<String>,
    ) -> Result<Vec<Pod>> {
        wait_for(
            &format!("every original pod of {app} evicted and replaced by a running pod"),
            UPDATE_TIMEOUT,
            || async {
                let pods = self.all_pods(ns, app).await?;
                let left = pods.iter().any(|p| {
                    p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|u| original.contains(u))
                });
                let fresh: Vec<Pod> = self
                    .running_pods(ns, app)
                    .await?
                    .into_iter()
                    .filter(|p| {
                        !p.metadata
                            .uid
                            .as_ref()
                            .is_some_and(|u| original.contains(u))
                    })
                    .collect();
                Ok((!left && fresh.len() == original.len()).then_some(fresh))
            },
        )
        .await
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

    /// Scales a Tailor component and waits until exactly `replicas` pods are ready (host processes: starts
    /// or stops them).
    async fn scale_component(&self, component: &str, replicas: i32) -> Result<()> {
        if let Platform::HostProcesses(control) = &self.platform {
            for slot in 0..10 {
                let verb = if slot < replicas { "start" } else { "stop" };
                run_control(control, &[verb, component, &slot.to_string()])?;
            }
            return Ok(());
        }
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

    /// Restarts the API server and waits until it serves again: `hack/cluster.sh restart kube-apiserver`, or
    /// on kind `docker restart` of the control-plane node (`TAILOR_E2E_KIND_NODE`, default
    /// `tailor-e2e-control-plane`).
    fn restart_api_server(&self) -> Result<()> {
        let (program, args): (PathBuf, Vec<String>) = match &self.platform {
            Platform::HostProcesses(control) => (
                control.clone(),
                vec!["restart".into(), "kube-apiserver".into()],
            ),
            Platform::Pods => {
                let node = std::env::var("TAILOR_E2E_KIND_NODE")
                    .unwrap_or_else(|_| "tailor-e2e-control-plane".into());
                ("docker".into(), vec!["restart".into(), node])
            }
        };
        let out = std::process::Command::new(&program)
            .args(&args)
            .output()
            .with_context(|| format!("running {} {args:?}", program.display()))?;
        if !out.status.success() {
            bail!(
                "{} {args:?} failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// The copies of a Tailor component: its pods (terminating ones included, as not running), or its host
    /// processes.
    async fn instances(&self, component: &str) -> Result<Vec<Instance>> {
        if let Platform::HostProcesses(control) = &self.platform {
            let out = run_control(control, &["list", component])?;
            return Ok(out
                .lines()
                .filter_map(|l| {
                    let mut words = l.split_whitespace();
                    Some(Instance {
                        name: words.next()?.to_string(),
                        running: words.next()? == "running",
                        slot: words.next().map(str::to_string),
                        restarts: words.next().and_then(|n| n.parse().ok()).unwrap_or(0),
                    })
                })
                .collect());
        }
        Ok(self
            .component_pods(component)
            .await?
            .into_iter()
            .map(|p| Instance {
                restarts: p
                    .status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
                    .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
                    .sum(),
                running: is_running(&p) && p.metadata.deletion_timestamp.is_none(),
                name: p.metadata.name.unwrap_or_default(),
                slot: None,
            })
            .collect())
    }

    /// The names of every running copy of Tailor's three components.
    async fn running_copies(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for component in ["recommender", "updater", "admission"] {
            out.extend(
                self.instances(component)
                    .await?
                    .into_iter()
                    .filter(|i| i.running)
                    .map(|i| i.name),
            );
        }
        Ok(out)
    }

    /// How many webhooks run now (at least 1: what a test scales back to after stopping them).
    async fn running_webhooks(&self) -> i32 {
        let running = self
            .instances("admission")
            .await
            .expect("the webhook's pods or processes")
            .iter()
            .filter(|i| i.running)
            .count();
        i32::try_from(running).unwrap_or(i32::MAX).max(1)
    }

    /// Stops one copy (SIGTERM) and lets a replacement start: deletes the pod (its ReplicaSet makes a new
    /// one), or restarts the host process under a new identity.
    async fn replace_instance(&self, component: &str, instance: &Instance) -> Result<()> {
        match (&self.platform, &instance.slot) {
            (Platform::HostProcesses(control), Some(slot)) => {
                run_control(control, &["restart", component, slot]).map(drop)
            }
            (Platform::HostProcesses(_), None) => bail!("{} has no slot", instance.name),
            (Platform::Pods, _) => {
                Api::<Pod>::namespaced(self.client.clone(), &self.system_namespace)
                    .delete(&instance.name, &DeleteParams::default())
                    .await?;
                Ok(())
            }
        }
    }

    /// Starts another Tailor recommender named `name` (`--recommender-name`: it serves only the VPAs naming it
    /// in `spec.recommenders`), without leader election, with `flags` (`--KEY=VALUE`) over the chart's
    /// arguments: a host process in slot 9, or on kind a Deployment `<release>-recommender-<name>` with the
    /// recommender's pod template under labels of its own. One at a time; [`E2e::stop_named_recommender`].
    async fn start_named_recommender(&self, name: &str, flags: &[String]) -> Result<()> {
        let mut changes = vec![
            "!--leader-elect".to_string(),
            format!("--recommender-name={name}"),
        ];
        changes.extend(flags.iter().cloned());
        if let Platform::HostProcesses(control) = &self.platform {
            let mut args = vec!["start", "recommender", NAMED_RECOMMENDER_SLOT];
            args.extend(changes.iter().map(String::as_str));
            return run_control(control, &args).map(drop);
        }
        let mut d = self.component("recommender").await?;
        let deployment = format!("{}-recommender-{name}", self.release);
        let labels = BTreeMap::from([("tailor.dev/e2e-recommender".to_string(), name.to_string())]);
        d.metadata = kube::api::ObjectMeta {
            name: Some(deployment.clone()),
            namespace: Some(self.system_namespace.clone()),
            ..Default::default()
        };
        let spec = d
            .spec
            .as_mut()
            .context("the recommender Deployment has no spec")?;
        spec.replicas = Some(1);
        spec.selector.match_labels = Some(labels.clone());
        spec.template
            .metadata
            .get_or_insert_with(Default::default)
            .labels = Some(labels);
        let container = spec
            .template
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
            .context("the recommender Deployment has no container")?;
        let mut args = container.args.take().unwrap_or_default();
        for change in &changes {
            let key = change.trim_start_matches('!');
            let key = key.split('=').next().unwrap_or(key);
            args.retain(|a| a != key && !a.starts_with(&format!("{key}=")));
            if !change.starts_with('!') {
                args.push(change.clone());
            }
        }
        container.args = Some(args);
        d.status = None;
        let api = Api::<Deployment>::namespaced(self.client.clone(), &self.system_namespace);
        api.create(&PostParams::default(), &d).await?;
        wait_for(&format!("{deployment} ready"), POD_TIMEOUT, || async {
            let ready = api
                .get(&deployment)
                .await?
                .status
                .and_then(|s| s.ready_replicas);
            Ok((ready == Some(1)).then_some(()))
        })
        .await
    }

    /// Stops the recommender [`E2e::start_named_recommender`] started.
    async fn stop_named_recommender(&self, name: &str) -> Result<()> {
        if let Platform::HostProcesses(control) = &self.platform {
            return run_control(control, &["stop", "recommender", NAMED_RECOMMENDER_SLOT])
                .map(drop);
        }
        Api::<Deployment>::namespaced(self.client.clone(), &self.system_namespace)
            .delete(
                &format!("{}-recommender-{name}", self.release),
                &DeleteParams::background(),
            )
            .await?;
        Ok(())
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
                let running = self
                    .instances("recommender")
                    .await?
                    .iter()
                    .any(|i| i.name == holder && i.running);
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

    /// The API server's minor version (`37` for v1.37.2).
    async fn server_minor(&self) -> Result<u32> {
        let info = self.client.apiserver_version().await?;
        // Some distributions append a `+`: "27+".
        let digits: String = info
            .minor
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .with_context(|| format!("API server minor version {:?}", info.minor))
    }

    /// The pods of `ns` that have an Event with `reason`, as (pod UID, when the Event was created).
    async fn pod_events(&self, ns: &str, reason: &str) -> Result<Vec<(String, Timestamp)>> {
        let events = Api::<Event>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default())
            .await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| e.involved_object.kind.as_deref() == Some("Pod"))
            .filter_map(|e| Some((e.involved_object.uid?, e.metadata.creation_timestamp?.0)))
            .collect())
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

/// Runs `hack/cluster.sh tailor ARGS…` and returns its standard output.
fn run_control(control: &std::path::Path, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(control)
        .arg("tailor")
        .args(args)
        .output()
        .with_context(|| format!("running {} tailor {args:?}", control.display()))?;
    if !out.status.success() {
        bail!(
            "{} tailor {args:?} failed: {}",
            control.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
    tailor_core::quantity::milli_value(q).map_err(|e| anyhow!("cpu {q:?}: {e}"))
}

fn bytes(q: &Quantity) -> Result<i64> {
    tailor_core::quantity::value(q).map_err(|e| anyhow!("memory {q:?}: {e}"))
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

/// The label and taint key of a test's own kwok node (node fit, docs/decisions/node-fit.md): pods of namespace
/// NS select `tailor-e2e/node=NS` and tolerate `tailor-e2e/node=NS:NoSchedule`, so nothing else lands there and the
/// largest node they can schedule on is known.
const OWN_NODE_KEY: &str = "tailor-e2e/node";

impl E2e {
    /// Creates kwok node `e2e-NS` with `cpu`/`memory` allocatable, labelled and tainted for namespace `ns`
    /// only ([`OWN_NODE_KEY`]), and waits until it is Ready without other taints.
    async fn create_own_node(&self, ns: &str, cpu: &str, memory: &str) -> Result<String> {
        let name = format!("e2e-{ns}");
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "metrics.k8s.io/resource-metrics-path": format!("/metrics/nodes/{name}/metrics/resource")
                },
                "labels": {
                    "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name, "type": "kwok", OWN_NODE_KEY: ns
                }
            },
            "spec": {"taints": [{"key": OWN_NODE_KEY, "value": ns, "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"}
            }
        }))?;
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(self.client.clone());
        nodes.create(&PostParams::default(), &node).await?;
        wait_for(&format!("node {name} Ready"), POD_TIMEOUT, || async {
            let n = nodes.get(&name).await?;
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let others = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key != OWN_NODE_KEY));
            Ok((ready && !others).then_some(()))
        })
        .await?;
        Ok(name)
    }

    async fn delete_node(&self, name: &str) {
        let _ = Api::<k8s_openapi::api::core::v1::Node>::all(self.client.clone())
            .delete(name, &DeleteParams::background())
            .await;
    }
}

/// A Deployment `name` of one pod on namespace `ns`'s own node ([`E2e::create_own_node`]) whose
/// container uses `cpu` and `memory` (kwok's usage annotations) and requests 10m/20Mi.
fn deployment_on_own_node(ns: &str, name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "kwok.x-k8s.io/usage-cpu": cpu, "kwok.x-k8s.io/usage-memory": memory}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {OWN_NODE_KEY: ns},
                    "tolerations": [{"key": OWN_NODE_KEY, "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "app", "image": IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"},
                                      "limits": {"cpu": "20m", "memory": "40Mi"}}
                    }]
                }
            }
        }
    })
}

/// The VPA's condition `type_`, once it is there.
async fn condition(
    env: &E2e,
    ns: &str,
    vpa: &str,
    type_: &str,
) -> Result<Option<tailor_crds::VerticalPodAutoscalerCondition>> {
    Ok(env
        .tailor_vpas(ns)
        .get(vpa)
        .await?
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == type_)))
}

/// The first container recommendation of the VPA: `(target, uncappedTarget)`.
async fn first_recommendation(
    env: &E2e,
    ns: &str,
    vpa: &str,
) -> Result<Option<(BTreeMap<String, Quantity>, BTreeMap<String, Quantity>)>> {
    Ok(env
        .tailor_vpas(ns)
        .get(vpa)
        .await?
        .status
        .and_then(|s| s.recommendation)
        .and_then(|r| r.container_recommendations)
        .and_then(|c| c.into_iter().next())
        .map(|r| (r.target, r.uncapped_target.unwrap_or_default())))
}

/// The pods of `ns` Tailor's identities asked the API server to evict or resize (`pods/eviction`,
/// `pods/resize`), request by request from the audit log; `None` without one (kind). Catches attempts the API
/// server refused too, which the pods themselves would not show.
fn tailor_disruptions(env: &E2e, ns: &str) -> Result<Option<Vec<String>>> {
    let Some(audit) = std::env::var_os("TAILOR_E2E_AUDIT_LOG") else {
        return Ok(None);
    };
    let tailor_user = format!(
        "system:serviceaccount:{}:{}-",
        env.system_namespace, env.release
    );
    Ok(Some(
        coexistence::audited_requests(std::path::Path::new(&audit), ns)?
            .into_iter()
            .filter(|r| r.user.starts_with(&tailor_user))
            .filter(|r| match r.subresource.as_str() {
                "eviction" => r.verb == "create",
                "resize" => matches!(r.verb.as_str(), "patch" | "update"),
                _ => false,
            })
            .map(|r| r.name)
            .collect(),
    ))
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
    let started = Instant::now();
    let result = body(ns.clone()).await;
    // Read by whoever tunes the suite's wall time (hack/e2e-local.sh shows the output of passing tests too).
    eprintln!("{test}: {:.0}s", started.elapsed().as_secs_f64());
    env.drop_namespace(&ns).await;
    if let Err(e) = result {
        panic!("{test} failed in namespace {ns}: {e:#}");
    }
}

/// The `/metrics` text of each webhook copy: host processes on the address the chart gave them, pods
/// through the API server's pod proxy.
pub(crate) async fn webhook_metrics(env: &E2e) -> Result<Vec<String>> {
    let d = env.component("admission").await?;
    let args = d
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    let address = args
        .iter()
        .rev()
        .find_map(|a| a.strip_prefix("--address="))
        .context("the webhook has no --address")?
        .to_owned();
    let port = address.rsplit(':').next().unwrap_or_default().to_owned();
    match &env.platform {
        Platform::HostProcesses(_) => Ok(vec![http_get(&format!("127.0.0.1:{port}"), "/metrics")?]),
        Platform::Pods => {
            let mut out = Vec::new();
            for pod in env.component_pods("admission").await? {
                let name = pod.metadata.name.unwrap_or_default();
                let path = format!(
                    "/api/v1/namespaces/{}/pods/{name}:{port}/proxy/metrics",
                    env.system_namespace
                );
                let request = http::Request::get(path).body(Vec::new())?;
                out.push(env.client.request_text(request).await?);
            }
            Ok(out)
        }
    }
}

/// A plain HTTP/1.0 GET on loopback (the metrics listener of a host process).
fn http_get(address: &str, path: &str) -> Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address)
        .with_context(|| format!("connecting to {address}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}
