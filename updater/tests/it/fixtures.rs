//! Settings the updater's snapshot tests share: one `tailor plan` iteration at a fixed time, no rate limit,
//! a single replica enough to act on, every request change large enough to matter.

use std::time::Duration;

use tailor_kube::rate::RateSettings;
use tailor_updater::decisions::config::{FeatureGates, RestrictionConfig};
use tailor_updater::iteration::IterationConfig;
use tailor_updater::preview::plan::PlanSettings;

/// A plan at 2026-01-10 12:00 with upstream's iteration defaults.
pub fn plan_settings() -> PlanSettings {
    PlanSettings {
        iteration: IterationConfig::default(),
        restriction: RestrictionConfig {
            min_replicas: 1,
            eviction_tolerance: 1.0,
            ..RestrictionConfig::default()
        },
        rate: RateSettings::from_flags(-1.0, 1),
        interval: Duration::from_secs(60),
        status_lease: None,
        now: "2026-01-10T12:00:00Z".parse().unwrap(),
        floor: None,
        resize_rules: Default::default(),
    }
}

/// [`plan_settings`] with in-place updates on, honouring a deferred resize when `honours_deferrals`.
pub fn in_place_plan_settings(honours_deferrals: bool) -> PlanSettings {
    let mut s = plan_settings();
    s.iteration = IterationConfig {
        gates: FeatureGates {
            in_place: true,
            ..FeatureGates::default()
        },
        in_place_honours_deferrals: honours_deferrals,
        ..IterationConfig::default()
    };
    s
}
