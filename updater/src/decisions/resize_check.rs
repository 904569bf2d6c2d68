//! What the API server's validation refuses of an in-place resize (docs/decisions/resize-precheck.md), checked
//! before the PATCH: a resize that changes the pod's QoS class (a BestEffort pod gaining requests, a Guaranteed pod
//! whose requests alone change, a Burstable pod becoming Guaranteed), a memory limit cut under the
//! `NotRequired` resize policy on servers before 1.34, any resize of a pod with pod-level resources
//! (their in-place resize is an alpha gate, off by default), and a request or limit removed. In `InPlace`
//! mode such a PATCH failed every interval forever; now the pod is skipped with the reason, and
//! `InPlaceOrRecreate` evicts it instead (upstream's fallback when a resize cannot be done).

use json_patch::PatchOperation;
use tailor_core::quantity;

use crate::decisions::qos::Qos;
use crate::views::pods::{self, CachedPod};

/// What the API server accepts, by version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResizeRules {
    /// Memory limits may be lowered under the `NotRequired` resize policy (Kubernetes ≥ 1.34).
    pub memory_limit_decrease: bool,
    /// Containers of pods with pod-level resources may be resized (`InPlacePodLevelResourcesVerticalScaling`,
    /// alpha, off by default).
    pub pod_level_resources: bool,
}

impl Default for ResizeRules {
    /// Kubernetes 1.34 with default feature gates (the oldest version the e2e suite runs).
    fn default() -> Self {
        Self::for_minor(34)
    }
}

impl ResizeRules {
    /// The rules of Kubernetes 1.`minor` with default feature gates.
    pub fn for_minor(minor: u32) -> Self {
        ResizeRules {
            memory_limit_decrease: minor >= 34,
            pod_level_resources: false,
        }
    }

    /// The rules of a server whose `/version` reports `minor` (`"34"`, `"34+"`); `None` when it does not
    /// parse.
    pub fn for_version(minor: &str) -> Option<Self> {
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok().map(Self::for_minor)
    }
}

/// cpu and memory of one container, in thousandths: requests and limits.
#[derive(Clone, Copy, Debug, Default)]
struct Values {
    requests: [Option<i64>; 2],
    limits: [Option<i64>; 2],
}

const RESOURCES: [&str; 2] = ["cpu", "memory"];

fn current(info: &pods::ContainerInfo) -> Values {
    let read = |list: Option<&std::sync::Arc<pods::Amounts>>, r: &str| {
        list.and_then(|l| l.get(r))
            .and_then(|(_, m)| m.as_ref().ok().map(|(v, _)| *v))
    };
    let mut v = Values::default();
    for (i, r) in RESOURCES.iter().enumerate() {
        v.requests[i] = read(info.requests.as_ref(), r);
        v.limits[i] = read(info.limits.as_ref(), r);
    }
    v
}

/// Applies the resize operations that set `/spec/containers/<i>/resources/<requests|limits>/<cpu|memory>`.
fn apply(values: &mut [Values], ops: &[PatchOperation]) {
    for op in ops {
        let PatchOperation::Add(add) = op else {
            continue;
        };
        let path = add.path.to_string();
        let parts: Vec<&str> = path.split('/').collect();
        let ["", "spec", "containers", i, "resources", field, resource] = parts.as_slice() else {
            continue;
        };
        let (Ok(i), Some(r)) = (
            i.parse::<usize>(),
            RESOURCES.iter().position(|x| x == resource),
        ) else {
            continue;
        };
        let Some(text) = add.value.as_str() else {
            continue;
        };
        let milli = quantity::milli_value(
            &k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.to_owned()),
        )
        .ok();
        if let Some(v) = values.get_mut(i) {
            match *field {
                "requests" => v.requests[r] = milli,
                "limits" => v.limits[r] = milli,
                _ => {}
            }
        }
    }
}

