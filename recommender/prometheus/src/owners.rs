//! Workloads from kube-state-metrics owner series (pure): `kube_pod_owner` names a pod's owner,
//! `kube_replicaset_owner` and `kube_job_owner` the owners' owners, so a pod resolves to its top owner
//! (`Deployment` through its ReplicaSet, `CronJob` through its Job, `StatefulSet`, `DaemonSet`, …). A pod
//! without owner series falls back to the stem of its name, with an empty kind.

use std::collections::{BTreeMap, HashMap};

/// A workload: the top owner of some pods.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkloadInfo {
    /// Namespace.
    pub namespace: String,
    /// Owner kind (`Deployment`, `StatefulSet`, …); empty when guessed from the pod name.
    pub kind: String,
    /// Owner name.
    pub name: String,
}

/// Owner links read so far.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    /// (namespace, pod) → (kind, name, is controller).
    pod: HashMap<(String, String), (String, String, bool)>,
    /// (namespace, kind, name) → (owner kind, owner name).
    parent: HashMap<(String, String, String), (String, String)>,
}

fn get<'a>(l: &'a BTreeMap<String, String>, k: &str) -> &'a str {
    l.get(k).map_or("", String::as_str)
}

impl Owners {
    /// Records one owner series (its labels, `__name__` included); other series and `<none>` owners are
    /// ignored. A controller owner wins over other owners of the same pod.
    pub fn record(&mut self, l: &BTreeMap<String, String>) {
        let (kind, name) = (get(l, "owner_kind"), get(l, "owner_name"));
        if kind.is_empty() || kind == "<none>" || name.is_empty() || name == "<none>" {
            return;
        }
        let ns = get(l, "namespace").to_string();
        let owner = (kind.to_string(), name.to_string());
        match get(l, "__name__") {
            "kube_pod_owner" => {
                let ctl = get(l, "owner_is_controller") == "true";
                let e = self.pod.entry((ns, get(l, "pod").into())).or_insert((
                    owner.0.clone(),
                    owner.1.clone(),
                    ctl,
                ));
                if ctl && !e.2 {
                    *e = (owner.0, owner.1, ctl);
                }
            }
            "kube_replicaset_owner" => {
                let rs = get(l, "replicaset").to_string();
                self.parent.insert((ns, "ReplicaSet".into(), rs), owner);
            }
            "kube_job_owner" => {
                let job = get(l, "job_name").to_string();
                self.parent.insert((ns, "Job".into(), job), owner);
            }
            _ => {}
        }
    }

    /// The workload of a pod: its top owner (at most four levels up), else its name's stem with no kind.
    pub fn workload_of(&self, namespace: &str, pod: &str) -> WorkloadInfo {
        let Some((kind, name, _)) = self.pod.get(&(namespace.to_string(), pod.to_string())) else {
            return WorkloadInfo {
                namespace: namespace.to_string(),
                kind: String::new(),
                name: tailor_engine::trace::workload_of(pod),
            };
        };
        let mut w = (kind.clone(), name.clone());
        for _ in 0..4 {
            match self
                .parent
                .get(&(namespace.to_string(), w.0.clone(), w.1.clone()))
            {
                Some(up) => w = up.clone(),
                None => break,
            }
        }
        WorkloadInfo {
            namespace: namespace.to_string(),
            kind: w.0,
            name: w.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod_owner(pod: &str, kind: &str, name: &str, ctl: bool) -> BTreeMap<String, String> {
        let ctl = if ctl { "true" } else { "false" };
        series(&[
            ("__name__", "kube_pod_owner"),
            ("namespace", "ns"),
            ("pod", pod),
            ("owner_kind", kind),
            ("owner_name", name),
            ("owner_is_controller", ctl),
        ])
    }

    fn kind_name(w: WorkloadInfo) -> (String, String) {
        (w.kind, w.name)
    }

    #[test]
    fn resolves_top_owners() {
        let mut o = Owners::default();
        o.record(&pod_owner("web-abc-1", "ReplicaSet", "web-abc", true));
        o.record(&series(&[
            ("__name__", "kube_replicaset_owner"),
            ("namespace", "ns"),
            ("replicaset", "web-abc"),
            ("owner_kind", "Deployment"),
            ("owner_name", "web"),
        ]));
        o.record(&pod_owner("db-0", "StatefulSet", "db", true));
        o.record(&pod_owner("agent-x", "DaemonSet", "agent", true));
        o.record(&pod_owner("backup-1-q", "Job", "backup-1", true));
        o.record(&series(&[
            ("__name__", "kube_job_owner"),
            ("namespace", "ns"),
            ("job_name", "backup-1"),
            ("owner_kind", "CronJob"),
            ("owner_name", "backup"),
        ]));
        let kn = |k: &str, n: &str| (k.to_string(), n.to_string());
        assert_eq!(
            kind_name(o.workload_of("ns", "web-abc-1")),
            kn("Deployment", "web")
        );
        assert_eq!(
            kind_name(o.workload_of("ns", "db-0")),
            kn("StatefulSet", "db")
        );
        assert_eq!(
            kind_name(o.workload_of("ns", "agent-x")),
            kn("DaemonSet", "agent")
        );
        assert_eq!(
            kind_name(o.workload_of("ns", "backup-1-q")),
            kn("CronJob", "backup")
        );
        // Another namespace's pod of the same name has no owner: the name's stem, no kind.
        let w = o.workload_of("other", "web-5d8f7c9b6d-abcde");
        assert_eq!((w.namespace.as_str(), w.kind.as_str()), ("other", ""));
        assert_eq!(
            w.name,
            tailor_engine::trace::workload_of("web-5d8f7c9b6d-abcde")
        );
    }

    #[test]
    fn controller_owner_wins_and_none_is_ignored() {
        let mut o = Owners::default();
        o.record(&pod_owner("p", "Node", "n1", false));
        o.record(&pod_owner("p", "StatefulSet", "s", true));
        o.record(&pod_owner("p", "Other", "x", false));
        o.record(&pod_owner("q", "<none>", "<none>", false));
        assert_eq!(
            kind_name(o.workload_of("ns", "p")),
            ("StatefulSet".into(), "s".into())
        );
        assert_eq!(o.workload_of("ns", "q").kind, "");
    }
}
