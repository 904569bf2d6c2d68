//! The HTTP face of the stand-in: one axum fallback handler that records the request, applies injected
//! faults, and routes by path to discovery, the resource verbs, subresources and watches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::record::{Action, Fault, Recorded, Target, decide};
use super::registry::ResourceType;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{ApiError, ChangeType, ObjKey, Part, State, scale_of, strategic_merge};

/// How [`crate::standin::ApiServer::drop_watches`] ends open watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMode {
    /// The response ends normally (the server's watch timeout).
    Clean,
    /// The connection breaks mid-response (a load balancer or API server restart).
    Abort,
}

/// Tunables of the stand-in.
#[derive(Debug, Clone)]
pub struct Options {
    /// Serve HTTPS with a generated CA (in the kubeconfig) instead of plain HTTP.
    pub tls: bool,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Longest a watch stays open, whatever `timeoutSeconds` asks.
    pub max_watch: Duration,
    /// Stamp every listed `metrics.k8s.io` object with the current time, as metrics-server's fresh scrapes.
    pub fresh_metrics: bool,
    /// Register Tailor's CRDs (`tailor_crds::crd::crds()`) at start.
    pub tailor_crds: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tls: true,
            bookmark_interval: Duration::from_secs(1),
            max_watch: Duration::from_secs(300),
            fresh_metrics: true,
            tailor_crds: true,
        }
    }
}

/// Shared state of a running stand-in.
#[derive(Debug)]
pub struct Inner {
    /// Objects and the change log.
    pub state: Mutex<State>,
    /// The latest `resourceVersion`, so watches wake up on changes.
    pub changed: watch::Sender<u64>,
    /// Bumped to end every open watch.
    pub drops: watch::Sender<(u64, DropMode)>,
    /// Every request, in order of arrival.
    pub requests: Mutex<Vec<Recorded>>,
    /// Injected faults.
    pub faults: Mutex<Vec<Fault>>,
    /// Tunables.
    pub options: Options,
    /// The address served (for `/api`'s `serverAddressByClientCIDRs`).
    pub address: Mutex<String>,
    /// [`crate::standin::ApiServer::requests`] shows requests from this sequence number on (all are kept
    /// for the record file).
    pub shown_from: AtomicU64,
    seq: AtomicU64,
}

/// Locks a mutex, recovering the data if a panicking test thread poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    /// Shared state over `state`.
    pub fn new(state: State, options: Options) -> Inner {
        let rv = state.rv;
        Inner {
            state: Mutex::new(state),
            changed: watch::channel(rv).0,
            drops: watch::channel((0, DropMode::Clean)).0,
            requests: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            options,
            address: Mutex::new(String::new()),
            shown_from: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// The sequence number the next request gets.
    pub fn next_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Runs `f` on the store and wakes the watches if it changed anything.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (out, rv) = {
            let mut s = lock(&self.state);
            let out = f(&mut s);
            (out, s.rv)
        };
        self.changed.send_if_modified(|v| {
            let changed = *v != rv;
            *v = rv;
            changed
        });
        out
    }
}

fn json_response(code: u16, v: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    url_decode_pairs(q.unwrap_or_default())
}

