//! A `PodMetricsList` body decoded while it arrives: each object is handed on as soon as its last byte is
//! in, and only the bytes of the object in progress are kept. At 50,000 pods the body is about 20 MB; held
//! whole, it was the largest allocation of the loop (BENCHMARKS.md, docs/decisions/recommender-memory.md).
//!
//! The list's own punctuation (`{`, `"items": [`, commas) is read here; every value (a field name, a
//! skipped field, one object) is parsed by `serde_json` from the buffered bytes, and one that ends past them
//! is parsed again once more bytes are in.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use serde::de::{Error as _, IgnoredAny};
use serde_json::value::RawValue;

use crate::time::parse_rfc3339;
use tailor_engine::units::Nanos;

/// The largest object (or other value of the list) kept while waiting for its end. A PodMetrics object is a
/// few hundred bytes per container; anything near this is not one.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Usage of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// CPU in millicores, if reported and readable.
    pub cpu_millicores: Option<i64>,
    /// Working-set memory in bytes, if reported and readable.
    pub memory_bytes: Option<i64>,
}

/// One pod's metrics snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMetrics {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Sample time (end of the measurement window for metrics-server).
    pub timestamp: Nanos,
    /// Containers (init containers are filtered by the loop, which knows the pod spec).
    pub containers: Vec<ContainerUsage>,
}

/// A container's usage as listed: strings borrowed from the response where they hold no escapes; usage
/// keys other than `cpu` and `memory` are skipped.
#[derive(Deserialize)]
struct RawContainer<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    usage: RawUsage<'a>,
}

#[derive(Deserialize, Default)]
struct RawUsage<'a> {
    #[serde(default, borrow)]
    cpu: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    memory: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct RawMeta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
}

/// One listed object as read: metadata typed (as for every object), the rest kept as unparsed JSON text
/// (borrowed from the response) so that one odd object is counted as unreadable instead of failing the
/// whole list.
#[derive(Deserialize)]
struct RawPodMetrics<'a> {
    #[serde(default, borrow)]
    metadata: RawMeta<'a>,
    #[serde(default, borrow)]
    timestamp: Option<&'a RawValue>,
    #[serde(default, borrow)]
    containers: Option<&'a RawValue>,
}

/// The amount of `resource` in a listed usage value, if it reads as a quantity.
fn usage_amount(resource: &str, text: Option<Cow<'_, str>>) -> Option<i64> {
    let q = Quantity(text?.into_owned());
    tailor_core::quantity::amount(resource, &q).ok()
}

fn containers(raw: Vec<RawContainer<'_>>) -> Vec<ContainerUsage> {
    raw.into_iter()
        .map(|c| ContainerUsage {
            cpu_millicores: usage_amount("cpu", c.usage.cpu),
            memory_bytes: usage_amount("memory", c.usage.memory),
            name: c.name.into_owned(),
        })
        .collect()
}

impl RawPodMetrics<'_> {
    fn into_metrics(self) -> Option<PodMetrics> {
        let name = self.metadata.name?.into_owned();
        let timestamp = serde_json::from_str::<Cow<'_, str>>(self.timestamp?.get()).ok()?;
        let timestamp = parse_rfc3339(&timestamp)?;
        let raw: Vec<RawContainer<'_>> = self
            .containers
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or_default();
        Some(PodMetrics {
            namespace: self
                .metadata
                .namespace
                .map(Cow::into_owned)
                .unwrap_or_default(),
            name,
            timestamp,
            containers: containers(raw),
        })
    }
}

/// Where in the list the bytes read so far end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the opening `{`.
    Start,
    /// After `{`: a field name or `}`.
    FirstField,
    /// After `,`: a field name.
    Field,
    /// After a field name: `:`.
    Colon { items: bool },
    /// After the `:` of a field other than `items`: its value, skipped.
    Value,
    /// After the `:` of `items`: `[` or `null`.
    Items,
    /// After `[`: an object or `]`.
    FirstItem,
    /// After an object: `,` or `]`.
    AfterItem,
    /// After `,` in `items`: an object.
    Item,
    /// After a value: `,` or `}`.
    AfterValue,
    /// After the closing `}`: nothing but white space.
    End,
}

