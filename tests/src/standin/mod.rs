//! The stand-in API server: a loopback HTTP(S) server that answers the Kubernetes API requests Tailor's
//! binaries make, so the real `tailor-recommender` and `tailor-admission` can run here through a
//! kubeconfig, exactly as in a cluster (docs/design/principles.md §5).
//!
//! It serves discovery (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`), list and watch with
//! `resourceVersion`s (bookmarks, 410 Gone once the change log is compacted), get / create / replace /
//! delete, merge / JSON / strategic-merge / server-side-apply patches with `resourceVersion` conflicts, the
//! `status` and `scale` subresources, pod evictions and `pods/resize`, and the `metrics.k8s.io` lists. The
//! store is generic: objects are JSON values keyed by group / version / resource / namespace / name, and
//! kinds come from a built-in table plus every `CustomResourceDefinition` loaded.
//!
//! Every request is recorded ([`Recorded`]: method, path, user — the bearer token of the kubeconfig that
//! sent it — field manager, body, answer), and faults can be injected ([`Fault`]: delays, HTTP errors,
//! conflicts, canned answers) or triggered ([`ApiServer::drop_watches`], [`ApiServer::compact`]).
//!
//! Tests of a library rather than a binary reach it in process: [`ApiServer::router`] is a tower service a
//! kube `Client` can run over (no socket, no TLS, and tokio's paused clock applies to its delays).
//!
//! What it does not do (none of Tailor's binaries depends on it today): authorization (every user may do
//! everything; the record is what an RBAC check reads), admission webhooks, schema validation and
//! defaulting, namespace existence, finalizers, graceful deletion and garbage collection, PodDisruptionBudgets
//! on evictions, field ownership in server-side apply (an apply is a merge patch, creating the object if
//! missing, except that a map the CRD declares atomic is replaced whole), strategic-merge directives (`$patch`, `$retainKeys`; lists of named objects merge by name),
//! `resourceVersionMatch=Exact` lists (every list is served from the latest state), and aggregated discovery.
//!
//! ```no_run
//! # async fn doc() -> Result<(), tailor_tests::standin::StandInError> {
//! use tailor_tests::standin::ApiServer;
//! let server = ApiServer::start().await?;
//! server.load_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n")?;
//! std::fs::write("/tmp/kubeconfig", server.kubeconfig("recommender-a"))?;
//! # Ok(()) }
//! ```

pub mod http;
pub mod record;
pub mod registry;
pub mod selectors;
pub mod store;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use base64::Engine as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt as _;

pub use http::{DropMode, Options};
pub use record::{Action, Fault, Match, Recorded, Target};
pub use store::{ApiError, ObjKey};

use http::{Inner, lock};
use registry::{Registry, ResourceType};
use store::{Part, State};

/// Why the stand-in could not start or load something.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    /// Binding or serving failed.
    #[error("stand-in I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Certificates.
    #[error("stand-in TLS: {0}")]
    Tls(#[from] tls::TlsError),
    /// A fixture is not YAML.
    #[error("fixture YAML: {0}")]
    Yaml(String),
    /// A fixture object was refused.
    #[error("fixture object {what}: {error:?}")]
    Object {
        /// `kind namespace/name` or the document index.
        what: String,
        /// Why.
        error: ApiError,
    },
    /// A CRD could not be read.
    #[error("CRD: {0}")]
    Crd(String),
}

/// A running stand-in API server. Dropping it stops accepting connections.
pub struct ApiServer {
    inner: Arc<Inner>,
    router: Router,
    addr: SocketAddr,
    ca_pem: Option<String>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

/// When set, every stand-in appends its recorded requests to a file in this directory when it drops (one
/// JSON object per line: user, verb, group, resource with subresource, namespace, name, path, status, and
/// the HTTP method and query the verb was derived from), so a check
/// outside the test run — the chart's RBAC rules against what each binary really asked — can read them. The
/// user is the kubeconfig token, which the harness names after the component (`recommender-…`,
/// `admission`).
pub const RECORD_DIR_ENV: &str = "TAILOR_STANDIN_RECORD_DIR";

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(dir) = std::env::var_os(RECORD_DIR_ENV) {
            let _ = self.write_record(std::path::Path::new(&dir));
        }
    }
}

impl ApiServer {
    /// Starts an HTTPS stand-in with the default [`Options`] on a free loopback port. Must run inside a
    /// Tokio runtime.
    pub async fn start() -> Result<ApiServer, StandInError> {
        ApiServer::start_with(Options::default()).await
    }