/// Decodes `application/x-www-form-urlencoded` pairs.
fn url_decode_pairs(q: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The body as JSON; apply patches may be YAML.
fn parse_body(bytes: &[u8], content_type: Option<&str>) -> Result<Option<Value>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) if content_type.is_some_and(|c| c.contains("yaml")) => {
            let text = std::str::from_utf8(bytes).map_err(|_| e.to_string())?;
            serde_saphyr::from_str::<Value>(text)
                .map(Some)
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Splits a resource path (after `/api/v1` or `/apis/g/v`) into its target.
pub(super) fn target_of(
    state: &State,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Option<Target> {
    let t = |ns: Option<&str>, plural: &str, name: Option<&&str>, sub: Option<&&str>| Target {
        group: group.into(),
        version: version.into(),
        resource: plural.into(),
        namespace: ns.map(str::to_string),
        name: name.map(|s| s.to_string()),
        subresource: sub.map(|s| s.to_string()),
    };
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && state
            .registry
            .by_plural(group, version, rest[2])
            .is_some_and(|t| t.namespaced)
    {
        if rest.len() > 5 {
            return None;
        }
        return Some(t(Some(rest[1]), rest[2], rest.get(3), rest.get(4)));
    }
    if rest.is_empty() || rest.len() > 3 {
        return None;
    }
    Some(t(None, rest[0], rest.get(1), rest.get(2)))
}

/// The one handler: record, fault, route.
pub async fn handle(AxState(inner): AxState<Arc<Inner>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query());
    let content_type = header_str(&parts.headers, header::CONTENT_TYPE);
    let user = header_str(&parts.headers, header::AUTHORIZATION)
        .and_then(|a| a.strip_prefix("Bearer ").map(str::to_string))
        .unwrap_or_else(|| "anonymous".into());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let target = {
        let s = lock(&inner.state);
        match segs.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() => target_of(&s, "", v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => target_of(&s, g, v, rest),
            _ => None,
        }
    };
    let body = parse_body(&bytes, content_type.as_deref());
    let mut rec = Recorded {
        seq: inner.seq.fetch_add(1, Ordering::SeqCst),
        at: Instant::now(),
        wall: std::time::SystemTime::now(),
        method: parts.method.to_string(),
        path: path.clone(),
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| path.clone(), |pq| pq.as_str().to_string()),
        field_manager: query.get("fieldManager").cloned(),
        query,
        user,
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        content_type,
        body: body.as_ref().ok().cloned().flatten(),
        target,
        status: 0,
        fault: None,
    };
    let decision = decide(&mut lock(&inner.faults), &rec);
    if !decision.applied.is_empty() {
        rec.fault = Some(decision.applied.join(", "));
    }
    let seq = rec.seq;
    lock(&inner.requests).push(rec.clone());
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    let response = match (decision.fail, body) {
        (Some(Action::Respond(code, v)), _) => json_response(code, &v),
        (Some(Action::Conflict), _) => error_response(&ApiError::new(
            409,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified (injected)",
        )),
        (Some(Action::Fail(code)), _) => error_response(&ApiError::new(
            code,
            match code {
                429 => "TooManyRequests",
                403 => "Forbidden",
                404 => "NotFound",
                503 => "ServiceUnavailable",
                _ => "InternalError",
            },
            format!("injected fault: HTTP {code}"),
        )),
        (_, Err(e)) => error_response(&ApiError::new(
            400,
            "BadRequest",
            format!("cannot parse the body: {e}"),
        )),
        (_, Ok(body)) => route(&inner, &parts.method, &segs, &rec, body),
    };
    let code = response.status().as_u16();
    if let Some(r) = lock(&inner.requests)
        .iter_mut()
        .rev()
        .find(|r| r.seq == seq)
    {
        r.status = code;
    }
    response
}

