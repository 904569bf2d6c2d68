//! Pure pieces of the recommender loop around the engine: which VPAs this recommender handles, target
//! validation conditions, status conditions, missing-recommendation tracking and checkpoint-writer ordering.

use tailor_engine::units::Nanos;

/// Name of the default recommender.
pub const DEFAULT_RECOMMENDER: &str = "default";

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

/// A status condition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Condition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` / `False`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// `NoPodsMatched` message.
pub const NO_PODS_MATCHED_MESSAGE: &str = "No pods match this VPA object";

/// The recommender's conditions for a VPA, sorted by type. `NoPodsMatched` is absent when pods match.
pub fn recommendation_conditions(has_recommendation: bool, pods_matched: bool) -> Vec<Condition> {
    let mut out = Vec::new();
    let (reason, message) = if pods_matched {
        ("", "")
    } else {
        ("NoPodsMatched", NO_PODS_MATCHED_MESSAGE)
    };
    out.push(Condition {
        type_: "RecommendationProvided".into(),
        status: if has_recommendation { "True" } else { "False" }.into(),
        reason: if has_recommendation { "" } else { reason }.into(),
        message: if has_recommendation { "" } else { message }.into(),
    });
    if !pods_matched {
        out.push(Condition {
            type_: "NoPodsMatched".into(),
            status: "True".into(),
            reason: "NoPodsMatched".into(),
            message: NO_PODS_MATCHED_MESSAGE.into(),
        });
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
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

/// An object reference (`apiVersion`, `kind`, `name`, namespace).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectKey {
    /// API version.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// Result of resolving a VPA's target: the selector to use (`None` = matches nothing) and the
/// `ConfigUnsupported` message (`None` = condition removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetResolution {
    /// The selector string if the target is valid.
    pub selector: Option<String>,
    /// `ConfigUnsupported` message.
    pub unsupported: Option<String>,
}

/// Decides selector and `ConfigUnsupported` from the fetched selector and the top-most controller lookup.
pub fn resolve_target(
    target: Option<&ObjectKey>,
    fetched_selector: Result<Option<String>, String>,
    topmost: Result<Option<ObjectKey>, String>,
) -> TargetResolution {
    let nothing = |m: Option<String>| TargetResolution {
        selector: None,
        unsupported: m,
    };
    let selector = match fetched_selector {
        Ok(Some(s)) => s,
        Ok(None) => return nothing(Some("Cannot read targetRef".into())),
        Err(e) => return nothing(Some(format!("Cannot read targetRef. Reason: {e}"))),
    };
    // Upstream stores an empty-type condition here; Tailor removes ConfigUnsupported instead.
    let Some(t) = target else {
        return nothing(None);
    };
    let desc = format!("{}.{}/{}", t.api_version, t.kind, t.name);
    match topmost {
        Err(e) => nothing(Some(format!(
            "Error checking if target {desc} is a topmost well-known or scalable controller: {e}"
        ))),
        Ok(None) => nothing(Some(format!(
            "Unknown error during checking if target {desc} is a topmost well-known or scalable controller"
        ))),
        Ok(Some(k))
            if k.api_version != t.api_version
                || k.kind != t.kind
                || k.name != t.name
                || k.namespace != t.namespace =>
        {
            nothing(Some(format!(
                "The target {desc} has a parent controller but it should point to a topmost well-known or scalable controller"
            )))
        }
        Ok(Some(_)) => TargetResolution {
            selector: Some(selector),
            unsupported: None,
        },
    }
}

/// Orders VPAs for checkpointing: oldest successful write first, never written (`None`) first of all.
pub fn checkpoint_order<T>(vpas: &mut [(T, Option<Nanos>)]) {
    vpas.sort_by_key(|(_, w)| w.unwrap_or(i64::MIN));
}

/// Checkpoints written when the deadline has already passed: each worker still writes all containers of one
/// VPA before checking it.
pub fn checkpoints_written_past_deadline(
    workers: usize,
    vpas: usize,
    containers_per_vpa: usize,
) -> usize {
    workers.min(vpas) * containers_per_vpa
}

/// VPAs whose `FetchingHistory` condition is `True` are not checkpointed.
pub fn skip_checkpoint(fetching_history_status: Option<&str>) -> bool {
    fetching_history_status == Some("True")
}
