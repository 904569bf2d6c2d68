//! Tailor profiles: named estimation settings that replace some of upstream's recommender flags for one VPA
//! (annotation [`PROFILE_ANNOTATION`]) or for all (the `--profile` flag). `upstream` changes nothing.
//!
//! A profile touches only per-VPA estimation settings ([`RecommenderConfig`]): percentiles, the safety margin,
//! the pod minimums, whether CPU follows the time of day or is priced against its risk, and whether memory
//! sits closer over steady peaks. Model settings (half-lives, the memory peak window, whether hourly CPU
//! histograms are kept) are shared by every VPA of a model and stay the flags'. The numbers come from
//! `tailor backtest` on the workload suite (docs/profiles.md).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::day_plan::ChangePrice;
use crate::estimate::{DailyRule, RecommenderConfig, TimeOfDay};
use crate::risk_price::RiskPrice;
use crate::stable_memory::StablePeaks;

/// VPA annotation that selects a profile for that VPA.
pub const PROFILE_ANNOTATION: &str = "tailor.dev/profile";
/// Name of the profile that keeps the flags' (upstream's) numbers.
pub const UPSTREAM: &str = "upstream";

/// A named set of estimation overrides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Name used in the annotation, `--profile` and `--strategy`.
    pub name: &'static str,
    /// One line on what it trades.
    pub summary: &'static str,
    /// Target CPU percentile.
    pub target_cpu_percentile: f64,
    /// Target memory percentile (of daily peaks).
    pub target_memory_percentile: f64,
    /// Safety margin added to both targets and bounds.
    pub safety_margin_fraction: f64,
    /// Pod minimum CPU (millicores), split across containers.
    pub pod_min_cpu_millicores: f64,
    /// Pod minimum memory (MiB), split across containers.
    pub pod_min_memory_mb: f64,
    /// CPU that follows the daily curve (needs the model's hourly histograms and in-place updates).
    pub cpu_time_of_day: Option<TimeOfDay>,
    /// The all-day CPU target priced against its risk on the container's own history (`None`: upstream's
    /// percentile and margin).
    pub cpu_risk_price: Option<RiskPrice>,
    /// Memory at a small margin over daily peaks that hold steady (`None`: upstream's percentile and margin
    /// everywhere).
    pub memory_stable_peaks: Option<StablePeaks>,
}

/// Tailor's profiles, besides `upstream`.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "cautious",
        summary: "a higher percentile with a smaller margin: fewer CPU risk minutes than upstream for a few \
                  per cent more waste (called `balanced` before: it is not a middle way on cost)",
        target_cpu_percentile: 0.95,
        target_memory_percentile: 0.95,
        safety_margin_fraction: 0.05,
        pod_min_cpu_millicores: 10.0,
        pod_min_memory_mb: 64.0,
        cpu_time_of_day: None,
        cpu_risk_price: None,
        memory_stable_peaks: None,
    },
    Profile {
        name: "saver",
        summary: "about a quarter less waste than upstream for about three times the CPU risk minutes",
        target_cpu_percentile: 0.9,
        target_memory_percentile: 0.95,
        safety_margin_fraction: 0.0,
        pod_min_cpu_millicores: 10.0,
        pod_min_memory_mb: 64.0,
        cpu_time_of_day: None,
        cpu_risk_price: None,
        memory_stable_peaks: None,
    },
    Profile {
        name: "diurnal",
        summary: "CPU follows the daily curve (in-place resizes): about a quarter less waste than upstream \
                  with a fifth of its CPU risk minutes; memory as upstream",
        target_cpu_percentile: 0.9,
        target_memory_percentile: 0.9,
        safety_margin_fraction: 0.15,
        pod_min_cpu_millicores: 10.0,
        pod_min_memory_mb: 64.0,
        cpu_time_of_day: Some(TimeOfDay {
            percentile: 0.95,
            margin: 0.05,
            ahead: 3 * HOUR,
            lower_ahead: HOUR,
            lower_margin: 0.0,
            upper_margin: 0.5,
            only_if: None,
            risk_budget: None,
            plan: None,
        }),
        cpu_risk_price: None,
        memory_stable_peaks: None,
    },
    Profile {
        name: AUTO,
        summary: "decides per container from its own history: the CPU request that minimises unused CPU + \
                  3.75 core-minutes per minute above it (large containers nearer their usual load, small ones \
                  above every peak); where a strong daily pattern repeats, a day request and a night request, \
                  each priced over its hours, when the CPU they free pays for their two resizes a day; \
                  memory 5 % over the highest daily peak where the peaks hold steady, upstream's elsewhere",
        target_cpu_percentile: 0.9,
        target_memory_percentile: 0.9,
        safety_margin_fraction: 0.15,
        pod_min_cpu_millicores: 25.0,
        pod_min_memory_mb: 250.0,
        cpu_time_of_day: Some(TimeOfDay {
            percentile: 0.95,
            margin: 0.0,
            ahead: 9 * HOUR,
            lower_ahead: HOUR,
            lower_margin: -0.1,
            upper_margin: 0.1,
            only_if: Some(DailyRule {
                min_autocorrelation: 0.6,
                min_stability: 0.6,
                min_swing: 2.5,
                min_amplitude: 0.0,
            }),
            risk_budget: None,
            plan: Some(ChangePrice {
                core_hours: 0.8,
                max_steps: 2,
            }),
        }),
        cpu_risk_price: Some(RiskPrice {
            price: 3.75,
            upper_margin: Some(0.1),
        }),
        memory_stable_peaks: Some(StablePeaks {
            max_spread: 0.1,
            margin: 0.05,
            min_days: 1.0,
        }),
    },
];

