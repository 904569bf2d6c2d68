//! Live pods grouped by namespace and interned label set.
//!
//! A VPA selects pods by their labels only, and the pods of one workload share a label set, so matching a
//! selector against a namespace needs to look at each distinct label set once, not at every pod: the
//! model's [`ClusterState::matching_pods`](super::ClusterState::matching_pods),
//! [`ClusterState::has_matching_pod`](super::ClusterState::has_matching_pod) and
//! [`ClusterState::open_windows`](super::ClusterState::open_windows) walk these groups. Without them every
//! VPA scanned every pod of its namespace, quadratic in pods per namespace. Each VPA also keeps the groups
//! its selector matches, updated when a group starts or ends, so that those calls match no selector at all.

use std::collections::HashMap;

use super::fxhash::FxBuildHasher;

type FxMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// Pod indices by namespace id, then by label-set id. Groups are never empty: a group whose last pod
/// leaves is dropped, so a label-set id that no pod uses any more appears in no group.
#[derive(Debug, Default, Clone)]
pub(crate) struct PodGroups {
    by_namespace: FxMap<u32, FxMap<u32, Vec<u32>>>,
}

impl PodGroups {
    /// Adds pod `pod` with label set `labels` to namespace `namespace`; true when that started a new group.
    pub(crate) fn insert(&mut self, namespace: u32, labels: u32, pod: u32) -> bool {
        let pods = self
            .by_namespace
            .entry(namespace)
            .or_default()
            .entry(labels)
            .or_default();
        pods.push(pod);
        pods.len() == 1
    }

    /// Removes pod `pod` from the group it was added to with these ids (no-op when absent); true when that
    /// dropped the group (its last pod left).
    pub(crate) fn remove(&mut self, namespace: u32, labels: u32, pod: u32) -> bool {
        let Some(groups) = self.by_namespace.get_mut(&namespace) else {
            return false;
        };
        let mut dropped = false;
        if let Some(pods) = groups.get_mut(&labels) {
            if let Some(pos) = pods.iter().position(|&p| p == pod) {
                pods.swap_remove(pos);
            }
            if pods.is_empty() {
                groups.remove(&labels);
                dropped = true;
            }
        }
        if groups.is_empty() {
            self.by_namespace.remove(&namespace);
        }
        dropped
    }

    /// The pods of one group (empty when there is none).
    pub(crate) fn pods(&self, namespace: u32, labels: u32) -> &[u32] {
        self.by_namespace
            .get(&namespace)
            .and_then(|g| g.get(&labels))
            .map_or(&[], Vec::as_slice)
    }

    /// The non-empty groups of a namespace as (label-set id, pod indices), in no particular order.
    pub(crate) fn groups(&self, namespace: u32) -> impl Iterator<Item = (u32, &[u32])> {
        self.by_namespace
            .get(&namespace)
            .into_iter()
            .flatten()
            .map(|(&labels, pods)| (labels, pods.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(g: &PodGroups, ns: u32) -> Vec<(u32, Vec<u32>)> {
        let mut out: Vec<(u32, Vec<u32>)> = g
            .groups(ns)
            .map(|(l, p)| {
                let mut p = p.to_vec();
                p.sort();
                (l, p)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn groups_follow_inserts_and_removals_and_drop_when_empty() {
        let mut g = PodGroups::default();
        assert!(g.insert(0, 7, 1));
        assert!(!g.insert(0, 7, 2));
        assert!(g.insert(0, 8, 3));
        assert!(g.insert(1, 7, 4));
        assert_eq!(sorted(&g, 0), [(7, vec![1, 2]), (8, vec![3])]);
        assert_eq!(sorted(&g, 1), [(7, vec![4])]);
        assert!(g.remove(0, 8, 3));
        assert!(!g.remove(0, 7, 1));
        assert!(!g.remove(0, 7, 99));
        assert!(!g.remove(5, 7, 1));
        assert_eq!(sorted(&g, 0), [(7, vec![2])]);
        assert_eq!(g.pods(0, 7), [2]);
        assert!(g.pods(0, 8).is_empty());
        assert!(g.remove(0, 7, 2));
        assert!(sorted(&g, 0).is_empty());
        assert!(!g.by_namespace.contains_key(&0));
        assert_eq!(sorted(&g, 1), [(7, vec![4])]);
    }
}
