//! The object store: every object as JSON, keyed by group / version / resource / namespace / name, a global
//! `resourceVersion` counter, and the log of changes that watches replay (until compacted: then 410 Gone).
//!
//! Writes follow the API server where Tailor's binaries can tell the difference: `resourceVersion`
//! preconditions (409 Conflict), `metadata.generation` bumped on spec changes, the `status` subresource
//! (writes to the object keep `status`, writes to `/status` change only `status`), `/scale` read and written
//! through the type's paths, and server-side apply that creates a missing object.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::registry::{Registry, ResourceType, ScalePaths};
use super::selectors::{FieldSelector, LabelSelector, selector_string};

/// Identifies one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// API group (`""` = core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace (`""` for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One change, as the watch log keeps it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The `resourceVersion` of the change.
    pub rv: u64,
    /// Which object.
    pub key: ObjKey,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (before it, for a deletion).
    pub object: Value,
    /// The object before a modification (for selector transitions).
    pub old: Option<Value>,
}

/// An API error: the HTTP status, the `reason` and a message, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` (`NotFound`, `Conflict`, `AlreadyExists`, …).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl ApiError {
    /// A new error.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// 404 for `key`.
    pub fn not_found(key: &ObjKey) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} {:?} not found", key.resource, key.name),
        )
    }

    /// 409 Conflict for a stale `resourceVersion`.
    pub fn conflict(key: &ObjKey) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply \
                 your changes to the latest version and try again",
                key.resource, key.name
            ),
        )
    }

    /// The `Status` object the API server returns.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        })
    }
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The object (its `status` too when the type has no status subresource).
    Main,
    /// `status` only.
    Status,
    /// Everything, as given (fixtures and the tests' own writes).
    Raw,
}

/// The store and its watch log.
#[derive(Debug)]
pub struct State {
    /// Served types.
    pub registry: Registry,
    /// Objects.
    pub objects: BTreeMap<ObjKey, Value>,
    /// Changes still replayable, oldest first.
    pub log: VecDeque<Arc<Change>>,
    /// The last `resourceVersion` handed out.
    pub rv: u64,
    /// Watches from a `resourceVersion` below this get 410 Gone.
    pub compacted: u64,
    /// Most changes kept in the log.
    pub max_log: usize,
    uid: u64,
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A value at a CRD-style JSON path (`.spec.replicas`).
pub fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut v = object;
    for seg in path.trim_start_matches('.').split('.') {
        v = v.get(seg)?;
    }
    Some(v)
}

/// Sets a value at a CRD-style JSON path, creating objects on the way.
pub fn set_path(object: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut v = object;
    for (i, seg) in segs.iter().enumerate() {
        if !v.is_object() {
            *v = Value::Object(Map::new());
        }
        let Value::Object(m) = v else { return };
        if i + 1 == segs.len() {
            m.insert((*seg).to_string(), value);
            return;
        }
        v = m
            .entry((*seg).to_string())
            .or_insert(Value::Object(Map::new()));
    }
}

