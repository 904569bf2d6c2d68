//! Bounds on text that came from a request: what a log line, an error or an answer repeats of it.

use std::fmt;

/// How much of an input-derived string a log line keeps.
pub const LOG_TEXT_LEN: usize = 256;

/// `text` cut to at most `max` bytes (on a character boundary), with `…[N bytes]` giving the full length when
/// anything was cut.
pub fn cut(text: &str, max: usize) -> String {
    Capped { text, max }.to_string()
}

/// Displays at most [`LOG_TEXT_LEN`] bytes of `text` (see [`cut`]), without copying it first.
pub fn capped(text: &str) -> Capped<'_> {
    Capped {
        text,
        max: LOG_TEXT_LEN,
    }
}

/// A string shown with a length cap; see [`capped`].
#[derive(Clone, Copy, Debug)]
pub struct Capped<'a> {
    text: &'a str,
    max: usize,
}

impl fmt::Display for Capped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.text.len() <= self.max {
            return f.write_str(self.text);
        }
        let mut end = self.max;
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}…[{} bytes]", &self.text[..end], self.text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged_and_long_text_is_marked() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…[4 bytes]");
        // Never splits a character: "é" is two bytes.
        assert_eq!(cut("aé", 2), "a…[3 bytes]");
        let long = "x".repeat(5 << 20);
        let shown = capped(&long).to_string();
        assert_eq!(shown.len(), LOG_TEXT_LEN + "…[5242880 bytes]".len());
    }
}