/// The QoS class of containers with `values` (init containers: `init_guaranteed`, and none with
/// resources when the pod was BestEffort).
fn class(values: &[Values], init_guaranteed: bool) -> Qos {
    let any = values
        .iter()
        .any(|v| v.requests.iter().chain(&v.limits).any(Option::is_some));
    if !any {
        return Qos::BestEffort;
    }
    let guaranteed = init_guaranteed
        && values.iter().all(|v| {
            (0..2).all(|r| match (v.requests[r], v.limits[r]) {
                (Some(req), Some(lim)) => req == lim,
                (None, Some(_)) => true,
                _ => false,
            })
        });
    if guaranteed {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// Why the API server would refuse the resize `ops` of `pod`, if it would.
pub fn refusal(pod: &CachedPod, ops: &[PatchOperation], rules: &ResizeRules) -> Option<String> {
    // Requests and limits may not be removed in place (any version); the updater's resizes never remove
    // one (a limit the VPA's limit policy unsets keeps its ratio, docs/limit-policy.md).
    let removed = ops.iter().find_map(|op| match op {
        PatchOperation::Remove(r) if r.path.to_string().contains("/resources/") => {
            Some(r.path.to_string())
        }
        _ => None,
    });
    if let Some(path) = removed {
        return Some(format!("the API server refuses removing {path} in place"));
    }
    if pods::has_pod_level_resources(pod) && !rules.pod_level_resources {
        return Some(
            "the pod sets pod-level resources: the API server refuses resizing its containers in place"
                .into(),
        );
    }
    let containers = pods::containers(pod);
    let before: Vec<Values> = containers.iter().map(current).collect();
    let mut after = before.clone();
    apply(&mut after, ops);
    if !rules.memory_limit_decrease {
        for ((info, b), a) in containers.iter().zip(&before).zip(&after) {
            if let (Some(old), Some(new)) = (b.limits[1], a.limits[1])
                && new < old
                && !info.memory_restart
            {
                return Some(format!(
                    "container {}: the API server refuses lowering a memory limit in place under the \
                     NotRequired resize policy (Kubernetes < 1.34)",
                    info.name
                ));
            }
        }
    }
    let was = pods::qos(pod);
    if was == Qos::Unknown {
        return None;
    }
    let init = pods::init_containers_guaranteed(pod);
    let will = class(&after, init);
    (will != was).then(|| {
        format!("the resize would change the pod's QoS class from {was:?} to {will:?}, which the API server refuses")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tailor_testkit::fixtures::PodFixture;

    fn pod(resources: serde_json::Value, qos: &str, extra: serde_json::Value) -> CachedPod {
        let pod = PodFixture::new("ns", "p")
            .uid("u")
            .container_resources("app", resources)
            .phase("Running")
            .qos(qos)
            .spec_fields(extra)
            .build();
        CachedPod::from(pod)
    }

    fn set(field: &str, resource: &str, value: &str) -> PatchOperation {
        tailor_core::sizing::add_op(
            &format!("/spec/containers/0/resources/{field}/{resource}"),
            json!(value),
        )
    }

    #[test]
    fn a_best_effort_pod_gaining_requests_is_refused() {
        let p = pod(json!({}), "BestEffort", json!({}));
        let ops = [set("requests", "cpu", "250m")];
        let why = refusal(&p, &ops, &ResizeRules::default()).expect("refused");
        assert!(why.contains("from BestEffort to Burstable"), "{why}");
    }

    #[test]
    fn a_guaranteed_pod_changing_only_requests_is_refused_and_both_together_are_not() {
        let r = json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        let p = pod(r, "Guaranteed", json!({}));
        let only_requests = [set("requests", "cpu", "500m")];
        let why = refusal(&p, &only_requests, &ResizeRules::default()).expect("refused");
        assert!(why.contains("from Guaranteed to Burstable"), "{why}");
        let both = [set("requests", "cpu", "500m"), set("limits", "cpu", "500m")];
        assert_eq!(refusal(&p, &both, &ResizeRules::default()), None);
    }

    #[test]
    fn a_burstable_pod_becoming_guaranteed_is_refused() {
        let r = json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        let p = pod(r, "Burstable", json!({}));
        let ops = [set("requests", "cpu", "1")];
        let why = refusal(&p, &ops, &ResizeRules::default()).expect("refused");
        assert!(why.contains("from Burstable to Guaranteed"), "{why}");
        // An init container without limits keeps the pod Burstable.
        let r = json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        let with_init = pod(
            r,
            "Burstable",
            json!({"initContainers": [{"name": "init", "resources": {"requests": {"cpu": "10m"}}}]}),
        );
        assert_eq!(refusal(&with_init, &ops, &ResizeRules::default()), None);
    }

    #[test]
    fn a_memory_limit_cut_under_not_required_is_refused_before_1_34() {
        let r = json!({"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}});
        let p = pod(r, "Burstable", json!({}));
        let cut = [set("limits", "memory", "512Mi")];
        let old = ResizeRules::for_version("33+").expect("rules");
        let why = refusal(&p, &cut, &old).expect("refused on 1.33");
        assert!(why.contains("memory limit"), "{why}");
        assert_eq!(refusal(&p, &cut, &ResizeRules::for_minor(34)), None);
        // With RestartContainer for memory, 1.33 accepts it.
        let text = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "app",
                "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]},
            "status": {"phase": "Running", "qosClass": "Burstable"}
        });
        let restart: k8s_openapi::api::core::v1::Pod = serde_json::from_value(text).expect("pod");
        let restart = CachedPod::from(restart);
        assert_eq!(refusal(&restart, &cut, &old), None);
    }

    #[test]
    fn removing_a_limit_is_refused() {
        let r = json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}});
        let p = pod(r, "Burstable", json!({}));
        let ops = [tailor_core::sizing::remove_op(
            "/spec/containers/0/resources/limits/cpu",
        )];
        let why = refusal(&p, &ops, &ResizeRules::default()).expect("refused");
        assert_eq!(
            why,
            "the API server refuses removing /spec/containers/0/resources/limits/cpu in place"
        );
    }

    #[test]
    fn containers_of_a_pod_with_pod_level_resources_are_not_resized() {
        let p = pod(
            json!({"requests": {"cpu": "100m"}}),
            "Burstable",
            json!({"resources": {"limits": {"memory": "1Gi"}}}),
        );
        let ops = [set("requests", "cpu", "200m")];
        let why = refusal(&p, &ops, &ResizeRules::default()).expect("refused");
        assert!(why.contains("pod-level resources"), "{why}");
    }
}
