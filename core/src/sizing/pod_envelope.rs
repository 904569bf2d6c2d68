//! Pod-level sizing (docs/pod-level-resources.md; Tailor, off unless `--pod-level-resources`): a pod that
//! declares `spec.resources` gets that envelope set from the recommendation row [`POD_ROW`], and the requests
//! its containers declare are scaled down in proportion so that they stay inside it. The result never breaks
//! the API server's rules for pod-level resources (pod request ≥ the containers' aggregate request, every
//! container limit ≤ the pod limit, pod request ≤ pod limit); when they cannot hold, the pod is left as it is
//! and [`EnvelopeRefused`] says why.

use json_patch::PatchOperation;
use serde_json::Value;

use super::{
    LimitPolicy, LimitRule, add_op, is_native_sidecar, pod_level_resources, proportional_limit,
    remove_op,
};
use crate::quantity;
use crate::quantity::Amount;
use crate::quantity::Format;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_crds::RecommendedContainerResources;
use tailor_crds::VerticalPodAutoscaler;

/// The container name under which the recommender publishes a pod's envelope. Container names are
/// DNS-1123 labels (no `.` or `/`), so no container can have it; readers that do not know it ignore the row,
/// as they ignore a recommendation for a container the pod does not have.
pub const POD_ROW: &str = "tailor.dev/pod";

/// Why a pod's envelope was not applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeRefused {
    /// A container's limit is above the new pod limit (Tailor does not rewrite container limits).
    #[error(
        "{resource}: container {container}'s limit {limit} is above the pod-level limit {pod_limit} the envelope gives"
    )]
    ContainerLimit {
        /// The container.
        container: String,
        /// `cpu` or `memory`.
        resource: &'static str,
        /// Its limit.
        limit: String,
        /// The new pod limit.
        pod_limit: String,
    },
    /// A container's request comes only from its limit, so it cannot be scaled without changing the limit.
    #[error(
        "{resource}: container {container} has no request of its own (it follows its limit) and does not fit in the envelope's request {pod_request}"
    )]
    Unscalable {
        /// The container.
        container: String,
        /// `cpu` or `memory`.
        resource: &'static str,
        /// The new pod request.
        pod_request: String,
    },
    /// A quantity could not be read or computed.
    #[error("{0}")]
    Quantity(String),
}

/// One resource of the envelope applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvelopeResource {
    /// `cpu` or `memory`.
    pub resource: &'static str,
    /// The new pod request.
    pub request: Quantity,
    /// The new pod limit (`None`: no limit written; see `remove_limit`).
    pub limit: Option<Quantity>,
    /// Whether the pod's limit is removed (the limit policy's `unset`).
    pub remove_limit: bool,
    /// Container requests scaled down: (path of the container, e.g. `/spec/containers/0`, new request).
    pub scaled: Vec<(String, Quantity)>,
}

/// A container whose request counts against the pod's (regular, init or sidecar).
struct Counted<'a> {
    path: String,
    name: &'a str,
    /// Init container that is not a sidecar: counted by the maximum, not the sum.
    plain_init: bool,
    request: Option<i128>,
    limit: Option<i128>,
}

fn amount_of(resource: &str, q: Option<&Quantity>) -> Result<Option<i128>, EnvelopeRefused> {
    let Some(q) = q else { return Ok(None) };
    let a = Amount::parse(q).map_err(|e| EnvelopeRefused::Quantity(format!("{resource}: {e}")))?;
    a.amount_i128(resource)
        .map(Some)
        .ok_or_else(|| EnvelopeRefused::Quantity(format!("{resource}: {} out of range", q.0)))
}

fn quantity_of(resource: &str, amount: i128, format: Format) -> Quantity {
    Amount::from_amount_i128(resource, amount, format).to_quantity()
}

fn counted<'a>(
    spec: &'a k8s_openapi::api::core::v1::PodSpec,
    resource: &str,
) -> Result<Vec<Counted<'a>>, EnvelopeRefused> {
    let lists = [
        ("containers", &spec.containers[..]),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    let mut out = Vec::new();
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let r = c.resources.as_ref();
            out.push(Counted {
                path: format!("/spec/{list}/{i}"),
                name: &c.name,
                plain_init: list == "initContainers" && !is_native_sidecar(c),
                request: amount_of(
                    resource,
                    r.and_then(|r| r.requests.as_ref())
                        .and_then(|m| m.get(resource)),
                )?,
                limit: amount_of(
                    resource,
                    r.and_then(|r| r.limits.as_ref())
                        .and_then(|m| m.get(resource)),
                )?,
            });
        }
    }
    Ok(out)
}