/// Everything but `metadata` and `status`: a change here bumps `metadata.generation`.
fn spec_part(o: &Value) -> Value {
    let mut o = o.clone();
    if let Value::Object(m) = &mut o {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

impl State {
    /// An empty store serving `registry`.
    pub fn new(registry: Registry) -> State {
        State {
            registry,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            rv: 0,
            compacted: 0,
            max_log: 100_000,
            uid: 0,
        }
    }

    /// The type of `key`.
    pub fn type_of(&self, key: &ObjKey) -> Result<ResourceType, ApiError> {
        self.registry
            .by_plural(&key.group, &key.version, &key.resource)
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    format!(
                        "the server could not find the requested resource {}",
                        key.resource
                    ),
                )
            })
    }

    /// The key of `object` (namespace defaulted to `default_namespace` for namespaced kinds).
    pub fn key_of(&self, object: &Value, default_namespace: &str) -> Result<ObjKey, ApiError> {
        let bad = |m: String| ApiError::new(400, "BadRequest", m);
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("object without apiVersion".into()))?;
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("object without kind".into()))?;
        let t = self
            .registry
            .by_kind(api_version, kind)
            .ok_or_else(|| bad(format!("no resource type for {api_version} {kind}")))?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{kind} without metadata.name")))?;
        let namespace = match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            _ if !t.namespaced => "",
            Some(ns) if !ns.is_empty() => ns,
            _ => default_namespace,
        };
        Ok(ObjKey {
            group: t.group.clone(),
            version: t.version.clone(),
            resource: t.plural.clone(),
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// A stored `CustomResourceDefinition` serves its kinds from then on (an unreadable one is ignored,
    /// as the API server would reject it).
    fn register_crd(&mut self, key: &ObjKey, object: &Value) {
        if key.group == "apiextensions.k8s.io" && key.resource == "customresourcedefinitions" {
            for t in ResourceType::from_crd(object).unwrap_or_default() {
                self.registry.add(t);
            }
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, change: Change) {
        self.log.push_back(Arc::new(change));
        while self.log.len() > self.max_log {
            if let Some(c) = self.log.pop_front() {
                self.compacted = self.compacted.max(c.rv);
            }
        }
    }

    /// Forgets the change log: watches from any earlier `resourceVersion` get 410 Gone.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted = self.rv;
    }

    /// Creates `object` at `key` (409 AlreadyExists when present). `Part::Raw` keeps `status`.
    pub fn create(
        &mut self,
        key: &ObjKey,
        mut object: Value,
        part: Part,
    ) -> Result<Value, ApiError> {
        let t = self.type_of(key)?;
        if self.objects.contains_key(key) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} {:?} already exists", key.resource, key.name),
            ));
        }
        if !object.is_object() {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "the body is not an object",
            ));
        }
        if part != Part::Raw
            && t.status
            && let Value::Object(m) = &mut object
        {
            m.remove("status");
        }
        let rv = self.next_rv();
        self.uid += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uid);
        object["apiVersion"] = json!(t.api_version());
        object["kind"] = json!(t.kind);
        let meta = object
            .as_object_mut()
            .map(|m| m.entry("metadata").or_insert(json!({})));
        if let Some(meta) = meta {
            if !meta.is_object() {
                *meta = json!({});
            }
            meta["name"] = json!(key.name);
            if t.namespaced {
                meta["namespace"] = json!(key.namespace);
            } else if let Value::Object(m) = meta {
                m.remove("namespace");
            }
            meta["resourceVersion"] = json!(rv.to_string());
            if meta
                .get("uid")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                meta["uid"] = json!(uid);
            }
            if meta.get("creationTimestamp").is_none_or(Value::is_null) {
                meta["creationTimestamp"] = json!(now_rfc3339());
            }
            if meta.get("generation").is_none() {
                meta["generation"] = json!(1);
            }
        }
        self.register_crd(key, &object);
        self.objects.insert(key.clone(), object.clone());
        self.record(Change {
            rv,
            key: key.clone(),
            change: ChangeType::Added,
            object: object.clone(),
            old: None,
        });
        Ok(object)
    }

    /// The object at `key`.
    pub fn get(&self, key: &ObjKey) -> Result<Value, ApiError> {
        self.objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(key))
    }

    /// Replaces the object at `key` with `new` (only the parts `part` allows), checking the
    /// `resourceVersion` precondition `new` carries.
    pub fn update(&mut self, key: &ObjKey, mut new: Value, part: Part) -> Result<Value, ApiError> {
        let t = self.type_of(key)?;
        let old = self.get(key)?;
        if !new.is_object() {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "the body is not an object",
            ));
        }
        let old_rv = old
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(want) = new
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !want.is_empty()
            && want != old_rv
        {
            return Err(ApiError::conflict(key));
        }
        let mut result = match part {
            Part::Status => {
                let mut r = old.clone();
                r["status"] = new.get("status").cloned().unwrap_or(Value::Null);
                if r["status"].is_null()
                    && let Value::Object(m) = &mut r
                {
                    m.remove("status");
                }
                r
            }
            Part::Main | Part::Raw => {
                if part == Part::Main && t.status {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Value::Object(m) = &mut new {
                                m.remove("status");
                            }
                        }
                    }
                }
                // Identity and bookkeeping stay the server's.
                let mut meta = new.get("metadata").cloned().unwrap_or(json!({}));
                if !meta.is_object() {
                    meta = json!({});
                }
                for f in [
                    "uid",
                    "creationTimestamp",
                    "generation",
                    "name",
                    "namespace",
                ] {
                    match old.pointer(&format!("/metadata/{f}")) {
                        Some(v) => meta[f] = v.clone(),
                        None => {
                            if let Value::Object(m) = &mut meta {
                                m.remove(f);
                            }
                        }
                    }
                }
                new["metadata"] = meta;
                new["apiVersion"] = json!(t.api_version());
                new["kind"] = json!(t.kind);
                if spec_part(&new) != spec_part(&old) {
                    let g = old
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    new["metadata"]["generation"] = json!(g + 1);
                }
                new
            }
        };
        let rv = self.next_rv();
        result["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.register_crd(key, &result);
        self.objects.insert(key.clone(), result.clone());
        self.record(Change {
            rv,
            key: key.clone(),
            change: ChangeType::Modified,
            object: result.clone(),
            old: Some(old),
        });
        Ok(result)
    }

    /// Deletes the object at `key`, returning it.
    pub fn delete(&mut self, key: &ObjKey) -> Result<Value, ApiError> {
        let mut old = self
            .objects
            .remove(key)
            .ok_or_else(|| ApiError::not_found(key))?;
        let rv = self.next_rv();
        old["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(Change {
            rv,
            key: key.clone(),
            change: ChangeType::Deleted,
            object: old.clone(),
            old: None,
        });
        Ok(old)
    }

    /// Objects of one type (`namespace` `None` = all namespaces) matching the selectors, sorted by key.
    pub fn list(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.list_page(group, version, resource, namespace, labels, fields, 0, None)
            .0
    }

    /// One page of [`State::list`]: `limit` objects from `offset` (all when `None`), and how many match in
    /// all. Only the page is copied, so paging through a large store costs what the pages hold.
    #[allow(clippy::too_many_arguments)]
    pub fn list_page(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        offset: usize,
        limit: Option<usize>,
    ) -> (Vec<Value>, usize) {
        let mut total = 0;
        let mut page = Vec::new();
        let matching = self
            .objects
            .iter()
            .filter(|(k, _)| {
                k.group == group
                    && k.version == version
                    && k.resource == resource
                    && namespace.is_none_or(|ns| k.namespace == ns)
            })
            .map(|(_, v)| v)
            .filter(|v| labels.matches(v) && fields.matches(v));
        for v in matching {
            if total >= offset && limit.is_none_or(|l| page.len() < l) {
                page.push(v.clone());
            }
            total += 1;
        }
        (page, total)
    }
}

