//! How much a pod needs an update (docs/design/upstream-updater.md §2.3, §2.6, §2.8).

use std::cmp::Ordering;
use std::hash::{BuildHasherDefault, Hasher};

use tailor_core::quantity::{self, QuantityError};
use tailor_crds::{
    RecommendedContainerResources, RecommendedPodResources, ResourceList, VerticalPodAutoscaler,
};

use crate::views::pods::{self, CachedPod};

/// The update priority of a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodPriority {
    /// Some request lies outside `[lowerBound, upperBound]` (or is missing).
    pub outside_recommended_range: bool,
    /// Some target is above its request (or the request is missing).
    pub scale_up: bool,
    /// Σ over resources of |request − target| / request, on totals over the pod's containers.
    pub resource_diff: f64,
}

impl PodPriority {
    /// Upstream's order: `self < other` when only `other` scales up, or both agree and `self` changes
    /// less. `OutsideRecommendedRange` plays no part.
    pub fn less(&self, other: &PodPriority) -> bool {
        if self.scale_up != other.scale_up {
            return other.scale_up;
        }
        self.resource_diff < other.resource_diff
    }

    /// Descending order for sorting (highest priority first).
    pub fn cmp_desc(&self, other: &PodPriority) -> Ordering {
        if other.less(self) {
            Ordering::Less
        } else if self.less(other) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }
}

/// The recommendation of `container`, if any.
pub fn container_recommendation<'a>(
    rec: Option<&'a RecommendedPodResources>,
    container: &str,
) -> Option<&'a RecommendedContainerResources> {
    rec?.container_recommendations
        .iter()
        .flatten()
        .find(|r| r.container_name.as_deref() == Some(container))
}

type Quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Most distinct quantity strings a [`MilliCache`] remembers before it starts over.
pub const MILLI_CACHE_ENTRIES: usize = 4096;

/// Quantities seen in an iteration, parsed once: the same few strings recur across thousands of pods.
/// Holds exact thousandths where the quantity has them; others are parsed (and compared) exactly each
/// time.
#[derive(Debug, Default)]
pub struct MilliCache {
    exact: std::collections::HashMap<String, Option<i64>, BuildHasherDefault<Fnv>>,
}

/// FNV-1a: the keys are a few bytes long, where it is several times faster than the default hasher.
#[derive(Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl MilliCache {
    /// Exact thousandths, `None` when the quantity has finer digits.
    pub fn exact(&mut self, q: &Quantity) -> Result<Option<i64>, QuantityError> {
        if let Some(v) = self.exact.get(q.0.as_str()) {
            return Ok(*v);
        }
        let v = if quantity::is_whole_milli(q)? {
            Some(quantity::milli_value(q)?)
        } else {
            None
        };
        if self.exact.len() >= MILLI_CACHE_ENTRIES {
            self.exact.clear();
        }
        self.exact.insert(q.0.clone(), v);
        Ok(v)
    }

    /// Thousandths rounded up (Go's `MilliValue`).
    pub fn milli(&mut self, q: &Quantity) -> Result<i64, QuantityError> {
        match self.exact(q)? {
            Some(v) => Ok(v),
            None => quantity::milli_value(q),
        }
    }

    /// Exact comparison of two quantities.
    pub fn cmp(&mut self, a: &Quantity, b: &Quantity) -> Result<Ordering, QuantityError> {
        match (self.exact(a)?, self.exact(b)?) {
            // i64::MAX may be a saturated value: compare those exactly.
            (Some(x), Some(y)) if x != i64::MAX && y != i64::MAX => Ok(x.cmp(&y)),
            _ => quantity::cmp(a, b),
        }
    }
}

/// The priority of `pod` for the processed recommendation `rec` (docs/design/upstream-updater.md §2.3). Only
/// observed containers count.
pub fn pod_priority(
    pod: &CachedPod,
    rec: Option<&RecommendedPodResources>,
) -> Result<PodPriority, QuantityError> {
    pod_priority_with(pod, rec, &mut MilliCache::default())
}

/// [`pod_priority`] with quantities parsed through `cache`.
pub fn pod_priority_with(
    pod: &CachedPod,
    rec: Option<&RecommendedPodResources>,
    cache: &mut MilliCache,
) -> Result<PodPriority, QuantityError> {
    priority_for(pod, &ParsedRecommendation::new(rec, cache))
}

