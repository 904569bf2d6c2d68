//! AdmissionReview v1 in and out: robust decoding, dispatch by resource, and the wire encoding of the response.
//!
//! The rules follow upstream's server (docs/design/upstream-admission.md §2.2): a body that does not decode as an
//! `admission.k8s.io/v1` AdmissionReview is answered with a well-formed `allowed: true` review (with the request's
//! `uid` when one can be found), the handler is chosen by `(request.resource.group, request.resource.resource)`
//! only, and every other resource is allowed unchanged. A panic inside a handler is caught and answered like a
//! handler error: allowed, no patch. Nothing in here panics on input.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use kube::core::Status;
use serde_json::value::RawValue;
use tailor_core::text::capped;

use crate::review_budgets::PodTooLarge;
pub use crate::review_wire::{Gvk, Gvr, Request};
use crate::slim_pod::{PodDecodeError, SlimPod, read_pod};

/// API version of every review Tailor reads and writes.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// Kind of the review object.
pub const KIND: &str = "AdmissionReview";
/// Largest accepted request body (5 MiB, as upstream); larger bodies are answered with HTTP 413.
pub const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// API group of Tailor's VerticalPodAutoscaler.
pub const VPA_GROUP: &str = tailor_crds::GROUP;
/// Plural resource name of Tailor's VerticalPodAutoscaler.
pub const VPA_RESOURCE: &str = "verticalpodautoscalers";

/// Which handler a review went to (the `resource` label of the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// `("", "pods")`.
    Pod,
    /// `("autoscaling.tailor.dev", "verticalpodautoscalers")`.
    Vpa,
    /// Anything else, or a review that could not be decoded.
    Other,
}

impl ResourceKind {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Pod => "pod",
            ResourceKind::Vpa => "vpa",
            ResourceKind::Other => "other",
        }
    }

    /// The handler for a `(group, resource)` pair; version, kind, operation and path play no part.
    pub fn of(group: &str, resource: &str) -> Self {
        match (group, resource) {
            ("", "pods") => ResourceKind::Pod,
            (VPA_GROUP, VPA_RESOURCE) => ResourceKind::Vpa,
            _ => ResourceKind::Other,
        }
    }
}

/// What a review did (the `result` label of the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReviewResult {
    /// Allowed with a JSON patch.
    Patched,
    /// Allowed without a patch (no matching VPA, valid VPA needing no default, unsupported resource).
    Allowed,
    /// Allowed untouched on purpose: the pod already carries upstream VPA's `vpaUpdates` annotation (Tailor's
    /// own annotations of an earlier call removed).
    SkippedUpstream,
    /// Allowed untouched: Tailor sized the pod in an earlier call of the same admission (reinvocation).
    AlreadySized,
    /// Matched, but every resource to change is budgeted at pod level (`spec.resources`); only Tailor's
    /// annotations were added.
    PodLevelLeftAlone,
    /// Admitted unsized although a VPA may cover it: the pod's owner chain could not be resolved.
    Unsized(UnsizedReason),
    /// Denied (VPA validation failed).
    Denied,
    /// The handler failed (or panicked); allowed unchanged.
    Error,
    /// The body was not a decodable AdmissionReview with a request; allowed unchanged.
    Malformed,
}

impl ReviewResult {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewResult::Patched => "patched",
            ReviewResult::Allowed => "allowed",
            ReviewResult::PodLevelLeftAlone => "pod_level_left_alone",
            ReviewResult::Unsized(reason) => reason.as_str(),
            ReviewResult::SkippedUpstream => "skipped_upstream",
            ReviewResult::AlreadySized => "already_sized",
            ReviewResult::Denied => "denied",
            ReviewResult::Error => "error",
            ReviewResult::Malformed => "malformed",
        }
    }
}

/// Why a pod in a namespace with VPAs was admitted unsized (each its own `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnsizedReason {
    /// An owner in the pod's chain is neither cached nor known to the API server.
    OwnerMissing,
    /// An owner missing from the cache was not read: a bound of the live reads was reached.
    OwnerLookupShed,
    /// An owner missing from the cache could not be read (error or timeout).
    OwnerLookupFailed,
    /// The owner chain cannot be walked (a cycle, an owner that cannot be a controller, a bad selector).
    OwnerChain,
}

