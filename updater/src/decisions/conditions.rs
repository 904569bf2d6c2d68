//! The `UpdatesBlocked` condition: the VPA itself says why the updater leaves its pods alone — a conflict with
//! another VPA (docs/decisions/conflicting-vpas.md), pods the webhook never sizes
//! (docs/decisions/webhook-scope.md), or pods quota fit holds back (docs/decisions/quota-fit.md) — next to
//! the warning event and `tailor plan`'s reason. The recommender keeps conditions it does not own, so the two
//! writers do not undo each other.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tailor_crds::condition::UPDATES_BLOCKED;
use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCondition};

use crate::writers::events::{EventObject, UpdaterEvent};

/// Longest condition message written.
pub const MAX_MESSAGE: usize = 1_024;

/// Why the updater leaves a VPA's pods alone in an iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// `ConflictingVPAs`, `OutsideWebhookScope`, `SizedByUpstreamVPA` or `QuotaFit` (the event's reason).
    pub reason: &'static str,
    /// The condition's message (and the event's).
    pub message: String,
}

impl Blocked {
    /// Blocked for `event`'s reason, with its message.
    pub fn of(event: UpdaterEvent) -> Self {
        Blocked {
            reason: event.reason,
            message: event.message,
        }
    }

    /// The warning event on the VPA: the condition's reason and message, word for word.
    pub fn event(&self) -> UpdaterEvent {
        UpdaterEvent {
            object: EventObject::Vpa,
            type_: "Warning",
            reason: self.reason,
            message: tailor_core::text::cut(&self.message, MAX_MESSAGE),
        }
    }
}

/// What an iteration changes on a VPA: its conditions and, when it is newly blocked or blocked for
/// another reason or message, the one event that says so.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The VPA's new `status.conditions`.
    pub conditions: Vec<VerticalPodAutoscalerCondition>,
    /// The event to record once the conditions are written.
    pub event: Option<UpdaterEvent>,
}

/// The [`Change`] of `vpa` for `blocked`; `None` when its conditions already say so (no write, no event:
/// the event goes with a change of the condition, not with every iteration).
pub fn change(
    vpa: &VerticalPodAutoscaler,
    blocked: Option<&Blocked>,
    now: &Time,
) -> Option<Change> {
    Some(Change {
        conditions: updated_conditions(vpa, blocked, now)?,
        event: blocked.map(Blocked::event),
    })
}

/// The VPA's conditions with `UpdatesBlocked` set from `blocked` (`None`: removed); `None` when they would
/// not change (a condition that keeps its reason and message keeps its transition time).
pub fn updated_conditions(
    vpa: &VerticalPodAutoscaler,
    blocked: Option<&Blocked>,
    now: &Time,
) -> Option<Vec<VerticalPodAutoscalerCondition>> {
    let old: &[VerticalPodAutoscalerCondition] = vpa
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let current = old.iter().find(|c| c.type_ == UPDATES_BLOCKED);
    let message = blocked.map(|b| tailor_core::text::cut(&b.message, MAX_MESSAGE));
    let same = match (current, blocked) {
        (None, None) => true,
        (Some(c), Some(b)) => {
            c.status == "True"
                && c.reason.as_deref() == Some(b.reason)
                && c.message.as_deref() == message.as_deref()
        }
        _ => false,
    };
    if same {
        return None;
    }
    let mut conditions: Vec<VerticalPodAutoscalerCondition> = old
        .iter()
        .filter(|c| c.type_ != UPDATES_BLOCKED)
        .cloned()
        .collect();
    if let Some(b) = blocked {
        conditions.push(VerticalPodAutoscalerCondition {
            type_: UPDATES_BLOCKED.to_owned(),
            status: "True".to_owned(),
            last_transition_time: match current {
                Some(c) if c.status == "True" => c.last_transition_time.clone(),
                _ => Some(now.clone()),
            },
            reason: Some(b.reason.to_owned()),
            message,
            observed_generation: vpa.metadata.generation,
        });
        conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    }
    Some(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_testkit::fixtures::VpaFixture;

    fn vpa(conditions: serde_json::Value) -> VerticalPodAutoscaler {
        VpaFixture::new("shop", "web")
            .target("Deployment", "web")
            .conditions(conditions)
            .build()
    }

    fn now() -> Time {
        Time("2026-01-01T00:00:00Z".parse().expect("time"))
    }

    #[test]
    fn the_condition_is_added_kept_and_removed_without_touching_the_recommenders() {
        let provided = serde_json::json!({"type": "RecommendationProvided", "status": "True"});
        let conflict = Blocked {
            reason: "ConflictingVPAs",
            message: "two VPAs".into(),
        };
        let added =
            updated_conditions(&vpa(serde_json::json!([provided])), Some(&conflict), &now())
                .expect("added");
        assert_eq!(
            added.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["RecommendationProvided", "UpdatesBlocked"]
        );
        let with = vpa(serde_json::to_value(&added).expect("json"));
        // Unchanged: nothing to write.
        assert_eq!(updated_conditions(&with, Some(&conflict), &now()), None);
        // Resolved: removed, the recommender's condition stays.
        let removed = updated_conditions(&with, None, &now()).expect("removed");
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].type_, "RecommendationProvided");
        assert_eq!(
            updated_conditions(&vpa(serde_json::json!([])), None, &now()),
            None
        );
    }
}
