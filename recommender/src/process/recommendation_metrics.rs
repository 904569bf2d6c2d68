//! `tailor_vpa_recommendation{namespace,vpa,container,resource,bound}`: each VPA's recommendation as a
//! gauge (CPU in cores, memory in bytes), for dashboards that chart requests against recommendations.
//!
//! Upstream does not export such a series, for cardinality: it grows with VPAs × containers × 2 resources ×
//! 4 bounds. Tailor exports it only when asked (`--recommendation-metrics`) and never more than
//! `--recommendation-metrics-max-series` series: past the cap, whole VPAs are left out (in namespace and
//! name order, so the same ones each loop) and `tailor_vpa_recommendation_series_dropped` says how many
//! series were not exported. Series of VPAs that are gone disappear with the next loop.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tailor_core::quantity::Amount;
use tailor_crds::RecommendedPodResources;

type Labels = Vec<(&'static str, String)>;

/// The bounds exported, with their label values.
const BOUNDS: [&str; 4] = ["target", "lowerBound", "upperBound", "uncappedTarget"];

/// The recommendation gauges and their cap.
#[derive(Clone, Debug)]
pub struct RecommendationMetrics {
    series: Family<Labels, Gauge<f64, AtomicU64>>,
    dropped: Gauge,
    max_series: usize,
}

impl RecommendationMetrics {
    /// Gauges for at most `max_series` series.
    pub fn new(max_series: usize) -> Self {
        RecommendationMetrics {
            series: Family::default(),
            dropped: Gauge::default(),
            max_series,
        }
    }

    /// Registers the gauges in `registry` (prefixed `tailor_vpa` by the caller).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "recommendation",
            "Each VPA's recommendation by container, resource (cpu in cores, memory in bytes) and bound",
            self.series.clone(),
        );
        registry.register(
            "recommendation_series_dropped",
            "Recommendation series not exported because of --recommendation-metrics-max-series",
            self.dropped.clone(),
        );
    }

    /// Replaces every series with those of `vpas` (namespace, name, recommendation), in order.
    pub fn update<'a>(
        &self,
        vpas: impl IntoIterator<Item = (&'a str, &'a str, RecommendedPodResources)>,
    ) {
        self.series.clear();
        let (mut exported, mut dropped) = (0usize, 0usize);
        for (namespace, name, rec) in vpas {
            let rows = rows(&rec);
            if exported + rows.len() > self.max_series {
                dropped += rows.len();
                continue;
            }
            exported += rows.len();
            for (container, resource, bound, value) in rows {
                let labels = vec![
                    ("namespace", namespace.to_owned()),
                    ("vpa", name.to_owned()),
                    ("container", container),
                    ("resource", resource.to_owned()),
                    ("bound", bound.to_owned()),
                ];
                self.series.get_or_create(&labels).set(value);
            }
        }
        self.dropped.set(i64::try_from(dropped).unwrap_or(i64::MAX));
    }
}

/// A quantity in the exported unit: cores for CPU, bytes for memory.
fn value(q: &Quantity, resource: &str) -> Option<f64> {
    let a = Amount::parse(q).ok()?;
    match resource {
        "cpu" => a.millis_i128().map(|m| m as f64 / 1000.0),
        _ => a.units_i128().map(|u| u as f64),
    }
}

/// `(container, resource, bound, value)` of every exported number of `rec`.
fn rows(rec: &RecommendedPodResources) -> Vec<(String, &'static str, &'static str, f64)> {
    let mut out = Vec::new();
    for c in rec.container_recommendations.iter().flatten() {
        let container = c.container_name.clone().unwrap_or_default();
        let lists: [Option<&BTreeMap<String, Quantity>>; 4] = [
            Some(&c.target),
            c.lower_bound.as_ref(),
            c.upper_bound.as_ref(),
            c.uncapped_target.as_ref(),
        ];
        for (bound, list) in BOUNDS.into_iter().zip(lists) {
            for resource in ["cpu", "memory"] {
                if let Some(v) = list
                    .and_then(|l| l.get(resource))
                    .and_then(|q| value(q, resource))
                {
                    out.push((container.clone(), resource, bound, v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn rec(cpu: &str, memory: &str) -> RecommendedPodResources {
        serde_json::from_value(serde_json::json!({"containerRecommendations": [{"containerName": "app",
            "target": {"cpu": cpu, "memory": memory}, "lowerBound": {"cpu": cpu, "memory": memory},
            "upperBound": {"cpu": cpu, "memory": memory}, "uncappedTarget": {"cpu": cpu, "memory": memory}}]}))
        .expect("recommendation")
    }

    #[test]
    fn series_in_exported_units_within_the_cap_and_gone_with_their_vpa() {
        let m = RecommendationMetrics::new(12);
        let mut registry = Registry::with_prefix("tailor_vpa");
        m.register(&mut registry);
        m.update([
            ("shop", "web", rec("250m", "256Mi")),
            ("shop", "api", rec("1", "1Gi")),
        ]);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(r#"tailor_vpa_recommendation{namespace="shop",vpa="web",container="app",resource="cpu",bound="target"} 0.25"#),
            "{text}"
        );
        assert!(
            text.contains(r#"resource="memory",bound="upperBound"} 268435456.0"#),
            "{text}"
        );
        // 8 series a VPA: the second VPA does not fit in 12, and is counted.
        assert!(!text.contains(r#"vpa="api""#), "{text}");
        assert!(
            text.contains("tailor_vpa_recommendation_series_dropped 8"),
            "{text}"
        );
        // The next loop without `web`: its series are gone.
        m.update([("shop", "api", rec("1", "1Gi"))]);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        assert!(
            !text.contains(r#"vpa="web""#) && text.contains(r#"vpa="api""#),
            "{text}"
        );
        assert!(
            text.contains("tailor_vpa_recommendation_series_dropped 0"),
            "{text}"
        );
    }
}
