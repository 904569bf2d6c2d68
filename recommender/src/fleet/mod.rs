//! Fleet onboarding in the recommender's leader: one Tailor VPA for each workload of a chosen namespace
//! (docs/fleet.md). The rules are [`tailor_core::fleet`]'s; this module feeds them and applies their plan.
//!
//! - [`sources`]: the namespaces and the workloads of the covered kinds, watched (only when the feature
//!   is on), trimmed to what the rules read.
//! - [`controller`]: the pass — plan, report (events, metrics, log), write within the token bucket.
//! - [`metrics`]: the `tailor_fleet_*` metrics.
//! - [`writer`]: the writes (server-side apply as `tailor-fleet`, deletes with a UID precondition) and
//!   the events, behind a trait the tests implement.

pub mod controller;
pub mod metrics;
pub mod sources;
pub mod writer;

use std::collections::BTreeSet;
use std::time::Duration;

use tailor_core::fleet::FleetSettings;
use tailor_core::fleet::namespace_policy::parse_mode;

pub use controller::FleetController;
pub use sources::{CoveredKind, FleetView};

/// The field manager of the fleet's writes.
pub const FIELD_MANAGER: &str = "tailor-fleet";
/// The namespace always protected, besides Tailor's own.
pub const KUBE_SYSTEM: &str = "kube-system";

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// The fleet's flags (`--fleet-*`).
#[derive(Debug, Clone, clap::Args)]
pub struct FleetFlags {
    /// Create one Tailor VPA for each workload of namespaces labelled `tailor.dev/vpa=<mode>` (and of those
    /// `--fleet-namespace-selector` chooses). Namespace annotations `tailor.dev/profile`,
    /// `tailor.dev/min-allowed`, `tailor.dev/max-allowed`, `tailor.dev/controlled-values` and
    /// `tailor.dev/min-replicas` set the created VPAs' defaults; a workload annotated `tailor.dev/vpa:
    /// "false"` gets none, one annotated with a mode gets that mode (docs/fleet.md).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub fleet_enabled: bool,
    /// Label selector (`env in (dev,staging)`) choosing namespaces without their own `tailor.dev/vpa`
    /// label; they get `--fleet-default-mode`. Empty: only labelled namespaces.
    #[arg(long, default_value = "")]
    pub fleet_namespace_selector: String,
    /// The mode of namespaces chosen by `--fleet-namespace-selector`.
    #[arg(long, default_value = "Off")]
    pub fleet_default_mode: String,
    /// Namespaces never onboarded unless named in `--fleet-allow-namespace` (repeatable); Tailor's own
    /// namespace (the `NAMESPACE` environment variable, which the chart sets) is always added.
    #[arg(long, default_values_t = [KUBE_SYSTEM.to_owned()])]
    pub fleet_protected_namespace: Vec<String>,
    /// A protected namespace that may be onboarded all the same (repeatable).
    #[arg(long)]
    pub fleet_allow_namespace: Vec<String>,
    /// A further kind to cover, `group/version/Kind` (repeatable); it must serve `/scale`. Deployments,
    /// StatefulSets, DaemonSets, CronJobs and Argo Rollouts (when served) are always covered.
    #[arg(long)]
    pub fleet_kind: Vec<String>,
    /// VPA creations, changes and deletions per second (token bucket).
    #[arg(long, default_value_t = 5.0)]
    pub fleet_qps: f64,
    /// Writes the bucket saves up.
    #[arg(long, default_value_t = 10)]
    pub fleet_burst: u32,
    /// Longest time between two passes (a namespace or workload change starts one at once).
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub fleet_resync_interval: Duration,
}

/// The fleet's checked settings.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// What the rules read.
    pub settings: FleetSettings,
    /// Kinds covered.
    pub kinds: Vec<CoveredKind>,
    /// Writes per second.
    pub qps: f64,
    /// Burst.
    pub burst: u32,
    /// Longest time between passes.
    pub resync: Duration,
}

