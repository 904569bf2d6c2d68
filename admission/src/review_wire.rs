//! The `request` of an incoming AdmissionReview as it is decoded ([`crate::review::decode`]): the request's
//! fields ([`Request`]), and each object either kept as the body's text or, for a pod review decoded in one
//! pass (`POD = true`), decoded straight into the slim pod ([`crate::slim_pod`]) while the body is read.
//!
//! Accepts what a derived decoder of these fields accepts: required `uid`, `kind`, `resource`, `operation`
//! and `userInfo`, the others defaulted when absent, unknown fields skipped, a repeated field refused.
//! `userInfo` and `options` are skipped, not built: no decision of the webhook depends on who asked or on the
//! request's options, and building them (the user's groups and extra, the options as a JSON tree) was a tenth
//! of a review's allocations. Their presence rules are kept (`userInfo` required, neither repeated); their
//! content is not checked, so this decoder accepts some bodies the derived one refuses, never the reverse.
//! The request's strings point into the body unless they hold escapes (the API server writes none in them).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use kube::core::admission::Operation;
use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::body_text::Text;
use crate::review_budgets::PodTooLarge;
use crate::slim_pod::{DecodedPod, SlimPod};

/// A group, version and kind, as a request names them (`kind`, `requestKind`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Gvk<'a> {
    /// API group ("" for the core group).
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    /// Version.
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    /// Kind.
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

/// A group, version and resource, as a request names them (`resource`, `requestResource`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Gvr<'a> {
    /// API group ("" for the core group).
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    /// Version.
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    /// Plural resource name.
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
}

/// The fields of an AdmissionRequest the webhook reads, as Kubernetes names them (serialised the same way),
/// borrowed from the body.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    /// The request's uid, which the response repeats.
    pub uid: Cow<'a, str>,
    /// Kind of the object.
    pub kind: Gvk<'a>,
    /// Resource being requested; it alone chooses the handler.
    pub resource: Gvr<'a>,
    /// Subresource (`status`), if any.
    pub sub_resource: Option<Cow<'a, str>>,
    /// Kind of the original request, when the API server converted it.
    pub request_kind: Option<Gvk<'a>>,
    /// Resource of the original request.
    pub request_resource: Option<Gvr<'a>>,
    /// Subresource of the original request.
    pub request_sub_resource: Option<Cow<'a, str>>,
    /// Name of the object ("" when the server generates it).
    pub name: Cow<'a, str>,
    /// Namespace of the object.
    pub namespace: Option<Cow<'a, str>>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Whether the request is a dry run.
    pub dry_run: bool,
}

/// The decoded `request` (`POD`: decode a core pod's object in the same pass).
pub struct WireRequestIn<'a, const POD: bool> {
    /// The request's fields.
    pub request: Request<'a>,
    /// `object` as text, unless decoded into `pod`.
    pub object: Option<&'a RawValue>,
    /// `object` decoded as a slim pod (one pass of a pod review).
    pub pod: Option<Result<Box<SlimPod<'a>>, PodTooLarge>>,
    /// `oldObject` as text.
    pub old_object: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    Uid,
    Kind,
    Resource,
    SubResource,
    RequestKind,
    RequestResource,
    RequestSubResource,
    Name,
    Namespace,
    Operation,
    UserInfo,
    Object,
    OldObject,
    DryRun,
    Options,
    #[serde(other)]
    Unknown,
}

/// Sets `slot` from the map's next value, refusing a second one.
fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    slot: &mut Option<T>,
    field: &'static str,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(field));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

/// The request's fields as they arrive, each `None` until seen.
#[derive(Default)]
struct Seen<'a> {
    uid: Option<Text<'a>>,
    kind: Option<Gvk<'a>>,
    resource: Option<Gvr<'a>>,
    sub_resource: Option<Option<Text<'a>>>,
    request_kind: Option<Option<Gvk<'a>>>,
    request_resource: Option<Option<Gvr<'a>>>,
    request_sub_resource: Option<Option<Text<'a>>>,
    name: Option<Text<'a>>,
    namespace: Option<Option<Text<'a>>>,
    operation: Option<Operation>,
    /// Seen, not built (see the module's documentation).
    user_info: Option<IgnoredAny>,
    object: Option<Option<&'a RawValue>>,
    pod: Option<Option<DecodedPod<'a>>>,
    old_object: Option<Option<&'a RawValue>>,
    dry_run: Option<bool>,
    /// Seen, not built.
    options: Option<IgnoredAny>,
}