impl UnsizedReason {
    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            UnsizedReason::OwnerMissing => "unsized_owner_missing",
            UnsizedReason::OwnerLookupShed => "unsized_owner_lookup_shed",
            UnsizedReason::OwnerLookupFailed => "unsized_owner_lookup_failed",
            UnsizedReason::OwnerChain => "unsized_owner_chain",
        }
    }

    /// The reason for a chain that could not be resolved.
    pub fn of(e: &tailor_kube::index::ChainError) -> Self {
        use tailor_kube::index::ChainError;
        match e {
            ChainError::Missing { .. } => UnsizedReason::OwnerMissing,
            ChainError::Unread { why: "shed", .. } => UnsizedReason::OwnerLookupShed,
            ChainError::Unread { .. } => UnsizedReason::OwnerLookupFailed,
            ChainError::Cycle | ChainError::Unhandled { .. } | ChainError::Selector(_) => {
                UnsizedReason::OwnerChain
            }
        }
    }
}

/// A handler's answer: the response to send and what it means for the metrics.
#[derive(Clone, Debug)]
pub struct Reviewed {
    /// Response (its `uid` is overwritten with the request's).
    pub response: Response,
    /// Metrics label.
    pub result: ReviewResult,
}

impl Reviewed {
    /// Allowed without a patch.
    pub fn allowed(req: &Request<'_>) -> Self {
        Reviewed {
            response: req.response(),
            result: ReviewResult::Allowed,
        }
    }
}

/// The two admission handlers the server dispatches to. Implementations must be cheap and never block on I/O:
/// they run on the server's review workers for every request.
pub trait Reviewer: Send + Sync + 'static {
    /// Pods (`CREATE`): compute the patch from the matching VPA.
    fn review_pod(&self, review: &Review<'_>) -> Reviewed;
    /// Tailor VPAs (`CREATE`/`UPDATE`, and status writes): validate and default.
    fn review_vpa(&self, review: &Review<'_>) -> Reviewed;
}

/// A decoded review: the request's fields, and its objects still as the JSON text of the body. Each handler
/// decodes only the object it needs, straight into its own types: no intermediate JSON tree, whose size is
/// many times the text's. A pod review decoded by [`decode_one_pass`] holds its pod already decoded instead
/// (see [`Review::take_pod`]).
#[derive(Debug)]
pub struct Review<'a> {
    /// The request's fields (its objects are [`Review::object`] and [`Review::old_object`]).
    pub request: Request<'a>,
    /// `request.object` as sent (`None` when absent or `null`, and when already decoded as a pod).
    pub object: Option<&'a RawValue>,
    /// `request.oldObject` as sent (`None` when absent or `null`).
    pub old_object: Option<&'a RawValue>,
    /// `request.object` decoded as a slim pod in the body's one pass, until [`Review::take_pod`] takes it.
    pod: RefCell<Option<Result<Box<SlimPod<'a>>, PodTooLarge>>>,
}

impl<'a> Review<'a> {
    /// The request's object as the pod a review reads ([`crate::slim_pod`]): the one read in the body's
    /// pass, or read now from [`Review::object`]. `None` when the request has no object (or it was taken).
    pub fn take_pod(&self) -> Option<Result<Box<SlimPod<'a>>, PodDecodeError>> {
        let decoded = self
            .pod
            .try_borrow_mut()
            .ok()
            .and_then(|mut pod| pod.take());
        match decoded {
            Some(pod) => Some(pod.map_err(PodDecodeError::from)),
            None => self.object.map(|raw| read_pod(raw.get())),
        }
    }
}

/// Why a body is not a usable review.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or JSON not shaped like an AdmissionReview.
    #[error("cannot decode AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    /// A review without `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// Decodes an AdmissionReview body (`admission.k8s.io/v1`; `apiVersion`, `kind` and `request` required), its
/// objects kept as text.
pub fn decode(body: &[u8]) -> Result<Review<'_>, DecodeError> {
    decode_as::<false>(body)
}

/// [`decode`] in one pass over the body: when `request.resource` names core pods before `request.object` comes
/// (the API server sends the request's fields in that order), the object is decoded straight into the slim pod
/// ([`Review::take_pod`]) instead of being scanned once to keep its text and again to decode it. A body whose
/// pod does not decode is decoded again with [`decode`], so that the pod review reports why, as before.
pub fn decode_one_pass(body: &[u8]) -> Result<Review<'_>, DecodeError> {
    decode_as::<true>(body).or_else(|_| decode(body))
}

