//! Compact caches of the well-known workload kinds. A watch delivers [`SlimWorkload`]s; each is folded
//! into a [`CompactWorkload`] (controller owner and pod selector, strings interned per kind) kept in a
//! two-level map namespace → name. A cached ReplicaSet costs about 0.3 KiB where a kube-rs `Store` entry of
//! the slim object costs about 1.5 KiB (an `ObjectMeta`, B-tree selector maps, the store's `ObjectRef`
//! key and an `Arc`): at 5,000 Deployments × 10 revisions this is most of the webhook's memory.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::runtime::watcher;

use crate::shelf::{CacheStopped, Interner, ShelfReader, ShelfWriter, Sym};
use tailor_core::target::{
    LabelLookup, SelectorError, WorkloadInfo, controller_owner, selector_matches,
    selector_parts_match,
};
use tailor_core::workload::{SlimSpec, SlimWorkload, WorkloadKind};

/// The controller owner of a cached workload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    api_version: Sym,
    kind: Sym,
    name: Sym,
    uid: Sym,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: Sym,
    operator: Sym,
    values: Option<Box<[Sym]>>,
}

/// A label selector with `None` and empty kept apart, as on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selector {
    labels: Option<Box<[(Sym, Sym)]>>,
    expressions: Option<Box<[Requirement]>>,
}

/// What target matching reads of one workload object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactWorkload {
    owner: Option<Owner>,
    /// The kept selector: `spec.selector` (ReplicationController: its map as `matchLabels`; CronJob: the
    /// job template's pod labels, `None` when the template has none).
    selector: Option<Selector>,
}

impl CompactWorkload {
    /// The controller owner as an `OwnerReference` (`controller: true`).
    pub fn owner_reference(&self) -> Option<OwnerReference> {
        self.owner.as_ref().map(|o| OwnerReference {
            api_version: o.api_version.to_string(),
            kind: o.kind.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
            controller: Some(true),
            block_owner_deletion: None,
        })
    }

    /// The selector as kept: `None` for a CronJob whose job template has no labels.
    pub fn kept_selector(&self) -> Option<LabelSelector> {
        self.selector.as_ref().map(|s| LabelSelector {
            match_labels: s.labels.as_ref().map(|l| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }),
            match_expressions: s.expressions.as_ref().map(|e| {
                e.iter()
                    .map(|r| LabelSelectorRequirement {
                        key: r.key.to_string(),
                        operator: r.operator.to_string(),
                        values: r
                            .values
                            .as_ref()
                            .map(|v| v.iter().map(|s| s.to_string()).collect()),
                    })
                    .collect()
            }),
        })
    }

    /// API version, kind and name of the controller owner, without copying them.
    pub fn owner_names(&self) -> Option<(&str, &str, &str)> {
        self.owner
            .as_ref()
            .map(|o| (&*o.api_version, &*o.kind, &*o.name))
    }

    /// The pod selector as [`tailor_core::target::workload_info`] gives it for the full object of kind `K`.
    pub fn selector<K: WorkloadKind>(&self) -> Option<LabelSelector> {
        K::SlimSpec::selector_from_kept(self.kept_selector())
    }

    /// Whether the pod selector of [`Self::selector`] selects `labels`, matched on the kept form without
    /// building the selector; `None` when the workload has none.
    pub fn selects<K: WorkloadKind, L: LabelLookup + ?Sized>(
        &self,
        labels: &L,
    ) -> Option<Result<bool, SelectorError>> {
        match &self.selector {
            Some(kept) => Some(kept.selects(labels)),
            // Built only for a kind that gives a selector without a kept one (a CronJob without template
            // labels): the empty selector.
            None => K::SlimSpec::selector_from_kept(None).map(|s| selector_matches(&s, labels)),
        }
    }

    /// Owner and pod selector as [`tailor_core::target::workload_info`] gives them for the full object of kind
    /// `K`.
    pub fn info<K: WorkloadKind>(&self) -> WorkloadInfo {
        WorkloadInfo {
            owner: self.owner_reference(),
            selector: self.selector::<K>(),
        }
    }
}

