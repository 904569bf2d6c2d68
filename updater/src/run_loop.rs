//! The updater's iteration as the binary runs it: the webhook-liveness check
//! (docs/design/upstream-updater.md §1.2 step 1), then [`run_once`] over the caches with the API actuator, then
//! the metrics.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tailor_crds::VerticalPodAutoscaler;

use crate::iteration::{Actuator, ClusterView, IterationConfig, Report, UpdaterState, run_once};
use crate::process::metrics::{IterationGauges, Metrics};
use crate::views::cache_view::CacheView;
use crate::views::lease;
use crate::views::pods::{self, CachedPod};
use crate::writers::api_actuator::ApiActuator;

/// Whether the admission webhook is known to be alive: upstream's `StatusValidator`
/// (docs/design/upstream-updater.md §1.2 step 1). The binary reads the webhook's status Lease ([`StatusCheck`]);
/// the conformance vectors give the validator's answer (`config.admissionControllerStatusValid`).
pub trait AdmissionStatus {
    /// `Ok` when the webhook's status is valid at `now`; `Err` says why not (the iteration then does
    /// nothing).
    fn check(&self, now: Timestamp) -> impl Future<Output = Result<(), String>>;
}

/// Where the webhook's status Lease is and how long a renewal counts.
#[derive(Clone)]
pub struct StatusCheck {
    /// The Lease's namespace.
    pub api: Api<Lease>,
    /// The Lease's name.
    pub name: String,
    /// Validity after creation or renewal.
    pub timeout: Duration,
}

impl AdmissionStatus for StatusCheck {
    /// Reads the Lease (retrying what [`lease::is_retryable`] accepts) and checks its freshness.
    async fn check(&self, now: Timestamp) -> Result<(), String> {
        let fetched =
            lease::fetch_with_retry(|| self.api.get(&self.name), tokio::time::sleep).await;
        match fetched {
            Ok(l) if lease::is_valid(&l, self.timeout, now) => Ok(()),
            Ok(_) => Err(format!(
                "status lease {} is older than {:?}",
                self.name, self.timeout
            )),
            Err(e) => Err(format!("Error getting Admission Controller status: {e}")),
        }
    }
}

/// What one iteration did.
#[derive(Debug)]
pub enum Outcome {
    /// The webhook is not known to be alive: nothing was done.
    AdmissionNotAlive(String),
    /// The iteration ran.
    Ran(Report),
}

/// `vpas` in namespace/name order: the order the binary and `tailor plan` both hand to an iteration, so
/// that ties (equal priorities, the rate limit's share) fall the same way in both (docs/decisions/plan-parity.md;
/// a cache's own order is a hash map's).
pub fn vpas_in_key_order(
    mut vpas: Vec<Arc<VerticalPodAutoscaler>>,
) -> Vec<Arc<VerticalPodAutoscaler>> {
    vpas.sort_unstable_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    vpas
}

/// `pods` in namespace/name order (see [`vpas_in_key_order`]).
pub fn pods_in_key_order(mut pods: Vec<Arc<CachedPod>>) -> Vec<Arc<CachedPod>> {
    pods.sort_unstable_by(|a, b| pods::pod_key(a).cmp(pods::pod_key(b)));
    pods
}

/// Records `event` on `vpa` (`key`) unless `announced` says it was already recorded with this message
/// (the VPA cache may not show the condition written yet).
pub fn announce<A: Actuator>(
    actuator: &mut A,
    announced: &mut std::collections::HashMap<(String, String), String>,
    vpa: &VerticalPodAutoscaler,
    key: (String, String),
    event: Option<crate::writers::events::UpdaterEvent>,
) {
    let Some(event) = event else {
        return;
    };
    if announced.get(&key) != Some(&event.message) {
        announced.insert(key, event.message.clone());
        actuator.vpa_event(vpa, event);
    }
}

/// Most `UpdatesBlocked` condition writes per iteration.
pub const MAX_CONDITION_WRITES: usize = 100;

/// Lists the objects an iteration reads.
pub type Lister<T> = Box<dyn Fn() -> Vec<Arc<T>> + Send + Sync>;

