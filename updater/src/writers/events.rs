//! Events the updater records on pods and VPAs (docs/design/upstream-updater.md §1.5; component `tailor-updater`).

/// What an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventObject {
    /// The pod.
    Pod,
    /// Its VPA.
    Vpa,
}

/// One event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdaterEvent {
    /// The object it is recorded on.
    pub object: EventObject,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// Machine-readable reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// The events of a successful eviction of `pod`: one on the pod, one on the VPA.
pub fn evicted(pod: &str) -> [UpdaterEvent; 2] {
    [
        UpdaterEvent {
            object: EventObject::Pod,
            type_: "Normal",
            reason: "EvictedByVPA",
            message: "Pod was evicted by VPA Updater to apply resource recommendation.".into(),
        },
        UpdaterEvent {
            object: EventObject::Vpa,
            type_: "Normal",
            reason: "EvictedPod",
            message: format!("VPA Updater evicted Pod {pod} to apply resource recommendation."),
        },
    ]
}

/// The event of a successful resize (upstream's message), with what it kept instead of changing (a limit the VPA's limit policy
/// unsets: the API server refuses removing it in place, docs/limit-policy.md).
pub fn resized_noting(notes: &[String]) -> UpdaterEvent {
    let mut message = String::from("Pod was resized in place by VPA Updater.");
    for note in notes {
        message.push(' ');
        message.push_str(note);
        message.push('.');
    }
    UpdaterEvent {
        object: EventObject::Pod,
        type_: "Normal",
        reason: "InPlaceResizedByVPA",
        // A pod of many containers must not make the note longer than the API accepts.
        message: tailor_core::text::cut(&message, tailor_kube::vpa_event::NOTE_BYTES),
    }
}

/// The warning on a VPA whose limit-policy annotation does not parse (docs/limit-policy.md): its pods'
/// limits keep their ratio meanwhile.
pub fn limit_policy_invalid(error: &str) -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "LimitPolicyInvalid",
        message: format!("{error}; pods keep their limit/request ratio until it is fixed"),
    }
}

/// The event of a pod skipped because its last resize was infeasible.
pub fn resize_skipped() -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Pod,
        type_: "Normal",
        reason: "InPlaceResizeSkipped",
        message: "Previously recorded in-place update was infeasible, current recommendation is not lower than previous, skipping resize".into(),
    }
}

/// The warning on a VPA the updater does not act on because another VPA targets the same workload
/// (`message` from [`crate::decisions::conflicts::Conflicts`]).
pub fn conflicting_vpas(message: &str) -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "ConflictingVPAs",
        message: message.to_owned(),
    }
}

/// The warning on a VPA some of whose pods upstream VPA's webhook sized, so the updater leaves them alone.
pub fn sized_by_upstream(message: &str) -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "SizedByUpstreamVPA",
        message: message.to_owned(),
    }
}

/// The warning on a VPA some of whose pods the webhook never sizes, so the updater leaves them alone.
pub fn outside_webhook(message: &str) -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "OutsideWebhookScope",
        message: message.to_owned(),
    }
}

/// The warning on a VPA whose evictions pause because a replacement of an evicted pod was admitted without
/// Tailor's webhook ([`crate::decisions::replacements`]).
pub fn replacements_unsized(message: &str) -> UpdaterEvent {
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "ReplacementsUnsized",
        message: message.to_owned(),
    }
}

/// The warning on a VPA some of whose pods quota fit holds back (docs/decisions/quota-fit.md): `pods` of them,
/// the first for the reason `why` (the quota fit's note).
pub fn quota_held(pods: usize, why: &str) -> UpdaterEvent {
    let what = if pods == 1 {
        "1 pod is".to_owned()
    } else {
        format!("{pods} pods are")
    };
    UpdaterEvent {
        object: EventObject::Vpa,
        type_: "Warning",
        reason: "QuotaFit",
        message: format!(
            "{what} not updated: the namespace's ResourceQuota has no room for the change ({why})"
        ),
    }
}
