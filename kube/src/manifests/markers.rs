//! JSON documents in a YAML stream. `kubectl get -o json` prints one JSON value; files put together by hand
//! or by tools often hold several, separated by YAML's `---` (a YAML stream whose documents are written as
//! JSON). [`looks_like_json`] tells such files from YAML by their first content, and [`JsonStream`] turns
//! what YAML allows between documents — `---` and `...` lines, `#` comments — into blanks, so that one
//! streaming JSON parser reads every document. Only what lies outside every JSON value (depth 0, outside
//! strings) is touched.

use std::io::{self, BufRead, Read};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a file starting with `head` holds JSON: its first content (after a BOM, blank lines, `#`
/// comments and document markers) opens an object or an array.
pub(crate) fn looks_like_json(head: &[u8]) -> bool {
    let head = head.strip_prefix(BOM).unwrap_or(head);
    for line in head.split(|b| *b == b'\n') {
        let mut line = line.trim_ascii();
        for marker in [&b"---"[..], b"..."] {
            if let Some(rest) = line.strip_prefix(marker)
                && rest.first().is_none_or(u8::is_ascii_whitespace)
            {
                line = rest.trim_ascii();
            }
        }
        match line.first() {
            None | Some(b'#') => continue,
            Some(b'{' | b'[') => return true,
            Some(_) => return false,
        }
    }
    false
}

/// A reader of JSON text that blanks YAML's document markers and comments between JSON values.
pub(crate) struct JsonStream<R> {
    inner: R,
    scan: Scan,
}

/// Where the scan is in the text.
#[derive(Default)]
struct Scan {
    /// Nesting depth of objects and arrays.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At the start of a line (depth 0 only matters).
    line_start: bool,
    /// In a `#` comment at depth 0.
    comment: bool,
    /// Marker characters seen at the start of a line and not yet written (`-` or `.`, up to three).
    held: (u8, usize),
    /// Bytes decided but not yet handed out.
    pending: Vec<u8>,
}

impl<R: BufRead> JsonStream<R> {
    /// Reads `inner`, skipping a leading UTF-8 BOM.
    pub(crate) fn new(mut inner: R) -> io::Result<Self> {
        if inner.fill_buf()?.starts_with(BOM) {
            inner.consume(BOM.len());
        }
        Ok(JsonStream {
            inner,
            scan: Scan {
                line_start: true,
                ..Scan::default()
            },
        })
    }
}

impl Scan {
    /// The byte written for `b`, if it is decided now (`None`: held, or written to `pending`).
    fn step(&mut self, b: u8) -> Option<u8> {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return Some(b);
        }
        if self.comment {
            if b == b'\n' {
                self.comment = false;
                self.line_start = true;
                return Some(b);
            }
            return Some(b' ');
        }
        let (marker, count) = self.held;
        if count > 0 {
            if b == marker && count < 3 {
                self.held.1 += 1;
                return None;
            }
            self.held = (0, 0);
            let blank = count == 3 && b.is_ascii_whitespace();
            let released = if blank { b' ' } else { marker };
            self.pending.extend(std::iter::repeat_n(released, count));
            if let Some(b) = self.step(b) {
                self.pending.push(b);
            }
            return None;
        }
        let at_line_start = std::mem::replace(&mut self.line_start, b == b'\n');
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b'-' | b'.' if self.depth == 0 && at_line_start => {
                self.held = (b, 1);
                return None;
            }
            b'#' if self.depth == 0 => {
                self.comment = true;
                return Some(b' ');
            }
            _ => {}
        }
        Some(b)
    }
}

impl<R: BufRead> Read for JsonStream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let scan = &mut self.scan;
        loop {
            if !scan.pending.is_empty() {
                let n = buf.len().min(scan.pending.len());
                buf[..n].copy_from_slice(&scan.pending[..n]);
                scan.pending.drain(..n);
                return Ok(n);
            }
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                let (marker, count) = std::mem::take(&mut scan.held);
                if count == 0 {
                    return Ok(0);
                }
                let released = if count == 3 { b' ' } else { marker };
                scan.pending.extend(std::iter::repeat_n(released, count));
                continue;
            }
            let mut used = 0;
            let mut written = 0;
            for &b in chunk {
                if written == buf.len() || !scan.pending.is_empty() {
                    break;
                }
                used += 1;
                if let Some(out) = scan.step(b) {
                    buf[written] = out;
                    written += 1;
                }
            }
            self.inner.consume(used);
            if written > 0 {
                return Ok(written);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(text: &str) -> String {
        let mut out = String::new();
        JsonStream::new(text.as_bytes())
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn markers_and_comments_between_documents_become_blanks() {
        let text = "# head\n---\n{\"a\": \"--- #x\"}\n--- {\"b\": [\n1]}\n...\n---\n";
        let out = filtered(text);
        assert_eq!(out.len(), text.len());
        let values: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            values,
            [
                serde_json::json!({"a": "--- #x"}),
                serde_json::json!({"b": [1]})
            ]
        );
    }

    #[test]
    fn anything_else_passes_unchanged() {
        for text in [
            "-5\n-1",
            "{\"a\": \"\\\"}\\\\\"}",
            "[1,\n--2]",
            "--x",
            "\u{feff}{}",
        ] {
            let expected = text.trim_start_matches('\u{feff}');
            assert_eq!(filtered(text), expected);
        }
    }

    #[test]
    fn json_is_told_from_yaml_by_its_first_content() {
        assert!(looks_like_json(b"\n# c\n---\n{\"a\": 1}"));
        assert!(looks_like_json(b"--- [1]"));
        assert!(looks_like_json(b"\xEF\xBB\xBF{}"));
        assert!(!looks_like_json(b"apiVersion: v1\n"));
        assert!(!looks_like_json(b"---\nkind: List\n"));
        assert!(!looks_like_json(b""));
    }
}