/// What one step over the buffered bytes found.
enum Step {
    /// Consumed this many bytes; go on.
    Took(usize),
    /// The next token or value ends past the buffered bytes.
    More,
}

/// Decodes one `PodMetricsList` body pushed chunk by chunk ([`ListDecoder::push`], then
/// [`ListDecoder::finish`]), handing each readable object to a callback as soon as it is complete.
#[derive(Debug)]
pub struct ListDecoder {
    /// Bytes received but not consumed: the start of the token or value in progress.
    pending: Vec<u8>,
    /// Bytes consumed before `pending` (for error positions).
    offset: usize,
    /// The length `pending` must reach before the value in progress is parsed again: twice what it was at
    /// the last attempt, so that a value arriving in many small chunks is parsed a few times, not once per
    /// chunk.
    retry_at: usize,
    at: At,
    readable: usize,
    unreadable: usize,
}

impl Default for ListDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ListDecoder {
    /// A decoder before the first byte of a body.
    pub fn new() -> Self {
        ListDecoder {
            pending: Vec::new(),
            offset: 0,
            retry_at: 0,
            at: At::Start,
            readable: 0,
            unreadable: 0,
        }
    }

    /// Decodes what `chunk` completes, handing each readable object to `each`. An error (malformed JSON, a
    /// body that is not a list object, a value over [`MAX_OBJECT_BYTES`]) ends the body: objects handed on
    /// before it stay handed on.
    pub fn push(
        &mut self,
        chunk: &[u8],
        each: &mut dyn FnMut(PodMetrics),
    ) -> Result<(), serde_json::Error> {
        if self.pending.is_empty() {
            // The common case: nothing carried over, so the chunk is read where it lies.
            let used = self.run(chunk, false, each)?;
            self.offset += used;
            self.pending.extend_from_slice(&chunk[used..]);
            self.retry_at = 2 * self.pending.len();
        } else {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() >= self.retry_at || self.pending.len() > MAX_OBJECT_BYTES {
                let mut buf = std::mem::take(&mut self.pending);
                let used = self.run(&buf, false, each);
                buf.drain(..*used.as_ref().unwrap_or(&0));
                self.pending = buf;
                self.offset += used?;
                self.retry_at = 2 * self.pending.len();
            }
        }
        if self.pending.len() > MAX_OBJECT_BYTES {
            return Err(self.error(0, format!("a value longer than {MAX_OBJECT_BYTES} bytes")));
        }
        Ok(())
    }

    /// Ends the body: returns how many objects were readable and how many were not, or an error if the
    /// body stopped before the end of the list object.
    pub fn finish(
        mut self,
        each: &mut dyn FnMut(PodMetrics),
    ) -> Result<(usize, usize), serde_json::Error> {
        let buf = std::mem::take(&mut self.pending);
        let used = self.run(&buf, true, each)?;
        if self.at != At::End || used < buf.len() {
            return Err(self.error(used, "the body ends before the end of the list".into()));
        }
        Ok((self.readable, self.unreadable))
    }

    /// Consumes every complete token and value of `buf` (all of it when `last`); returns the bytes used.
    fn run(
        &mut self,
        buf: &[u8],
        last: bool,
        each: &mut dyn FnMut(PodMetrics),
    ) -> Result<usize, serde_json::Error> {
        let mut pos = 0;
        loop {
            while buf.get(pos).is_some_and(u8::is_ascii_whitespace) {
                pos += 1;
            }
            if pos == buf.len() {
                return Ok(pos);
            }
            match self
                .step(&buf[pos..], last, each)
                .map_err(|e| self.located(pos, e))?
            {
                Step::Took(n) => pos += n,
                Step::More => return Ok(pos),
            }
        }
    }