fn decode_as<const POD: bool>(body: &[u8]) -> Result<Review<'_>, DecodeError> {
    // Text checked once: read from bytes, serde_json checks every string it keeps (each key, label and kept
    // field) on its own. A body that is not UTF-8 is read from bytes, which accepts what it accepted before
    // (bytes in strings it skips are not checked).
    let review: WireReviewIn<'_, POD> = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text)?,
        Err(_) => serde_json::from_slice(body)?,
    };
    let r = review.request.ok_or(DecodeError::NoRequest)?;
    Ok(Review {
        request: r.request,
        object: r.object,
        old_object: r.old_object,
        pod: RefCell::new(r.pod),
    })
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReviewIn<'a, const POD: bool> {
    // Required, as in the derived decoder; the response always carries `admission.k8s.io/v1`.
    #[serde(rename = "apiVersion", borrow)]
    _api_version: crate::body_text::Text<'a>,
    #[serde(rename = "kind", borrow)]
    _kind: crate::body_text::Text<'a>,
    #[serde(default, borrow)]
    request: Option<crate::review_wire::WireRequestIn<'a, POD>>,
}

/// Best effort for a body that did not decode: the `request.uid` string if the body is JSON that has one.
pub fn salvage_uid(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Uid {
        uid: serde_json::Value,
    }
    #[derive(serde::Deserialize)]
    struct Req {
        request: Uid,
    }
    let req: Req = serde_json::from_slice(body).ok()?;
    match req.request.uid {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// The outcome of one review: the encoded response body and the metric labels.
#[derive(Clone, Debug)]
pub struct Handled {
    /// JSON body of the response AdmissionReview.
    pub body: Vec<u8>,
    /// Handler the review went to.
    pub resource: ResourceKind,
    /// What the handler did.
    pub result: ReviewResult,
    /// The request's uid ("" when unknown), for logs.
    pub uid: String,
}

/// Decodes `body`, dispatches it to `reviewer`, and encodes the answer. Never panics, always yields a valid
/// AdmissionReview response.
pub fn handle(body: &[u8], reviewer: &dyn Reviewer) -> Handled {
    let review = match decode_one_pass(body) {
        Ok(review) => review,
        Err(err) => {
            let uid = salvage_uid(body).unwrap_or_default();
            tracing::warn!(uid = %capped(&uid), error = %capped(&err.to_string()), "malformed admission review; allowing");
            return Handled {
                body: encode(&allowed_response(&uid)),
                resource: ResourceKind::Other,
                result: ReviewResult::Malformed,
                uid,
            };
        }
    };
    let req = &review.request;
    let resource = ResourceKind::of(&req.resource.group, &req.resource.resource);
    let reviewed = match resource {
        ResourceKind::Pod => guarded(req, || reviewer.review_pod(&review)),
        ResourceKind::Vpa => guarded(req, || reviewer.review_vpa(&review)),
        ResourceKind::Other => {
            tracing::debug!(uid = %capped(&req.uid), group = %capped(&req.resource.group),
                resource = %capped(&req.resource.resource), "not a supported resource; allowing");
            Reviewed::allowed(req)
        }
    };
    let mut response = reviewed.response;
    if response.uid != req.uid {
        response.uid.clear();
        response.uid.push_str(&req.uid);
    }
    Handled {
        body: encode(&response),
        resource,
        result: reviewed.result,
        uid: review.request.uid.into_owned(),
    }
}

/// Runs a handler, turning a panic into an allowed response without patch.
fn guarded(req: &Request<'_>, f: impl FnOnce() -> Reviewed) -> Reviewed {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            tracing::error!(uid = %capped(&req.uid), "admission handler panicked; allowing unchanged");
            Reviewed {
                response: req.response(),
                result: ReviewResult::Error,
            }
        }
    }
}

impl Request<'_> {
    /// `allowed: true` for this request: its uid, no patch.
    pub fn response(&self) -> Response {
        allowed_response(&self.uid)
    }
}

/// The response of a review: the fields of an AdmissionReview's `response` the webhook writes ([`encode`]
/// adds `apiVersion`, `kind` and the patch's type). The webhook's own type rather than kube's
/// `AdmissionResponse`: that one holds fields the webhook never sends, and has no constructor that allocates
/// nothing, so each review used to copy a template of it.
#[derive(Clone, Debug, Default)]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Whether the object is admitted.
    pub allowed: bool,
    /// Why not: sent only when it carries something.
    pub result: Status,
    /// A JSON patch, sent with `patchType: JSONPatch`.
    pub patch: Option<EncodedPatch>,
    /// Warnings for the client (`kubectl` prints them).
    pub warnings: Option<Vec<String>>,
}

