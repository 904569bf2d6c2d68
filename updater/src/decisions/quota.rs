//! Quota fit in the updater (docs/decisions/quota-fit.md): a running pod is charged to its namespace's
//! ResourceQuotas, and the API server charges an in-place resize's increase against them too. So:
//! - an in-place resize is sent only when the whole raise fits the headroom ([`QuotaUse::Resize`]);
//! - a pod is not evicted when the webhook's quota fit would give its replacement the requests and limits
//!   it has now ([`QuotaUse::Replace`]): the eviction would be churn without end.
//!
//! The compact pod keeps its containers only (no init containers, overhead, priority class or deadline),
//! so the check is the stricter reading: every quota counts whatever its scopes, and the charge is the sum
//! of the containers (a raise never costs less than that against a quota).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use tailor_core::quantity::Amount;
use tailor_core::quota::{Charged, Quota, QuotaFit, QuotaOutcome, fit_to_quotas};
use tailor_core::sizing::{ContainerResources, PatchOptions, PodError, slots};

use crate::views::pods::{self, CachedPod};

/// What the check is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaUse {
    /// An in-place resize: the whole raise must fit.
    Resize,
    /// An eviction: the replacement, fitted by the webhook, must differ from the pod.
    Replace,
}

/// Why quota fit holds the update back (the text of [`crate::decisions::skip::Skip::Quota`]); `None` when the update
/// may go ahead. `provided` is what the pod would get (from [`crate::decisions::resize::provider_resources`]).
pub fn quota_hold(
    pod: &CachedPod,
    provided: &[ContainerResources],
    quotas: &[Quota],
    purpose: QuotaUse,
) -> Result<Option<String>, PodError> {
    if quotas.is_empty() {
        return Ok(None);
    }
    let unscoped: Vec<Quota> = quotas
        .iter()
        .map(|q| Quota {
            scopes: Box::new([]),
            ..q.clone()
        })
        .collect();
    let synthetic = as_pod(pod);
    let slots = slots(&synthetic, &PatchOptions::default());
    let mut fitted = provided.to_vec();
    let fit = fit_to_quotas(&synthetic, &slots, &mut fitted, &unscoped, Charged::Running)?;
    let held = match purpose {
        QuotaUse::Resize => fit.outcome != QuotaOutcome::Fits,
        QuotaUse::Replace => fit.outcome != QuotaOutcome::Fits && unchanged(pod, &fitted),
    };
    Ok(held.then(|| text(&fit)))
}

fn text(fit: &QuotaFit) -> String {
    fit.notes().join("; ")
}

/// The pod as the quota rule reads it: its containers with their current requests and limits.
fn as_pod(pod: &CachedPod) -> Pod {
    let containers = pods::containers(pod)
        .iter()
        .map(|c| Container {
            name: c.name.to_string(),
            resources: Some(ResourceRequirements {
                requests: c.requests.as_ref().map(|a| a.list().clone()),
                limits: c.limits.as_ref().map(|a| a.list().clone()),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        })
        .collect();
    Pod {
        metadata: pod.metadata.clone(),
        spec: Some(PodSpec {
            containers,
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Whether `fitted` leaves every container's requests and limits as they are.
fn unchanged(pod: &CachedPod, fitted: &[ContainerResources]) -> bool {
    pods::containers(pod).iter().zip(fitted).all(|(info, res)| {
        let same = |now: Option<&std::sync::Arc<crate::views::pods::Amounts>>,
                    new: &tailor_crds::ResourceList| {
            new.iter().all(|(resource, q)| {
                let current = now.and_then(|a| a.list().get(resource));
                match (current.map(Amount::parse), Amount::parse(q)) {
                    (Some(Ok(a)), Ok(b)) => a.cmp_value(&b).is_eq(),
                    _ => false,
                }
            })
        };
        same(info.requests.as_ref(), &res.requests) && same(info.limits.as_ref(), &res.limits)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceQuota;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;
    use tailor_testkit::fixtures::PodFixture;

    fn pod() -> CachedPod {
        let pod = PodFixture::new("ns", "web-1")
            .uid("u")
            .container("app", json!({"cpu": "100m"}), serde_json::Value::Null)
            .build();
        CachedPod::new(&pod)
    }

    fn quota(used: &str) -> Quota {
        let rq: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "compute", "namespace": "ns"},
            "spec": {"hard": {"requests.cpu": "1"}, "scopes": ["Terminating"]},
            "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": used}}
        }))
        .unwrap();
        Quota::of(&rq).unwrap()
    }

    fn raise_to(cpu: &str) -> Vec<ContainerResources> {
        let mut r = ContainerResources::default();
        r.requests.insert("cpu".into(), Quantity(cpu.into()));
        vec![r]
    }

    #[test]
    fn a_resize_needs_the_whole_raise_to_fit_and_an_eviction_some_of_it() {
        let p = pod();
        // 900m used, 100m of it the pod's own: 200m in all for it.
        let quotas = [quota("900m")];
        let resize = quota_hold(&p, &raise_to("500m"), &quotas, QuotaUse::Resize).unwrap();
        let why = resize.expect("the raise does not fit in place");
        assert!(why.contains("ResourceQuota compute"), "{why}");
        assert_eq!(
            quota_hold(&p, &raise_to("200m"), &quotas, QuotaUse::Resize).unwrap(),
            None
        );
        // The replacement would get 200m: worth an eviction (the scope is ignored: stricter).
        assert_eq!(
            quota_hold(&p, &raise_to("500m"), &quotas, QuotaUse::Replace).unwrap(),
            None
        );
        // No headroom: the replacement would be the same pod again.
        let full = [quota("1")];
        let why = quota_hold(&p, &raise_to("500m"), &full, QuotaUse::Replace).unwrap();
        assert!(why.is_some_and(|w| w.contains("cpu raise dropped")));
        // Lowering always goes ahead; so does everything without quotas.
        assert_eq!(
            quota_hold(&p, &raise_to("50m"), &full, QuotaUse::Replace).unwrap(),
            None
        );
        assert_eq!(
            quota_hold(&p, &raise_to("5"), &[], QuotaUse::Resize).unwrap(),
            None
        );
    }
}
