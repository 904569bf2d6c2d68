//! A pod's quality-of-service class ([`Qos`]), and the class computed from its spec as the API server computes
//! `status.qosClass` at creation ([`of_spec`]): for pods read without a status (a snapshot, a manifest), so
//! that the resize check that a resize must not change the class still applies to them.

use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use tailor_core::quantity::Amount;

/// A pod's quality-of-service class (`status.qosClass`, or computed from the spec without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    /// No container requests or limits cpu or memory.
    BestEffort,
    /// Neither of the others.
    Burstable,
    /// Every container has cpu and memory limits equal to its requests.
    Guaranteed,
    /// Neither reported nor computable (a pod without a spec).
    Unknown,
}

/// The two resources the class looks at.
const RESOURCES: [&str; 2] = ["cpu", "memory"];

/// Sums of one resource's requests and limits, and whether every container (or the pod) limits both.
#[derive(Default)]
struct Totals {
    requests: [i128; 2],
    limits: [i128; 2],
    has_request: [bool; 2],
    has_limit: [bool; 2],
    limits_everything: bool,
}

impl Totals {
    /// Adds one set of requirements. A request left out where a limit is set counts as the limit (the API
    /// server's defaulting, which a spec read from a file has not had).
    fn add(&mut self, r: Option<&ResourceRequirements>) {
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        let positive = |list: Option<&std::collections::BTreeMap<_, _>>, name: &str| {
            list.and_then(|l| l.get(name))
                .and_then(|q| Amount::parse(q).ok())
                .and_then(|a| a.amount_i128(name))
                .filter(|v| *v > 0)
        };
        let mut limited = true;
        for (i, name) in RESOURCES.iter().enumerate() {
            let limit = positive(limits, name);
            let request = positive(requests, name).or(limit);
            if let Some(v) = request {
                self.requests[i] = self.requests[i].saturating_add(v);
                self.has_request[i] = true;
            }
            match limit {
                Some(v) => {
                    self.limits[i] = self.limits[i].saturating_add(v);
                    self.has_limit[i] = true;
                }
                None => limited = false,
            }
        }
        self.limits_everything &= limited;
    }
}

/// The QoS class the API server gives a pod with `spec`: pod-level resources decide where they are set,
/// else every container and init container. `BestEffort` without any cpu or memory request or limit;
/// `Guaranteed` when cpu and memory are limited everywhere and the requests equal the limits; else
/// `Burstable`.
pub fn of_spec(spec: &PodSpec) -> Qos {
    let mut t = Totals {
        limits_everything: true,
        ..Totals::default()
    };
    match spec.resources.as_ref() {
        Some(pod_level) => t.add(Some(pod_level)),
        None => {
            let init = spec.init_containers.iter().flatten();
            for c in spec.containers.iter().chain(init) {
                t.add(c.resources.as_ref());
            }
        }
    }
    if !t.has_request.contains(&true) && !t.has_limit.contains(&true) {
        return Qos::BestEffort;
    }
    let equal = (0..RESOURCES.len())
        .all(|i| t.has_request[i] == t.has_limit[i] && t.requests[i] == t.limits[i]);
    if t.limits_everything && equal {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn classes_as_the_api_server_computes_them() {
        let best = spec(serde_json::json!({"containers": [{"name": "a"}]}));
        assert_eq!(of_spec(&best), Qos::BestEffort);
        let guaranteed = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Mi"},
                                         "limits": {"cpu": "0.5", "memory": "1Mi"}}}
        ]}));
        assert_eq!(of_spec(&guaranteed), Qos::Guaranteed);
        let burstable = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}}}
        ]}));
        assert_eq!(of_spec(&burstable), Qos::Burstable);
        let lower_request = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"},
                                         "limits": {"cpu": "1", "memory": "1Gi"}}}
        ]}));
        assert_eq!(of_spec(&lower_request), Qos::Burstable);
        // An init container without limits makes it Burstable.
        let init = spec(serde_json::json!({
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "10m"}}}]
        }));
        assert_eq!(of_spec(&init), Qos::Burstable);
        // Pod-level resources decide when set.
        let pod_level = spec(serde_json::json!({
            "resources": {"limits": {"cpu": "2", "memory": "2Gi"}},
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]
        }));
        assert_eq!(of_spec(&pod_level), Qos::Guaranteed);
        // Zero quantities count as unset.
        let zero = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0"}}}
        ]}));
        assert_eq!(of_spec(&zero), Qos::BestEffort);
    }
}
