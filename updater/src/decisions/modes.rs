//! Which VPAs the updater acts on and how (docs/design/upstream-updater.md §1.2 step 3, §1.4).

use tailor_core::policy::{has_startup_boost, update_mode};
use tailor_crds::{PodUpdatePolicy, UpdateMode, VerticalPodAutoscaler};

/// Whether the VPA takes part in an iteration: a mode that updates running pods, or a start-up boost.
pub fn is_selected(vpa: &VerticalPodAutoscaler) -> bool {
    matches!(
        update_mode(&vpa.spec),
        UpdateMode::Recreate
            | UpdateMode::Auto
            | UpdateMode::InPlaceOrRecreate
            | UpdateMode::InPlace
    ) || has_startup_boost(&vpa.spec)
}

/// Whether the update policy uses the deprecated `Auto` mode (logged once per iteration).
pub fn is_deprecated(policy: Option<&PodUpdatePolicy>) -> bool {
    policy.and_then(|p| p.update_mode.as_ref()) == Some(&UpdateMode::Auto)
}

/// The path a VPA's running pods take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `Off`, `Initial`: nothing beyond un-boosting.
    None,
    /// `InPlaceOrRecreate`, or `InPlace` with its gate: in-place first.
    InPlace,
    /// `InPlace` without its gate: nothing (a warning).
    InPlaceGateOff,
    /// `Recreate`, `Auto`: eviction.
    Evict,
}

/// The path of a mode.
pub fn path(mode: &UpdateMode, in_place_gate: bool) -> Path {
    match mode {
        UpdateMode::InPlaceOrRecreate => Path::InPlace,
        UpdateMode::InPlace if in_place_gate => Path::InPlace,
        UpdateMode::InPlace => Path::InPlaceGateOff,
        UpdateMode::Recreate | UpdateMode::Auto => Path::Evict,
        _ => Path::None,
    }
}

/// The metric label of a mode (the effective mode's name).
pub fn mode_label(mode: &UpdateMode) -> String {
    match mode {
        UpdateMode::Unknown(s) => s.clone(),
        other => format!("{other:?}"),
    }
}
