//! The updater's flag group (docs/design/upstream-updater.md §6), shared by the `tailor-updater` binary and
//! `tailor plan`, and the binary's whole command line ([`Flags`]), which [`crate::process::settings`] validates.

use std::time::Duration;

use clap::{Args, Parser};
use tailor_kube::client::ClientFlags;
use tailor_kube::leader::LeaderFlags;
use tailor_kube::listen::ListenFlags;
use tailor_kube::log::LogFlags;

use crate::decisions::config::{FeatureGates, PriorityConfig, RestrictionConfig};
use crate::iteration::IterationConfig;

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{v} is not within [0, 1]"));
    }
    Ok(v)
}

fn non_negative(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{v} must be a finite number ≥ 0"));
    }
    Ok(v)
}

fn rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_nan() {
        return Err("NaN is not a rate".into());
    }
    Ok(v)
}

/// Tailor's updater. Flag names and defaults follow the upstream VPA updater.
#[derive(Debug, Parser)]
#[command(name = "tailor-updater", version, about)]
#[command(mut_arg("address", |a| a.default_value(":8943")
    .help("Address of the HTTP server for `/metrics`, `/healthz` and `/readyz` (`:8943` = all interfaces)")))]
#[command(mut_arg("leader_elect_lease_name", |a| a.default_value("tailor-updater")))]
#[command(mut_arg("leader_elect_identity", |a| a.default_value("tailor-updater")))]
pub struct Flags {
    /// `--address`.
    #[command(flatten)]
    pub listen: ListenFlags,
    /// Period of the main loop; also each iteration's deadline.
    #[arg(long, value_parser = positive_duration, default_value = "1m")]
    pub updater_interval: Duration,
    /// The decision flags (shared with `tailor plan`).
    #[command(flatten)]
    pub updater: UpdaterFlags,
    /// The webhook's status Lease.
    #[command(flatten)]
    pub status: AdmissionStatusFlags,
    /// Only handle VPAs (and watch objects) in this namespace.
    #[arg(long, default_value = "")]
    pub vpa_object_namespace: String,
    /// Comma-separated namespaces whose VPAs are ignored.
    #[arg(long, default_value = "")]
    pub ignored_vpa_object_namespaces: String,
    /// `--kubeconfig` and the API client's rate.
    #[command(flatten)]
    pub client: ClientFlags,
    /// `--leader-elect` and the lease flags.
    #[command(flatten)]
    pub leader: LeaderFlags,
    /// After SIGTERM, the iteration in progress is abandoned and the leader lease released within this
    /// long. Keep the pod's `terminationGracePeriodSeconds` above it.
    #[arg(long, value_parser = positive_duration, default_value = "20s")]
    pub shutdown_timeout: Duration,
    /// `--log-format`, `--log-level`.
    #[command(flatten)]
    pub log: LogFlags,
}