/// Name of the profile that decides per container ([`PROFILES`]).
pub const AUTO: &str = "auto";

const HOUR: i64 = 3_600_000_000_000;

/// Former profile names, still accepted wherever a name is (annotation, `--profile`, `--strategy`): (old,
/// current).
pub const ALIASES: &[(&str, &str)] = &[("balanced", "cautious")];

/// The current name for `name` (itself unless it is a former name in [`ALIASES`]).
pub fn canonical(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(old, _)| *old == name)
        .map_or(name, |(_, new)| new)
}

/// A profile name that is neither `upstream` nor one of [`PROFILES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile {name:?} (known: {})", known_names().join(", "))]
pub struct UnknownProfile {
    /// The name asked for (truncated to 64 bytes).
    pub name: String,
}

/// `upstream` and every profile name.
pub fn known_names() -> Vec<&'static str> {
    std::iter::once(UPSTREAM)
        .chain(PROFILES.iter().map(|p| p.name))
        .collect()
}

/// The profile called `name`; `Ok(None)` for `upstream`.
pub fn by_name(name: &str) -> Result<Option<&'static Profile>, UnknownProfile> {
    let asked = name;
    let name = canonical(name);
    if name == UPSTREAM {
        return Ok(None);
    }
    PROFILES
        .iter()
        .find(|p| p.name == name)
        .map(Some)
        .ok_or_else(|| UnknownProfile {
            name: asked.chars().take(64).collect(),
        })
}

/// The profile a VPA's annotations select: `Ok(None)` when the annotation is absent or `upstream`.
pub fn from_annotations(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<&'static Profile>, UnknownProfile> {
    match annotations.get(PROFILE_ANNOTATION) {
        Some(n) => by_name(n.trim()),
        None => Ok(None),
    }
}

impl Profile {
    /// `base` with this profile's settings; everything else (bounds, rounding, caps) stays.
    pub fn apply(&self, base: &RecommenderConfig) -> RecommenderConfig {
        RecommenderConfig {
            target_cpu_percentile: self.target_cpu_percentile,
            target_memory_percentile: self.target_memory_percentile,
            safety_margin_fraction: self.safety_margin_fraction,
            pod_min_cpu_millicores: self.pod_min_cpu_millicores,
            pod_min_memory_mb: self.pod_min_memory_mb,
            cpu_time_of_day: self.cpu_time_of_day,
            cpu_risk_price: self.cpu_risk_price,
            memory_stable_peaks: self.memory_stable_peaks,
            ..base.clone()
        }
    }
}

/// The configuration for a VPA: `base` with the annotation's profile if it names one, else `global`'s.
pub fn config_for<'a>(
    base: &'a RecommenderConfig,
    global: Option<&Profile>,
    annotations: &BTreeMap<String, String>,
) -> Result<Cow<'a, RecommenderConfig>, UnknownProfile> {
    let chosen = if annotations.contains_key(PROFILE_ANNOTATION) {
        from_annotations(annotations)?
    } else {
        global
    };
    Ok(match chosen {
        Some(p) => Cow::Owned(p.apply(base)),
        None => Cow::Borrowed(base),
    })
}
