//! What the stand-in remembers about each request (so tests can assert who wrote what), and the faults a
//! test can inject.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

/// The resource a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// API group (`""` = core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace in the path, if any.
    pub namespace: Option<String>,
    /// Object name, if the path names one.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `eviction`, `resize`).
    pub subresource: Option<String>,
}

/// One request the stand-in answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Order of arrival.
    pub seq: u64,
    /// When it arrived.
    pub at: Instant,
    /// When it arrived, by the wall clock (to compare with the binaries' log timestamps).
    pub wall: SystemTime,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Path and query as sent (`?` included when the client sent an empty query).
    pub uri: String,
    /// Decoded query parameters.
    pub query: BTreeMap<String, String>,
    /// Who sent it: the bearer token of its kubeconfig (`anonymous` without one).
    pub user: String,
    /// `User-Agent`, if sent.
    pub user_agent: Option<String>,
    /// `?fieldManager=`, if sent.
    pub field_manager: Option<String>,
    /// `Content-Type`, if sent.
    pub content_type: Option<String>,
    /// The body, parsed (JSON, or YAML for apply patches).
    pub body: Option<Value>,
    /// The resource addressed, when the path is a resource path.
    pub target: Option<Target>,
    /// The HTTP status answered (200 for a watch that started; 0 while the request is in flight: it is
    /// recorded on arrival, so a write is in the record before its effect is visible).
    pub status: u16,
    /// The fault that shaped the answer, if any.
    pub fault: Option<String>,
}

impl Recorded {
    /// Whether this is a `?watch=` request.
    pub fn is_watch(&self) -> bool {
        self.query
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
    }

    /// The RBAC verb of the request: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource paths, the lower-case HTTP method.
    pub fn verb(&self) -> String {
        let named = self.target.as_ref().is_some_and(|t| t.name.is_some());
        let verb = match (self.method.as_str(), named) {
            ("GET", true) => "get",
            ("GET", false) if self.is_watch() => "watch",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            (m, _) => return m.to_lowercase(),
        };
        if self.target.is_none() {
            return self.method.to_lowercase();
        }
        verb.into()
    }

    /// `resource` or `resource/subresource`, as RBAC rules name it; empty for non-resource paths.
    pub fn resource(&self) -> String {
        match &self.target {
            Some(t) => match &t.subresource {
                Some(s) => format!("{}/{s}", t.resource),
                None => t.resource.clone(),
            },
            None => String::new(),
        }
    }

    /// Whether the request may change state (anything but GET).
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    /// `namespace/name` of the addressed object (empty parts when absent).
    pub fn object(&self) -> String {
        match &self.target {
            Some(t) => format!(
                "{}/{}",
                t.namespace.as_deref().unwrap_or_default(),
                t.name.as_deref().unwrap_or_default()
            ),
            None => String::new(),
        }
    }
}

/// Which requests a fault applies to; every field set must match.
#[derive(Debug, Clone, Default)]
pub struct Match {
    /// RBAC verb ([`Recorded::verb`]).
    pub verb: Option<String>,
    /// Plural resource name.
    pub resource: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Requesting user (kubeconfig token).
    pub user: Option<String>,
    /// A substring of the path.
    pub path_contains: Option<String>,
    /// The whole path.
    pub path: Option<String>,
}

impl Match {
    /// Every request.
    pub fn any() -> Match {
        Match::default()
    }

    /// Requests with RBAC verb `verb` on `resource` (plural name).
    pub fn verb(verb: &str, resource: &str) -> Match {
        Match {
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            ..Match::default()
        }
    }

    /// Every request on `resource` (plural name).
    pub fn resource(resource: &str) -> Match {
        Match {
            resource: Some(resource.into()),
            ..Match::default()
        }
    }

    /// Only the subresource `sub`.
    pub fn subresource(mut self, sub: &str) -> Match {
        self.subresource = Some(sub.into());
        self
    }

    /// Only requests of `user`.
    pub fn user(mut self, user: &str) -> Match {
        self.user = Some(user.into());
        self
    }

    /// Only the object `name`.
    pub fn name(mut self, name: &str) -> Match {
        self.name = Some(name.into());
        self
    }

    /// Whether `r` is one of the requests meant.
    pub fn matches(&self, r: &Recorded) -> bool {
        let t = r.target.as_ref();
        let eq = |want: &Option<String>, got: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == got)
        };
        eq(&self.verb, Some(r.verb().as_str()))
            && eq(&self.resource, t.map(|t| t.resource.as_str()))
            && eq(&self.subresource, t.and_then(|t| t.subresource.as_deref()))
            && eq(&self.name, t.and_then(|t| t.name.as_deref()))
            && eq(&self.namespace, t.and_then(|t| t.namespace.as_deref()))
            && eq(&self.user, Some(r.user.as_str()))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| r.path.contains(p))
            && self.path.as_deref().is_none_or(|p| r.path == p)
    }
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answers after this delay (other faults may still apply).
    Delay(Duration),
    /// Answers with this HTTP status and a `Status` body (500 InternalError, 429, 403, …).
    Fail(u16),
    /// Answers 409 Conflict, as a stale `resourceVersion` would.
    Conflict,
    /// Answers with this HTTP status and JSON body instead of the store's answer: a canned reply, such as
    /// the one metrics list a test wants the next scrape to see.
    Respond(u16, Value),
}

/// A fault: requests matching `when` get `action`, `times` times (`None`: until cleared).
#[derive(Debug, Clone)]
pub struct Fault {
    /// Which requests.
    pub when: Match,
    /// What happens to them.
    pub action: Action,
    /// How many more requests it applies to.
    pub times: Option<u32>,
}

impl Fault {
    /// A fault applying to every matching request until cleared.
    pub fn new(when: Match, action: Action) -> Fault {
        Fault {
            when,
            action,
            times: None,
        }
    }

    /// Applies to the next `n` matching requests only.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }
}

/// What the faults decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Total delay before answering.
    pub delay: Duration,
    /// The failure to answer with, if any.
    pub fail: Option<Action>,
    /// Description of the faults applied.
    pub applied: Vec<String>,
}

/// Applies `faults` to `r`, consuming their counts.
pub fn decide(faults: &mut [Fault], r: &Recorded) -> Decision {
    let mut d = Decision::default();
    for f in faults.iter_mut() {
        if f.times == Some(0) || !f.when.matches(r) {
            continue;
        }
        if d.fail.is_some() && !matches!(f.action, Action::Delay(_)) {
            continue;
        }
        if let Some(n) = &mut f.times {
            *n -= 1;
        }
        d.applied.push(format!("{:?}", f.action));
        match &f.action {
            Action::Delay(t) => d.delay += *t,
            other => d.fail = Some(other.clone()),
        }
    }
    d
}
