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
use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::body_text::Text;
use crate::review_budgets::PodTooLarge;
use crate::slim_pod::{DecodedPod, SlimPod};

/// A group, version and kind, as a request names them (`kind`, `requestKind`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Gvk<'a> {
    /// API group ("" for the core group).
    pub group: Cow<'a, str>,
    /// Version.
    pub version: Cow<'a, str>,
    /// Kind.
    pub kind: Cow<'a, str>,
}

/// A group, version and resource, as a request names them (`resource`, `requestResource`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Gvr<'a> {
    /// API group ("" for the core group).
    pub group: Cow<'a, str>,
    /// Version.
    pub version: Cow<'a, str>,
    /// Plural resource name.
    pub resource: Cow<'a, str>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Gvk<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let [group, version, kind] = Triple::Kind.decode(d)?;
        Ok(Gvk {
            group,
            version,
            kind,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Gvr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let [group, version, resource] = Triple::Resource.decode(d)?;
        Ok(Gvr {
            group,
            version,
            resource,
        })
    }
}

/// [`Gvk`] or [`Gvr`]: `group`, `version` and a third field. Both are read by one decoder, which accepts what
/// the derived decoder of each accepts (a map with the three fields, others skipped, none repeated; or a
/// sequence of the three): a review reads four of them, and two derived decoders of the same shape were two
/// copies of the same code to fetch.
#[derive(Clone, Copy)]
enum Triple {
    Kind,
    Resource,
}

/// A key of a [`Triple`]'s map.
enum TripleKey {
    Group,
    Version,
    Kind,
    Resource,
    Other,
}

impl<'de> Deserialize<'de> for TripleKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TripleKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<TripleKey, E> {
                Ok(match v {
                    "group" => TripleKey::Group,
                    "version" => TripleKey::Version,
                    "kind" => TripleKey::Kind,
                    "resource" => TripleKey::Resource,
                    _ => TripleKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

impl Triple {
    fn name(self) -> &'static str {
        match self {
            Triple::Kind => "Gvk",
            Triple::Resource => "Gvr",
        }
    }

    /// The field names, in the order of the decoded values.
    fn fields(self) -> &'static [&'static str; 3] {
        match self {
            Triple::Kind => &["group", "version", "kind"],
            Triple::Resource => &["group", "version", "resource"],
        }
    }

    fn decode<'de: 'a, 'a, D: Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<[Cow<'a, str>; 3], D::Error> {
        d.deserialize_struct(self.name(), self.fields(), TripleVisitor(self, PhantomData))
    }
}

struct TripleVisitor<'a>(Triple, PhantomData<&'a ()>);

/// What a [`Triple`] given as a sequence is short of, in the derived decoder's words.
struct ThreeElements(Triple);

impl serde::de::Expected for ThreeElements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "struct {} with 3 elements", self.0.name())
    }
}

