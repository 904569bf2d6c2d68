//! Incremental splitting of a Prometheus API response: the bytes of the envelope arrive in chunks, and each
//! element of one array inside it (`data.result` for queries, `data` for `/api/v1/series`) is handed out
//! as soon as it is complete, so a response of any size is parsed with memory bounded by its largest
//! element. Pure: no I/O.

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// The envelope outside the split array is kept for validation up to this many bytes.
const MAX_SKELETON: usize = 1 << 20;

/// A response that is not the JSON the Prometheus API returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StreamError(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Object { expecting_key: bool },
    Array,
}

/// Splits the elements of the array at `path` out of a JSON document fed in chunks.
#[derive(Debug)]
pub struct Splitter {
    path: &'static [&'static str],
    stack: Vec<Frame>,
    keys: Vec<Option<String>>,
    in_string: bool,
    escape: bool,
    key_buf: Option<String>,
    /// Depth of the target array while inside it.
    target: Option<usize>,
    found: bool,
    element: Vec<u8>,
    element_depth: usize,
    element_in_string: bool,
    element_escape: bool,
    capturing: bool,
    skeleton: Vec<u8>,
    done: bool,
    elements: u64,
}

impl Splitter {
    /// A splitter for the array at `path` (object keys from the top), e.g. `["data", "result"]`.
    pub fn new(path: &'static [&'static str]) -> Self {
        Splitter {
            path,
            stack: Vec::new(),
            keys: Vec::new(),
            in_string: false,
            escape: false,
            key_buf: None,
            target: None,
            found: false,
            element: Vec::new(),
            element_depth: 0,
            element_in_string: false,
            element_escape: false,
            capturing: false,
            skeleton: Vec::new(),
            done: false,
            elements: 0,
        }
    }

    /// Number of elements handed out so far.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    fn at_target_path(&self) -> bool {
        if self.keys.len() != self.path.len() {
            return false;
        }
        self.keys
            .iter()
            .zip(self.path)
            .all(|(k, p)| k.as_deref() == Some(*p))
    }

    /// Feeds a chunk; `on_element` receives the bytes of every element completed in it.
    pub fn feed<E: From<StreamError>>(
        &mut self,
        mut chunk: &[u8],
        on_element: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        while !chunk.is_empty() {
            if self.capturing {
                let used = self.capture(chunk);
                chunk = &chunk[used..];
                if !self.capturing {
                    self.elements += 1;
                    let r = on_element(&self.element);
                    self.element.clear();
                    r?;
                }
                continue;
            }
            let b = chunk[0];
            chunk = &chunk[1..];
            self.outer(b)?;
        }
        Ok(())
    }

    /// Copies bytes of the current element; returns how many were consumed.
    fn capture(&mut self, chunk: &[u8]) -> usize {
        for (i, &b) in chunk.iter().enumerate() {
            if self.element_in_string {
                if self.element_escape {
                    self.element_escape = false;
                } else if b == b'\\' {
                    self.element_escape = true;
                } else if b == b'"' {
                    self.element_in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.element_in_string = true,
                b'{' | b'[' => self.element_depth += 1,
                b'}' | b']' => {
                    self.element_depth -= 1;
                    if self.element_depth == 0 {
                        self.element.extend_from_slice(&chunk[..=i]);
                        self.capturing = false;
                        return i + 1;
                    }
                }
                _ => {}
            }
        }
        self.element.extend_from_slice(chunk);
        chunk.len()
    }

    fn push_skeleton(&mut self, b: u8) -> Result<(), StreamError> {
        if self.skeleton.len() >= MAX_SKELETON {
            return Err(StreamError(format!(
                "the response envelope outside the result exceeds {MAX_SKELETON} bytes"
            )));
        }
        self.skeleton.push(b);
        Ok(())
    }

    fn outer(&mut self, b: u8) -> Result<(), StreamError> {
        if self.in_string {
            self.push_skeleton(b)?;
            if self.escape {
                self.escape = false;
                if let Some(k) = &mut self.key_buf {
                    k.push(b as char);
                }
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(k) = self.key_buf.take()
                    && let Some(last) = self.keys.last_mut()
                {
                    *last = Some(k);
                }
            } else if let Some(k) = &mut self.key_buf {
                k.push(b as char);
            }
            return Ok(());
        }
        if self.done && !b.is_ascii_whitespace() {
            return Err(StreamError("trailing data after the JSON document".into()));
        }
        if let Some(depth) = self.target
            && self.stack.len() == depth
            && matches!(b, b'{' | b'[')
        {
            self.capturing = true;
            self.element_depth = 0;
            self.element_in_string = false;
            self.element_escape = false;
            let _ = self.capture(&[b]);
            return Ok(());
        }
        self.push_skeleton(b)?;
        match b {
            b'{' => {
                self.stack.push(Frame::Object {
                    expecting_key: true,
                });
                self.keys.push(None);
            }
            b'[' => {
                self.stack.push(Frame::Array);
                if self.target.is_none() && !self.found && self.at_target_path() {
                    self.target = Some(self.stack.len());
                    self.found = true;
                }
            }
            b'}' | b']' => {
                let want = if b == b'}' {
                    matches!(self.stack.last(), Some(Frame::Object { .. }))
                } else {
                    matches!(self.stack.last(), Some(Frame::Array))
                };
                if !want {
                    return Err(StreamError(format!(
                        "unbalanced '{}' in the response",
                        b as char
                    )));
                }
                if self.target == Some(self.stack.len()) {
                    self.target = None;
                }
                if let Some(Frame::Object { .. }) = self.stack.pop() {
                    self.keys.pop();
                }
                if self.stack.is_empty() {
                    self.done = true;
                }
            }
            b'"' => {
                self.in_string = true;
                if let Some(Frame::Object { expecting_key }) = self.stack.last_mut()
                    && *expecting_key
                {
                    self.key_buf = Some(String::new());
                }
            }
            b':' => {
                if let Some(Frame::Object { expecting_key }) = self.stack.last_mut() {
                    *expecting_key = false;
                }
            }
            b',' => {
                if let Some(Frame::Object { expecting_key }) = self.stack.last_mut() {
                    *expecting_key = true;
                }
                if self.target == Some(self.stack.len()) {
                    // Separator between elements: keep the skeleton a valid (empty) array.
                    self.skeleton.pop();
                }
            }
            _ => {
                if self.target == Some(self.stack.len()) && !b.is_ascii_whitespace() {
                    return Err(StreamError(format!(
                        "unexpected '{}' in the result array (expected objects)",
                        b as char
                    )));
                }
            }
        }
        Ok(())
    }

    /// Ends the document: checks it is complete, that the array was found, and returns the envelope with
    /// the array emptied (for `status`, `resultType`, `error`).
    pub fn finish(self) -> Result<serde_json::Value, StreamError> {
        if self.capturing || !self.done {
            return Err(StreamError(format!(
                "the response ended early (after {} complete elements)",
                self.elements
            )));
        }
        let v: serde_json::Value = serde_json::from_slice(&self.skeleton)
            .map_err(|e| StreamError(format!("invalid JSON envelope: {e}")))?;
        if !self.found {
            let status = v.get("status").and_then(|s| s.as_str()).unwrap_or("");
            if status == "error" {
                return Ok(v);
            }
            return Err(StreamError(format!(
                "the response has no {} array",
                self.path.join(".")
            )));
        }
        Ok(v)
    }
}