impl Response {
    /// Not admitted, for `reason` (the status message).
    pub fn deny(mut self, reason: impl ToString) -> Self {
        self.allowed = false;
        self.result.message = reason.to_string();
        self
    }

    /// Admitted with `patch`, serialised.
    pub fn with_patch(mut self, patch: json_patch::Patch) -> Result<Self, serde_json::Error> {
        self.patch = Some(EncodedPatch::of_json(&serde_json::to_vec(&patch)?));
        Ok(self)
    }
}

/// A JSON patch as a response sends it: its JSON text in base64. Encoded once when the patch is made, so that
/// a patch the memo answers with again is shared, not copied and encoded again for every pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedPatch(Arc<str>);

impl EncodedPatch {
    /// The patch whose JSON text is `json`.
    pub fn of_json(json: &[u8]) -> Self {
        use base64::Engine as _;
        EncodedPatch(
            base64::engine::general_purpose::STANDARD
                .encode(json)
                .into(),
        )
    }

    /// The patch's JSON text.
    pub fn json(&self) -> Result<Vec<u8>, base64::DecodeError> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(self.0.as_bytes())
    }

    /// The base64 text, as sent.
    pub fn as_base64(&self) -> &str {
        &self.0
    }
}

/// An `allowed: true` response without patch for the given uid.
pub fn allowed_response(uid: &str) -> Response {
    Response {
        uid: uid.to_owned(),
        allowed: true,
        ..Response::default()
    }
}

