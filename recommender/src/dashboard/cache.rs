//! The pages rendered from one published fleet, kept until the next loop publishes another: the fleet only
//! changes once a loop, so a dashboard left open (or a script polling it) costs one rendering per loop, not
//! one per view. Bounded: [`MAX_ENTRIES`] answers, none over [`MAX_ENTRY_BYTES`], [`MAX_BYTES`] in all; past
//! the bounds the oldest answers go first, and an answer too large is served without being kept.

use std::sync::{Mutex, PoisonError};

use axum::body::Bytes;

/// Answers kept per fleet.
pub const MAX_ENTRIES: usize = 32;
/// Largest answer kept.
pub const MAX_ENTRY_BYTES: usize = 512 * 1024;
/// Bytes kept in all.
pub const MAX_BYTES: usize = 2 * 1024 * 1024;

/// One rendered answer: its content type and body.
#[derive(Clone, Debug)]
pub struct Answer {
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Bytes,
}

/// The answers rendered from one fleet, by request (route and query).
#[derive(Debug, Default)]
pub struct ResponseCache {
    entries: Mutex<Vec<(String, Answer)>>,
}

impl ResponseCache {
    /// The answer to `key`, when rendered before.
    pub fn get(&self, key: &str) -> Option<Answer> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, a)| a.clone())
    }

    /// Keeps `answer` to `key`, within the bounds.
    pub fn put(&self, key: String, answer: Answer) {
        if answer.body.len() > MAX_ENTRY_BYTES || key.len() > 4096 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.iter().any(|(k, _)| *k == key) {
            return;
        }
        entries.push((key, answer));
        let bytes =
            |e: &[(String, Answer)]| e.iter().map(|(k, a)| k.len() + a.body.len()).sum::<usize>();
        while entries.len() > MAX_ENTRIES || bytes(&entries) > MAX_BYTES {
            entries.remove(0);
        }
    }

    /// Answers kept.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(n: usize) -> Answer {
        Answer {
            content_type: "text/html",
            body: Bytes::from(vec![b'x'; n]),
        }
    }

    #[test]
    fn answers_are_kept_within_their_bounds() {
        let c = ResponseCache::default();
        c.put("/".into(), answer(10));
        assert_eq!(c.get("/").map(|a| a.body.len()), Some(10));
        assert!(c.get("/?page=1").is_none());
        c.put("big".into(), answer(MAX_ENTRY_BYTES + 1));
        assert!(c.get("big").is_none(), "too large to keep");
        for i in 0..100 {
            c.put(format!("/{i}"), answer(100_000));
        }
        assert!(c.len() <= MAX_ENTRIES);
        assert!(c.get("/").is_none(), "the oldest went first");
        assert!(c.get("/99").is_some());
    }
}