fn route(
    inner: &Arc<Inner>,
    method: &Method,
    segs: &[&str],
    rec: &Recorded,
    body: Option<Value>,
) -> Response {
    if method == Method::GET {
        let s = lock(&inner.state);
        let discovery = match segs {
            [] | ["healthz"] | ["livez"] | ["readyz"] => {
                return (StatusCode::OK, "ok").into_response();
            }
            ["version"] => Some(json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-tailor-standin",
                "platform": "linux/amd64",
            })),
            ["api"] => Some(json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                    "serverAddress": lock(&inner.address).clone()}],
            })),
            ["apis"] => {
                let groups: Vec<Value> = s
                    .registry
                    .groups()
                    .into_iter()
                    .map(|(g, vs)| group_doc(&g, &vs))
                    .collect();
                Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
            }
            ["apis", g] => s
                .registry
                .groups()
                .into_iter()
                .find(|(name, _)| name.as_str() == *g)
                .map(|(g, vs)| {
                    let mut d = group_doc(&g, &vs);
                    d["kind"] = json!("APIGroup");
                    d["apiVersion"] = json!("v1");
                    d
                }),
            ["api", v] => resource_list(&s, "", v),
            ["apis", g, v] => resource_list(&s, g, v),
            _ => None,
        };
        if let Some(d) = discovery {
            return json_response(200, &d);
        }
    }
    let Some(target) = rec.target.clone() else {
        return error_response(&ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource {}",
                rec.path
            ),
        ));
    };
    let t = {
        let s = lock(&inner.state);
        s.registry
            .by_plural(&target.group, &target.version, &target.resource)
            .cloned()
    };
    let Some(t) = t else {
        return error_response(&ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({})",
                target.resource
            ),
        ));
    };
    match resource(inner, method, &t, &target, rec, body) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first()})
}

fn resource_list(s: &State, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = s
        .registry
        .in_group_version(group, version)
        .flat_map(ResourceType::discovery_entries)
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources,
    }))
}

fn random_suffix(seq: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = seq
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn bad_request(m: impl Into<String>) -> ApiError {
    ApiError::new(400, "BadRequest", m)
}

/// Applies a PATCH body of `content_type` to `doc`.
fn apply_patch(doc: &mut Value, content_type: &str, patch: &Value) -> Result<(), ApiError> {
    if content_type.starts_with("application/json-patch+json") {
        let p: json_patch::Patch = serde_json::from_value(patch.clone())
            .map_err(|e| bad_request(format!("invalid JSON patch: {e}")))?;
        json_patch::patch(doc, &p).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the JSON patch does not apply: {e}"),
            )
        })
    } else if content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/apply-patch+yaml")
    {
        json_patch::merge(doc, patch);
        Ok(())
    } else if content_type.starts_with("application/strategic-merge-patch+json") {
        strategic_merge(doc, patch);
        Ok(())
    } else {
        Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        ))
    }
}

/// After an apply's merge: each map the CRD declares atomic (`x-kubernetes-map-type: atomic`) that the
/// applied object names is replaced whole, so no key of the stored map the apply leaves out survives.
fn replace_atomic_maps(doc: &mut Value, applied: &Value, atomic_maps: &[Vec<String>]) {
    for path in atomic_maps {
        let pointer: String = path
            .iter()
            .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
            .collect();
        let Some(value) = applied.pointer(&pointer) else {
            continue;
        };
        if let Some(slot) = doc.pointer_mut(&pointer) {
            *slot = value.clone();
        }
    }
}

