//! What fleet onboarding reads of the cluster besides the VPAs: namespaces (labels, and their
//! `tailor.dev/` annotations) and the workloads of the covered kinds (name, UID, the `tailor.dev/vpa`
//! annotation, a covered controller owner, whether being deleted), watched into one [`FleetView`].
//!
//! A kind the API does not serve (Argo Rollouts without Argo) is looked for again every few minutes; a kind
//! whose list fails (no RBAC) stays unlisted: the plan then neither creates nor deletes anything for it.
//! A change that alters what the rules read wakes the controller; status churn does not.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace as KubeNamespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt as _, watcher};
use tailor_core::fleet::{MAX_VALUE_LEN, Namespace, VPA_KEY, Workload};
use tailor_core::text::cut;
use tokio::sync::Notify;

/// Most workloads kept over all covered kinds (the rest are not seen, with a warning).
pub const MAX_WORKLOADS: usize = 200_000;
/// Most namespaces kept.
pub const MAX_NAMESPACES: usize = 50_000;
/// Time between two discoveries of a kind the API does not serve.
const REDISCOVERY: Duration = Duration::from_secs(300);
/// How long one discovery may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Annotation prefix kept of namespaces.
const ANNOTATION_PREFIX: &str = "tailor.dev/";

/// A workload kind the fleet covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoveredKind {
    /// API group (empty for the core group).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name, when known without discovery.
    pub plural: Option<String>,
}

impl CoveredKind {
    fn known(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        CoveredKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: Some(plural.into()),
        }
    }

    /// The kinds always covered: Deployments, StatefulSets, DaemonSets, CronJobs and Argo Rollouts.
    pub fn builtin() -> Vec<CoveredKind> {
        vec![
            Self::known("apps", "v1", "Deployment", "deployments"),
            Self::known("apps", "v1", "StatefulSet", "statefulsets"),
            Self::known("apps", "v1", "DaemonSet", "daemonsets"),
            Self::known("batch", "v1", "CronJob", "cronjobs"),
            Self::known("argoproj.io", "v1alpha1", "Rollout", "rollouts"),
        ]
    }

    /// `group/version/Kind`.
    pub fn parse(text: &str) -> Result<CoveredKind, String> {
        let parts: Vec<&str> = text.trim().split('/').collect();
        match parts[..] {
            [group, version, kind] if !version.is_empty() && !kind.is_empty() => Ok(CoveredKind {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: None,
            }),
            _ => Err("expected group/version/Kind".into()),
        }
    }

    /// `group/version` (`version` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Where one kind's watch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindListing {
    /// Not listed yet.
    Pending,
    /// Not served by the API: no workloads of it.
    Absent,
    /// Listed and watched.
    Listed,
    /// Its list failed: left out of the plan until it succeeds.
    Failed,
}

type Key = (String, String);

#[derive(Debug)]
struct KindState {
    kind: String,
    api_version: String,
    listing: KindListing,
    workloads: HashMap<Key, Workload>,
    relist: Option<HashMap<Key, Workload>>,
}

#[derive(Debug, Default)]
struct ViewState {
    namespaces: Option<BTreeMap<String, Namespace>>,
    relist_namespaces: Option<BTreeMap<String, Namespace>>,
    kinds: Vec<KindState>,
    full_warned: bool,
}

impl ViewState {
    fn workload_count(&self) -> usize {
        self.kinds.iter().map(|k| k.workloads.len()).sum()
    }
}

/// What one pass reads.
#[derive(Clone, Debug, Default)]
pub struct FleetInputs {
    /// Every namespace.
    pub namespaces: Vec<Namespace>,
    /// Every workload of a listed kind.
    pub workloads: Vec<Workload>,
    /// The kinds listed (or not served): the plan may create and delete for these only.
    pub settled_kinds: Vec<String>,
}

/// Namespaces and workloads as the watches fill them, and the signal that something the rules read
/// changed.
#[derive(Clone, Debug)]
pub struct FleetView {
    state: Arc<Mutex<ViewState>>,
    changed: Arc<Notify>,
}

