//! Upstream `autoscaling.k8s.io/v1` VerticalPodAutoscalers as Tailor reads them: never written, kept
//! trimmed to their target and mode ([`UpstreamVpa`], at most [`MAX_UPSTREAM_VPAS`]). A daemon watches
//! them once discovery shows the API serves them ([`UpstreamVpas::start`]; without the group, or without
//! the right to list them, it carries on without, and says so once); `tailor plan` reads them from its
//! snapshot ([`UpstreamVpas::fixed`]).
//!
//! Two readers: the updater stands down on a workload an upstream VPA also acts on (the two updaters would
//! undo each other's changes), and fleet onboarding creates no Tailor VPA for a workload an upstream VPA
//! targets.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Deserialize;
use tailor_crds::VerticalPodAutoscaler;

/// Upstream's API version.
pub const API_VERSION: &str = "autoscaling.k8s.io/v1";
/// Upstream's resource.
pub const PLURAL: &str = "verticalpodautoscalers";
/// Most upstream VPAs kept (the rest are ignored, with a warning).
pub const MAX_UPSTREAM_VPAS: usize = 50_000;
/// How long one discovery of upstream's API may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Time between two discoveries while upstream's API is not served (it may be installed later).
const REDISCOVERY: Duration = Duration::from_secs(300);

/// An upstream VPA as the updater keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamVpa {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.targetRef.kind`.
    pub target_kind: String,
    /// `spec.targetRef.name`.
    pub target_name: String,
    /// `spec.updatePolicy.updateMode`, `Auto` when unset (upstream's default, which evicts).
    pub mode: String,
}

impl UpstreamVpa {
    /// Whether upstream acts on the target's pods (any mode but `Off`: `Initial` sizes them at creation).
    pub fn acts(&self) -> bool {
        self.mode != "Off"
    }