impl<'a> Seen<'a> {
    /// Whether `object` is to be decoded as a pod now: `resource` came first and names core pods (the rule of
    /// `ResourceKind::of`, by which `review::handle` sends the review to the pod handler).
    fn pod_review(&self) -> bool {
        self.resource
            .as_ref()
            .is_some_and(|r| r.group.is_empty() && r.resource == "pods")
    }

    fn finish<E: Error, const POD: bool>(self) -> Result<WireRequestIn<'a, POD>, E> {
        if self.user_info.is_none() {
            return Err(E::missing_field("userInfo"));
        }
        let request = Request {
            uid: self.uid.ok_or_else(|| E::missing_field("uid"))?.0,
            kind: self.kind.ok_or_else(|| E::missing_field("kind"))?,
            resource: self.resource.ok_or_else(|| E::missing_field("resource"))?,
            sub_resource: self.sub_resource.flatten().map(|t| t.0),
            request_kind: self.request_kind.flatten(),
            request_resource: self.request_resource.flatten(),
            request_sub_resource: self.request_sub_resource.flatten().map(|t| t.0),
            name: self.name.map(|t| t.0).unwrap_or_default(),
            namespace: self.namespace.flatten().map(|t| t.0),
            operation: self
                .operation
                .ok_or_else(|| E::missing_field("operation"))?,
            dry_run: self.dry_run.unwrap_or_default(),
        };
        Ok(WireRequestIn {
            request,
            object: self.object.flatten(),
            pod: self.pod.flatten().map(|DecodedPod(pod)| pod),
            old_object: self.old_object.flatten(),
        })
    }
}

struct RequestVisitor<'a, const POD: bool>(PhantomData<&'a ()>);

impl<'de: 'a, 'a, const POD: bool> Visitor<'de> for RequestVisitor<'a, POD> {
    type Value = WireRequestIn<'a, POD>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = Seen::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Uid => once(&mut map, &mut seen.uid, "uid")?,
                Field::Kind => once(&mut map, &mut seen.kind, "kind")?,
                Field::Resource => once(&mut map, &mut seen.resource, "resource")?,
                Field::SubResource => once(&mut map, &mut seen.sub_resource, "subResource")?,
                Field::RequestKind => once(&mut map, &mut seen.request_kind, "requestKind")?,
                Field::RequestResource => {
                    once(&mut map, &mut seen.request_resource, "requestResource")?
                }
                Field::RequestSubResource => once(
                    &mut map,
                    &mut seen.request_sub_resource,
                    "requestSubResource",
                )?,
                Field::Name => once(&mut map, &mut seen.name, "name")?,
                Field::Namespace => once(&mut map, &mut seen.namespace, "namespace")?,
                Field::Operation => once(&mut map, &mut seen.operation, "operation")?,
                Field::UserInfo => once(&mut map, &mut seen.user_info, "userInfo")?,
                Field::Object if seen.object.is_some() || seen.pod.is_some() => {
                    return Err(A::Error::duplicate_field("object"));
                }
                Field::Object if POD && seen.pod_review() => {
                    once(&mut map, &mut seen.pod, "object")?
                }
                Field::Object => once(&mut map, &mut seen.object, "object")?,
                Field::OldObject => once(&mut map, &mut seen.old_object, "oldObject")?,
                Field::DryRun => once(&mut map, &mut seen.dry_run, "dryRun")?,
                Field::Options => once(&mut map, &mut seen.options, "options")?,
                Field::Unknown => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        seen.finish()
    }
}

impl<'de: 'a, 'a, const POD: bool> Deserialize<'de> for WireRequestIn<'a, POD> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RequestVisitor(PhantomData))
    }
}