impl<'de: 'a, 'a> Visitor<'de> for TripleVisitor<'a> {
    type Value = [Cow<'a, str>; 3];

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "struct {}", self.0.name())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen: [Option<Cow<'a, str>>; 3] = [None, None, None];
        let names = self.0.fields();
        while let Some(key) = map.next_key::<TripleKey>()? {
            let at = match (key, self.0) {
                (TripleKey::Group, _) => 0,
                (TripleKey::Version, _) => 1,
                (TripleKey::Kind, Triple::Kind) | (TripleKey::Resource, Triple::Resource) => 2,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if seen[at].is_some() {
                return Err(A::Error::duplicate_field(names[at]));
            }
            seen[at] = Some(map.next_value::<Text<'a>>()?.0);
        }
        let [group, version, third] = seen;
        Ok([
            group.ok_or_else(|| A::Error::missing_field(names[0]))?,
            version.ok_or_else(|| A::Error::missing_field(names[1]))?,
            third.ok_or_else(|| A::Error::missing_field(names[2]))?,
        ])
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let expected = ThreeElements(self.0);
        let mut next = |at: usize| match seq.next_element::<Text<'a>>()? {
            Some(text) => Ok(text.0),
            None => Err(A::Error::invalid_length(at, &expected)),
        };
        Ok([next(0)?, next(1)?, next(2)?])
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What serde derives for [`Gvk`] and [`Gvr`]: the decoders the shared one stands for (named as they are,
    /// since the derived error messages name the type).
    mod derived {
        use std::borrow::Cow;

        #[derive(Debug, serde::Deserialize)]
        pub struct Gvk<'a> {
            #[serde(borrow)]
            pub group: Cow<'a, str>,
            #[serde(borrow)]
            pub version: Cow<'a, str>,
            #[serde(borrow)]
            pub kind: Cow<'a, str>,
        }

        #[derive(Debug, serde::Deserialize)]
        pub struct Gvr<'a> {
            #[serde(borrow)]
            pub group: Cow<'a, str>,
            #[serde(borrow)]
            pub version: Cow<'a, str>,
            #[serde(borrow)]
            pub resource: Cow<'a, str>,
        }
    }

    /// Both decoders of `text` give the same value, or fail with the same message.
    fn same_as_derived(text: &str) -> Result<(), TestCaseError> {
        let ours = serde_json::from_str::<Gvk<'_>>(text)
            .map(|g| [g.group, g.version, g.kind])
            .map_err(|e| e.to_string());
        let derived = serde_json::from_str::<derived::Gvk<'_>>(text)
            .map(|g| [g.group, g.version, g.kind])
            .map_err(|e| e.to_string());
        prop_assert_eq!(ours, derived, "Gvk of {}", text);
        let ours = serde_json::from_str::<Gvr<'_>>(text)
            .map(|g| [g.group, g.version, g.resource])
            .map_err(|e| e.to_string());
        let derived = serde_json::from_str::<derived::Gvr<'_>>(text)
            .map(|g| [g.group, g.version, g.resource])
            .map_err(|e| e.to_string());
        prop_assert_eq!(ours, derived, "Gvr of {}", text);
        Ok(())
    }

    #[test]
    fn kinds_and_resources_decode_as_derived() {
        for text in [
            r#"{"group":"","version":"v1","kind":"Pod","resource":"pods"}"#,
            r#"{"group":"apps","version":"v1","resource":"deployments"}"#,
            r#"{"group":"a\"b","version":"v\u0031","kind":"K"}"#,
            r#"{"group":"","group":"","version":"v1","kind":"Pod"}"#,
            r#"{"group":"","version":"v1","kind":"Pod","kind":"Pod"}"#,
            r#"{"group":"","version":"v1","resource":"r","resource":"r","kind":"K"}"#,
            r#"{"group":"","version":"v1","kind":"K","kind":"K","resource":"r"}"#,
            r#"{"group":"","version":"v1","kind":5}"#,
            r#"{"group":null,"version":"v1","kind":"K"}"#,
            r#"{"version":"v1"}"#,
            r#"{"other":{"kind":1},"group":"","version":"v1","kind":"K"}"#,
            r#"["", "v1", "Pod"]"#,
            r#"["", "v1"]"#,
            r#"["", "v1", "Pod", "x"]"#,
            r#"[]"#,
            r#""text""#,
            r#"null"#,
            r#"{}"#,
        ] {
            same_as_derived(text).unwrap();
        }
    }

    proptest! {
        #[test]
        fn any_object_decodes_as_derived(
            fields in prop::collection::vec(
                (prop_oneof![Just("group"), Just("version"), Just("kind"), Just("resource"), Just("x")],
                 prop_oneof![
                     "[a-z\\\\\"]{0,4}".prop_map(|s| serde_json::to_string(&s).unwrap()),
                     Just("1".to_owned()),
                     Just("null".to_owned()),
                     Just("[\"a\"]".to_owned()),
                 ]),
                0..6,
            ),
            as_seq in any::<bool>(),
        ) {
            // Built as text, so that a field may come twice.
            let text = if as_seq {
                let items: Vec<&str> = fields.iter().map(|(_, v)| v.as_str()).collect();
                format!("[{}]", items.join(","))
            } else {
                let items: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", items.join(","))
            };
            same_as_derived(&text)?;
        }
    }
}