    /// Starts a stand-in with `options`.
    pub async fn start_with(options: Options) -> Result<ApiServer, StandInError> {
        let mut registry = Registry::builtin();
        if options.tailor_crds {
            for crd in tailor_crds::crd::crds() {
                let v = serde_json::to_value(&crd).map_err(|e| StandInError::Crd(e.to_string()))?;
                for t in ResourceType::from_crd(&v).map_err(StandInError::Crd)? {
                    registry.add(t);
                }
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (acceptor, ca_pem) = if options.tls {
            let ca = tls::TestCa::new("tailor-standin-ca")?;
            let issued = ca.issue(&["127.0.0.1", "localhost"])?;
            let config = tls::server_config(&issued)?;
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                Some(ca.ca_pem),
            )
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner::new(State::new(registry), options));
        *lock(&inner.address) = addr.to_string();
        let app = Router::new()
            .fallback(http::handle)
            .with_state(inner.clone());
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(serve(listener, acceptor, app.clone(), stop_rx));
        Ok(ApiServer {
            inner,
            router: app,
            addr,
            ca_pem,
            stop,
        })
    }

    /// `https://127.0.0.1:PORT` (or `http://` without TLS).
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The server as a tower service (`axum::Router`), for a client in the same process: a kube `Client`
    /// built with `Client::new` over it sends its requests here without a socket. Requests arrive without
    /// a bearer token, so they are recorded as `anonymous`.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The CA that signed the serving certificate (`None` over plain HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A kubeconfig (JSON, which every YAML reader accepts) for `user`: the token is the user's name, so
    /// the recorded requests say which process sent them.
    pub fn kubeconfig(&self, user: &str) -> String {
        let mut cluster = json!({"server": self.url()});
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "standin", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": user}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": user}}],
            "current-context": "standin",
        })
        .to_string()
    }

    /// Loads every object of a multi-document YAML stream (`List`s expanded, CRDs registered), as a
    /// `kubectl apply` of those objects would, but keeping `status`. Returns how many objects were stored.
    pub fn load_yaml(&self, text: &str) -> Result<usize, StandInError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| StandInError::Yaml(e.to_string()))?;
        let mut n = 0;
        for doc in docs {
            n += self.load_value(doc)?;
        }
        Ok(n)
    }

    /// Loads a fixture file ([`ApiServer::load_yaml`]).
    pub fn load_file(&self, path: impl AsRef<std::path::Path>) -> Result<usize, StandInError> {
        let text = std::fs::read_to_string(path.as_ref())?;
        self.load_yaml(&text)
    }

    fn load_value(&self, doc: Value) -> Result<usize, StandInError> {
        if doc.is_null() {
            return Ok(0);
        }
        if let Some(items) = doc.get("items").and_then(Value::as_array)
            && doc
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
        {
            let mut n = 0;
            for item in items.clone() {
                n += self.load_value(item)?;
            }
            return Ok(n);
        }
        self.put(doc)?;
        Ok(1)
    }

    /// Creates or replaces `object` as given (status included, no `resourceVersion` check), waking the
    /// watches. A `CustomResourceDefinition` also registers its kinds.
    pub fn put(&self, object: Value) -> Result<Value, StandInError> {
        let what = format!(
            "{} {}/{}",
            object.get("kind").and_then(Value::as_str).unwrap_or("?"),
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?"),
        );
        let err = |error| StandInError::Object {
            what: what.clone(),
            error,
        };
        if object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            ResourceType::from_crd(&object).map_err(StandInError::Crd)?;
        }
        self.inner
            .write(|s| {
                let key = s.key_of(&object, "default")?;
                let mut object = object.clone();
                if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                if s.objects.contains_key(&key) {
                    s.update(&key, object, Part::Raw)
                } else {
                    s.create(&key, object, Part::Raw)
                }
            })
            .map_err(err)
    }

    fn key(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<ObjKey> {
        let s = lock(&self.inner.state);
        let t = s.registry.by_kind(api_version, kind)?;
        Some(ObjKey {
            group: t.group.clone(),
            version: t.version.clone(),
            resource: t.plural.clone(),
            namespace: if t.namespaced {
                namespace.into()
            } else {
                String::new()
            },
            name: name.into(),
        })
    }

    /// The stored object, if any.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let key = self.key(api_version, kind, namespace, name)?;
        lock(&self.inner.state).objects.get(&key).cloned()
    }

    /// The resource an API path addresses (`/api/v1/…` or `/apis/GROUP/VERSION/…`).
    fn target_at(&self, path: &str) -> Option<Target> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let s = lock(&self.inner.state);
        match segs.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() => http::target_of(&s, "", v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => http::target_of(&s, g, v, rest),
            _ => None,
        }
    }

    /// The stored object at an API path (`/apis/GROUP/VERSION/namespaces/NS/PLURAL/NAME`), if any.
    pub fn object_at(&self, path: &str) -> Option<Value> {
        let t = self.target_at(path)?;
        let key = ObjKey {
            group: t.group,
            version: t.version,
            resource: t.resource,
            namespace: t.namespace.unwrap_or_default(),
            name: t.name?,
        };
        lock(&self.inner.state).objects.get(&key).cloned()
    }

    /// Every stored object of the collection at an API path (`/apis/GROUP/VERSION/namespaces/NS/PLURAL`,
    /// or without the namespace for all), in namespace and name order; empty when the path names none.
    pub fn list_at(&self, path: &str) -> Vec<Value> {
        let Some(t) = self.target_at(path).filter(|t| t.name.is_none()) else {
            return Vec::new();
        };
        lock(&self.inner.state).list(
            &t.group,
            &t.version,
            &t.resource,
            t.namespace.as_deref(),
            &Default::default(),
            &Default::default(),
        )
    }

    /// Every stored object of a kind (`namespace` `None` = all).
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let s = lock(&self.inner.state);
        let Some(t) = s.registry.by_kind(api_version, kind) else {
            return Vec::new();
        };
        s.list(
            &t.group,
            &t.version,
            &t.plural,
            namespace,
            &Default::default(),
            &Default::default(),
        )
    }

    /// Deletes an object, waking the watches; whether it existed.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let Some(key) = self.key(api_version, kind, namespace, name) else {
            return false;
        };
        self.inner.write(|s| s.delete(&key).is_ok())
    }

    /// Every request since the start or the last [`ApiServer::clear_requests`], in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        let from = self.inner.shown_from.load(Ordering::SeqCst);
        lock(&self.inner.requests)
            .iter()
            .filter(|r| r.seq >= from)
            .cloned()
            .collect()
    }

    /// Appends the recorded requests to `dir/requests-<process>-<port>.jsonl` (see [`RECORD_DIR_ENV`]).
    pub fn write_record(&self, dir: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write as _;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(
            "requests-{}-{}.jsonl",
            std::process::id(),
            self.addr.port()
        ));
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        for r in lock(&self.inner.requests).iter() {
            let t = r.target.as_ref();
            let line = json!({
                "user": r.user, "verb": r.verb(), "group": t.map(|t| t.group.clone()),
                "resource": r.resource(), "namespace": t.and_then(|t| t.namespace.clone()),
                "name": t.and_then(|t| t.name.clone()), "path": r.path, "status": r.status,
                "method": r.method, "query": r.query,
            });
            writeln!(out, "{line}")?;
        }
        Ok(())
    }

    /// The requests [`ApiServer::requests`] shows, removed from the stand-in's memory (the record file
    /// then lacks them): for in-process tests and benchmarks that read each batch once and make many.
    pub fn take_requests(&self) -> Vec<Recorded> {
        let from = self.inner.shown_from.load(Ordering::SeqCst);
        let mut kept = lock(&self.inner.requests);
        std::mem::take(&mut *kept)
            .into_iter()
            .filter(|r| r.seq >= from)
            .collect()
    }

    /// Hides the requests so far from [`ApiServer::requests`] (the record file keeps them).
    pub fn clear_requests(&self) {
        self.inner
            .shown_from
            .store(self.inner.next_seq(), Ordering::SeqCst);
    }

    /// Adds a fault (faults apply in the order added).
    pub fn inject(&self, fault: Fault) {
        lock(&self.inner.faults).push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.inner.faults).clear();
    }

    /// Ends every open watch now.
    pub fn drop_watches(&self, mode: DropMode) {
        self.inner.drops.send_modify(|(generation, m)| {
            *generation += 1;
            *m = mode;
        });
    }

    /// Forgets the change log: a watch resuming from any earlier `resourceVersion` gets 410 Gone and
    /// must list again.
    pub fn compact(&self) {
        lock(&self.inner.state).compact();
    }

    /// The latest `resourceVersion`.
    pub fn resource_version(&self) -> u64 {
        lock(&self.inner.state).rv
    }

    /// Waits until `check` holds for the store, polling every 50 ms; `None` after `timeout`.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&ApiServer) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(v) = check(self) {
                return Some(v);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Accepts connections until `stop` turns true.
async fn serve(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let app = app.clone();
        let acceptor = acceptor.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            match acceptor {
                Some(a) => {
                    let Ok(tls) = a.accept(tcp).await else { return };
                    let conn = builder.serve_connection(TokioIo::new(tls), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                }
                None => {
                    let conn = builder.serve_connection(TokioIo::new(tcp), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                }
            }
        });
    }
}