    /// One token or value at the start of `rest` (which starts with a non-space byte).
    fn step(
        &mut self,
        rest: &[u8],
        last: bool,
        each: &mut dyn FnMut(PodMetrics),
    ) -> Result<Step, serde_json::Error> {
        let byte = rest[0];
        let (next, took) = match (self.at, byte) {
            (At::Start, b'{') => (At::FirstField, 1),
            (At::FirstField, b'}') | (At::AfterValue, b'}') => (At::End, 1),
            (At::AfterValue, b',') => (At::Field, 1),
            (At::FirstField | At::Field, b'"') => match value::<Cow<'_, str>>(rest, last)? {
                Some((name, n)) => (
                    At::Colon {
                        items: name == "items",
                    },
                    n,
                ),
                None => return Ok(Step::More),
            },
            (At::Colon { items }, b':') => (if items { At::Items } else { At::Value }, 1),
            (At::Value, _) => match value::<IgnoredAny>(rest, last)? {
                Some((_, n)) => (At::AfterValue, n),
                None => return Ok(Step::More),
            },
            (At::Items, b'[') => (At::FirstItem, 1),
            (At::Items, _) => match value::<()>(rest, last)? {
                Some(((), n)) => (At::AfterValue, n),
                None => return Ok(Step::More),
            },
            (At::FirstItem | At::AfterItem, b']') => (At::AfterValue, 1),
            (At::AfterItem, b',') => (At::Item, 1),
            (At::FirstItem | At::Item, _) => match value::<RawPodMetrics<'_>>(rest, last)? {
                Some((item, n)) => {
                    match item.into_metrics() {
                        Some(pm) => {
                            self.readable += 1;
                            each(pm);
                        }
                        None => self.unreadable += 1,
                    }
                    (At::AfterItem, n)
                }
                None => return Ok(Step::More),
            },
            (at, _) => {
                return Err(serde_json::Error::custom(format!(
                    "unexpected {:?} {}",
                    char::from(byte),
                    expected(at)
                )));
            }
        };
        self.at = next;
        Ok(Step::Took(took))
    }

    fn located(&self, pos: usize, e: serde_json::Error) -> serde_json::Error {
        self.error(pos, e.to_string())
    }

    fn error(&self, pos: usize, message: String) -> serde_json::Error {
        serde_json::Error::custom(format!(
            "PodMetricsList at byte {}: {message}",
            self.offset + pos
        ))
    }
}

/// What may come next at `at`.
fn expected(at: At) -> &'static str {
    match at {
        At::Start => "where the list object should start",
        At::FirstField => "where a field name or '}' should be",
        At::Field => "where a field name should be",
        At::Colon { .. } => "where ':' should be",
        At::AfterValue => "where ',' or '}' should be",
        At::AfterItem => "where ',' or ']' should be",
        At::End => "after the end of the list",
        At::Value | At::Items | At::FirstItem | At::Item => "in a value",
    }
}

/// Whether `e` was found at the last byte of `rest` (or past it): more bytes may make it a valid value
/// (`2.` before `5`, `tr` before `ue`, a string cut short).
fn at_end(rest: &[u8], e: &serde_json::Error) -> bool {
    let line_start = match e.line() {
        0 | 1 => 0,
        line => rest
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
            .map_or(rest.len(), |(i, _)| i + 1),
    };
    e.is_eof() || line_start + e.column() >= rest.len()
}