impl Selector {
    /// [`selector_matches`] of this selector as [`CompactWorkload::kept_selector`] builds it.
    fn selects<L: LabelLookup + ?Sized>(&self, labels: &L) -> Result<bool, SelectorError> {
        let pairs = self.labels.iter().flatten().map(|(k, v)| (&**k, &**v));
        let requirements = self.expressions.iter().flatten().map(|r| {
            let values = r.values.as_deref().unwrap_or_default();
            (&*r.key, &*r.operator, values)
        });
        selector_parts_match(pairs, requirements, labels)
    }
}

/// The compact form of a selector.
fn compact_selector(interner: &mut Interner, s: &LabelSelector) -> Selector {
    Selector {
        labels: s.match_labels.as_ref().map(|m| {
            m.iter()
                .map(|(k, v)| (interner.intern(k), interner.intern(v)))
                .collect()
        }),
        expressions: s.match_expressions.as_ref().map(|e| {
            e.iter()
                .map(|r| Requirement {
                    key: interner.intern(&r.key),
                    operator: interner.intern(&r.operator),
                    values: r
                        .values
                        .as_ref()
                        .map(|v| v.iter().map(|s| interner.intern(s)).collect()),
                })
                .collect()
        }),
    }
}

/// The compact form of a workload object.
fn compact<K: WorkloadKind>(interner: &mut Interner, object: &SlimWorkload<K>) -> CompactWorkload {
    CompactWorkload {
        owner: controller_owner(object.metadata.owner_references.as_ref()).map(|o| Owner {
            api_version: interner.intern(&o.api_version),
            kind: interner.intern(&o.kind),
            name: interner.intern(&o.name),
            uid: interner.intern(&o.uid),
        }),
        selector: K::SlimSpec::kept_selector(object.spec.as_ref())
            .map(|s| compact_selector(interner, &s)),
    }
}

