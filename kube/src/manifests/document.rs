//! One document of a manifest stream, read by a serde visitor that keeps only what the caller's [`Keep`]
//! takes: a plain object, a `List` (`kind: …List` with `items`, as `kubectl get` prints several objects)
//! whose items are decoded and handed to [`Keep`] one at a time as the parser reaches them, or a JSON array
//! of either. Each object is built as a bounded JSON value ([`super::bounded`]), kept, and dropped before
//! the next is read, so the whole document is never held; what [`Keep`] returns for the items of one List
//! is collected until the List ends (the parsers hand out whole documents), at most
//! [`MAX_OBJECTS_PER_DOCUMENT`] of them.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::bounded::{Bounded, Budget};
use super::{Keep, Object};

/// Most objects in one document (items of a List included).
pub const MAX_OBJECTS_PER_DOCUMENT: usize = 1_000_000;

/// An object a [`Keep`] refused, with what names it.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) message: String,
}

/// What one document yielded, in order; reading stops at the first refusal.
pub(crate) struct Document<T> {
    pub(crate) objects: Vec<Result<T, Refused>>,
    /// Whether the objects are items (of a List or an array) rather than the document itself.
    pub(crate) items: bool,
}

/// Whether `kind` names a List (`List`, `PodList`, …).
fn is_list_kind(kind: &str) -> bool {
    kind.ends_with("List")
}

/// Hands one object to `T`.
fn keep<T: Keep>(value: Value) -> Result<T, Refused> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let kind = text(value.get("kind"));
    let object = Object {
        api_version: text(value.get("apiVersion")),
        kind: kind.clone(),
        value,
    };
    let name = object.name().to_owned();
    T::keep(object).map_err(|message| Refused {
        kind,
        name,
        message,
    })
}

/// Appends `next` to `objects` unless a refusal already ended the document.
fn push<T, E: de::Error>(
    objects: &mut Vec<Result<T, Refused>>,
    next: Result<T, Refused>,
) -> Result<(), E> {
    if objects.len() >= MAX_OBJECTS_PER_DOCUMENT {
        return Err(E::custom(format_args!(
            "more than {MAX_OBJECTS_PER_DOCUMENT} objects in one document"
        )));
    }
    objects.push(next);
    Ok(())
}

fn refused<T>(objects: &[Result<T, Refused>]) -> bool {
    objects.last().is_some_and(Result::is_err)
}

impl<'de, T: Keep> Deserialize<'de> for Document<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocumentVisitor(PhantomData))
    }
}

struct DocumentVisitor<T>(PhantomData<fn() -> T>);

impl<'de, T: Keep> Visitor<'de> for DocumentVisitor<T> {
    type Value = Document<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object, a List, or an array of them")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Document {
            objects: Vec::new(),
            items: false,
        })
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    /// An array of documents, flattened.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::new();
        while !refused(&objects) {
            let Some(document) = seq.next_element::<Document<T>>()? else {
                break;
            };
            for next in document.objects {
                push(&mut objects, next)?;
            }
        }
        while refused(&objects) && seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Document {
            objects,
            items: true,
        })
    }

    /// An object, or a List whose `items` stream through [`Items`]. The kind may come after the items (as
    /// `kubectl` orders the keys): the items are then read as a List's and dropped if the kind is not one.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut rest = Map::new();
        let mut budget = Budget::object();
        let mut kind: Option<String> = None;
        let mut items: Option<Vec<Result<T, Refused>>> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" && kind.as_deref().is_none_or(is_list_kind) {
                match map.next_value_seed(Items::<T>(PhantomData))? {
                    ItemsRead::Objects(objects) => items = Some(objects),
                    ItemsRead::Other(value) => {
                        rest.insert(key, value);
                    }
                }
                continue;
            }
            let value = map.next_value_seed(Bounded {
                budget: &mut budget,
            })?;
            if key == "kind" {
                kind = value.as_str().map(str::to_owned);
            }
            rest.insert(key, value);
        }
        match items {
            Some(objects) if kind.as_deref().is_some_and(is_list_kind) => Ok(Document {
                objects,
                items: true,
            }),
            _ => Ok(Document {
                objects: vec![keep(Value::Object(rest))],
                items: false,
            }),
        }
    }
}

/// The `items` of a List: each decoded, kept and dropped in turn.
struct Items<T>(PhantomData<fn() -> T>);

/// What `items` held: objects, or (not a sequence) a value that stays a field of the object.
enum ItemsRead<T> {
    Objects(Vec<Result<T, Refused>>),
    Other(Value),
}

impl<'de, T: Keep> DeserializeSeed<'de> for Items<T> {
    type Value = ItemsRead<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// `items` that are not a sequence: read as an ordinary field.
macro_rules! items_as_a_field {
    ($($method:ident($($arg:ident: $ty:ty)?)),+) => {$(
        fn $method<E: de::Error>(self, $($arg: $ty)?) -> Result<Self::Value, E> {
            let mut budget = Budget::object();
            Bounded { budget: &mut budget }.$method($($arg)?).map(ItemsRead::Other)
        }
    )+};
}

impl<'de, T: Keep> Visitor<'de> for Items<T> {
    type Value = ItemsRead<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the items of a List")
    }

    items_as_a_field!(
        visit_bool(v: bool),
        visit_i64(v: i64),
        visit_u64(v: u64),
        visit_f64(v: f64),
        visit_str(v: &str),
        visit_unit(),
        visit_none()
    );

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut budget = Budget::object();
        Bounded {
            budget: &mut budget,
        }
        .visit_map(map)
        .map(ItemsRead::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::new();
        while !refused(&objects) {
            let mut budget = Budget::object();
            let Some(value) = seq.next_element_seed(Bounded {
                budget: &mut budget,
            })?
            else {
                break;
            };
            push(&mut objects, keep(value))?;
        }
        while refused(&objects) && seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ItemsRead::Objects(objects))
    }
}