fn resource(
    inner: &Arc<Inner>,
    method: &Method,
    t: &ResourceType,
    target: &Target,
    rec: &Recorded,
    body: Option<Value>,
) -> Result<Response, ApiError> {
    if t.namespaced != target.namespace.is_some() && target.name.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("{} is namespaced: {}", t.plural, t.namespaced),
        ));
    }
    let key = |name: &str| ObjKey {
        group: t.group.clone(),
        version: t.version.clone(),
        resource: t.plural.clone(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: name.into(),
    };
    let writable = |verb: &str| {
        if t.verbs.iter().any(|v| v == verb) {
            Ok(())
        } else {
            Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{verb} is not supported on {}", t.plural),
            ))
        }
    };
    let ct = rec.content_type.clone().unwrap_or_default();
    let body_obj = || {
        body.clone()
            .ok_or_else(|| bad_request("a body is required"))
    };
    let sub = target.subresource.as_deref();
    let ok = |code: u16, v: Value| Ok(json_response(code, &v));
    match (method.as_str(), target.name.as_deref(), sub) {
        ("GET", None, None) if rec.is_watch() => {
            writable("watch")?;
            watch(inner, t, target, rec)
        }
        ("GET", None, None) => {
            writable("list")?;
            list(inner, t, target, rec)
        }
        ("POST", None, None) => {
            writable("create")?;
            let mut obj = body_obj()?;
            let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => n.to_string(),
                _ => match obj
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                {
                    Some(g) => format!("{g}{}", random_suffix(rec.seq)),
                    None => return Err(bad_request("metadata.name or generateName required")),
                },
            };
            if let (Some(ns), Some(body_ns)) = (
                target.namespace.as_deref(),
                obj.pointer("/metadata/namespace").and_then(Value::as_str),
            ) && ns != body_ns
            {
                return Err(bad_request(format!(
                    "the namespace of the object ({body_ns}) does not match the namespace on the request ({ns})"
                )));
            }
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            let created = inner.write(|s| s.create(&key(&name), obj, Part::Main))?;
            ok(201, created)
        }
        ("DELETE", None, None) => {
            writable("deletecollection")?;
            let (labels, fields) = selectors(rec)?;
            let ns = target.namespace.as_deref();
            let deleted = inner.write(|s| {
                let doomed = s.list(&t.group, &t.version, &t.plural, ns, &labels, &fields);
                let keys: Vec<ObjKey> =
                    doomed.iter().filter_map(|o| s.key_of(o, "").ok()).collect();
                keys.iter()
                    .filter_map(|k| s.delete(k).ok())
                    .collect::<Vec<_>>()
            });
            ok(
                200,
                json!({"kind": format!("{}List", t.kind), "apiVersion": t.api_version(),
                "metadata": {}, "items": deleted}),
            )
        }
        ("GET", Some(name), None | Some("resize")) => {
            writable("get")?;
            ok(200, lock(&inner.state).get(&key(name))?)
        }
        ("GET", Some(name), Some("status")) if t.status => {
            ok(200, lock(&inner.state).get(&key(name))?)
        }
        ("PUT", Some(name), None | Some("status") | Some("resize")) => {
            writable("update")?;
            let part = if sub == Some("status") {
                if !t.status {
                    return Err(ApiError::not_found(&key(name)));
                }
                Part::Status
            } else {
                Part::Main
            };
            ok(
                200,
                inner.write(|s| s.update(&key(name), body_obj()?, part))?,
            )
        }
        ("PATCH", Some(name), None | Some("status") | Some("resize")) => {
            writable("patch")?;
            let patch = body_obj()?;
            let part = if sub == Some("status") {
                if !t.status {
                    return Err(ApiError::not_found(&key(name)));
                }
                Part::Status
            } else {
                Part::Main
            };
            let apply = ct.starts_with("application/apply-patch+yaml");
            inner
                .write(|s| {
                    let k = key(name);
                    match s.get(&k) {
                        Ok(mut doc) => {
                            apply_patch(&mut doc, &ct, &patch)?;
                            if apply {
                                replace_atomic_maps(&mut doc, &patch, &t.atomic_maps);
                            }
                            s.update(&k, doc, part).map(|v| (200, v))
                        }
                        Err(e) if e.code == 404 && apply && part == Part::Main => {
                            if !patch.is_object() {
                                return Err(bad_request("an apply patch must be an object"));
                            }
                            let mut obj = patch.clone();
                            obj["metadata"]["name"] = json!(name);
                            s.create(&k, obj, Part::Main).map(|v| (201, v))
                        }
                        Err(e) => Err(e),
                    }
                })
                .map(|(code, v)| json_response(code, &v))
        }
        ("DELETE", Some(name), None) => {
            writable("delete")?;
            ok(200, inner.write(|s| s.delete(&key(name)))?)
        }
        (m, Some(name), Some("scale")) if t.scale.is_some() => {
            let Some(paths) = t.scale.clone() else {
                return Err(ApiError::not_found(&key(name)));
            };
            let k = key(name);
            match m {
                "GET" => ok(200, scale_of(&lock(&inner.state).get(&k)?, &paths)),
                "PUT" | "PATCH" => {
                    let input = body_obj()?;
                    inner.write(|s| {
                        let obj = s.get(&k)?;
                        let mut scale = scale_of(&obj, &paths);
                        if m == "PUT" {
                            scale = input.clone();
                        } else {
                            apply_patch(&mut scale, &ct, &input)?;
                        }
                        let current = obj.pointer("/metadata/resourceVersion").cloned();
                        if let Some(want) = scale
                            .pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            && !want.is_empty()
                            && current.as_ref().and_then(Value::as_str) != Some(want)
                        {
                            return Err(ApiError::conflict(&k));
                        }
                        let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                        let mut new = obj;
                        super::store::set_path(&mut new, &paths.spec_replicas, replicas);
                        let new = s.update(&k, new, Part::Main)?;
                        ok(200, scale_of(&new, &paths))
                    })
                }
                _ => Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "scale: get, update, patch",
                )),
            }
        }
        ("POST", Some(name), Some("eviction")) if t.plural == "pods" && t.group.is_empty() => {
            inner.write(|s| s.delete(&key(name)))?;
            ok(
                201,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Success", "code": 201}),
            )
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{} {} is not supported by the stand-in",
                rec.method, rec.path
            ),
        )),
    }
}