/// One resource of a container recommendation, parsed as the priority reads it.
#[derive(Debug)]
struct ParsedResource {
    resource: String,
    /// [`MilliCache::milli`] of the target.
    target: Result<i64, QuantityError>,
    /// The lower bound and its [`MilliCache::exact`].
    lower: Option<(Quantity, Result<Option<i64>, QuantityError>)>,
    /// The upper bound and its [`MilliCache::exact`].
    upper: Option<(Quantity, Result<Option<i64>, QuantityError>)>,
}

/// A processed recommendation with every quantity the priority compares parsed once (errors are kept and
/// reported when the priority reads the quantity, as if it were parsed then). Built once per VPA and
/// shared by its pods.
#[derive(Debug)]
pub struct ParsedRecommendation {
    containers: Vec<(Option<String>, Vec<ParsedResource>)>,
}

impl ParsedRecommendation {
    /// Parses `rec` through `cache`.
    pub fn new(rec: Option<&RecommendedPodResources>, cache: &mut MilliCache) -> Self {
        let containers = rec
            .and_then(|r| r.container_recommendations.as_ref())
            .into_iter()
            .flatten()
            .map(|c| {
                let bound =
                    |list: Option<&ResourceList>, resource: &str, cache: &mut MilliCache| {
                        list.and_then(|l| l.get(resource))
                            .map(|q| (q.clone(), cache.exact(q)))
                    };
                let resources = c
                    .target
                    .iter()
                    .map(|(resource, target)| ParsedResource {
                        resource: resource.clone(),
                        target: cache.milli(target),
                        lower: bound(c.lower_bound.as_ref(), resource, cache),
                        upper: bound(c.upper_bound.as_ref(), resource, cache),
                    })
                    .collect();
                (c.container_name.clone(), resources)
            })
            .collect();
        ParsedRecommendation { containers }
    }

    fn container(&self, name: &str) -> Option<&[ParsedResource]> {
        self.containers
            .iter()
            .find(|(n, _)| n.as_deref() == Some(name))
            .map(|(_, r)| r.as_slice())
    }
}

/// Totals of one resource over the pod's containers.
struct Total<'a> {
    resource: &'a str,
    request: Option<f64>,
    recommended: f64,
}

/// The request's exact thousandths, if it has them (what [`MilliCache::cmp`] compares on).
fn exact_of(parsed: &pods::Milli) -> Result<Option<i64>, QuantityError> {
    match parsed {
        Ok((v, true)) => Ok(Some(*v)),
        Ok((_, false)) => Ok(None),
        Err(e) => Err(e.clone()),
    }
}

/// The priority of `pod` for a parsed processed recommendation (docs/design/upstream-updater.md §2.3): what
/// [`pod_priority`] computes.
pub fn priority_for(
    pod: &CachedPod,
    rec: &ParsedRecommendation,
) -> Result<PodPriority, QuantityError> {
    let observed = pods::observed_containers(pod);
    // Resources the pod budgets at pod level are left alone (as the webhook does): they never make a pod a
    // candidate, or its replacement would come back with the same requests.
    let pod_level = pods::pod_level(pod);
    let mut out = PodPriority::default();
    let mut totals: Vec<Total<'_>> = Vec::new();
    for container in pods::containers(pod) {
        if !pods::is_observed(observed, &container.name) {
            continue;
        }
        let Some(crec) = rec.container(&container.name) else {
            continue;
        };
        let requests = container.requests.as_deref();
        for r in crec {
            let resource = r.resource.as_str();
            if pod_level.contains(&resource) {
                continue;
            }
            let target_milli = r.target.clone()?;
            let i = match totals.iter().position(|t| t.resource == resource) {
                Some(i) => i,
                None => {
                    totals.push(Total {
                        resource,
                        request: None,
                        recommended: 0.0,
                    });
                    totals.len() - 1
                }
            };
            totals[i].recommended += target_milli as f64;
            match requests.and_then(|a| a.get(resource)) {
                Some((request, parsed)) => {
                    let exact = exact_of(parsed)?;
                    let request_milli = match exact {
                        Some(v) => v,
                        None => parsed.clone()?.0,
                    };
                    *totals[i].request.get_or_insert(0.0) += request_milli as f64;
                    if target_milli > request_milli {
                        out.scale_up = true;
                    }
                    if outside((request, exact), r)? {
                        out.outside_recommended_range = true;
                    }
                }
                None => {
                    out.scale_up = true;
                    out.outside_recommended_range = true;
                }
            }
        }
    }
    // Summed in resource-name order, as upstream's sorted map (floating-point sums depend on the order).
    totals.sort_by(|a, b| a.resource.cmp(b.resource));
    for t in &totals {
        let request = t.request.unwrap_or(0.0).max(1.0);
        out.resource_diff += (request - t.recommended).abs() / request;
    }
    Ok(out)
}

