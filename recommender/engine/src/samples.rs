//! Usage values that cannot be real, and what input parsing does with them ([`BadSamples`]): negative,
//! non-finite, or beyond any machine (more than [`MAX_CPU_CORES`] cores or [`MAX_MEMORY_BYTES`] bytes for one
//! container). The replay itself accepts every value, as upstream does (conformance); the checks apply when
//! traces are parsed from a file ([`crate::trace`]).
//!
//! JSON samples are checked while they are deserialized (serde_json then names the line and column); the rule
//! in force is set per parse with [`Rules::scope`], per thread.

use std::cell::Cell;

use serde::de::{Deserializer, Error as _, SeqAccess, Visitor};

/// Largest CPU usage of one container taken as real: 10,000 cores.
pub const MAX_CPU_CORES: f64 = 10_000.0;
/// Largest memory usage of one container taken as real: 1 PiB.
pub const MAX_MEMORY_BYTES: f64 = 1_125_899_906_842_624.0;

/// What parsing does with a usage value that cannot be real.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BadSamples {
    /// Keep it (the replay's own behaviour; conformance inputs).
    #[default]
    Accept,
    /// Fail, naming the input, line and value.
    Reject,
    /// Drop it and count it.
    Skip,
}

/// Which resource a value measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Cores.
    Cpu,
    /// Bytes.
    Memory,
}

/// Why `v` cannot be a usage value of `resource`, if it cannot.
pub fn implausible(resource: Resource, v: f64) -> Option<String> {
    let v_text = if v.is_finite() && v.abs() >= 1e9 {
        format!("{v:e}")
    } else {
        format!("{v}")
    };
    let (unit, max) = match resource {
        Resource::Cpu => ("cores", MAX_CPU_CORES),
        Resource::Memory => ("bytes", MAX_MEMORY_BYTES),
    };
    if !v.is_finite() {
        Some(format!("{v_text} {unit} is not a finite number"))
    } else if v < 0.0 {
        Some(format!("{v_text} {unit} is negative"))
    } else if v > max {
        Some(format!(
            "{v_text} {unit} is beyond any container (at most {max} {unit})"
        ))
    } else {
        None
    }
}

thread_local! {
    static RULE: Cell<BadSamples> = const { Cell::new(BadSamples::Accept) };
    static SKIPPED: Cell<[u64; 2]> = const { Cell::new([0, 0]) };
}

/// The rule in force on this thread while it lives; restores the previous one on drop.
#[derive(Debug)]
pub struct Rules {
    previous: BadSamples,
}

impl Rules {
    /// Sets `rule` for the parses this thread runs until the returned guard is dropped.
    pub fn scope(rule: BadSamples) -> Rules {
        let previous = RULE.with(|r| r.replace(rule));
        Rules { previous }
    }

    /// (CPU, memory) values skipped on this thread since the last call; resets the counts.
    pub fn take_skipped() -> [u64; 2] {
        SKIPPED.with(|s| s.replace([0, 0]))
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        RULE.with(|r| r.set(self.previous));
    }
}

/// Counts a skipped value.
pub fn count_skipped(resource: Resource) {
    SKIPPED.with(|s| {
        let mut v = s.get();
        let i = usize::from(resource == Resource::Memory);
        v[i] = v[i].saturating_add(1);
        s.set(v);
    });
}

/// The rule in force on this thread.
pub fn rule() -> BadSamples {
    RULE.with(Cell::get)
}

struct SamplesVisitor(Resource);

impl<'de> Visitor<'de> for SamplesVisitor {
    type Value = Vec<[f64; 2]>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of [unix_seconds, value] pairs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let rule = rule();
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(s) = seq.next_element::<[f64; 2]>()? {
            if rule != BadSamples::Accept
                && let Some(why) = implausible(self.0, s[1])
            {
                if rule == BadSamples::Reject {
                    return Err(A::Error::custom(format!(
                        "sample [{}, {}]: {why} (--skip-bad-samples drops such samples)",
                        s[0], s[1]
                    )));
                }
                count_skipped(self.0);
                continue;
            }
            out.push(s);
        }
        Ok(out)
    }
}

/// `deserialize_with` of `cpu_samples`: checked under the thread's [`BadSamples`] rule.
pub fn cpu_samples<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[f64; 2]>, D::Error> {
    d.deserialize_seq(SamplesVisitor(Resource::Cpu))
}

/// `deserialize_with` of `memory_samples`: checked under the thread's [`BadSamples`] rule.
pub fn memory_samples<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[f64; 2]>, D::Error> {
    d.deserialize_seq(SamplesVisitor(Resource::Memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implausible_values() {
        assert!(implausible(Resource::Cpu, 0.0).is_none());
        assert!(implausible(Resource::Cpu, 9_999.0).is_none());
        assert!(
            implausible(Resource::Cpu, -0.1)
                .unwrap()
                .contains("negative")
        );
        assert!(
            implausible(Resource::Cpu, f64::NAN)
                .unwrap()
                .contains("finite")
        );
        assert!(
            implausible(Resource::Cpu, 1e300)
                .unwrap()
                .contains("beyond")
        );
        assert!(implausible(Resource::Memory, 1e15).is_none());
        assert!(implausible(Resource::Memory, 1e16).is_some());
    }
}