fn selectors(rec: &Recorded) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let q = |k: &str| rec.query.get(k).map(String::as_str).unwrap_or_default();
    Ok((
        LabelSelector::parse(q("labelSelector")).map_err(bad_request)?,
        FieldSelector::parse(q("fieldSelector")).map_err(bad_request)?,
    ))
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn list(
    inner: &Arc<Inner>,
    t: &ResourceType,
    target: &Target,
    rec: &Recorded,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rec)?;
    let offset: usize = rec
        .query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // kube-apiserver answers `resourceVersion=0` from its watch cache, which ignores `limit`: the whole
    // list in one response (kubernetes/kubernetes#70735). Clients that want bounded pages leave the
    // resource version unset.
    let from_cache = rec.query.get("resourceVersion").map(String::as_str) == Some("0");
    let limit: Option<usize> = rec
        .query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0 && !from_cache);
    let (mut items, total, rv) = {
        let s = lock(&inner.state);
        let (items, total) = s.list_page(
            &t.group,
            &t.version,
            &t.plural,
            target.namespace.as_deref(),
            &labels,
            &fields,
            offset,
            limit,
        );
        (items, total, s.rv)
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(l) = limit
        && total > offset + l
    {
        meta["continue"] = json!((offset + l).to_string());
        meta["remainingItemCount"] = json!(total - offset - l);
    }
    if inner.options.fresh_metrics && t.group == "metrics.k8s.io" {
        let now = now_rfc3339();
        for i in &mut items {
            i["timestamp"] = json!(now);
        }
    }
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", t.kind), "apiVersion": t.api_version(),
            "metadata": meta, "items": items}),
    ))
}

/// What a watch selects.
struct WatchFilter {
    group: String,
    version: String,
    resource: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn selects(&self, o: &Value) -> bool {
        self.labels.matches(o) && self.fields.matches(o)
    }

    fn same_resource(&self, k: &ObjKey) -> bool {
        k.group == self.group
            && k.version == self.version
            && k.resource == self.resource
            && self.namespace.as_deref().is_none_or(|ns| k.namespace == ns)
    }
}

/// One watch event line, `type` first as the API server writes it: clients that decode the adjacently
/// tagged event in one pass (kube-rs) then read `object` straight from the text. With `object` first they
/// must buffer it, and map keys that are numbers (checkpoint `bucketWeights`) no longer decode.
fn event_line(kind: &str, object: &Value) -> Bytes {
    Bytes::from(format!(
        "{{\"type\":{},\"object\":{object}}}\n",
        json!(kind)
    ))
}

type Chunk = Result<Bytes, std::io::Error>;