/// The containers' aggregate request as the API server computes it: regular containers and sidecars summed,
/// or a plain init container with the sidecars, whichever is larger (a request absent: its limit).
fn aggregate(counted: &[Counted<'_>]) -> i128 {
    let effective = |c: &Counted<'_>| c.request.or(c.limit).unwrap_or(0);
    let sum: i128 = counted
        .iter()
        .filter(|c| !c.plain_init)
        .map(effective)
        .sum();
    let sidecars: i128 = counted
        .iter()
        .filter(|c| !c.plain_init && c.path.starts_with("/spec/initContainers"))
        .map(effective)
        .sum();
    let init = counted
        .iter()
        .filter(|c| c.plain_init)
        .map(effective)
        .max()
        .unwrap_or(0);
    sum.max(init.saturating_add(sidecars))
}

/// The new pod limit for `request` under `rule`; `Ok(None)` with `true`: remove the limit.
fn pod_limit(
    resource: &'static str,
    rule: &LimitRule,
    current: (Option<&Quantity>, Option<&Quantity>),
    request: &Quantity,
) -> Result<(Option<Quantity>, bool), EnvelopeRefused> {
    let (limit, old_request) = current;
    let new = amount_of(resource, Some(request))?.unwrap_or(0);
    let format = Amount::parse(request).map(|a| a.format).unwrap_or_default();
    Ok(match rule {
        LimitRule::KeepRatio => {
            let (limit, _) = proportional_limit(resource, limit, old_request, Some(request), None)
                .map_err(|e| EnvelopeRefused::Quantity(e.to_string()))?;
            (limit, false)
        }
        LimitRule::RequestPlus(a) => {
            let plus = a.amount_i128(resource).unwrap_or(0);
            (
                Some(quantity_of(resource, new.saturating_add(plus), format)),
                false,
            )
        }
        LimitRule::Ratio(t) => {
            let v = quantity::mul_div_floor_i128(new, i128::from(*t), 1000).unwrap_or(new);
            (Some(quantity_of(resource, v.max(new), format)), false)
        }
        LimitRule::Unset => (None, limit.is_some()),
    })
}

/// The envelope for `resource` of `pod`, whose pod-level requests and limits are `current`, from the row's
/// `target`; `Ok(None)` when the row has no target for it.
fn envelope_resource(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    resource: &'static str,
    target: &Quantity,
    rule: &LimitRule,
) -> Result<EnvelopeResource, EnvelopeRefused> {
    let pod = spec.resources.as_ref();
    let old_limit = pod
        .and_then(|r| r.limits.as_ref())
        .and_then(|m| m.get(resource));
    let old_request = pod
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(resource))
        .or(old_limit);
    let request = canonical_quantity(target);
    let (limit, remove_limit) = pod_limit(resource, rule, (old_limit, old_request), &request)?;
    let new_request = amount_of(resource, Some(&request))?.unwrap_or(0);
    let new_limit = amount_of(resource, limit.as_ref())?;
    let counted = counted(spec, resource)?;
    if let Some(pod_limit) = new_limit
        && let Some(c) = counted
            .iter()
            .find(|c| c.limit.is_some_and(|l| l > pod_limit))
    {
        return Err(EnvelopeRefused::ContainerLimit {
            container: c.name.to_owned(),
            resource,
            limit: quantity_of(resource, c.limit.unwrap_or(0), Format::default()).0,
            pod_limit: quantity_of(resource, pod_limit, Format::default()).0,
        });
    }
    let total = aggregate(&counted);
    let mut scaled = Vec::new();
    if total > new_request {
        for c in &counted {
            let Some(r) = c.request else {
                if c.limit.is_some_and(|l| l > 0) {
                    return Err(EnvelopeRefused::Unscalable {
                        container: c.name.to_owned(),
                        resource,
                        pod_request: request.0.clone(),
                    });
                }
                continue;
            };
            let v = quantity::mul_div_floor_i128(r, new_request, total).ok_or_else(|| {
                EnvelopeRefused::Quantity(format!("{resource}: scaling overflows"))
            })?;
            scaled.push((
                c.path.clone(),
                quantity_of(resource, v.max(0), Format::default()),
            ));
        }
    }
    Ok(EnvelopeResource {
        resource,
        request,
        limit,
        remove_limit,
        scaled,
    })
}

