//! `InPlace` mode: the recommendation at the last infeasible resize of each pod
//! (docs/design/upstream-updater.md §5.6), and how an infeasible resize shows in an API error
//! (docs/design/upstream-updater.md §5.2).

use std::collections::HashMap;

use tailor_crds::RecommendedPodResources;

/// Pod UID → the VPA's raw recommendation when a resize of that pod was last found infeasible.
#[derive(Clone, Debug, Default)]
pub struct InfeasibleAttempts {
    by_uid: HashMap<String, RecommendedPodResources>,
}

impl InfeasibleAttempts {
    /// Records (or overwrites) an attempt.
    pub fn record(&mut self, uid: &str, recommendation: RecommendedPodResources) {
        self.by_uid.insert(uid.to_owned(), recommendation);
    }

    /// Whether no attempt is recorded.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    /// The recorded attempt of a pod.
    pub fn get(&self, uid: &str) -> Option<&RecommendedPodResources> {
        self.by_uid.get(uid)
    }

    /// Forgets every pod whose UID is not live.
    pub fn retain_live<'a>(&mut self, live: impl IntoIterator<Item = &'a str>) {
        let live: std::collections::HashSet<&str> = live.into_iter().collect();
        self.by_uid.retain(|uid, _| live.contains(uid.as_str()));
    }

    /// Forgets one pod (Tailor, with `--in-place-timers=patch`: after a successful resize).
    pub fn forget(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }

    /// The recorded UIDs, sorted.
    pub fn uids(&self) -> Vec<String> {
        let mut out: Vec<String> = self.by_uid.keys().cloned().collect();
        out.sort();
        out
    }
}

/// Whether an API error says the resize can never fit the node: `Forbidden` with a `NodeCapacity` cause.
pub fn is_infeasible_error(error: Option<&kube::Error>) -> bool {
    let Some(kube::Error::Api(status)) = error else {
        return false;
    };
    status.reason == "Forbidden"
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NodeCapacity"))
}