/// Encodes a response as the AdmissionReview the API server expects: `apiVersion`/`kind` always set, the patch
/// base64-encoded with `patchType: JSONPatch`, `status` only when it carries something, `warnings` only when
/// there are some.
///
/// Written field by field: the fixed parts as they are, the uid, status and warnings through serde_json (which
/// escapes them), and the patch's base64 as it is (its alphabet needs no escaping in a JSON string). A derived
/// serialiser of the whole review was more code for a cold review to fetch, to write the same text.
pub fn encode(response: &Response) -> Vec<u8> {
    let status = &response.result;
    let status_empty = status.status.is_none()
        && status.code == 0
        && status.message.is_empty()
        && status.reason.is_empty()
        && status.details.is_none()
        && status.metadata.is_none();
    let warnings = response.warnings.as_ref().filter(|w| !w.is_empty());
    let patch = response.patch.as_ref().map(EncodedPatch::as_base64);
    let patch_len = patch.map_or(0, |p| p.len() + 40);
    let mut out = Vec::with_capacity(160 + response.uid.len() + patch_len);
    for part in [
        r#"{"apiVersion":""#,
        API_VERSION,
        r#"","kind":""#,
        KIND,
        r#"","response":{"uid":"#,
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    // Serialising strings and these plain structs cannot fail; fall back to a fixed allowed review all the same.
    let mut written = serde_json::to_writer(&mut out, &response.uid);
    out.extend_from_slice(if response.allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if !status_empty && written.is_ok() {
        out.extend_from_slice(br#","status":"#);
        written = serde_json::to_writer(&mut out, status);
    }
    if let Some(warnings) = warnings.filter(|_| written.is_ok()) {
        out.extend_from_slice(br#","warnings":"#);
        written = serde_json::to_writer(&mut out, warnings);
    }
    if written.is_err() {
        return br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}"#
            .to_vec();
    }
    if let Some(patch) = patch {
        out.extend_from_slice(br#","patch":""#);
        out.extend_from_slice(patch.as_bytes());
        out.extend_from_slice(br#"","patchType":"JSONPatch""#);
    }
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use base64::Engine as _;
    use kube::core::DynamicObject;
    use kube::core::admission::AdmissionReview;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// The request's fields in the order the API server writes them (Go's `AdmissionRequest`).
    const API_SERVER_ORDER: [&str; 15] = [
        "uid",
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "object",
        "oldObject",
        "dryRun",
        "options",
    ];

    /// `review` encoded as the API server sends it: the request's fields in its order (`json!` sorts them, which
    /// puts `object` before `resource`), any other field after them.
    pub(crate) fn as_api_server_sends(review: &Value) -> Vec<u8> {
        let Some(request) = review["request"].as_object() else {
            return serde_json::to_vec(review).unwrap();
        };
        let known = API_SERVER_ORDER
            .iter()
            .filter_map(|k| request.get_key_value(*k));
        let others = request
            .iter()
            .filter(|(k, _)| !API_SERVER_ORDER.contains(&k.as_str()));
        let fields: Vec<String> = known
            .chain(others)
            .map(|(k, v)| format!("{}:{}", json!(k), v))
            .collect();
        let mut top = review.as_object().unwrap().clone();
        top.remove("request");
        let mut out = serde_json::to_string(&top).unwrap();
        out.pop();
        if !top.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("\"request\":{{{}}}}}", fields.join(",")));
        out.into_bytes()
    }

    /// The one pass and the two gave the same review: request fields, objects (as text or as the pod) and the
    /// pod's decoding error.
    fn one_pass_as_two(body: &[u8]) {
        let two = decode(body);
        let one = decode_one_pass(body);
        let text = String::from_utf8_lossy(body);
        let (two, one) = match (two, one) {
            (Ok(two), Ok(one)) => (two, one),
            (Err(_), Err(_)) => return,
            (two, one) => panic!("{text}: two passes {two:?}, one {one:?}"),
        };
        assert_eq!(
            serde_json::to_value(&one.request).unwrap(),
            serde_json::to_value(&two.request).unwrap(),
            "{text}"
        );
        assert_eq!(
            one.old_object.map(|r| r.get()),
            two.old_object.map(|r| r.get())
        );
        let pod = |r: &Review<'_>| {
            r.take_pod().map(|p| {
                p.map_err(|e| e.to_string())
                    .and_then(|p| p.into_pod().map_err(|e| e.to_string()))
            })
        };
        assert_eq!(pod(&one), pod(&two), "{text}");
        if ResourceKind::of(&one.request.resource.group, &one.request.resource.resource)
            != ResourceKind::Pod
        {
            assert_eq!(one.object.map(|r| r.get()), two.object.map(|r| r.get()));
        }
    }

    #[test]
    fn one_pass_decodes_the_pod_as_two_passes_do() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "web-", "namespace": "ns", "labels": {"app": "web"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "b"}],
                "resources": {"requests": {"cpu": "1"}}}]}});
        let labels: serde_json::Map<String, Value> =
            (0..70).map(|i| (format!("l{i}"), json!("v"))).collect();
        for object in [
            pod.clone(),
            Value::Null,
            json!({}),
            json!({"metadata": {"name": 5}}),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 1}}}]}}),
            json!({"metadata": {"labels": labels}}),
            json!([1]),
        ] {
            for resource in [("", "pods"), (VPA_GROUP, VPA_RESOURCE), ("apps", "pods")] {
                let mut r = review(resource.0, resource.1);
                r["request"]["object"] = object.clone();
                one_pass_as_two(&as_api_server_sends(&r));
                one_pass_as_two(&serde_json::to_vec(&r).unwrap());
            }
        }
        // The pass decodes the pod only when the resource came first; then the text is not kept.
        let mut r = review("", "pods");
        r["request"]["object"] = pod;
        let body = as_api_server_sends(&r);
        let one = decode_one_pass(&body).unwrap();
        assert!(one.object.is_none());
        assert_eq!(
            one.take_pod()
                .unwrap()
                .unwrap()
                .meta
                .generate_name
                .as_deref(),
            Some("web-")
        );
        assert!(one.take_pod().is_none(), "taken once");
        let sorted = serde_json::to_vec(&r).unwrap();
        assert!(decode_one_pass(&sorted).unwrap().object.is_some());
        // A repeated object is refused, as the derived decoder refuses any repeated field.
        let text = String::from_utf8(body).unwrap();
        let twice = text.replacen("\"object\":", "\"object\":{},\"object\":", 1);
        assert!(decode_one_pass(twice.as_bytes()).is_err());
        assert!(decode(twice.as_bytes()).is_err());
    }

    struct Fixed;
    impl Reviewer for Fixed {
        fn review_pod(&self, review: &Review<'_>) -> Reviewed {
            let req = &review.request;
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "add", "path": "/metadata/annotations", "value": {}}
            ]))
            .unwrap();
            Reviewed {
                response: req.response().with_patch(patch).unwrap(),
                result: ReviewResult::Patched,
            }
        }
        fn review_vpa(&self, review: &Review<'_>) -> Reviewed {
            Reviewed {
                response: review.request.response().deny("nope"),
                result: ReviewResult::Denied,
            }
        }
    }

    struct Panics;
    impl Reviewer for Panics {
        fn review_pod(&self, _: &Review<'_>) -> Reviewed {
            panic!("boom")
        }
        fn review_vpa(&self, _: &Review<'_>) -> Reviewed {
            panic!("boom")
        }
    }

    fn review(group: &str, resource: &str) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": group, "version": "v1", "kind": "X"},
                "resource": {"group": group, "version": "v1", "resource": resource},
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "me"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
                "oldObject": null,
                "dryRun": false
            }
        })
    }

    fn response(h: &Handled) -> Value {
        let v: Value = serde_json::from_slice(&h.body).unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        v["response"].clone()
    }

    /// The patch appended after serde's fields reads back as the bytes it was made from, with its type, beside
    /// every other field, and a response without a patch carries neither.
    #[test]
    fn encoded_patches_read_back() {
        let table = b"[]{}\"/:az09\\";
        let long: Vec<u8> = (0..2000).map(|i| table[i % table.len()]).collect();
        let patches: [Option<&[u8]>; 6] = [
            None,
            Some(b""),
            Some(b"["),
            Some(b"[]"),
            Some(b"[1]"),
            Some(&long),
        ];
        for patch in patches {
            for warnings in [None, Some(vec!["two \"VPAs\"\n".to_owned()])] {
                let mut r = allowed_response("u-\"1\"\\");
                r.patch = patch.map(EncodedPatch::of_json);
                r.warnings = warnings.clone();
                let v: Value = serde_json::from_slice(&encode(&r)).unwrap();
                assert_eq!(
                    (v["apiVersion"].as_str(), v["kind"].as_str()),
                    (Some(API_VERSION), Some(KIND))
                );
                let resp = v["response"].as_object().unwrap();
                assert_eq!(resp["uid"], "u-\"1\"\\");
                assert_eq!(resp["allowed"], true);
                assert_eq!(resp.get("warnings").cloned(), warnings.map(|w| json!(w)));
                let sent = resp.get("patch").map(|p| {
                    base64::engine::general_purpose::STANDARD
                        .decode(p.as_str().unwrap())
                        .unwrap()
                });
                assert_eq!(sent.as_deref(), patch, "{patch:?}");
                let typed = resp.get("patchType").and_then(Value::as_str);
                assert_eq!(typed, patch.map(|_| "JSONPatch"));
                assert!(!resp.contains_key("status"));
            }
        }
    }

    #[test]
    fn dispatches_by_group_and_resource() {
        let body = serde_json::to_vec(&review("", "pods")).unwrap();
        let h = handle(&body, &Fixed);
        assert_eq!(
            (h.resource, h.result),
            (ResourceKind::Pod, ReviewResult::Patched)
        );
        let r = response(&h);
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["allowed"], true);
        assert_eq!(r["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().unwrap())
            .unwrap();
        let patch: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(patch[0]["path"], "/metadata/annotations");

        let body = serde_json::to_vec(&review(VPA_GROUP, VPA_RESOURCE)).unwrap();
        let h = handle(&body, &Fixed);
        assert_eq!(
            (h.resource, h.result),
            (ResourceKind::Vpa, ReviewResult::Denied)
        );
        let r = response(&h);
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["message"], "nope");

        // Upstream's group is not ours, and other resources are allowed untouched.
        for (g, res) in [
            ("autoscaling.k8s.io", VPA_RESOURCE),
            ("apps", "deployments"),
            ("", "services"),
        ] {
            let body = serde_json::to_vec(&review(g, res)).unwrap();
            let h = handle(&body, &Fixed);
            assert_eq!(
                (h.resource, h.result),
                (ResourceKind::Other, ReviewResult::Allowed)
            );
            let r = response(&h);
            assert_eq!(r, json!({"uid": "u-1", "allowed": true}));
        }
    }

    #[test]
    fn malformed_bodies_are_allowed() {
        for body in [
            &b""[..],
            b"{",
            b"null",
            b"[]",
            b"{\"request\":null}",
            b"\xff\xfe",
        ] {
            let h = handle(body, &Fixed);
            assert_eq!(h.result, ReviewResult::Malformed);
            assert_eq!(response(&h), json!({"uid": "", "allowed": true}));
        }
        // A request whose uid is readable but whose shape is wrong keeps its uid.
        let body = br#"{"request":{"uid":"abc","operation":"EXPLODE"}}"#;
        let h = handle(body, &Fixed);
        assert_eq!(response(&h), json!({"uid": "abc", "allowed": true}));
    }

    /// The decoder accepts what `AdmissionReview<DynamicObject>`'s derived decoder accepts, gives the same
    /// request fields, and keeps each object's text as sent.
    fn same_as_serde(body: &[u8]) {
        let ours = decode(body).ok();
        let theirs = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
            .ok()
            .and_then(|r| r.request);
        let text = String::from_utf8_lossy(body);
        assert!(theirs.is_none() || ours.is_some(), "{text}");
        let Some(ours) = ours else { return };
        let sent: Value = serde_json::from_slice(body).unwrap();
        let theirs = theirs.or_else(|| {
            // Objects are left to the handlers (as Go's RawExtension does): the derived decoder may refuse
            // one that is not shaped like a DynamicObject, but must accept the rest of the review. Ours skips
            // the content of `userInfo` and `options` (present, since ours accepted).
            let mut without = sent.clone();
            without["request"]["object"] = Value::Null;
            without["request"]["oldObject"] = Value::Null;
            without["request"]["userInfo"] = json!({});
            without["request"]["options"] = Value::Null;
            let r = serde_json::from_value::<AdmissionReview<DynamicObject>>(without).ok();
            assert!(r.is_some(), "{text}");
            r.and_then(|r| r.request)
        });
        let Some(theirs) = theirs else { return };
        let raw = |r: Option<&RawValue>| r.map(|r| serde_json::from_str::<Value>(r.get()).unwrap());
        let or_null = |v: &Value| Some(v.clone()).filter(|v| !v.is_null());
        assert_eq!(raw(ours.object), or_null(&sent["request"]["object"]));
        assert_eq!(raw(ours.old_object), or_null(&sent["request"]["oldObject"]));
        // Every other field as the derived decoder read it, but for those ours skips (nothing reads them).
        let mut theirs = serde_json::to_value(&theirs).unwrap();
        for skipped in ["object", "oldObject", "userInfo", "options"] {
            theirs.as_object_mut().unwrap().remove(skipped);
        }
        // kube's resource type also writes its `apiVersion` (group/version), a field of its own.
        for resource in ["resource", "requestResource"] {
            if let Some(r) = theirs[resource].as_object_mut() {
                r.remove("api_version");
            }
        }
        assert_eq!(serde_json::to_value(&ours.request).unwrap(), theirs);
    }

    #[test]
    fn decoder_matches_the_derived_one() {
        let mut full = review("", "pods");
        full["request"]["object"] = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "annotations": {"x": "y"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {}
        });
        full["request"]["oldObject"] = json!({"metadata": {"name": "old"}, "spec": {}});
        full["request"]["options"] =
            json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
        full["request"]["requestKind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
        full["request"]["subResource"] = json!("status");
        same_as_serde(&serde_json::to_vec(&full).unwrap());
        // Objects without type information, with a non-string kind, or without metadata.
        for object in [
            json!({"spec": {}}),
            json!({"apiVersion": "v1", "kind": 3, "metadata": {}}),
            json!({"kind": "Pod"}),
        ] {
            let mut r = review("", "pods");
            r["request"]["object"] = object;
            same_as_serde(&serde_json::to_vec(&r).unwrap());
        }
        // Failures fail in both.
        for bad in [json!({"metadata": {"name": 5}}), json!([1]), json!("pod")] {
            let mut r = review("", "pods");
            r["request"]["object"] = bad;
            same_as_serde(&serde_json::to_vec(&r).unwrap());
        }
        let mut r = review("", "pods");
        r.as_object_mut().unwrap().remove("apiVersion");
        same_as_serde(&serde_json::to_vec(&r).unwrap());
    }

    #[test]
    fn skipped_fields_keep_their_presence_rules() {
        // Required, and refused when repeated, as in the derived decoder; the content is not read.
        let mut r = review("", "pods");
        r["request"].as_object_mut().unwrap().remove("userInfo");
        let err = decode(&serde_json::to_vec(&r).unwrap()).unwrap_err();
        assert!(err.to_string().contains("userInfo"), "{err}");
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},
            "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE",
            "userInfo":{"username":"a"},"userInfo":{"username":"b"}}}"#;
        let err = decode(body).unwrap_err();
        assert!(
            err.to_string().contains("duplicate field `userInfo`"),
            "{err}"
        );
        let twice = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},
            "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE",
            "userInfo":{},"options":{},"options":null}}"#;
        let err = decode(twice).unwrap_err();
        assert!(
            err.to_string().contains("duplicate field `options`"),
            "{err}"
        );
        // Present, whatever their content: the request is read without them.
        let mut r = review("", "pods");
        r["request"]["userInfo"] = json!({"username": 5, "groups": "g", "extra": []});
        r["request"]["options"] = json!([1]);
        let body = serde_json::to_vec(&r).unwrap();
        let ours = decode(&body).unwrap();
        assert_eq!(ours.request.uid, "u-1");
        assert_eq!(ours.request.resource.resource, "pods");
    }

    #[test]
    fn escaped_strings_are_read_as_well() {
        // The request's strings point into the body; one with escapes is unescaped into its own.
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u\u002d1","kind":{"group":"","version":"v1","kind":"P\u006fd"},
            "resource":{"group":"","version":"v1","resource":"p\u006fds"},"operation":"CREATE",
            "namespace":"n\"s","userInfo":{}}}"#;
        let ours = decode(body).unwrap();
        assert_eq!(ours.request.uid, "u-1");
        assert_eq!(ours.request.kind.kind, "Pod");
        assert_eq!(
            ResourceKind::of(
                &ours.request.resource.group,
                &ours.request.resource.resource
            ),
            ResourceKind::Pod
        );
        assert_eq!(ours.request.namespace.as_deref(), Some("n\"s"));
        let plain = serde_json::to_vec(&review("", "pods")).unwrap();
        let ours = decode(&plain).unwrap();
        assert!(matches!(ours.request.uid, std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn bodies_not_utf8_decode_as_before() {
        let mut body = serde_json::to_vec(&review("", "pods")).unwrap();
        // A byte that is not UTF-8 in a string nobody reads: read from bytes, accepted as before.
        let at = body.len() - 2;
        body.splice(at..at, br#","x":"a"#.iter().copied().chain([0xff, b'"']));
        assert!(std::str::from_utf8(&body).is_err());
        let ours = decode_one_pass(&body).unwrap();
        assert_eq!(ours.request.uid, "u-1");
        // In a string that is read: refused, as before.
        let bad = serde_json::to_vec(&review("", "pods"))
            .unwrap()
            .iter()
            .flat_map(|&b| if b == b'u' { vec![0xff] } else { vec![b] })
            .collect::<Vec<u8>>();
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn handler_panics_are_allowed() {
        let body = serde_json::to_vec(&review("", "pods")).unwrap();
        let h = handle(&body, &Panics);
        assert_eq!(h.result, ReviewResult::Error);
        assert_eq!(response(&h), json!({"uid": "u-1", "allowed": true}));
    }

    fn check_valid(body: &[u8]) -> Result<(), TestCaseError> {
        let h = handle(body, &Fixed);
        let v: Value =
            serde_json::from_slice(&h.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&v["apiVersion"], "admission.k8s.io/v1");
        prop_assert_eq!(&v["kind"], "AdmissionReview");
        prop_assert!(v["response"]["uid"].is_string());
        prop_assert!(v["response"]["allowed"].is_boolean());
        Ok(())
    }

    /// Mutates one JSON value somewhere in the tree, chosen by `path`.
    fn mutate(v: &mut Value, path: &[usize], replacement: Value) {
        let Some((&i, rest)) = path.split_first() else {
            *v = replacement;
            return;
        };
        match v {
            Value::Object(m) if !m.is_empty() => {
                let key = m.keys().nth(i % m.len()).cloned().unwrap();
                if rest.is_empty() && i % 7 == 0 {
                    m.remove(&key);
                } else {
                    mutate(m.get_mut(&key).unwrap(), rest, replacement);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let n = a.len();
                mutate(&mut a[i % n], rest, replacement);
            }
            _ => *v = replacement,
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_give_a_valid_review(body in prop::collection::vec(any::<u8>(), 0..512)) {
            check_valid(&body)?;
        }

        #[test]
        fn mutated_reviews_give_a_valid_review(
            which in 0usize..2,
            path in prop::collection::vec(0usize..16, 0..6),
            replacement in arb_json(),
        ) {
            let mut v = if which == 0 { review("", "pods") } else { review(VPA_GROUP, VPA_RESOURCE) };
            mutate(&mut v, &path, replacement);
            let body = serde_json::to_vec(&v).unwrap();
            check_valid(&body)?;
            same_as_serde(&body);
            let sent = as_api_server_sends(&v);
            check_valid(&sent)?;
            one_pass_as_two(&sent);
        }

        #[test]
        fn truncated_reviews_give_a_valid_review(cut in 0usize..400) {
            let body = serde_json::to_vec(&review("", "pods")).unwrap();
            check_valid(&body[..cut.min(body.len())])?;
        }
    }
}
