//! The VPA status the recommender writes: recommendation, conditions and `observedGeneration`, built
//! purely from the previous status and this loop's findings.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tailor_crds::condition as cond;
use tailor_crds::{
    RecommendedContainerResources, RecommendedPodResources, ResourceList,
    VerticalPodAutoscalerCondition, VerticalPodAutoscalerStatus,
};

use tailor_engine::estimate::ContainerRecommendation;
use tailor_engine::policy::Resources;

/// `NoPodsMatched` reason and message.
pub const NO_PODS_MATCHED_MESSAGE: &str = "No pods match this VPA object";

fn resource_list(r: &Resources) -> ResourceList {
    let mut out = ResourceList::new();
    if let Some(c) = r.cpu {
        out.insert("cpu".into(), tailor_crds::quantity::from_amount("cpu", c));
    }
    if let Some(m) = r.memory {
        out.insert(
            "memory".into(),
            tailor_crds::quantity::from_amount("memory", m),
        );
    }
    out
}

/// The API form of the engine's per-container recommendations; `None` when there are none.
pub fn to_api_recommendation(recs: &[ContainerRecommendation]) -> Option<RecommendedPodResources> {
    if recs.is_empty() {
        return None;
    }
    Some(RecommendedPodResources {
        container_recommendations: Some(
            recs.iter()
                .map(|r| RecommendedContainerResources {
                    container_name: Some(r.container_name.clone()),
                    target: resource_list(&r.target),
                    lower_bound: Some(resource_list(&r.lower_bound)),
                    upper_bound: Some(resource_list(&r.upper_bound)),
                    uncapped_target: Some(resource_list(&r.uncapped_target)),
                })
                .collect(),
        ),
    })
}

fn has_entries(r: Option<&RecommendedPodResources>) -> bool {
    r.and_then(|r| r.container_recommendations.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// What this loop found out about one VPA.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Findings {
    /// The recommendation to publish.
    pub recommendation: Option<RecommendedPodResources>,
    /// Whether any pod matches.
    pub pods_matched: bool,
    /// `ConfigUnsupported` message (unresolvable target, bad policy).
    pub unsupported: Option<String>,
    /// `LowConfidence` message when some container has less than a day of history.
    pub low_confidence: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `FetchingHistory` message while the VPA's usage history is being loaded.
    pub fetching_history: Option<String>,
}

fn set(
    conditions: &mut Vec<VerticalPodAutoscalerCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let status = if status { "True" } else { "False" };
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let (reason, message) = (opt(reason), opt(message));
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Some(now.clone());
        }
        c.status = status.into();
        c.reason = reason;
        c.message = message;
        return;
    }
    conditions.push(VerticalPodAutoscalerCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(now.clone()),
        reason,
        message,
        observed_generation: None,
    });
}

fn remove(conditions: &mut Vec<VerticalPodAutoscalerCondition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The status to write: conditions owned by the recommender (all but user-set ones) are set or removed
/// (`FetchingHistory` while the history bootstrap runs), a condition keeps its `lastTransitionTime` unless its status changes,
/// and conditions are sorted by type.
pub fn build_status(
    old: Option<&VerticalPodAutoscalerStatus>,
    f: &Findings,
    now: &Time,
) -> VerticalPodAutoscalerStatus {
    let mut conditions = old.and_then(|s| s.conditions.clone()).unwrap_or_default();
    remove(&mut conditions, cond::CONFIG_DEPRECATED);
    match &f.unsupported {
        Some(m) => set(&mut conditions, cond::CONFIG_UNSUPPORTED, true, "", m, now),
        None => remove(&mut conditions, cond::CONFIG_UNSUPPORTED),
    }
    if f.pods_matched {
        remove(&mut conditions, cond::NO_PODS_MATCHED);
    } else {
        set(
            &mut conditions,
            cond::NO_PODS_MATCHED,
            true,
            "NoPodsMatched",
            NO_PODS_MATCHED_MESSAGE,
            now,
        );
    }
    let provided = has_entries(f.recommendation.as_ref());
    if provided {
        set(
            &mut conditions,
            cond::RECOMMENDATION_PROVIDED,
            true,
            "",
            "",
            now,
        );
    } else if f.pods_matched {
        set(
            &mut conditions,
            cond::RECOMMENDATION_PROVIDED,
            false,
            "",
            "",
            now,
        );
    } else {
        set(
            &mut conditions,
            cond::RECOMMENDATION_PROVIDED,
            false,
            "NoPodsMatched",
            NO_PODS_MATCHED_MESSAGE,
            now,
        );
    }
    match (&f.low_confidence, provided) {
        (Some(m), true) => set(
            &mut conditions,
            cond::LOW_CONFIDENCE,
            true,
            "LowConfidence",
            m,
            now,
        ),
        _ => remove(&mut conditions, cond::LOW_CONFIDENCE),
    }
    match &f.fetching_history {
        Some(m) => set(
            &mut conditions,
            cond::FETCHING_HISTORY,
            true,
            "FetchingHistory",
            m,
            now,
        ),
        None => remove(&mut conditions, cond::FETCHING_HISTORY),
    }
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    VerticalPodAutoscalerStatus {
        recommendation: f.recommendation.clone(),
        conditions: Some(conditions),
        observed_generation: f.generation,
    }
}

/// The JSON merge patch that turns any status into `status` (absent fields are sent as `null` so that
/// they are removed).
pub fn merge_patch(
    status: &VerticalPodAutoscalerStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    Ok(serde_json::json!({
        "status": {
            "recommendation": serde_json::to_value(&status.recommendation)?,
            "conditions": serde_json::to_value(&status.conditions)?,
            "observedGeneration": status.observed_generation,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::to_time_secs;

    #[test]
    fn transitions_keep_times_and_sort() {
        let t0 = to_time_secs(1_000_000_000_000).unwrap();
        let t1 = to_time_secs(2_000_000_000_000).unwrap();
        let f = Findings::default();
        let s0 = build_status(None, &f, &t0);
        let c = s0.conditions.as_ref().unwrap();
        assert_eq!(
            c.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["NoPodsMatched", "RecommendationProvided"]
        );
        assert_eq!(c[1].status, "False");
        assert_eq!(c[1].reason.as_deref(), Some("NoPodsMatched"));
        let s1 = build_status(Some(&s0), &f, &t1);
        assert_eq!(s0, s1, "unchanged status keeps transition times");
        let f2 = Findings {
            pods_matched: true,
            recommendation: to_api_recommendation(&[ContainerRecommendation {
                container_name: "app".into(),
                ..Default::default()
            }]),
            low_confidence: Some("x".into()),
            ..Default::default()
        };
        let s2 = build_status(Some(&s1), &f2, &t1);
        let c = s2.conditions.as_ref().unwrap();
        assert_eq!(
            c.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [
                ("LowConfidence", "True"),
                ("RecommendationProvided", "True")
            ]
        );
        assert_eq!(c[1].last_transition_time, Some(t1));
    }
}