/// Read handle of one kind's cache; cheap to clone.
pub struct WorkloadCache<K> {
    shelf: ShelfReader<CompactWorkload>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for WorkloadCache<K> {
    fn clone(&self) -> Self {
        Self {
            shelf: self.shelf.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: WorkloadKind> WorkloadCache<K> {
    /// Runs `f` on the cached `namespace/name`, under the read lock.
    pub fn with<R>(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&CompactWorkload) -> R,
    ) -> Option<R> {
        self.shelf.with(namespace, name, f)
    }

    /// Owner and pod selector of the cached `namespace/name`.
    pub fn info(&self, namespace: &str, name: &str) -> Option<WorkloadInfo> {
        self.with(namespace, name, CompactWorkload::info::<K>)
    }

    /// The pod selector of the cached `namespace/name` (`Some(None)`: cached without one).
    pub fn selector(&self, namespace: &str, name: &str) -> Option<Option<LabelSelector>> {
        self.with(namespace, name, CompactWorkload::selector::<K>)
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.shelf.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.shelf.is_empty()
    }

    /// Waits until the writer has applied its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.shelf.wait_until_ready().await
    }
}

/// Write handle of one kind's cache: applies watch events (the watch task owns it).
pub struct WorkloadCacheWriter<K> {
    shelf: ShelfWriter<CompactWorkload>,
    kind: PhantomData<fn() -> K>,
}

impl<K: WorkloadKind> Default for WorkloadCacheWriter<K> {
    fn default() -> Self {
        Self {
            shelf: ShelfWriter::new(K::KIND),
            kind: PhantomData,
        }
    }
}

impl<K: WorkloadKind> WorkloadCacheWriter<K> {
    /// A read handle.
    pub fn as_reader(&self) -> WorkloadCache<K> {
        WorkloadCache {
            shelf: self.shelf.reader(),
            kind: PhantomData,
        }
    }

    /// Applies one watch event.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<SlimWorkload<K>>) {
        self.shelf
            .apply(event, |interner, o| Some(compact(interner, o)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::batch::v1::CronJob;
    use serde_json::json;
    use std::sync::Arc;
    use tailor_core::target::workload_info;

    fn rs(name: &str, deployment: &str) -> SlimWorkload<ReplicaSet> {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment,
                    "uid": "u1", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": deployment, "pod-template-hash": name},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}
        }))
        .unwrap()
    }

    /// Matching on the kept form answers as matching the selector built from it did, errors included; a
    /// CronJob without template labels selects every pod, another kind without a selector none.
    #[test]
    fn the_kept_selector_selects_as_the_built_one() {
        use proptest::prelude::*;
        let key = || prop::sample::select(vec!["app", "tier", "x"]);
        let value = || prop::sample::select(vec!["a", "b", ""]);
        let operator = prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist", "in"]);
        let values = prop::option::of(prop::collection::vec(value(), 0..3));
        let requirement =
            (key(), operator, values).prop_map(|(k, op, v)| LabelSelectorRequirement {
                key: k.into(),
                operator: op.into(),
                values: v.map(|v| v.into_iter().map(str::to_owned).collect()),
            });
        let map = || prop::collection::btree_map(key(), value(), 0..3);
        let owned = |m: BTreeMap<&str, &str>| -> BTreeMap<String, String> {
            m.into_iter().map(|(k, v)| (k.into(), v.into())).collect()
        };
        let selector = (
            prop::option::of(map()),
            prop::option::of(prop::collection::vec(requirement, 0..3)),
        );
        proptest!(|((match_labels, match_expressions) in selector, labels in map())| {
            let selector = LabelSelector { match_labels: match_labels.map(owned), match_expressions };
            let labels = owned(labels);
            let cached = CompactWorkload {
                owner: None,
                selector: Some(compact_selector(&mut Interner::default(), &selector)),
            };
            let built = cached.selector::<ReplicaSet>().map(|s| selector_matches(&s, &labels));
            prop_assert_eq!(cached.selects::<ReplicaSet, _>(&labels), built);
        });
        let none = CompactWorkload {
            owner: None,
            selector: None,
        };
        let labels = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        assert_eq!(none.selects::<CronJob, _>(&labels), Some(Ok(true)));
        assert_eq!(none.selects::<ReplicaSet, _>(&labels), None);
    }

    #[test]
    fn the_compact_form_answers_as_the_object_does() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        let cache = writer.as_reader();
        let object = rs("web-1", "web");
        writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));
        assert_eq!(cache.info("ns", "web-1"), Some(workload_info(&object)));
        assert_eq!(cache.info("ns", "web-2"), None);
        assert_eq!(cache.info("other", "web-1"), None);
        writer.apply_watcher_event(&watcher::Event::Delete(object));
        assert!(cache.is_empty());
    }

    #[tokio::test]
    async fn a_relist_drops_what_it_did_not_list_and_marks_ready() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        let cache = writer.as_reader();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(rs("a", "web")),
            watcher::Event::InitApply(rs("b", "web")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        cache.wait_until_ready().await.unwrap();
        assert_eq!(cache.len(), 2);
        // The second list no longer has `a`: it stays readable while the list runs, and goes at its end.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(rs("b", "web")));
        writer.apply_watcher_event(&watcher::Event::InitApply(rs("c", "api")));
        assert!(cache.info("ns", "a").is_some());
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(cache.info("ns", "a").is_none());
        assert_eq!(cache.len(), 2);
        // Strings of the dropped object that nothing else holds are gone from the interner.
        assert!(!writer.shelf.interner.contains("a"));
        assert!(writer.shelf.interner.contains("web"));
    }

    #[test]
    fn equal_strings_share_one_allocation() {
        let mut writer = WorkloadCacheWriter::<ReplicaSet>::default();
        writer.apply_watcher_event(&watcher::Event::Apply(rs("web-1", "web")));
        writer.apply_watcher_event(&watcher::Event::Apply(rs("web-2", "web")));
        let cache = writer.as_reader();
        let owner = |name| {
            cache
                .with("ns", name, |w| w.owner.clone())
                .unwrap()
                .unwrap()
        };
        let (a, b) = (owner("web-1"), owner("web-2"));
        assert!(Arc::ptr_eq(&a.name, &b.name) && Arc::ptr_eq(&a.kind, &b.kind));
    }

    #[tokio::test]
    async fn a_dropped_writer_is_an_error_for_waiters() {
        let writer = WorkloadCacheWriter::<CronJob>::default();
        let cache = writer.as_reader();
        drop(writer);
        let err = cache.wait_until_ready().await.unwrap_err();
        assert!(err.to_string().contains("CronJob"), "{err}");
    }
}