/// Adds the pod-level envelope to `out` (`--pod-level-resources`, docs/pod-level-resources.md): for each
/// resource `pod` budgets at pod level and `vpa`'s `tailor.dev/pod` row recommends, the pod-level request is
/// compared with the row as a container's request with its recommendation (outside `[lowerBound,
/// upperBound]`, below target, relative difference; the containers skip those resources). Nothing without
/// the row.
pub fn add_pod_level(
    out: &mut PodPriority,
    pod: &CachedPod,
    vpa: &VerticalPodAutoscaler,
) -> Result<(), QuantityError> {
    let Some(row) = tailor_core::sizing::pod_row(vpa) else {
        return Ok(());
    };
    let bound = |list: Option<&ResourceList>, resource: &str| {
        list.and_then(|l| l.get(resource))
            .map(quantity::milli_value)
            .transpose()
    };
    for &resource in pods::pod_level(pod) {
        let Some(target) = row.target.get(resource) else {
            continue;
        };
        let target = quantity::milli_value(target)?;
        let Some(request) = pods::pod_level_request(pod, resource) else {
            out.scale_up = true;
            out.outside_recommended_range = true;
            continue;
        };
        out.scale_up |= target > request;
        let below = bound(row.lower_bound.as_ref(), resource)?.is_some_and(|l| request < l);
        let above = bound(row.upper_bound.as_ref(), resource)?.is_some_and(|u| request > u);
        out.outside_recommended_range |= below || above;
        let r = (request as f64).max(1.0);
        out.resource_diff += (r - target as f64).abs() / r;
    }
    Ok(())
}

/// [`MilliCache::cmp`] of a request and a bound, both already parsed.
fn cmp_request(
    (request, exact): (&Quantity, Option<i64>),
    (other, other_exact): &(Quantity, Result<Option<i64>, QuantityError>),
) -> Result<Ordering, QuantityError> {
    match (exact, other_exact.clone()?) {
        (Some(x), Some(y)) if x != i64::MAX && y != i64::MAX => Ok(x.cmp(&y)),
        _ => quantity::cmp(request, other),
    }
}

fn outside(request: (&Quantity, Option<i64>), r: &ParsedResource) -> Result<bool, QuantityError> {
    if let Some(lb) = &r.lower
        && cmp_request(request, lb)? == Ordering::Less
    {
        return Ok(true);
    }
    if let Some(ub) = &r.upper
        && cmp_request(request, ub)? == Ordering::Greater
    {
        return Ok(true);
    }
    Ok(false)
}