impl FleetFlags {
    /// The checked settings (`None` when the feature is off); `own_namespace` is Tailor's (protected).
    pub fn config(
        &self,
        own_namespace: Option<&str>,
        profiles: Vec<String>,
    ) -> Result<Option<FleetConfig>, String> {
        if !self.fleet_enabled {
            return Ok(None);
        }
        let default_mode = parse_mode(&self.fleet_default_mode).ok_or_else(|| {
            format!(
                "--fleet-default-mode {:?} is not a mode (one of {})",
                self.fleet_default_mode,
                tailor_core::fleet::namespace_policy::MODES.join(", ")
            )
        })?;
        let selector = self.fleet_namespace_selector.trim();
        let namespace_selector = if selector.is_empty() {
            None
        } else {
            let parsed = tailor_core::label_selector::parse(selector)
                .map_err(|e| format!("--fleet-namespace-selector: {e}"))?;
            Some(parsed)
        };
        let mut protected: BTreeSet<String> =
            self.fleet_protected_namespace.iter().cloned().collect();
        protected.extend(own_namespace.filter(|n| !n.is_empty()).map(str::to_owned));
        for allowed in &self.fleet_allow_namespace {
            protected.remove(allowed);
        }
        if !(self.fleet_qps > 0.0 && self.fleet_qps.is_finite()) {
            return Err(format!(
                "--fleet-qps must be above 0, not {}",
                self.fleet_qps
            ));
        }
        let mut kinds = CoveredKind::builtin();
        for k in &self.fleet_kind {
            kinds.push(CoveredKind::parse(k).map_err(|e| format!("--fleet-kind {k:?}: {e}"))?);
        }
        Ok(Some(FleetConfig {
            settings: FleetSettings {
                namespace_selector,
                default_mode: Some(default_mode),
                protected,
                profiles,
            },
            kinds,
            qps: self.fleet_qps,
            burst: self.fleet_burst.max(1),
            resync: self.fleet_resync_interval.max(Duration::from_secs(1)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        fleet: FleetFlags,
    }

    fn config(args: &[&str]) -> Result<Option<FleetConfig>, String> {
        let all = std::iter::once("x").chain(args.iter().copied());
        let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
        cli.fleet.config(Some("tailor"), vec!["upstream".into()])
    }

    #[test]
    fn off_by_default_and_checked_when_on() {
        assert!(config(&[]).expect("valid").is_none());
        let c = config(&["--fleet-enabled"]).expect("valid").expect("on");
        assert_eq!(
            c.settings.protected,
            BTreeSet::from(["kube-system".to_owned(), "tailor".to_owned()])
        );
        assert!(c.settings.namespace_selector.is_none());
        assert_eq!(c.kinds.len(), 5);
        let c = config(&[
            "--fleet-enabled",
            "--fleet-allow-namespace",
            "kube-system",
            "--fleet-namespace-selector",
            "env=dev",
            "--fleet-kind",
            "example.com/v1/Widget",
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(c.settings.protected, BTreeSet::from(["tailor".to_owned()]));
        assert!(c.settings.namespace_selector.is_some());
        assert_eq!(c.kinds.last().map(|k| k.kind.as_str()), Some("Widget"));
        for (bad, says) in [
            (
                &["--fleet-enabled", "--fleet-default-mode", "Auto"][..],
                "not a mode",
            ),
            (
                &["--fleet-enabled", "--fleet-namespace-selector", "a in (b"][..],
                "--fleet-namespace-selector",
            ),
            (&["--fleet-enabled", "--fleet-qps", "0"][..], "--fleet-qps"),
            (
                &["--fleet-enabled", "--fleet-kind", "Widget"][..],
                "--fleet-kind",
            ),
        ] {
            let err = config(bad).expect_err("refused");
            assert!(err.contains(says), "{err}");
        }
    }
}