impl FleetView {
    /// An empty view of `kinds`.
    pub fn new(kinds: &[CoveredKind]) -> Self {
        let kinds = (kinds.iter())
            .map(|k| KindState {
                kind: k.kind.clone(),
                api_version: k.api_version(),
                listing: KindListing::Pending,
                workloads: HashMap::new(),
                relist: None,
            })
            .collect();
        FleetView {
            state: Arc::new(Mutex::new(ViewState {
                kinds,
                ..ViewState::default()
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a change the rules read.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Whether namespaces and every kind have been listed (or found not served, or failed).
    pub fn ready(&self) -> bool {
        let s = self.lock();
        s.namespaces.is_some() && s.kinds.iter().all(|k| k.listing != KindListing::Pending)
    }

    /// What a pass reads now.
    pub fn inputs(&self) -> FleetInputs {
        let s = self.lock();
        let settled =
            |k: &&KindState| matches!(k.listing, KindListing::Listed | KindListing::Absent);
        FleetInputs {
            namespaces: s
                .namespaces
                .iter()
                .flat_map(|m| m.values().cloned())
                .collect(),
            workloads: (s.kinds.iter().filter(settled))
                .flat_map(|k| k.workloads.values().cloned())
                .collect(),
            settled_kinds: s
                .kinds
                .iter()
                .filter(settled)
                .map(|k| k.kind.clone())
                .collect(),
        }
    }

    /// Applies one namespace watch event.
    pub fn apply_namespace(&self, event: watcher::Event<KubeNamespace>) {
        let mut s = self.lock();
        let changed = match event {
            watcher::Event::Init => {
                s.relist_namespaces = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(n) => {
                let relist = s.relist_namespaces.get_or_insert_with(BTreeMap::new);
                if relist.len() < MAX_NAMESPACES {
                    let n = trim_namespace(n);
                    relist.insert(n.name.clone(), n);
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = s.relist_namespaces.take().unwrap_or_default();
                let changed = s.namespaces.as_ref() != Some(&listed);
                s.namespaces = Some(listed);
                changed
            }
            watcher::Event::Apply(n) => {
                let n = trim_namespace(n);
                let map = s.namespaces.get_or_insert_with(BTreeMap::new);
                let room = map.len() < MAX_NAMESPACES || map.contains_key(&n.name);
                if room && map.get(&n.name) != Some(&n) {
                    map.insert(n.name.clone(), n);
                    true
                } else {
                    false
                }
            }
            watcher::Event::Delete(n) => {
                let name = n.metadata.name.unwrap_or_default();
                s.namespaces
                    .as_mut()
                    .is_some_and(|m| m.remove(&name).is_some())
            }
        };
        drop(s);
        if changed {
            self.changed.notify_one();
        }
    }

    /// Applies one watch event of covered kind number `index`; `covered` names every covered kind.
    pub fn apply_workload(
        &self,
        index: usize,
        event: watcher::Event<DynamicObject>,
        covered: &[String],
    ) {
        let mut s = self.lock();
        let total = s.workload_count();
        let state = &mut *s;
        let Some(k) = state.kinds.get_mut(index) else {
            return;
        };
        let full = total >= MAX_WORKLOADS;
        let changed = match event {
            watcher::Event::Init => {
                k.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let w = trim_workload(&k.kind, &k.api_version, o, covered);
                let relist = k.relist.get_or_insert_with(HashMap::new);
                if !full || relist.len() < k.workloads.len() {
                    relist.insert((w.namespace.clone(), w.name.clone()), w);
                } else {
                    warn_full(&mut state.full_warned);
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = k.relist.take().unwrap_or_default();
                let changed = k.listing != KindListing::Listed || k.workloads != listed;
                k.workloads = listed;
                k.listing = KindListing::Listed;
                changed
            }
            watcher::Event::Apply(o) => {
                let w = trim_workload(&k.kind, &k.api_version, o, covered);
                let key = (w.namespace.clone(), w.name.clone());
                if full && !k.workloads.contains_key(&key) {
                    warn_full(&mut state.full_warned);
                    false
                } else {
                    k.workloads.insert(key, w.clone()) != Some(w)
                }
            }
            watcher::Event::Delete(o) => {
                let key = (
                    o.metadata.namespace.unwrap_or_default(),
                    o.metadata.name.unwrap_or_default(),
                );
                k.workloads.remove(&key).is_some()
            }
        };
        drop(s);
        if changed {
            self.changed.notify_one();
        }
    }

    fn set_listing(&self, index: usize, listing: KindListing) {
        let mut s = self.lock();
        let Some(k) = s.kinds.get_mut(index) else {
            return;
        };
        let changed = k.listing != listing;
        // A kind that was listed keeps its workloads through a failed relist: nothing is deleted on a
        // watch error.
        if listing == KindListing::Failed && k.listing == KindListing::Listed {
            return;
        }
        k.listing = listing;
        if listing == KindListing::Absent {
            k.workloads.clear();
        }
        drop(s);
        if changed {
            self.changed.notify_one();
        }
    }
}

fn warn_full(warned: &mut bool) {
    if !std::mem::replace(warned, true) {
        tracing::warn!(
            max = MAX_WORKLOADS,
            "fleet: too many workloads; the rest are not onboarded"
        );
    }
}

/// A namespace as the rules read it: its labels, and its `tailor.dev/` annotations.
pub fn trim_namespace(n: KubeNamespace) -> Namespace {
    let m = n.metadata;
    Namespace {
        name: m.name.unwrap_or_default(),
        labels: m.labels.unwrap_or_default(),
        annotations: (m.annotations.unwrap_or_default().into_iter())
            .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
            .collect(),
    }
}

/// A workload of `kind` (served as `api_version`: list items carry no `apiVersion`) as the rules read it.
pub fn trim_workload(
    kind: &str,
    api_version: &str,
    o: DynamicObject,
    covered: &[String],
) -> Workload {
    let m = o.metadata;
    let controlled_by = (m.owner_references.iter().flatten())
        .find(|r| r.controller == Some(true))
        .filter(|r| covered.contains(&r.kind))
        .map(|r| r.kind.clone());
    Workload {
        namespace: m.namespace.unwrap_or_default(),
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: m.name.unwrap_or_default(),
        uid: m.uid.unwrap_or_default(),
        annotation: (m.annotations.as_ref())
            .and_then(|a| a.get(VPA_KEY))
            .map(|v| cut(v, MAX_VALUE_LEN)),
        controlled_by,
        deleting: m.deletion_timestamp.is_some(),
    }
}

/// Starts the watches of namespaces and of every covered kind into `view`. Must run inside a Tokio
/// runtime.
pub fn spawn_watches(
    client: &Client,
    kinds: &[CoveredKind],
    view: &FleetView,
) -> Vec<tokio::task::JoinHandle<()>> {
    let covered: Arc<[String]> = kinds.iter().map(|k| k.kind.clone()).collect();
    let mut tasks = vec![tokio::spawn(watch_namespaces(client.clone(), view.clone()))];
    for (index, kind) in kinds.iter().enumerate() {
        tasks.push(tokio::spawn(watch_kind(
            client.clone(),
            index,
            kind.clone(),
            view.clone(),
            covered.clone(),
        )));
    }
    tasks
}

async fn watch_namespaces(client: Client, view: FleetView) {
    let api: Api<KubeNamespace> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    let mut warned = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(e) => view.apply_namespace(e),
            Err(e) if !std::mem::replace(&mut warned, true) => {
                tracing::warn!(error = %e, "fleet: cannot watch namespaces (list and watch on namespaces \
                    are needed); retrying")
            }
            Err(e) => tracing::debug!(error = %e, "fleet: namespace watch failed; retrying"),
        }
    }
}

/// The plural of `kind` if the API serves it (and, for a kind not built in, its `/scale`); `Ok(None)`
/// when it does not.
async fn discover(client: &Client, kind: &CoveredKind) -> Result<Option<String>, String> {
    let api_version = kind.api_version();
    let listed = tokio::time::timeout(
        DISCOVERY_TIMEOUT,
        client.list_api_group_resources(&api_version),
    )
    .await
    .map_err(|_| format!("discovery of {api_version} timed out"))?;
    let list = match listed {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(format!("discovery of {api_version}: {e}")),
    };
    let Some(resource) = list
        .resources
        .iter()
        .find(|r| r.kind == kind.kind && !r.name.contains('/'))
    else {
        return Ok(None);
    };
    let scale = format!("{}/scale", resource.name);
    if kind.plural.is_none() && !list.resources.iter().any(|r| r.name == scale) {
        return Err(format!(
            "{} {api_version} serves no /scale subresource",
            kind.kind
        ));
    }
    Ok(Some(resource.name.clone()))
}

async fn watch_kind(
    client: Client,
    index: usize,
    kind: CoveredKind,
    view: FleetView,
    covered: Arc<[String]>,
) {
    let plural = loop {
        match discover(&client, &kind).await {
            Ok(Some(plural)) => break plural,
            Ok(None) => {
                tracing::info!(kind = %kind.kind, api_version = %kind.api_version(),
                    "fleet: kind not served; looked for again every {}s", REDISCOVERY.as_secs());
                view.set_listing(index, KindListing::Absent);
            }
            Err(e) => {
                tracing::warn!(kind = %kind.kind, error = %e, "fleet: kind left out");
                view.set_listing(index, KindListing::Failed);
            }
        }
        tokio::time::sleep(REDISCOVERY).await;
    };
    let resource = ApiResource {
        group: kind.group.clone(),
        version: kind.version.clone(),
        api_version: kind.api_version(),
        kind: kind.kind.clone(),
        plural,
    };
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    let mut warned = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(e) => view.apply_workload(index, e, &covered),
            Err(e) => {
                view.set_listing(index, KindListing::Failed);
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(kind = %kind.kind, error = %e, "fleet: cannot watch the kind (list and \
                        watch are needed); its workloads are left as they are; retrying");
                } else {
                    tracing::debug!(kind = %kind.kind, error = %e, "fleet: watch failed; retrying");
                }
            }
        }
    }
}
