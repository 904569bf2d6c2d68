//! The `request` of an incoming AdmissionReview as it is decoded ([`crate::review::decode`]): the request's
//! fields, and each object either kept as the body's text or, for a pod review decoded in one pass
//! (`POD = true`), decoded straight into the slim pod ([`crate::slim_pod`]) while the body is read.
//!
//! Accepts what a derived decoder of these fields accepts: required `uid`, `kind`, `resource`, `operation`
//! and `userInfo`, the others defaulted when absent, unknown fields skipped, a repeated field refused.
//! `userInfo` and `options` are skipped, not built: no decision of the webhook depends on who asked or on the
//! request's options, and building them (the user's groups and extra, the options as a JSON tree) was a tenth
//! of a review's allocations. Their presence rules are kept (`userInfo` required, neither repeated); their
//! content is not checked, so this decoder accepts some bodies the derived one refuses, never the reverse.

use std::fmt;
use std::marker::PhantomData;

use kube::core::admission::Operation;
use kube::core::{GroupVersionKind, GroupVersionResource};
use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::review_budgets::PodTooLarge;
use crate::slim_pod::{DecodedPod, SlimPod};

/// The decoded `request` (`POD`: decode a core pod's object in the same pass).
pub struct WireRequestIn<'a, const POD: bool> {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    pub sub_resource: Option<String>,
    pub request_kind: Option<GroupVersionKind>,
    pub request_resource: Option<GroupVersionResource>,
    pub request_sub_resource: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    pub operation: Operation,
    /// `object` as text, unless decoded into `pod`.
    pub object: Option<&'a RawValue>,
    /// `object` decoded as a slim pod (one pass of a pod review).
    pub pod: Option<Result<Box<SlimPod<'a>>, PodTooLarge>>,
    pub old_object: Option<&'a RawValue>,
    pub dry_run: bool,
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
    uid: Option<String>,
    kind: Option<GroupVersionKind>,
    resource: Option<GroupVersionResource>,
    sub_resource: Option<Option<String>>,
    request_kind: Option<Option<GroupVersionKind>>,
    request_resource: Option<Option<GroupVersionResource>>,
    request_sub_resource: Option<Option<String>>,
    name: Option<String>,
    namespace: Option<Option<String>>,
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
        Ok(WireRequestIn {
            uid: self.uid.ok_or_else(|| E::missing_field("uid"))?,
            kind: self.kind.ok_or_else(|| E::missing_field("kind"))?,
            resource: self.resource.ok_or_else(|| E::missing_field("resource"))?,
            sub_resource: self.sub_resource.flatten(),
            request_kind: self.request_kind.flatten(),
            request_resource: self.request_resource.flatten(),
            request_sub_resource: self.request_sub_resource.flatten(),
            name: self.name.unwrap_or_default(),
            namespace: self.namespace.flatten(),
            operation: self
                .operation
                .ok_or_else(|| E::missing_field("operation"))?,
            object: self.object.flatten(),
            pod: self.pod.flatten().map(|DecodedPod(pod)| pod),
            old_object: self.old_object.flatten(),
            dry_run: self.dry_run.unwrap_or_default(),
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
