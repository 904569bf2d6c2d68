//! A fixed set of VPAs (standalone mode, tests) with the two lookups every pod review makes answered from
//! maps built once: whether a namespace has a VPA that takes part in matching, and which of those name a
//! given controller. Scanning the namespace's VPA objects instead touched every one of them for every
//! review, a cache miss each when reviews arrive one at a time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tailor_crds::VerticalPodAutoscaler;

use super::{ObjectSource, StaticHasher, StaticSource, VpaSource, is_active};

/// VPAs indexed by namespace, and the active ones by target.
#[derive(Debug, Default)]
pub struct StaticVpas {
    source: StaticSource<VerticalPodAutoscaler>,
    /// Namespaces with at least one active VPA.
    active_namespaces: HashSet<String, StaticHasher>,
    /// Active VPAs by namespace, then by `targetRef.name` (the kind is compared on lookup).
    active_by_target: HashMap<
        String,
        HashMap<String, Vec<Arc<VerticalPodAutoscaler>>, StaticHasher>,
        StaticHasher,
    >,
}

impl StaticVpas {
    /// Indexes `vpas`; a later VPA with the same namespace and name replaces an earlier one.
    pub fn new(vpas: Vec<VerticalPodAutoscaler>) -> Self {
        let source = StaticSource::new(vpas);
        let mut out = StaticVpas::default();
        for vpa in source.filter(&is_active) {
            let namespace = vpa.metadata.namespace.clone().unwrap_or_default();
            if let Some(target) = &vpa.spec.target_ref {
                (out.active_by_target.entry(namespace.clone()).or_default())
                    .entry(target.name.clone())
                    .or_default()
                    .push(vpa.clone());
            }
            out.active_namespaces.insert(namespace);
        }
        out.source = source;
        out
    }
}

impl VpaSource for StaticVpas {
    fn has_active(&self, namespace: &str) -> bool {
        self.active_namespaces.contains(namespace)
    }

    fn active_targeting(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<Arc<VerticalPodAutoscaler>> {
        let Some(named) = (self.active_by_target.get(namespace)).and_then(|n| n.get(name)) else {
            return Vec::new();
        };
        named
            .iter()
            .filter(|v| v.spec.target_ref.as_ref().is_some_and(|t| t.kind == kind))
            .cloned()
            .collect()
    }

    fn each_target(&self, f: &mut dyn FnMut(&str, &str, &str, &str)) {
        self.source.each_target(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_testkit::fixtures::VpaFixture;

    /// The maps answer as the scan over the same VPAs does.
    #[test]
    fn the_lookups_agree_with_a_scan() {
        let vpas = vec![
            VpaFixture::new("a", "web")
                .target("Deployment", "web")
                .build(),
            VpaFixture::new("a", "web-off")
                .target("Deployment", "web")
                .mode("Off")
                .build(),
            VpaFixture::new("a", "web-sts")
                .target("StatefulSet", "web")
                .build(),
            VpaFixture::new("a", "web-2")
                .target("Deployment", "web")
                .build(),
            VpaFixture::new("b", "off")
                .target("Deployment", "x")
                .mode("Off")
                .build(),
            VpaFixture::new("c", "no-target").build(),
        ];
        let indexed = StaticVpas::new(vpas.clone());
        let scanned = StaticSource::new(vpas);
        for ns in ["a", "b", "c", "d"] {
            assert_eq!(indexed.has_active(ns), scanned.has_active(ns), "{ns}");
            for (kind, name) in [
                ("Deployment", "web"),
                ("StatefulSet", "web"),
                ("Deployment", "x"),
            ] {
                let names = |v: Vec<Arc<VerticalPodAutoscaler>>| {
                    let mut n: Vec<_> = v.iter().map(|v| v.metadata.name.clone()).collect();
                    n.sort();
                    n
                };
                assert_eq!(
                    names(indexed.active_targeting(ns, kind, name)),
                    names(scanned.active_targeting(ns, kind, name)),
                    "{ns} {kind}/{name}"
                );
            }
        }
        assert_eq!(indexed.active_targeting("a", "Deployment", "web").len(), 2);
        let mut targets = 0;
        indexed.each_target(&mut |_, _, _, _| targets += 1);
        assert_eq!(targets, 5);
    }
}
