//! Which VPAs this recommender handles, and the log of VPAs that stay without a recommendation: pure
//! decisions the loop takes for every VPA.

use tailor_engine::units::Nanos;

/// Name of the default recommender (`spec.recommenders` empty or listing it).
pub const DEFAULT_RECOMMENDER: &str = "default";

/// How often a VPA still missing a recommendation is logged (upstream: 30 minutes).
pub const RECOMMENDATION_MISSING_LOG_PERIOD: i64 = 30 * 60 * 1_000_000_000;

/// Whether a recommender named `recommender` handles a VPA in `namespace` listing `vpa_recommenders`.
/// The default recommender also takes VPAs that list none. `only_namespace` (if non-empty) restricts to one
/// namespace; `ignored` namespaces are skipped.
pub fn is_selected(
    recommender: &str,
    vpa_recommenders: &[String],
    namespace: &str,
    only_namespace: &str,
    ignored: &[String],
) -> bool {
    if !only_namespace.is_empty() && namespace != only_namespace {
        return false;
    }
    if ignored.iter().any(|n| n == namespace) {
        return false;
    }
    if vpa_recommenders.is_empty() {
        return recommender == DEFAULT_RECOMMENDER;
    }
    vpa_recommenders.iter().any(|r| r == recommender)
}

/// Go's `Duration.String()` for non-negative whole-second durations (`30m0s`, `1h0m0s`, `45s`).
pub fn go_duration_string(ns: i64) -> String {
    let s = ns / 1_000_000_000;
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{sec}s")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

/// Outcome of tracking a VPA that may lack a recommendation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTracking {
    /// Whether the VPA is tracked as having no recommendation.
    pub tracked: bool,
    /// When the problem was last logged.
    pub last_logged: Option<Nanos>,
    /// The message to log now, if any.
    pub log: Option<String>,
}

/// Updates tracking of VPAs without a recommendation: logs at most once per `max_duration`.
pub fn track_missing_recommendation(
    vpa: &str,
    has_recommendation: bool,
    last_logged: Option<Nanos>,
    now: Nanos,
    max_duration: i64,
) -> MissingTracking {
    if has_recommendation {
        return MissingTracking {
            tracked: false,
            last_logged: None,
            log: None,
        };
    }
    match last_logged {
        None => MissingTracking {
            tracked: true,
            last_logged: Some(now),
            log: None,
        },
        Some(l) if now.saturating_sub(l) > max_duration => MissingTracking {
            tracked: true,
            last_logged: Some(now),
            log: Some(format!(
                "VPA {vpa} is missing recommendation for more than {}",
                go_duration_string(max_duration)
            )),
        },
        Some(l) => MissingTracking {
            tracked: true,
            last_logged: Some(l),
            log: None,
        },
    }
}