fn watch(
    inner: &Arc<Inner>,
    t: &ResourceType,
    target: &Target,
    rec: &Recorded,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rec)?;
    let filter = WatchFilter {
        group: t.group.clone(),
        version: t.version.clone(),
        resource: t.plural.clone(),
        namespace: target.namespace.clone(),
        labels,
        fields,
    };
    let from = match rec.query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let asked = rec
        .query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(inner.options.max_watch);
    let timeout = asked.min(inner.options.max_watch);
    let bookmarks = rec
        .query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let bookmark_type = json!({"kind": t.kind, "apiVersion": t.api_version()});
    let (tx, rx) = mpsc::channel::<Chunk>(256);
    let inner = inner.clone();
    tokio::spawn(async move {
        run_watch(inner, filter, from, timeout, bookmarks, bookmark_type, tx).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Streams the changes after `from` (or the current objects as ADDED, then the changes, when `from` is
/// `None`) until the timeout, a drop, or the client going away.
async fn run_watch(
    inner: Arc<Inner>,
    filter: WatchFilter,
    from: Option<u64>,
    timeout: Duration,
    bookmarks: bool,
    bookmark_type: Value,
    tx: mpsc::Sender<Chunk>,
) {
    let mut changed = inner.changed.subscribe();
    let mut drops = inner.drops.subscribe();
    drops.mark_unchanged();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut cursor = match from {
        Some(rv) => rv,
        None => {
            let (objects, rv) = {
                let s = lock(&inner.state);
                let objects: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|(k, o)| filter.same_resource(k) && filter.selects(o))
                    .map(|(_, o)| o.clone())
                    .collect();
                (objects, s.rv)
            };
            for o in objects {
                if tx.send(Ok(event_line("ADDED", &o))).await.is_err() {
                    return;
                }
            }
            rv
        }
    };
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + inner.options.bookmark_interval,
        inner.options.bookmark_interval,
    );
    loop {
        changed.mark_unchanged();
        let (changes, head, gone) = {
            let s = lock(&inner.state);
            if cursor < s.compacted {
                (Vec::new(), s.rv, true)
            } else {
                // The log is in resourceVersion order: start after the cursor instead of scanning it
                // all on every wake-up (at scale every write wakes every watch).
                let start = s.log.partition_point(|c| c.rv <= cursor);
                let changes: Vec<_> = s
                    .log
                    .range(start..)
                    .filter(|c| filter.same_resource(&c.key))
                    .cloned()
                    .collect();
                (changes, s.rv, false)
            }
        };
        if gone {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "reason": "Expired", "code": 410,
                "message": format!("too old resource version: {cursor} ({head})")});
            let _ = tx.send(Ok(event_line("ERROR", &status))).await;
            return;
        }
        for c in changes {
            let new = filter.selects(&c.object);
            let old = c.old.as_ref().map(|o| filter.selects(o));
            let kind = match (c.change, old, new) {
                (ChangeType::Added, _, true) => "ADDED",
                (ChangeType::Modified, Some(true), true) => "MODIFIED",
                (ChangeType::Modified, _, true) => "ADDED",
                (ChangeType::Modified, Some(true), false) => "DELETED",
                (ChangeType::Deleted, _, true) => "DELETED",
                _ => continue,
            };
            if tx.send(Ok(event_line(kind, &c.object))).await.is_err() {
                return;
            }
        }
        cursor = head.max(cursor);
        tokio::select! {
            r = changed.changed() => if r.is_err() { return },
            r = drops.changed() => {
                let mode = if r.is_ok() { drops.borrow().1 } else { DropMode::Clean };
                if mode == DropMode::Abort {
                    let _ = tx.send(Err(std::io::Error::other("watch dropped by the stand-in"))).await;
                }
                return;
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tick.tick(), if bookmarks => {
                let mut bm = bookmark_type.clone();
                bm["metadata"] = json!({"resourceVersion": cursor.to_string()});
                if tx.send(Ok(event_line("BOOKMARK", &bm))).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}