/// Whether `new` recommends less than `last` for some resource of some container both name
/// (docs/design/upstream-updater.md §2.8). False when either is absent.
pub fn has_lower_resource(
    last: Option<&RecommendedPodResources>,
    new: Option<&RecommendedPodResources>,
) -> Result<bool, QuantityError> {
    let (Some(last), Some(new)) = (last, new) else {
        return Ok(false);
    };
    for crec in new.container_recommendations.iter().flatten() {
        let Some(name) = crec.container_name.as_deref() else {
            continue;
        };
        let Some(old) = container_recommendation(Some(last), name) else {
            continue;
        };
        if list_has_lower(&old.target, &crec.target)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `new` is lower than `old` for some resource both name.
pub fn list_has_lower(old: &ResourceList, new: &ResourceList) -> Result<bool, QuantityError> {
    for (resource, value) in new {
        if let Some(old_value) = old.get(resource)
            && quantity::cmp(value, old_value)? == Ordering::Less
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod pod_level_tests {
    use super::*;
    use tailor_testkit::fixtures::{PodFixture, VpaFixture};

    #[test]
    fn resources_budgeted_at_pod_level_never_make_a_candidate() {
        let rec: RecommendedPodResources = serde_json::from_value(serde_json::json!({
            "containerRecommendations": [{"containerName": "app",
                "target": {"cpu": "1", "memory": "1Gi"},
                "lowerBound": {"cpu": "800m", "memory": "800Mi"},
                "upperBound": {"cpu": "2", "memory": "2Gi"}}]
        }))
        .expect("recommendation");
        let pod = |pod_resources: serde_json::Value| -> CachedPod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"resources": pod_resources,
                         "containers": [{"name": "app",
                             "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}
            }))
            .expect("pod")
        };
        let free = pod_priority(&pod(serde_json::json!(null)), Some(&rec)).expect("priority");
        assert!(free.outside_recommended_range && free.scale_up);
        let cpu = pod_priority(
            &pod(serde_json::json!({"limits": {"cpu": "4"}})),
            Some(&rec),
        )
        .expect("priority");
        assert!(cpu.outside_recommended_range, "memory still counts");
        assert!(cpu.resource_diff < free.resource_diff);
        let both = pod_priority(
            &pod(serde_json::json!({"requests": {"cpu": "4", "memory": "4Gi"}})),
            Some(&rec),
        )
        .expect("priority");
        assert!(!both.outside_recommended_range && !both.scale_up);
        assert_eq!(both.resource_diff, 0.0);
    }

    fn vpa(pod_row: serde_json::Value) -> VerticalPodAutoscaler {
        VpaFixture::new("ns", "v")
            .target("Deployment", "web")
            .recommendation_target("app", serde_json::json!({"cpu": "1"}))
            .recommendation_row(pod_row)
            .build()
    }

    fn pod(pod_resources: serde_json::Value) -> CachedPod {
        let pod = PodFixture::new("ns", "p")
            .pod_resources(pod_resources)
            .container(
                "app",
                serde_json::json!({"cpu": "100m"}),
                serde_json::Value::Null,
            )
            .build();
        CachedPod::from(pod)
    }

    #[test]
    fn the_envelope_makes_a_candidate_of_a_pod_whose_pod_level_requests_stray() {
        let row = serde_json::json!({"containerName": tailor_core::sizing::POD_ROW,
            "target": {"cpu": "500m", "memory": "700Mi"},
            "lowerBound": {"cpu": "400m", "memory": "600Mi"},
            "upperBound": {"cpu": "800m", "memory": "1Gi"}});
        let v = vpa(row);
        let decide = |pod_resources: serde_json::Value| {
            let mut p = PodPriority::default();
            add_pod_level(&mut p, &pod(pod_resources), &v).expect("priority");
            p
        };
        // Far above the envelope: outside the range, a scale-down.
        let big = decide(serde_json::json!({"requests": {"cpu": "2", "memory": "2Gi"}}));
        assert!(big.outside_recommended_range && !big.scale_up);
        assert!(big.resource_diff > 1.0, "{}", big.resource_diff);
        // Below it: a scale-up.
        let small = decide(serde_json::json!({"requests": {"cpu": "100m"}}));
        assert!(small.outside_recommended_range && small.scale_up);
        // Within the bounds: not outside, a small difference only.
        let near = decide(serde_json::json!({"limits": {"cpu": "550m", "memory": "700Mi"}}));
        assert!(!near.outside_recommended_range && !near.scale_up);
        assert!(near.resource_diff < 0.1, "{}", near.resource_diff);
        // No row, or no pod-level resources: nothing added.
        let none = vpa(serde_json::json!({"containerName": "other", "target": {"cpu": "1"}}));
        let mut p = PodPriority::default();
        add_pod_level(
            &mut p,
            &pod(serde_json::json!({"requests": {"cpu": "2"}})),
            &none,
        )
        .unwrap();
        add_pod_level(&mut p, &pod(serde_json::json!(null)), &v).unwrap();
        assert_eq!(p, PodPriority::default());
    }
}