/// The `autoscaling/v1` Scale of `object` through `paths`.
pub fn scale_of(object: &Value, paths: &ScalePaths) -> Value {
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| at_path(object, p))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => selector_string(other),
        });
    let meta = object.get("metadata").cloned().unwrap_or(json!({}));
    let mut status = json!({
        "replicas": at_path(object, &paths.status_replicas).cloned().unwrap_or(json!(0)),
    });
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": at_path(object, &paths.spec_replicas).cloned().unwrap_or(json!(0))},
        "status": status,
    })
}

/// Strategic merge as far as Tailor's writers need it: a JSON merge patch, except that lists of objects
/// that all carry a `name` (containers, webhooks, volumes, env) are merged element by element by name.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k) {
                    Some(tv) => strategic_merge(tv, pv),
                    None => {
                        let mut v = Value::Null;
                        strategic_merge(&mut v, pv);
                        t.insert(k.clone(), v);
                    }
                }
            }
        }
        (t @ Value::Array(_), Value::Array(p)) => {
            let named = |a: &[Value]| {
                a.iter()
                    .all(|e| e.get("name").is_some_and(Value::is_string))
            };
            let Value::Array(ta) = t else { return };
            if !p.is_empty() && named(p) && named(ta) {
                for pe in p {
                    match ta.iter_mut().find(|te| te.get("name") == pe.get("name")) {
                        Some(te) => strategic_merge(te, pe),
                        None => ta.push(pe.clone()),
                    }
                }
            } else {
                *ta = p.clone();
            }
        }
        (t, p) => {
            if p.is_object() {
                *t = Value::Object(Map::new());
                strategic_merge(t, p);
            } else {
                *t = p.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn writes_respect_status_and_preconditions() {
        let mut s = State::new(Registry::builtin());
        let k = key("web");
        let created = s
            .create(
                &k,
                json!({"metadata": {"name": "web"}, "spec": {"replicas": 1}, "status": {"replicas": 9}}),
                Part::Main,
            )
            .unwrap();
        assert_eq!(created["status"], Value::Null, "status dropped on create");
        assert_eq!(created["metadata"]["resourceVersion"], "1");
        let mut stale = created.clone();
        stale["spec"]["replicas"] = json!(3);
        let updated = s.update(&k, stale.clone(), Part::Main).unwrap();
        assert_eq!(updated["metadata"]["generation"], 2);
        assert_eq!(
            s.update(&k, stale, Part::Main).unwrap_err().code,
            409,
            "stale resourceVersion"
        );
        let mut st = updated.clone();
        st["status"] = json!({"replicas": 3});
        st["spec"]["replicas"] = json!(100);
        let after = s.update(&k, st, Part::Status).unwrap();
        assert_eq!(after["spec"]["replicas"], 3, "status write keeps spec");
        assert_eq!(after["status"]["replicas"], 3);
        assert_eq!(s.log.len(), 3);
        let scale = scale_of(&after, s.type_of(&k).unwrap().scale.as_ref().unwrap());
        assert_eq!(scale["spec"]["replicas"], 3);
    }

    #[test]
    fn strategic_merge_by_name() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {"containers": [{"name": "b", "image": "y"}]}}),
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "x");
        assert_eq!(pod["spec"]["containers"][1]["image"], "y");
    }
}