/// The updater: caches, state kept between iterations and the API. The binary runs the defaults (its
/// caches, the API, the status Lease); `tailor plan --case` and the conformance vectors run the same
/// iteration over upstream's test doubles.
pub struct Updater<V = CacheView, A = ApiActuator, S = StatusCheck> {
    /// Iteration settings.
    pub config: IterationConfig,
    /// State kept between iterations.
    pub state: UpdaterState,
    /// Cached lookups.
    pub view: V,
    /// API calls.
    pub actuator: A,
    /// The status check (`None` with `--use-admission-controller-status=false`).
    pub status: Option<S>,
    /// Lists VPAs.
    pub vpas: Lister<VerticalPodAutoscaler>,
    /// Lists pods.
    pub pods: Lister<CachedPod>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

impl<V: ClusterView, A: Actuator, S: AdmissionStatus> Updater<V, A, S> {
    /// Whether the webhook is alive at `now` (`Err` says why not); always with no status check.
    pub async fn admission_alive(&self, now: Timestamp) -> Result<(), String> {
        match &self.status {
            Some(check) => check.check(now).await,
            None => Ok(()),
        }
    }

    /// Sets or clears the `UpdatesBlocked` condition of the VPAs whose answer changed, at most
    /// [`MAX_CONDITION_WRITES`] per iteration (the rest follow in the next ones); a failed write is logged
    /// and tried again next iteration. Each written change that blocks a VPA is announced by one event with
    /// the condition's text ([`announce`]).
    async fn write_conditions(
        &mut self,
        vpas: &[Arc<VerticalPodAutoscaler>],
        report: &Report,
        now: Timestamp,
    ) {
        let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
        let announced = &mut self.state.announced;
        announced
            .retain(|key, _| report.blocked.contains_key(key) || report.undecided.contains(key));
        let mut writes = 0;
        for vpa in vpas {
            if writes >= MAX_CONDITION_WRITES {
                break;
            }
            let key = (
                vpa.metadata.namespace.clone().unwrap_or_default(),
                vpa.metadata.name.clone().unwrap_or_default(),
            );
            if report.undecided.contains(&key) {
                continue;
            }
            let Some(change) =
                crate::decisions::conditions::change(vpa, report.blocked.get(&key), &time)
            else {
                continue;
            };
            writes += 1;
            match self.actuator.set_conditions(vpa, change.conditions).await {
                Ok(()) => announce(&mut self.actuator, announced, vpa, key, change.event),
                Err(e) => tracing::warn!(vpa = %format!("{}/{}", key.0, key.1), error = %e,
                    "could not write the UpdatesBlocked condition"),
            }
        }
    }

    /// One iteration at `now`, whose rate-limiter waits end by `deadline`.
    pub async fn iterate(&mut self, now: Timestamp, deadline: tokio::time::Instant) -> Outcome {
        let started = tokio::time::Instant::now();
        if let Err(why) = self.admission_alive(now).await {
            self.metrics.admission_alive.set(0);
            return Outcome::AdmissionNotAlive(why);
        }
        self.metrics.admission_alive.set(1);
        self.actuator.set_deadline(deadline);
        self.view.begin_iteration(now);
        let vpas = (self.vpas)();
        self.metrics
            .observe_step("ListVPAs", started.elapsed().as_secs_f64());
        let mut gauges = IterationGauges::default();
        let pods = &self.pods;
        let mut live_keys: std::collections::HashSet<Arc<str>> = std::collections::HashSet::new();
        let report = run_once(
            &self.config,
            &mut self.state,
            &self.view,
            &mut self.actuator,
            &vpas,
            || {
                let list = pods();
                live_keys = list.iter().map(|p| pods::shared_key(p)).collect();
                list
            },
            now,
            &mut gauges,
            Some(&self.metrics),
        )
        .await;
        if report.pods_listed {
            self.metrics.publish(&gauges);
            self.state.timers.retain(|k| live_keys.contains(k));
        }
        self.write_conditions(&vpas, &report, now).await;
        self.metrics
            .observe_step("total", started.elapsed().as_secs_f64());
        self.metrics
            .last_iteration_timestamp
            .set(Timestamp::now().as_second());
        Outcome::Ran(report)
    }
}