/// The value of type `T` at the start of `rest` and its length, or `None` if it may end past `rest`. A
/// value is taken as complete only if a byte follows it (or `last`): a number cut by the end of a chunk
/// reads as a shorter number.
fn value<'a, T: Deserialize<'a>>(
    rest: &'a [u8],
    last: bool,
) -> Result<Option<(T, usize)>, serde_json::Error> {
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
    match values.next() {
        Some(Ok(v)) => {
            let n = values.byte_offset();
            Ok((last || n < rest.len()).then_some((v, n)))
        }
        Some(Err(e)) if !last && at_end(rest, &e) => Ok(None),
        Some(Err(e)) => Err(e),
        None if last => Err(serde_json::Error::custom("the body ends inside a value")),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `body` pushed in chunks of `size` bytes.
    fn decode_in(
        body: &[u8],
        size: usize,
    ) -> Result<(Vec<PodMetrics>, usize, usize), serde_json::Error> {
        let mut out = Vec::new();
        let mut d = ListDecoder::new();
        for chunk in body.chunks(size.max(1)) {
            d.push(chunk, &mut |p| out.push(p))?;
        }
        let (ok, bad) = d.finish(&mut |p| out.push(p))?;
        Ok((out, ok, bad))
    }

    /// Decodes `body` whole and in chunks of every size from one byte up, and checks every way agrees.
    fn decode(body: &[u8]) -> Result<(Vec<PodMetrics>, usize, usize), String> {
        let whole = decode_in(body, body.len()).map_err(|e| e.to_string());
        for size in 1..body.len().min(64) {
            let chunked = decode_in(body, size).map_err(|e| e.to_string());
            assert_eq!(
                chunked.is_ok(),
                whole.is_ok(),
                "chunks of {size}: {chunked:?}"
            );
            if let (Ok(a), Ok(b)) = (&chunked, &whole) {
                assert_eq!(a, b, "chunks of {size}");
            }
        }
        whole
    }

    #[test]
    fn decodes_metrics_server_objects_one_by_one_in_chunks_of_any_size() {
        let body = serde_json::json!({
            "kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"resourceVersion": "1", "remainingItemCount": 12345},
            "items": [
                {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
                 "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
                 "timestamp": "2023-11-14T22:13:20Z", "window": "15.003s",
                 "containers": [
                    {"name": "app", "usage": {"cpu": "250123456n", "memory": "100Mi"}},
                    {"name": "side", "usage": {"cpu": "bad"}}
                 ]},
                {"metadata": {"name": "no-time", "namespace": "default"}, "containers": []},
                {"metadata": {"namespace": "default"}, "timestamp": "2023-11-14T22:13:20Z"},
                {"metadata": {"name": "odd", "namespace": "default"}, "timestamp": 5},
                {"metadata": {"name": "odd-containers", "namespace": "x"},
                 "timestamp": "2023-11-14T22:13:20Z", "containers": {"not": "a list"}}
            ],
            "trailing": [1, 2.5, true, null]
        });
        let (pods, ok, bad) = decode(body.to_string().as_bytes()).unwrap();
        assert_eq!((ok, bad), (2, 3));
        let p = &pods[0];
        assert_eq!(p.name, "web-1");
        assert_eq!(p.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(p.containers[0].cpu_millicores, Some(251));
        assert_eq!(p.containers[0].memory_bytes, Some(104_857_600));
        assert_eq!(p.containers[1].cpu_millicores, None);
        assert!(
            pods[1].containers.is_empty(),
            "unreadable containers read as none"
        );
    }

    #[test]
    fn escaped_strings_and_white_space_are_read_as_well_as_plain_ones() {
        let body = br#"
            { "items" : [ {"metadata": {"name": "web\u002d1", "namespace": "d\u0065fault"},
            "timestamp": "2023-11-14T22:13:20\u005a",
            "containers": [{"name": "\u0061pp", "usage": {"cpu": "25\u0030m", "memory": "1Ki"}}]} ] ,
            "k\u0069nd" : "PodMetricsList" }
        "#;
        let (pods, ok, bad) = decode(body).unwrap();
        assert_eq!((ok, bad), (1, 0));
        let p = &pods[0];
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("default", "web-1")
        );
        assert_eq!(p.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(p.containers[0].name, "app");
        assert_eq!(p.containers[0].cpu_millicores, Some(250));
        assert_eq!(p.containers[0].memory_bytes, Some(1024));
    }

    #[test]
    fn a_list_without_items_is_empty() {
        for body in [
            r#"{"kind": "PodMetricsList", "items": null}"#,
            r#"{"kind": "PodMetricsList"}"#,
            r#"{"items": []}"#,
            "{}",
        ] {
            assert_eq!(decode(body.as_bytes()).unwrap(), (vec![], 0, 0), "{body}");
        }
    }

    #[test]
    fn broken_bodies_are_errors_that_say_where() {
        for (body, says) in [
            (r#"{"items": ["#, "ends"),
            (
                r#"{"items": [{"metadata": {"name": "a"}"#,
                "byte 11: EOF while parsing an object",
            ),
            (r#"{"items": []"#, "ends"),
            ("", "ends"),
            ("[]", "byte 0: unexpected '['"),
            (
                r#"{"items": [] "kind": 1}"#,
                "byte 13: unexpected '\"' where ',' or '}' should be",
            ),
            (r#"{"items": [{}, ]}"#, "byte 15"),
            (r#"{"items": 5}"#, "byte 10"),
            (r#"{"items": [5]}"#, "byte 11"),
            (r#"{} {}"#, "after the end of the list"),
            (r#"{"a" 1}"#, "where ':' should be"),
        ] {
            let e = decode(body.as_bytes()).unwrap_err();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn objects_before_an_error_are_handed_on() {
        let body = br#"{"items": [{"metadata": {"name": "a"}, "timestamp": "2023-11-14T22:13:20Z"}, !, {}]}"#;
        let mut out = Vec::new();
        let mut d = ListDecoder::new();
        assert!(d.push(body, &mut |p| out.push(p)).is_err());
        assert_eq!(out.len(), 1);
        // Cut right after the bad byte, the error shows when the body ends.
        let cut = &body[..body.iter().position(|b| *b == b'!').unwrap() + 1];
        let mut out = Vec::new();
        let mut d = ListDecoder::new();
        d.push(cut, &mut |p| out.push(p)).unwrap();
        assert!(d.finish(&mut |p| out.push(p)).is_err());
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_large_object_trickling_in_small_chunks_is_read_whole() {
        // 200 KB of containers in one object, in 7-byte chunks: parsed again only when its bytes double
        // (parsing it on every chunk would read about 3 GB).
        let containers: Vec<_> = (0..4000)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "usage": {"cpu": "1m", "memory": "1Ki"}}))
            .collect();
        let body = serde_json::json!({"items": [
            {"metadata": {"name": "big", "namespace": "x"}, "timestamp": "2023-11-14T22:13:20Z",
             "containers": containers},
            {"metadata": {"name": "small", "namespace": "x"}, "timestamp": "2023-11-14T22:13:20Z"}
        ]})
        .to_string();
        assert!(body.len() > 200_000, "{}", body.len());
        let (pods, ok, bad) = decode_in(body.as_bytes(), 7).unwrap();
        assert_eq!((ok, bad), (2, 0));
        assert_eq!(pods[0].containers.len(), 4000);
        assert_eq!(pods[0].containers[3999].memory_bytes, Some(1024));
        assert_eq!(pods[1].name, "small");
    }

    #[test]
    fn a_value_that_does_not_end_within_the_bound_is_refused() {
        let mut d = ListDecoder::new();
        d.push(br#"{"items": [{"metadata": {"name": ""#, &mut |_| {})
            .unwrap();
        let filler = vec![b'x'; 64 * 1024];
        let mut refused = None;
        for i in 0..(MAX_OBJECT_BYTES / filler.len() + 2) {
            if let Err(e) = d.push(&filler, &mut |_| {}) {
                refused = Some((i, e.to_string()));
                break;
            }
        }
        let (i, e) = refused.expect("refused");
        assert_eq!(i + 1, MAX_OBJECT_BYTES / filler.len());
        assert!(e.contains("longer than 1048576 bytes"), "{e}");
    }
}