    /// The trimmed form of `object`; `None` without a `targetRef`.
    pub fn of(object: UpstreamVpaObject) -> Option<Self> {
        let target = object.spec.target_ref?;
        Some(UpstreamVpa {
            namespace: object.metadata.namespace.unwrap_or_default(),
            name: object.metadata.name.unwrap_or_default(),
            target_kind: target.kind,
            target_name: target.name,
            mode: (object.spec.update_policy)
                .and_then(|p| p.update_mode)
                .unwrap_or_else(|| "Auto".to_owned()),
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What the watch decodes of an upstream VPA (everything else is skipped).
#[derive(Clone, Debug, Deserialize)]
pub struct UpstreamVpaObject {
    /// Metadata (only namespace and name are kept).
    pub metadata: ObjectMeta,
    /// Target and mode.
    #[serde(default)]
    pub spec: WireSpec,
}

/// `spec`, trimmed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireSpec {
    /// `targetRef`.
    #[serde(default)]
    pub target_ref: Option<WireTarget>,
    /// `updatePolicy`.
    #[serde(default)]
    pub update_policy: Option<WirePolicy>,
}

/// `spec.targetRef`, trimmed.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireTarget {
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// `spec.updatePolicy`, trimmed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WirePolicy {
    /// `updateMode`.
    #[serde(default)]
    pub update_mode: Option<String>,
}

impl kube::Resource for UpstreamVpaObject {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "VerticalPodAutoscaler".into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        tailor_crds::UPSTREAM_GROUP.into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Where the reader stands on upstream VPAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Not known yet (discovery or the first list under way): Tailor VPAs wait.
    Pending,
    /// Upstream's API is not served, or cannot be read: carry on without.
    Absent,
    /// Listed and watched.
    Listed,
}

/// (namespace, name) of an upstream VPA.
type Key = (String, String);
/// (namespace, kind, name) of a target.
type TargetKey = (String, String, String);

#[derive(Debug)]
struct Table {
    listing: Listing,
    vpas: HashMap<Key, UpstreamVpa>,
    /// Upstream VPA names by target.
    targets: HashMap<TargetKey, BTreeSet<String>>,
    /// The list under way (between a watch's `Init` and `InitDone`).
    relist: Option<HashMap<Key, UpstreamVpa>>,
    /// Whether the "too many upstream VPAs" warning was given.
    full_warned: bool,
}

fn target_key(v: &UpstreamVpa) -> TargetKey {
    (
        v.namespace.clone(),
        v.target_kind.clone(),
        v.target_name.clone(),
    )
}

impl Table {
    fn new(listing: Listing) -> Self {
        Table {
            listing,
            vpas: HashMap::new(),
            targets: HashMap::new(),
            relist: None,
            full_warned: false,
        }
    }

    /// Whether `map` may take `key` (bounded by [`MAX_UPSTREAM_VPAS`]; warns once when not).
    fn room(full_warned: &mut bool, map: &HashMap<Key, UpstreamVpa>, key: &Key) -> bool {
        let room = map.len() < MAX_UPSTREAM_VPAS || map.contains_key(key);
        if !room && !std::mem::replace(full_warned, true) {
            tracing::warn!(
                max = MAX_UPSTREAM_VPAS,
                "too many upstream VPAs: the rest are not seen"
            );
        }
        room
    }

    fn insert(&mut self, vpa: UpstreamVpa) {
        let key = (vpa.namespace.clone(), vpa.name.clone());
        if !Table::room(&mut self.full_warned, &self.vpas, &key) {
            return;
        }
        self.remove(&key);
        (self.targets.entry(target_key(&vpa)).or_default()).insert(vpa.name.clone());
        self.vpas.insert(key, vpa);
    }

    fn remove(&mut self, key: &Key) {
        let Some(old) = self.vpas.remove(key) else {
            return;
        };
        let target = target_key(&old);
        if let Some(names) = self.targets.get_mut(&target) {
            names.remove(&old.name);
            if names.is_empty() {
                self.targets.remove(&target);
            }
        }
    }

    /// Replaces everything with `vpas` (a complete list).
    fn replace(&mut self, vpas: HashMap<Key, UpstreamVpa>) {
        self.vpas.clear();
        self.targets.clear();
        for vpa in vpas.into_values() {
            self.insert(vpa);
        }
    }

    fn apply(&mut self, event: watcher::Event<UpstreamVpaObject>) {
        let key_of = |o: &UpstreamVpaObject| {
            (
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        };
        match event {
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                let relist = self.relist.get_or_insert_with(HashMap::new);
                let key = key_of(&o);
                if Table::room(&mut self.full_warned, relist, &key)
                    && let Some(vpa) = UpstreamVpa::of(o)
                {
                    relist.insert(key, vpa);
                }
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                self.replace(listed);
                self.listing = Listing::Listed;
            }
            watcher::Event::Apply(o) => {
                let key = key_of(&o);
                match UpstreamVpa::of(o) {
                    Some(vpa) => self.insert(vpa),
                    None => self.remove(&key),
                }
            }
            watcher::Event::Delete(o) => self.remove(&key_of(&o)),
        }
    }
}

/// The upstream VPAs known, shared between the watch that fills them and the iterations
/// that read them.
#[derive(Clone, Debug)]
pub struct UpstreamVpas {
    table: Arc<RwLock<Table>>,
}

impl UpstreamVpas {
    /// Not known yet: what the binary starts with.
    pub fn pending() -> Self {
        UpstreamVpas {
            table: Arc::new(RwLock::new(Table::new(Listing::Pending))),
        }
    }

    /// Exactly `vpas` (a snapshot's).
    pub fn fixed(vpas: impl IntoIterator<Item = UpstreamVpa>) -> Self {
        let mut table = Table::new(Listing::Listed);
        for vpa in vpas {
            table.insert(vpa);
        }
        UpstreamVpas {
            table: Arc::new(RwLock::new(table)),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the reader stands.
    pub fn listing(&self) -> Listing {
        self.read().listing
    }

    /// Upstream VPAs kept.
    pub fn len(&self) -> usize {
        self.read().vpas.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one watch event.
    pub fn apply(&self, event: watcher::Event<UpstreamVpaObject>) {
        self.write().apply(event);
    }

    /// Upstream's API is not served (`gone`: any more, and what was kept is dropped) or cannot be read:
    /// a pending answer becomes "none".
    pub fn unavailable(&self, gone: bool) {
        let mut table = self.write();
        if gone {
            table.replace(HashMap::new());
            table.listing = Listing::Absent;
        } else if table.listing == Listing::Pending {
            table.listing = Listing::Absent;
        }
    }

    /// The upstream VPA (in name order, the first) that targets `vpa`'s workload in a mode other than
    /// `Off`; `Err` while upstream VPAs are not known yet.
    pub fn covering(&self, vpa: &VerticalPodAutoscaler) -> Result<Option<UpstreamVpa>, String> {
        let Some(target) = vpa.spec.target_ref.as_ref() else {
            return Ok(None);
        };
        let namespace = vpa.metadata.namespace.clone().unwrap_or_default();
        let table = self.read();
        match table.listing {
            Listing::Pending => return Err("upstream VPAs not listed yet".into()),
            Listing::Absent => return Ok(None),
            Listing::Listed => {}
        }
        let key = (namespace, target.kind.clone(), target.name.clone());
        let Some(names) = table.targets.get(&key) else {
            return Ok(None);
        };
        Ok(names
            .iter()
            .filter_map(|name| table.vpas.get(&(key.0.clone(), name.clone())))
            .find(|v| v.acts())
            .cloned())
    }

    /// Every upstream VPA kept, in no order; `Err` while they are not known yet.
    pub fn all(&self) -> Result<Vec<UpstreamVpa>, String> {
        let table = self.read();
        match table.listing {
            Listing::Pending => Err("upstream VPAs not listed yet".into()),
            Listing::Absent => Ok(Vec::new()),
            Listing::Listed => Ok(table.vpas.values().cloned().collect()),
        }
    }

    /// Watches upstream VPAs in `namespace` (empty: all) once discovery shows the API serves them
    /// (looked for again every few minutes until it does). Must run inside a Tokio runtime.
    pub fn start(client: &Client, namespace: &str) -> UpstreamVpas {
        let vpas = UpstreamVpas::pending();
        tokio::spawn(watch(client.clone(), namespace.to_owned(), vpas.clone()));
        vpas
    }
}

/// Whether the API serves upstream VPAs (`Ok(false)`: the group or the resource is absent).
async fn served(client: &Client) -> Result<bool, String> {
    let listed = tokio::time::timeout(
        DISCOVERY_TIMEOUT,
        client.list_api_group_resources(API_VERSION),
    )
    .await
    .map_err(|_| format!("discovery of {API_VERSION} timed out"))?;
    match listed {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(format!("discovery of {API_VERSION}: {e}")),
    }
}

/// Waits until the API serves upstream VPAs ("none" meanwhile, said once).
async fn discover(client: &Client, vpas: &UpstreamVpas) {
    let mut said = false;
    loop {
        let why = match served(client).await {
            Ok(true) => return,
            Ok(false) => format!("{API_VERSION} {PLURAL} is not served"),
            Err(e) => e,
        };
        vpas.unavailable(false);
        if !std::mem::replace(&mut said, true) {
            tracing::info!(reason = %why, "no upstream VPAs: carrying on without them (looked for again every {}s)",
                REDISCOVERY.as_secs());
        }
        tokio::time::sleep(REDISCOVERY).await;
    }
}

/// Whether a watch error says the API does not serve the resource (any more).
fn is_gone(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// Discovers, then watches upstream VPAs into `vpas`; the first failure is logged as a warning (RBAC
/// may forbid the list: Tailor then carries on without), the retries at debug level.
async fn watch(client: Client, namespace: String, vpas: UpstreamVpas) {
    discover(&client, &vpas).await;
    let api = crate::reflectors::api::<UpstreamVpaObject>(&client, &namespace);
    let config = watcher::Config::default().any_semantic();
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut warned = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => vpas.apply(event),
            Err(e) => {
                vpas.unavailable(is_gone(&e));
                if std::mem::replace(&mut warned, true) {
                    tracing::debug!(error = %e, "upstream VPA watch failed; retrying");
                } else {
                    tracing::warn!(error = %e, "cannot watch upstream VPAs: carrying on without them \
                        (list and watch on {PLURAL}.autoscaling.k8s.io are needed); retrying");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_testkit::fixtures::VpaFixture;

    fn object(
        ns: &str,
        name: &str,
        kind: &str,
        target: &str,
        mode: Option<&str>,
    ) -> UpstreamVpaObject {
        let mut spec = serde_json::json!({"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}});
        if let Some(mode) = mode {
            spec["updatePolicy"] = serde_json::json!({"updateMode": mode});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        }))
        .expect("object")
    }

    fn tailor_vpa(ns: &str, target: &str) -> VerticalPodAutoscaler {
        VpaFixture::new(ns, target)
            .target("Deployment", target)
            .build()
    }

    fn name(found: Result<Option<UpstreamVpa>, String>) -> Option<String> {
        found.expect("listed").map(|v| v.key())
    }

    #[test]
    fn only_a_non_off_vpa_on_the_same_target_covers() {
        let vpas = UpstreamVpas::pending();
        assert!(vpas.covering(&tailor_vpa("shop", "web")).is_err());
        vpas.apply(watcher::Event::Init);
        for o in [
            object("shop", "a-off", "Deployment", "web", Some("Off")),
            object("shop", "b-default", "Deployment", "web", None),
            object("shop", "other", "Deployment", "api", Some("Recreate")),
            object("lab", "web", "Deployment", "web", Some("Recreate")),
            object("shop", "sts", "StatefulSet", "db", Some("Recreate")),
        ] {
            vpas.apply(watcher::Event::InitApply(o));
        }
        vpas.apply(watcher::Event::InitDone);
        assert_eq!(vpas.listing(), Listing::Listed);
        // No updatePolicy: upstream's default, Auto, which is not Off.
        assert_eq!(
            name(vpas.covering(&tailor_vpa("shop", "web"))),
            Some("shop/b-default".into())
        );
        assert_eq!(name(vpas.covering(&tailor_vpa("shop", "db"))), None);
        assert_eq!(name(vpas.covering(&tailor_vpa("dev", "web"))), None);
        // Turned Off: no longer covers; deleted: gone.
        vpas.apply(watcher::Event::Apply(object(
            "shop",
            "b-default",
            "Deployment",
            "web",
            Some("Off"),
        )));
        assert_eq!(name(vpas.covering(&tailor_vpa("shop", "web"))), None);
        vpas.apply(watcher::Event::Delete(object(
            "lab",
            "web",
            "Deployment",
            "web",
            None,
        )));
        assert_eq!(name(vpas.covering(&tailor_vpa("lab", "web"))), None);
        assert_eq!(vpas.len(), 4);
    }

    #[test]
    fn without_the_api_the_updater_carries_on() {
        let vpas = UpstreamVpas::pending();
        vpas.unavailable(false);
        assert_eq!(name(vpas.covering(&tailor_vpa("shop", "web"))), None);
        let fixed = UpstreamVpas::fixed(UpstreamVpa::of(object(
            "shop",
            "web",
            "Deployment",
            "web",
            Some("InPlaceOrRecreate"),
        )));
        assert!(name(fixed.covering(&tailor_vpa("shop", "web"))).is_some());
        // The API went away: what was kept goes too.
        fixed.unavailable(true);
        assert!(fixed.is_empty());
        assert_eq!(name(fixed.covering(&tailor_vpa("shop", "web"))), None);
    }
}