/// Decision settings of the updater.
#[derive(Args, Debug, Clone)]
pub struct UpdaterFlags {
    /// Minimum live pods per controller before any pod of it is disrupted (per VPA: `updatePolicy.minReplicas`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i32).range(1..), help_heading = "Disruption budget")]
    pub min_replicas: i32,
    /// Fraction of a controller's replicas that may be disrupted at once.
    #[arg(long, default_value = "0.5", value_parser = fraction, help_heading = "Disruption budget")]
    pub eviction_tolerance: f64,
    /// In-place modes resize pods whose resize restarts no container without consulting the budget.
    #[arg(long, help_heading = "Disruption budget")]
    pub in_place_skip_disruption_budget: bool,
    /// Count only Ready pods as running (a pod whose `Ready` condition is `False` is down already); `false`:
    /// upstream's count of Running pods.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, help_heading = "Disruption budget")]
    pub count_readiness: bool,
    /// Most pods of one DaemonSet disrupted at once (node agents; the chart sets 1); 0: upstream's
    /// `--eviction-tolerance` (half of them).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..), help_heading = "Disruption budget")]
    pub daemonset_max_unavailable: i32,
    /// Evict pods of Jobs, as upstream; an evicted Job pod counts against the Job's `backoffLimit`, so the
    /// chart sets `false` (they are then left alone; in-place resizes still apply).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, help_heading = "Disruption budget")]
    pub evict_job_pods: bool,
    /// Quota fit: resize a pod in place only when the whole raise fits its namespace's
    /// ResourceQuota headroom, and do not evict a pod whose replacement the webhook's quota fit would give
    /// the requests it has now. Watches ResourceQuotas (needs list/watch on them). No effect in namespaces
    /// without a ResourceQuota.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, help_heading = "Disruption budget")]
    pub quota_fit: bool,
    /// Evictions (and, separately, in-place resizes) per second; ≤ 0 means unlimited.
    #[arg(long, default_value = "-1", value_parser = rate, allow_hyphen_values = true, help_heading = "Disruption budget")]
    pub eviction_rate_limit: f64,
    /// Token-bucket burst of both rate limits (ignored when unlimited).
    #[arg(long, default_value_t = 1, help_heading = "Disruption budget")]
    pub eviction_rate_burst: u32,
    /// Least relative change worth updating a pod whose requests are within the recommended range.
    #[arg(long, default_value = "0.1", value_parser = non_negative, help_heading = "When to update")]
    pub pod_update_threshold: f64,
    /// Pods within the recommended range younger than this are left alone.
    #[arg(long, default_value = "12h", value_parser = duration, help_heading = "When to update")]
    pub in_recommendation_bounds_eviction_lifetime_threshold: Duration,
    /// A container OOM-killed after running less than this makes its pod eligible at any age.
    #[arg(long, default_value = "10m", value_parser = duration, help_heading = "When to update")]
    pub evict_after_oom_threshold: Duration,
    /// `InPlaceOrRecreate`: how long a resize the kubelet deferred (no room on the node yet) waits before the
    /// pod is evicted instead (upstream's fixed 5 minutes).
    #[arg(long, default_value = "5m", value_parser = positive_duration, help_heading = "When to update")]
    pub in_place_deferred_timeout: Duration,
    /// `InPlaceOrRecreate`: how long a resize in progress waits before the pod is evicted instead (upstream's
    /// fixed hour).
    #[arg(long, default_value = "1h", value_parser = positive_duration, help_heading = "When to update")]
    pub in_place_in_progress_timeout: Duration,
    /// Alpha features: `CPUStartupBoost`, `InPlace`, `PerVPAConfig` (`Name=true,…`; `AllAlpha=true`).
    #[arg(long, default_value = "", value_parser = FeatureGates::parse, help_heading = "When to update")]
    pub feature_gates: FeatureGates,
    /// Update pods that declare pod-level resources (`spec.resources`) whose pod-level requests stray from
    /// their VPA's `tailor.dev/pod` envelope (published by a recommender run with the same flag) as a
    /// container's would: by eviction in `Recreate` and `Auto` modes, within the usual budgets; never in
    /// place (`InPlaceOrRecreate` leaves such pods as its resize check already does). Run the webhook with the
    /// same flag, which sets the envelope at creation (docs/pod-level-resources.md).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, help_heading = "When to update")]
    pub pod_level_resources: bool,
    /// Comma-separated namespaces the webhook does not serve (the chart passes its release namespace,
    /// `kube-system` and `admission.webhook.excludeNamespaces`): their VPAs' pods are left alone, since an
    /// evicted pod would come back unchanged.
    #[arg(long, default_value = "", value_parser = namespaces, help_heading = "Webhook scope")]
    pub webhook_excluded_namespaces: Namespaces,
    /// The webhook's `objectSelector` as JSON (the chart passes `admission.webhook.objectSelector`): pods it
    /// does not select are left alone.
    #[arg(long, default_value = "", value_parser = object_selector, help_heading = "Webhook scope")]
    pub webhook_object_selector: ObjectSelector,
    /// The webhook's extra `namespaceSelector` terms as JSON (the chart passes
    /// `admission.webhook.namespaceSelector`): pods of namespaces it does not select are left alone (the
    /// updater then watches namespaces).
    #[arg(long, default_value = "", value_parser = object_selector, help_heading = "Webhook scope")]
    pub webhook_namespace_selector: ObjectSelector,
    /// Act on no VPA of a workload that several VPAs (of any mode but `Off`) target, and warn on each
    /// (upstream evicts by one while the webhook sizes by another: an endless loop).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, help_heading = "Webhook scope")]
    pub skip_conflicting_vpas: bool,
    /// After a replacement of an evicted pod comes back without Tailor's webhook (the API server does not
    /// reach it), the workload's evictions pause; one probe eviction is let through this often until a
    /// replacement comes back sized.
    #[arg(long, default_value = "2m", value_parser = duration, help_heading = "Webhook scope")]
    pub unsized_replacement_probe_interval: Duration,
    /// The webhook's pod floor: resizes never go below it, and priorities see the floored range.
    #[command(flatten)]
    pub floor: tailor_kube::floor_flags::PodFloorFlags,
}

