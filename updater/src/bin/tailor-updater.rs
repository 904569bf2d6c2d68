//! `tailor-updater`: brings running pods of Tailor VPAs to their recommendation, in place or by eviction.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tailor_core::text::capped;

use anyhow::{Context, bail};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ReplicationController};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::client::ClientFlags;
use tailor_kube::index::{Index, IndexStores, ScaleLookup};
use tailor_kube::leader::{Fence, LeaderElector, LeaderFlags};
use tailor_kube::listen::ListenFlags;
use tailor_kube::log::LogFlags;
use tailor_kube::quota_cache::spawn_quota_cache;
use tailor_kube::reflectors::{OnWatchError, api, spawn_reflector, workload_stores};
use tailor_kube::scale_cache::{ScaleCache, ScaleCacheSettings};
use tailor_kube::shutdown::Shutdown;
use tailor_updater::api_actuator::ApiActuator;
use tailor_updater::cache_view::{
    CacheView, NamespaceLabels, ReplicaStores, ScaleReplicas, governed_creator, strip_controller,
};
use tailor_updater::flags::{AdmissionStatusFlags, UpdaterFlags};
use tailor_updater::iteration::UpdaterState;
use tailor_updater::metrics::Metrics;
use tailor_updater::pods::CompactPod;
use tailor_updater::rate_limit::RateSettings;
use tailor_updater::resize_check::ResizeRules;
use tailor_updater::run_loop::{
    Outcome, StatusCheck, Updater, pods_in_key_order, vpas_in_key_order,
};

/// mimalloc, as the recommender and the webhook use, with `MIMALLOC_ARENA_EAGER_COMMIT=0` as the image and
/// the chart set it: an iteration allocates and frees millions of small objects, which glibc's malloc made
/// about a third of its instructions. Unlike the other two binaries, freed pages keep mimalloc's default
/// purge delay (10 ms): `MIMALLOC_PURGE_DELAY=0` purged and faulted pages in again all through an
/// iteration, about 80 ms of 5,000 VPAs' (BENCHMARKS.md, issue 11).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

/// Tailor's updater. Flag names and defaults follow the upstream VPA updater.
#[derive(Debug, Parser)]
#[command(name = "tailor-updater", version, about)]
#[command(mut_arg("address", |a| a.default_value(":8943")
    .help("Address of the HTTP server for `/metrics`, `/healthz` and `/readyz` (`:8943` = all interfaces)")))]
#[command(mut_arg("leader_elect_lease_name", |a| a.default_value("tailor-updater")))]
#[command(mut_arg("leader_elect_identity", |a| a.default_value("tailor-updater")))]
struct Args {
    #[command(flatten)]
    listen: ListenFlags,
    /// Period of the main loop; also each iteration's deadline.
    #[arg(long, value_parser = duration, default_value = "1m")]
    updater_interval: Duration,
    #[command(flatten)]
    updater: UpdaterFlags,
    #[command(flatten)]
    status: AdmissionStatusFlags,
    /// Only handle VPAs (and watch objects) in this namespace.
    #[arg(long, default_value = "")]
    vpa_object_namespace: String,
    /// Comma-separated namespaces whose VPAs are ignored.
    #[arg(long, default_value = "")]
    ignored_vpa_object_namespaces: String,
    #[command(flatten)]
    client: ClientFlags,
    /// `--leader-elect` and the lease flags.
    #[command(flatten)]
    leader: LeaderFlags,
    /// After SIGTERM, the iteration in progress is abandoned and the leader lease released within this
    /// long. Keep the pod's `terminationGracePeriodSeconds` above it.
    #[arg(long, value_parser = duration, default_value = "20s")]
    shutdown_timeout: Duration,
    #[command(flatten)]
    log: LogFlags,
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    /// Set once the VPA and pod caches have listed.
    synced: Arc<std::sync::atomic::AtomicBool>,
    last_iteration: Arc<AtomicI64>,
    started: Arc<AtomicI64>,
    interval: Duration,
}

fn unix_now() -> i64 {
    Timestamp::now().as_second()
}