/// A sample value: Prometheus sends numbers as strings (`"0.25"`, `"NaN"`, `"+Inf"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value(pub f64);

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number as a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
                s.parse::<f64>()
                    .map(Value)
                    .map_err(|_| E::custom(format!("invalid sample value {s:?}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
                Ok(Value(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
                Ok(Value(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
                Ok(Value(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[unix_seconds, "value"]` → (unix milliseconds, value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point(pub i64, pub f64);

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Point;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("[unix_seconds, \"value\"]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Point, A::Error> {
                let t: f64 = s
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let v: Value = s
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if s.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                if !t.is_finite() || t.abs() > 1e13 {
                    return Err(de::Error::custom(format!("invalid timestamp {t}")));
                }
                Ok(Point((t * 1000.0).round() as i64, v.0))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One element of a query result: a series with its points (matrix) or its single point (vector).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RawSeries {
    /// Labels.
    #[serde(default)]
    pub metric: std::collections::BTreeMap<String, String>,
    /// Points of a matrix.
    #[serde(default)]
    pub values: Vec<Point>,
    /// Point of a vector.
    #[serde(default)]
    pub value: Option<Point>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(
        doc: &[u8],
        path: &'static [&'static str],
        chunk: usize,
    ) -> (Vec<String>, serde_json::Value) {
        let mut s = Splitter::new(path);
        let mut out = Vec::new();
        for c in doc.chunks(chunk) {
            s.feed::<StreamError>(c, &mut |e| {
                out.push(String::from_utf8(e.to_vec()).unwrap());
                Ok(())
            })
            .unwrap();
        }
        (out, s.finish().unwrap())
    }

    #[test]
    fn splits_result_elements_at_any_chunking() {
        let doc = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"x}]\"y"},"values":[[1,"1"],[2,"2"]]} , {"metric":{},"values":[]}]},"warnings":["w"]}"#;
        for chunk in [1, 2, 3, 7, 1000] {
            let (els, env) = split(doc, &["data", "result"], chunk);
            assert_eq!(els.len(), 2, "chunk {chunk}");
            let s: RawSeries = serde_json::from_str(&els[0]).unwrap();
            assert_eq!(s.metric["a"], "x}]\"y");
            assert_eq!(s.values, vec![Point(1000, 1.0), Point(2000, 2.0)]);
            assert_eq!(env["data"]["resultType"], "matrix");
            assert_eq!(env["data"]["result"], serde_json::json!([]));
        }
    }

    #[test]
    fn series_endpoint_and_errors() {
        let doc = br#"{"status":"success","data":[{"__name__":"up","job":"a"},{"__name__":"up"}]}"#;
        let (els, _) = split(doc, &["data"], 5);
        assert_eq!(els.len(), 2);
        let doc = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        let (els, env) = split(doc, &["data", "result"], 4);
        assert!(els.is_empty());
        assert_eq!(env["error"], "parse error");
    }

    #[test]
    fn truncated_and_malformed() {
        let doc = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]},{"metric":"#;
        let mut s = Splitter::new(&["data", "result"]);
        let mut n = 0;
        s.feed::<StreamError>(doc, &mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1);
        let e = s.finish().unwrap_err();
        assert!(e.0.contains("ended early"), "{e}");
        let mut s = Splitter::new(&["data", "result"]);
        let e = s
            .feed::<StreamError>(br#"{"data":{"result":[1]}}"#, &mut |_| Ok(()))
            .unwrap_err();
        assert!(e.0.contains("unexpected"), "{e}");
        let s = Splitter::new(&["data", "result"]);
        assert!(s.finish().is_err());
        let mut s = Splitter::new(&["data", "result"]);
        s.feed::<StreamError>(br#"{"status":"success","data":{}}"#, &mut |_| Ok(()))
            .unwrap();
        assert!(s.finish().unwrap_err().0.contains("no data.result"));
    }

    #[test]
    fn values() {
        let p: Point = serde_json::from_str(r#"[1717990000.5,"NaN"]"#).unwrap();
        assert_eq!(p.0, 1717990000500);
        assert!(p.1.is_nan());
        let p: Point = serde_json::from_str(r#"[1,"+Inf"]"#).unwrap();
        assert!(p.1.is_infinite());
        assert!(serde_json::from_str::<Point>(r#"[1,"x"]"#).is_err());
        assert!(serde_json::from_str::<Point>(r#"[1]"#).is_err());
    }
}
