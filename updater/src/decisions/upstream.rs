//! Upstream VPA beside Tailor's (README, "Moving from upstream VPA"): on a workload that an upstream
//! `autoscaling.k8s.io/v1` VerticalPodAutoscaler in a mode other than `Off` also targets, the two updaters
//! would resize or evict the same pods in turn, each towards its own numbers, for ever. Tailor's updater
//! stands down there: the Tailor VPA is left out of every iteration, from the first one, with the
//! `UpdatesBlocked` condition naming the upstream VPA.
//!
//! Upstream VPAs are read as [`tailor_kube::upstream_vpa`] keeps them: watched by the binary, read from
//! the snapshot by `tailor plan`.

use tailor_kube::upstream_vpa::{API_VERSION, UpstreamVpa};

/// The text of the `UpdatesBlocked` condition, and of its one event, on a Tailor VPA whose workload
/// `upstream` also covers.
pub fn stand_down_message(upstream: &UpstreamVpa) -> String {
    format!(
        "upstream VPA {} ({API_VERSION}, updateMode {}) also targets {} {}: Tailor's updater neither evicts \
         nor resizes its pods while it does (the two updaters would undo each other's changes). Keep one of \
         the two VPAs, or set the upstream one's updateMode to Off",
        upstream.key(),
        upstream.mode,
        upstream.target_kind,
        upstream.target_name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_upstream_vpa() {
        let object: tailor_kube::upstream_vpa::UpstreamVpaObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-vpa", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
        }))
        .expect("decodes");
        let upstream = UpstreamVpa::of(object).expect("target");
        let text = stand_down_message(&upstream);
        assert!(text.starts_with("upstream VPA shop/web-vpa (autoscaling.k8s.io/v1, updateMode Auto) also targets Deployment web"), "{text}");
    }
}