async fn healthz(State(h): State<Health>) -> (StatusCode, String) {
    let last = h
        .last_iteration
        .load(Ordering::Relaxed)
        .max(h.started.load(Ordering::Relaxed));
    let limit = 5 * h.interval.as_secs() as i64 + 1;
    let age = unix_now() - last;
    if age > limit {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Error: last activity more than {age}s ago"),
        )
    } else {
        (StatusCode::OK, "OK".into())
    }
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.synced.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

async fn serve_metrics(State(h): State<Health>) -> String {
    h.metrics.encode()
}

fn strip<K: kube::Resource>(mut o: K) -> K {
    o.managed_fields_mut().clear();
    o.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    o
}

/// Most per-VPA debug lines an iteration writes.
const MAX_SKIP_LINES: usize = 50;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init();
    if !args.vpa_object_namespace.is_empty() && !args.ignored_vpa_object_namespaces.is_empty() {
        bail!("--vpa-object-namespace and --ignored-vpa-object-namespaces are mutually exclusive");
    }
    let addr = args.listen.socket_addr().context("--address")?;
    let client = args.client.client().await.context("Kubernetes client")?;
    let metrics = Arc::new(Metrics::new());
    let health = Health {
        metrics: metrics.clone(),
        synced: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        last_iteration: Arc::new(AtomicI64::new(0)),
        started: Arc::new(AtomicI64::new(unix_now())),
        interval: args.updater_interval,
    };
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/health-check", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .with_state(health.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    let shutdown = Shutdown::on_signal();

    let elector = args
        .leader
        .validated()?
        .map(|settings| Arc::new(LeaderElector::new(client.clone(), settings)));
    let mut holder = None;
    if let Some(e) = &elector {
        tokio::select! {
            _ = e.acquire() => tracing::info!("leader lease acquired"),
            _ = shutdown.wait() => {
                // An attempt cut off here may still have succeeded on the server.
                release_lease(e, args.shutdown_timeout).await;
                return Ok(());
            }
        }
        let e = e.clone();
        holder = Some(tokio::spawn(async move {
            let lost = e.hold().await;
            tracing::error!(error = %lost, "leader lease lost; stopping");
        }));
    }
    let fence = elector
        .as_ref()
        .map(|e| e.fence())
        .unwrap_or_else(Fence::unfenced);
    let lost = fence.lost();
    tokio::pin!(lost);

    // Caches.
    let ns = args.vpa_object_namespace.as_str();
    let config = watcher::Config::default().any_semantic();
    let on_error: OnWatchError = Arc::new(|_| {});
    let vpas = Writer::default();
    let vpa_store: Store<VerticalPodAutoscaler> = vpas.as_reader();
    let limit_ranges = Writer::default();
    let (workloads, workload_writers) = workload_stores();
    let stores = IndexStores {
        vpas: Arc::new(vpa_store.clone()),
        workloads,
        limit_ranges: limit_ranges.as_reader(),
    };
    spawn_reflector(
        api::<VerticalPodAutoscaler>(&client, ns),
        config.clone(),
        vpas,
        strip,
        on_error.clone(),
    );
    spawn_reflector(
        api::<LimitRange>(&client, ns),
        config.clone(),
        limit_ranges,
        strip,
        on_error.clone(),
    );
    let quotas = args
        .updater
        .quota_fit
        .then(|| spawn_quota_cache(&client, ns, config.clone(), on_error.clone()));
    workload_writers.spawn(&client, ns, &config, &on_error);
    let rs = Writer::default();
    let ss = Writer::default();
    let rc = Writer::default();
    let ds = Writer::default();
    let replicas = ReplicaStores {
        replica_sets: rs.as_reader(),
        stateful_sets: ss.as_reader(),
        replication_controllers: rc.as_reader(),
        daemon_sets: ds.as_reader(),
        scaled: ScaleReplicas::default(),
    };
    spawn_reflector(
        api::<ReplicaSet>(&client, ns),
        config.clone(),
        rs,
        strip_controller,
        on_error.clone(),
    );
    spawn_reflector(
        api::<StatefulSet>(&client, ns),
        config.clone(),
        ss,
        strip_controller,
        on_error.clone(),
    );
    spawn_reflector(
        api::<ReplicationController>(&client, ns),
        config.clone(),
        rc,
        strip_controller,
        on_error.clone(),
    );
    spawn_reflector(
        api::<DaemonSet>(&client, ns),
        config.clone(),
        ds,
        strip_controller,
        on_error.clone(),
    );
    let pods = Writer::default();
    let pod_store = pods.as_reader();
    let pod_config = config
        .clone()
        .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
    spawn_reflector(
        api::<CompactPod>(&client, ns),
        pod_config,
        pods,
        std::convert::identity,
        on_error.clone(),
    );
    // One waiter on the stores' readiness: a reflector store wakes only one of several concurrent
    // `wait_until_ready` callers (its readiness is a oneshot channel), so the others wait on this signal.
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    {
        let (vpas, pods, synced) = (vpa_store.clone(), pod_store.clone(), health.synced.clone());
        tokio::spawn(async move {
            if vpas.wait_until_ready().await.is_ok() && pods.wait_until_ready().await.is_ok() {
                synced.store(true, Ordering::Relaxed);
                synced_tx.send_replace(true);
                tracing::info!("caches synced");
            }
        });
    }
    // Controllers of other kinds (Argo Rollouts, custom controllers) through their `/scale` subresource,
    // fetched in the background as the webhook fetches them: one decision path with `tailor plan`, whose
    // snapshot stands in for `/scale` (issue 30). The cache looks up VPA targets and the owners matching
    // asked for; matching asks only in namespaces with a VPA the iteration selected.
    let scale = ScaleCache::default();
    {
        // Started once the VPAs are listed, so that its first refresh reads their targets.
        let (scale, client, vpas, mut ready) = (
            scale.clone(),
            client.clone(),
            stores.vpas.clone(),
            synced_rx.clone(),
        );
        tokio::spawn(async move {
            if ready.wait_for(|synced| *synced).await.is_ok() {
                tracing::debug!("/scale cache started");
                scale
                    .run(
                        client,
                        vpas,
                        ScaleCacheSettings::default(),
                        std::future::pending(),
                    )
                    .await;
            }
        });
    }
    let scale_lookup: Arc<dyn ScaleLookup> = Arc::new(scale);
    {
        // Replica counts of controllers of other kinds, off the iteration's path: only the creators of
        // pods some VPA governs, answers (also "none") remembered, a bounded number of reads per refresh.
        let scaled = replicas.scaled.clone();
        let pods = pod_store.clone();
        let vpas = vpa_store.clone();
        let index = Index::from_stores(stores.clone()).with_scale_lookup(scale_lookup.clone());
        let client = client.clone();
        let period = args.updater_interval;
        let mut ready = synced_rx.clone();
        tokio::spawn(async move {
            if ready.wait_for(|synced| *synced).await.is_err() {
                return;
            }
            loop {
                let vpa_list = vpas.state();
                let wanted = ScaleReplicas::wanted(&pods.state(), |creator, api_version| {
                    governed_creator(&index, &vpa_list, creator, api_version)
                });
                let wanted_count = wanted.len();
                let fetched = scaled
                    .refresh(&client, wanted, Duration::from_secs(2))
                    .await;
                tracing::debug!(
                    controllers = wanted_count,
                    fetched,
                    "replica counts of other kinds refreshed"
                );
                tokio::time::sleep(period).await;
            }
        });
    }
    let mut index = Index::from_stores(stores).with_scale_lookup(scale_lookup);
    if let Some(quotas) = quotas {
        index = index.with_quotas(Arc::new(quotas));
    }

    let status = args
        .status
        .use_admission_controller_status
        .then(|| StatusCheck {
            api: Api::namespaced(client.clone(), &args.status.namespace()),
            name: args.status.admission_controller_status_lease_name.clone(),
            timeout: args.status.admission_controller_status_lease_timeout,
        });
    let origin = tokio::time::Instant::now();
    let mut view = CacheView::new(
        index,
        replicas,
        args.updater.restriction_config(),
        args.updater.feature_gates,
        Timestamp::now(),
    );
    view.floor = args.updater.floor.floor();
    if args.updater.webhook_namespace_selector.0.is_some() {
        // The webhook selects namespaces by label: the updater reads the same labels.
        let namespaces = Writer::default();
        view.namespaces = Some(NamespaceLabels::Store(namespaces.as_reader()));
        spawn_reflector(
            Api::<Namespace>::all(client.clone()),
            config.clone(),
            namespaces,
            strip,
            on_error.clone(),
        );
    }
    // What the API server accepts of an in-place resize depends on its version (issue 30).
    match client.apiserver_version().await {
        Ok(info) => match ResizeRules::for_version(&info.minor) {
            Some(rules) => view.resize_rules = rules,
            None => {
                tracing::warn!(minor = %capped(&info.minor), "unreadable server version; resize rules of Kubernetes 1.34")
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "server version unknown; resize rules of Kubernetes 1.34")
        }
    }
    let mut updater = Updater {
        config: args
            .updater
            .iteration_config(&args.ignored_vpa_object_namespaces),
        state: UpdaterState::default(),
        view,
        actuator: ApiActuator::new(
            client.clone(),
            RateSettings::from_flags(
                args.updater.eviction_rate_limit,
                args.updater.eviction_rate_burst,
            ),
            origin,
        ),
        status,
        // In namespace/name order, as tailor plan hands them over: ties fall the same way in both.
        vpas: Box::new(move || vpas_in_key_order(vpa_store.state())),
        pods: Box::new(move || pods_in_key_order(pod_store.state())),
        metrics: metrics.clone(),
    };
    // The first iteration runs one interval after start-up, as upstream's.
    let mut ticker =
        tokio::time::interval_at(origin + args.updater_interval, args.updater_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut lease_lost = false;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait() => break,
            _ = &mut lost => { lease_lost = true; break }
            _ = ticker.tick() => {}
        }
        let started = tokio::time::Instant::now();
        // Abandoned at once on SIGTERM or a lost lease: no eviction or resize goes out after either.
        let outcome = tokio::select! {
            biased;
            _ = shutdown.wait() => break,
            _ = &mut lost => { lease_lost = true; break }
            o = updater.iterate(Timestamp::now(), started + args.updater_interval) => o,
        };
        match outcome {
            Outcome::AdmissionNotAlive(why) => {
                tracing::error!(reason = %why, "the webhook is not known to be alive: no pod is updated this iteration");
            }
            Outcome::Ran(report) => {
                for vpa in &report.deprecated {
                    tracing::warn!(%vpa, "updateMode Auto is deprecated; use Recreate or InPlaceOrRecreate");
                }
                if let Some(reason) = &report.aborted {
                    tracing::warn!(%reason, "iteration stopped early");
                }
                // Why VPAs were left out, at debug level and bounded: a cluster can hold thousands.
                for (namespace, name, reason) in report.skipped_vpas.iter().take(MAX_SKIP_LINES) {
                    tracing::debug!(vpa = %format!("{}/{}", capped(namespace), capped(name)),
                        reason = %capped(reason), "VPA skipped");
                }
                for vpa in report.vpas.iter().take(MAX_SKIP_LINES) {
                    tracing::debug!(vpa = %format!("{}/{}", capped(&vpa.namespace), capped(&vpa.name)),
                        mode = %vpa.mode, pods = vpa.pods.len(), "VPA considered");
                }
                tracing::info!(
                    evictions = report.evictions,
                    resizes = report.resizes,
                    vpas = report.vpas.len(),
                    skipped_vpas = report.skipped_vpas.len(),
                    pods = report.vpas.iter().map(|v| v.pods.len()).sum::<usize>(),
                    "iteration done"
                );
            }
        }
        health.last_iteration.store(unix_now(), Ordering::Relaxed);
    }
    if let Some(h) = holder {
        h.abort();
    }
    if let Some(e) = &elector {
        release_lease(e, args.shutdown_timeout).await;
    }
    if lease_lost {
        bail!("leader lease lost");
    }
    Ok(())
}

/// Gives the leader lease up within `budget`.
async fn release_lease(e: &LeaderElector, budget: Duration) {
    match tokio::time::timeout(budget, e.release()).await {
        Ok(Ok(())) => tracing::info!("leader lease released"),
        Ok(Err(err)) => tracing::warn!(error = %err, "could not release the leader lease"),
        Err(_) => tracing::warn!(?budget, "releasing the leader lease timed out"),
    }
}