/// The parsed `--webhook-excluded-namespaces`.
#[derive(Clone, Debug, Default)]
pub struct Namespaces(pub Vec<String>);

/// A parsed `--webhook-object-selector` or `--webhook-namespace-selector` (`None`: everything).
#[derive(Clone, Debug, Default)]
pub struct ObjectSelector(
    pub Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
);

fn namespaces(s: &str) -> Result<Namespaces, String> {
    crate::decisions::scope::parse_namespaces(s)
        .map(Namespaces)
        .map_err(|e| e.to_string())
}

fn object_selector(s: &str) -> Result<ObjectSelector, String> {
    crate::decisions::scope::parse_selector(s)
        .map(ObjectSelector)
        .map_err(|e| e.to_string())
}

impl UpdaterFlags {
    /// `--feature-gates` with `--pod-level-resources`.
    pub fn gates(&self) -> FeatureGates {
        FeatureGates {
            pod_level_resources: self.pod_level_resources,
            ..self.feature_gates
        }
    }

    /// The iteration settings these flags describe, with Tailor's improvements on.
    pub fn iteration_config(&self, ignored_namespaces: &str) -> IterationConfig {
        IterationConfig {
            priority: PriorityConfig {
                min_change_priority: self.pod_update_threshold,
                pod_lifetime_update_threshold: self
                    .in_recommendation_bounds_eviction_lifetime_threshold,
                evict_after_oom_threshold: self.evict_after_oom_threshold,
                quick_oom_max_age: Some(self.in_recommendation_bounds_eviction_lifetime_threshold),
            },
            gates: self.gates(),
            ignored_namespaces: ignored_namespaces
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            in_place_honours_deferrals: true,
            fair_order: true,
            webhook_scope: crate::decisions::scope::WebhookScope {
                excluded_namespaces: self.webhook_excluded_namespaces.0.clone(),
                object_selector: self.webhook_object_selector.0.clone(),
                namespace_selector: self.webhook_namespace_selector.0.clone(),
            },
            skip_conflicting_vpas: self.skip_conflicting_vpas,
            unsized_replacement_probe_interval: Some(self.unsized_replacement_probe_interval),
        }
    }

    /// The budget settings these flags describe.
    pub fn restriction_config(&self) -> RestrictionConfig {
        RestrictionConfig {
            min_replicas: self.min_replicas,
            eviction_tolerance: self.eviction_tolerance,
            in_place_skip_disruption_budget: self.in_place_skip_disruption_budget,
            timers_from_patch: true,
            count_readiness: self.count_readiness,
            daemonset_max_unavailable: self.daemonset_max_unavailable,
            evict_job_pods: self.evict_job_pods,
            deferred_timeout: self.in_place_deferred_timeout,
            in_progress_timeout: self.in_place_in_progress_timeout,
        }
    }
}

/// Settings of the webhook's status lease check.
#[derive(Args, Debug, Clone)]
pub struct AdmissionStatusFlags {
    /// Act only while the webhook's status Lease is fresh.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, help_heading = "Webhook liveness")]
    pub use_admission_controller_status: bool,
    /// Name of the webhook's status Lease.
    #[arg(
        long,
        default_value = "tailor-admission",
        help_heading = "Webhook liveness"
    )]
    pub admission_controller_status_lease_name: String,
    /// Namespace of that Lease (default: `$NAMESPACE`, else `kube-system`).
    #[arg(long, default_value = "", help_heading = "Webhook liveness")]
    pub admission_controller_status_lease_namespace: String,
    /// How long a renewal keeps the webhook alive.
    #[arg(long, default_value = "1m", value_parser = positive_duration, help_heading = "Webhook liveness")]
    pub admission_controller_status_lease_timeout: Duration,
}

impl AdmissionStatusFlags {
    /// The Lease namespace: the flag, else `$NAMESPACE`, else `kube-system`.
    pub fn namespace(&self) -> String {
        if !self.admission_controller_status_lease_namespace.is_empty() {
            return self.admission_controller_status_lease_namespace.clone();
        }
        match std::env::var("NAMESPACE") {
            Ok(ns) if !ns.is_empty() => ns,
            _ => "kube-system".into(),
        }
    }
}