fn canonical_quantity(q: &Quantity) -> Quantity {
    Amount::parse(q)
        .map(|a| a.to_quantity())
        .unwrap_or_else(|_| q.clone())
}

/// The envelope `vpa`'s [`POD_ROW`] gives `pod`, for each resource the pod sets at pod level and the row has a
/// target for. Empty when the pod has no `spec.resources` or the VPA no such row.
pub fn pod_envelope(
    pod: &Pod,
    vpa: &VerticalPodAutoscaler,
) -> Result<Vec<EnvelopeResource>, EnvelopeRefused> {
    let Some(spec) = pod.spec.as_ref().filter(|s| s.resources.is_some()) else {
        return Ok(Vec::new());
    };
    let Some(target) = pod_row(vpa).map(|r| &r.target) else {
        return Ok(Vec::new());
    };
    let policy = LimitPolicy::or_keep_ratio(vpa);
    let mut out = Vec::new();
    for resource in pod_level_resources(pod) {
        let Some(t) = target.get(resource) else {
            continue;
        };
        out.push(envelope_resource(
            spec,
            resource,
            t,
            policy.rule(POD_ROW, resource),
        )?);
    }
    Ok(out)
}

/// The [`POD_ROW`] recommendation of `vpa`'s status, if any.
pub fn pod_row(vpa: &VerticalPodAutoscaler) -> Option<&RecommendedContainerResources> {
    vpa.status
        .as_ref()?
        .recommendation
        .as_ref()?
        .container_recommendations
        .as_ref()?
        .iter()
        .find(|r| r.container_name.as_deref() == Some(POD_ROW))
}

/// The JSON Patch operations writing `envelope` into a pod whose `spec.resources` is `current`, and the items
/// of the updates annotation.
pub fn envelope_ops(
    current: &ResourceRequirements,
    envelope: &[EnvelopeResource],
) -> (Vec<PatchOperation>, Vec<String>) {
    let mut ops = Vec::new();
    let mut items = Vec::new();
    let value = |q: &Quantity| Value::String(q.0.clone());
    if current.requests.is_none() && !envelope.is_empty() {
        ops.push(add_op(
            "/spec/resources/requests",
            Value::Object(Default::default()),
        ));
    }
    let mut limits_map = current.limits.is_some();
    for e in envelope {
        ops.push(add_op(
            &format!("/spec/resources/requests/{}", e.resource),
            value(&e.request),
        ));
        items.push(format!("pod {} request {}", e.resource, e.request.0));
        if let Some(l) = &e.limit {
            if !limits_map {
                ops.push(add_op(
                    "/spec/resources/limits",
                    Value::Object(Default::default()),
                ));
                limits_map = true;
            }
            ops.push(add_op(
                &format!("/spec/resources/limits/{}", e.resource),
                value(l),
            ));
            items.push(format!("pod {} limit {}", e.resource, l.0));
        } else if e.remove_limit {
            ops.push(remove_op(&format!("/spec/resources/limits/{}", e.resource)));
            items.push(format!("pod {} limit removed", e.resource));
        }
        for (path, q) in &e.scaled {
            ops.push(add_op(
                &format!("{path}/resources/requests/{}", e.resource),
                value(q),
            ));
            items.push(format!("{path} {} request scaled to {}", e.resource, q.0));
        }
    }
    (ops, items)
}

/// The pod's current pod-level request of `resource` in millicores or bytes (a request absent: the limit).
pub fn pod_level_request(pod: &Pod, resource: &str) -> Option<i128> {
    let r = pod.spec.as_ref()?.resources.as_ref()?;
    let q = r
        .requests
        .as_ref()
        .and_then(|m| m.get(resource))
        .or_else(|| r.limits.as_ref()?.get(resource))?;
    amount_of(resource, Some(q)).ok().flatten()
}
