//! Tailor's limit policy (docs/limit-policy.md, docs/decisions/limit-policy.md): the VPA annotation
//! `tailor.dev/limit-policy` chooses, per container and resource, how a limit follows the new request —
//! `keep-ratio` (upstream's rule, docs/design/upstream-admission.md §3.6, and the default), `request+<quantity>`,
//! `ratio:<x>` or `unset`. This module reads the annotation; [`policy_limits`] applies it.
//!
//! Syntax: entries `[container/]resource=policy` separated by commas; no container or `*` means every
//! container, and an entry naming the container wins over one for every container. A bare `unset-cpu`
//! (or `container/unset-cpu`) is `cpu=unset`. Whitespace around entries and tokens is ignored.
//!
//! ```text
//! memory=request+256Mi,cpu=unset
//! app/memory=ratio:1.5, */memory=request+128Mi, unset-cpu
//! ```
//!
//! The text is bounded ([`MAX_POLICY_BYTES`], [`MAX_POLICY_ENTRIES`]) and quantities go through
//! [`Amount::parse`]. A value that does not parse is a [`LimitPolicyError`]: the webhook and the updater report
//! it (an Event on the VPA, a log line) and size as without the annotation.

use std::fmt;

use super::annotations::is_dns1123_label;
use super::{CPU, MEMORY};
use crate::quantity::Amount;
use crate::quantity::QuantityError;
use crate::text::cut;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tailor_crds::VerticalPodAutoscaler;

/// The VPA annotation holding the limit policy.
pub const LIMIT_POLICY_ANNOTATION: &str = "tailor.dev/limit-policy";
/// Longest annotation value read; a longer one is an error.
pub const MAX_POLICY_BYTES: usize = 1024;
/// Most entries read; more are an error.
pub const MAX_POLICY_ENTRIES: usize = 32;
/// Largest `ratio:` accepted (a limit a thousand times the request already limits nothing).
pub const MAX_RATIO: u32 = 1000;
/// How much of an offending token an error repeats.
const SHOWN_BYTES: usize = 64;

/// How one container's limit of one resource follows its new request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LimitRule {
    /// The original limit/request ratio (upstream, docs/design/upstream-admission.md §3.6).
    #[default]
    KeepRatio,
    /// The request plus a fixed amount (not negative).
    RequestPlus(Amount),
    /// The request times a factor, in thousandths (1000 ≤ x ≤ 1000·[`MAX_RATIO`]), rounded down.
    Ratio(u32),
    /// No limit: the container's limit is removed.
    Unset,
}

impl fmt::Display for LimitRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitRule::KeepRatio => f.write_str("keep-ratio"),
            LimitRule::RequestPlus(a) => write!(f, "request+{}", a.to_quantity().0),
            LimitRule::Ratio(t) => {
                let (whole, frac) = (t / 1000, t % 1000);
                if frac == 0 {
                    write!(f, "ratio:{whole}")
                } else {
                    let digits = format!("{frac:03}");
                    write!(f, "ratio:{whole}.{}", digits.trim_end_matches('0'))
                }
            }
            LimitRule::Unset => f.write_str("unset"),
        }
    }
}

/// One entry of the annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// The container it names; `None`: every container.
    container: Option<String>,
    /// [`CPU`] or [`MEMORY`].
    resource: &'static str,
    rule: LimitRule,
}

/// A VPA's limit policy: keep-ratio everywhere unless an entry says otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitPolicy {
    entries: Vec<Entry>,
}

/// Why an annotation value is not a limit policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitPolicyError {
    /// The value is longer than [`MAX_POLICY_BYTES`].
    #[error(
        "annotation {LIMIT_POLICY_ANNOTATION} is {0} bytes long; at most {MAX_POLICY_BYTES} are read"
    )]
    TooLong(usize),
    /// The value has more than [`MAX_POLICY_ENTRIES`] entries.
    #[error("annotation {LIMIT_POLICY_ANNOTATION} has more than {MAX_POLICY_ENTRIES} entries")]
    TooManyEntries,
    /// One entry is wrong.
    #[error("annotation {LIMIT_POLICY_ANNOTATION}, entry {position} {entry:?}: {reason}")]
    Entry {
        /// Its position, from 1.
        position: usize,
        /// Its text (cut to 64 bytes).
        entry: String,
        /// What is wrong with it.
        reason: EntryError,
    },
}

/// What is wrong with one entry of the annotation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Nothing between two commas.
    #[error("empty entry")]
    Empty,
    /// Neither `[container/]resource=policy` nor `[container/]unset-cpu`.
    #[error("expected [container/]resource=policy or unset-cpu")]
    Syntax,
    /// The container is neither `*` nor a DNS-1123 label.
    #[error("container {0:?} is neither * nor a container name")]
    Container(String),
    /// The resource is not `cpu` or `memory`.
    #[error("resource {0:?} is not cpu or memory")]
    Resource(String),
    /// The policy is none of the four.
    #[error("policy {0:?} is not keep-ratio, request+<quantity>, ratio:<x> or unset")]
    Policy(String),
    /// `memory=unset-cpu`.
    #[error("unset-cpu applies to cpu only")]
    UnsetCpuOnMemory,
    /// The quantity of `request+` does not parse.
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    /// The quantity of `request+` is negative: the limit would be below the request.
    #[error("the amount added to the request must not be negative")]
    Negative,
    /// The factor of `ratio:` is not a decimal in range.
    #[error("ratio {0:?} is not a decimal with at most 3 decimals from 1 to {MAX_RATIO}")]
    Ratio(String),
    /// The same container (or `*`) and resource twice.
    #[error("{resource} of {container} is given twice")]
    Duplicate {
        /// The container, or `*`.
        container: String,
        /// The resource.
        resource: &'static str,
    },
}

impl LimitPolicy {
    /// The policy `vpa`'s annotation sets (keep-ratio everywhere without the annotation).
    pub fn of(vpa: &VerticalPodAutoscaler) -> Result<Self, LimitPolicyError> {
        let text = vpa
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LIMIT_POLICY_ANNOTATION));
        match text {
            Some(text) => Self::parse(text),
            None => Ok(Self::default()),
        }
    }

    /// The policy sizing follows: [`LimitPolicy::of`], or keep-ratio everywhere when the annotation does not
    /// parse (the callers report that error separately).
    pub fn or_keep_ratio(vpa: &VerticalPodAutoscaler) -> Self {
        Self::of(vpa).unwrap_or_default()
    }

    /// Parses an annotation value.
    pub fn parse(text: &str) -> Result<Self, LimitPolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(LimitPolicyError::TooLong(text.len()));
        }
        let mut entries: Vec<Entry> = Vec::new();
        if text.trim().is_empty() {
            return Ok(Self { entries });
        }
        for (i, raw) in text.split(',').enumerate() {
            if i == MAX_POLICY_ENTRIES {
                return Err(LimitPolicyError::TooManyEntries);
            }
            let raw = raw.trim();
            let fail = |reason| LimitPolicyError::Entry {
                position: i + 1,
                entry: cut(raw, SHOWN_BYTES),
                reason,
            };
            let entry = parse_entry(raw).map_err(fail)?;
            if entries
                .iter()
                .any(|e| e.container == entry.container && e.resource == entry.resource)
            {
                return Err(fail(EntryError::Duplicate {
                    container: entry.container.unwrap_or_else(|| "*".into()),
                    resource: entry.resource,
                }));
            }
            entries.push(entry);
        }
        Ok(Self { entries })
    }

    /// Whether every container keeps its ratio (no entry, or only `keep-ratio` entries).
    pub fn is_keep_ratio(&self) -> bool {
        self.entries.iter().all(|e| e.rule == LimitRule::KeepRatio)
    }

    /// The rule for `container`'s `resource`: its own entry, else the entry for every container, else
    /// keep-ratio.
    pub fn rule(&self, container: &str, resource: &str) -> &LimitRule {
        let of = |named: bool| {
            self.entries.iter().find(|e| {
                e.resource == resource
                    && match &e.container {
                        Some(c) => named && c == container,
                        None => !named,
                    }
            })
        };
        static KEEP: LimitRule = LimitRule::KeepRatio;
        of(true).or_else(|| of(false)).map_or(&KEEP, |e| &e.rule)
    }
}

/// One trimmed entry.
fn parse_entry(text: &str) -> Result<Entry, EntryError> {
    if text.is_empty() {
        return Err(EntryError::Empty);
    }
    let (key, policy) = match text.split_once('=') {
        Some((k, p)) => (k.trim(), Some(p.trim())),
        None => (text, None),
    };
    let (container, key) = match key.split_once('/') {
        Some((c, k)) => (Some(c.trim()), k.trim()),
        None => (None, key),
    };
    let container = match container {
        None | Some("*") => None,
        Some(c) if is_dns1123_label(c) => Some(c.to_owned()),
        Some(c) => return Err(EntryError::Container(cut(c, SHOWN_BYTES))),
    };
    let Some(policy) = policy else {
        return if key == "unset-cpu" {
            Ok(Entry {
                container,
                resource: CPU,
                rule: LimitRule::Unset,
            })
        } else {
            Err(EntryError::Syntax)
        };
    };
    let resource = match key {
        "cpu" => CPU,
        "memory" => MEMORY,
        other => return Err(EntryError::Resource(cut(other, SHOWN_BYTES))),
    };
    Ok(Entry {
        container,
        resource,
        rule: parse_rule(policy, resource)?,
    })
}

/// The policy of one entry, for `resource`.
fn parse_rule(text: &str, resource: &'static str) -> Result<LimitRule, EntryError> {
    match text {
        "keep-ratio" => return Ok(LimitRule::KeepRatio),
        "unset" => return Ok(LimitRule::Unset),
        "unset-cpu" if resource == CPU => return Ok(LimitRule::Unset),
        "unset-cpu" => return Err(EntryError::UnsetCpuOnMemory),
        _ => {}
    }
    if let Some(amount) = text.strip_prefix("request+") {
        let amount = Amount::parse(&Quantity(amount.trim().to_owned()))?;
        if amount.is_negative() {
            return Err(EntryError::Negative);
        }
        return Ok(LimitRule::RequestPlus(amount));
    }
    if let Some(factor) = text.strip_prefix("ratio:") {
        return parse_ratio(factor.trim()).map(LimitRule::Ratio);
    }
    Err(EntryError::Policy(cut(text, SHOWN_BYTES)))
}

/// `1`, `1.5`, `2.125`: thousandths, from 1000 to 1000·[`MAX_RATIO`].
fn parse_ratio(text: &str) -> Result<u32, EntryError> {
    let bad = || EntryError::Ratio(cut(text, SHOWN_BYTES));
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) if !f.is_empty() => (w, f),
        Some(_) => return Err(bad()),
        None => (text, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 4 || frac.len() > 3 || !digits(whole) || !digits(frac) {
        return Err(bad());
    }
    let whole: u32 = whole.parse().map_err(|_| bad())?;
    let frac: u32 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
    let thousandths = whole * 1000 + frac;
    if !(1000..=MAX_RATIO * 1000).contains(&thousandths) {
        return Err(bad());
    }
    Ok(thousandths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rule(policy: &LimitPolicy, container: &str, resource: &str) -> String {
        policy.rule(container, resource).to_string()
    }

    fn error(text: &str) -> String {
        LimitPolicy::parse(text).expect_err(text).to_string()
    }

    #[test]
    fn the_documented_forms_parse() {
        let p = LimitPolicy::parse("memory=request+256Mi,cpu=unset").expect("parses");
        assert_eq!(rule(&p, "app", MEMORY), "request+256Mi");
        assert_eq!(rule(&p, "app", CPU), "unset");
        let p = LimitPolicy::parse(" app/memory = ratio:1.5 , */memory=request+128Mi, unset-cpu ")
            .expect("parses");
        assert_eq!(rule(&p, "app", MEMORY), "ratio:1.5");
        assert_eq!(rule(&p, "sidecar", MEMORY), "request+128Mi");
        assert_eq!(rule(&p, "sidecar", CPU), "unset");
        let p = LimitPolicy::parse("app/unset-cpu,cpu=keep-ratio,memory=ratio:2.125").expect("ok");
        assert_eq!(rule(&p, "app", CPU), "unset");
        assert_eq!(rule(&p, "other", CPU), "keep-ratio");
        assert_eq!(rule(&p, "other", MEMORY), "ratio:2.125");
        let p = LimitPolicy::parse("cpu=unset-cpu,memory=ratio:1").expect("alias and ratio 1");
        assert_eq!(rule(&p, "x", CPU), "unset");
        assert_eq!(rule(&p, "x", MEMORY), "ratio:1");
    }

    #[test]
    fn no_annotation_or_an_empty_one_keeps_the_ratio_everywhere() {
        for text in ["", "   "] {
            let p = LimitPolicy::parse(text).expect("empty is valid");
            assert!(p.is_keep_ratio());
            assert_eq!(rule(&p, "app", CPU), "keep-ratio");
        }
        let vpa = VerticalPodAutoscaler::default();
        assert_eq!(LimitPolicy::of(&vpa), Ok(LimitPolicy::default()));
        assert!(
            LimitPolicy::parse("cpu=keep-ratio")
                .expect("ok")
                .is_keep_ratio()
        );
        assert!(!LimitPolicy::parse("unset-cpu").expect("ok").is_keep_ratio());
    }

    #[test]
    fn the_policy_is_read_from_the_vpa_annotation() {
        let mut vpa = VerticalPodAutoscaler::default();
        vpa.metadata.annotations = Some(BTreeMap::from([(
            LIMIT_POLICY_ANNOTATION.to_owned(),
            "memory=request+1Gi".to_owned(),
        )]));
        let p = LimitPolicy::of(&vpa).expect("parses");
        assert_eq!(rule(&p, "c", MEMORY), "request+1Gi");
        vpa.metadata.annotations = Some(BTreeMap::from([(
            LIMIT_POLICY_ANNOTATION.to_owned(),
            "memory=lots".to_owned(),
        )]));
        assert!(LimitPolicy::of(&vpa).is_err());
        assert_eq!(LimitPolicy::or_keep_ratio(&vpa), LimitPolicy::default());
    }

    #[test]
    fn bad_entries_are_errors_that_say_which_and_why() {
        let cases = [
            ("memory", "entry 1 \"memory\": expected"),
            ("cpu=unset,,memory=unset", "entry 2 \"\": empty entry"),
            ("cpu=unset,", "entry 2 \"\": empty entry"),
            ("gpu=unset", "resource \"gpu\" is not cpu or memory"),
            ("Memory=unset", "resource \"Memory\""),
            ("App/cpu=unset", "container \"App\" is neither"),
            ("a/b/cpu=unset", "resource \"b/cpu\""),
            ("cpu=none", "policy \"none\" is not"),
            ("memory=unset-cpu", "unset-cpu applies to cpu only"),
            ("memory=request+lots", "invalid quantity \"lots\""),
            ("memory=request+-1Mi", "must not be negative"),
            ("memory=request+", "invalid quantity \"\""),
            ("memory=ratio:0.5", "ratio \"0.5\""),
            ("memory=ratio:1.", "ratio \"1.\""),
            ("memory=ratio:.5", "ratio \".5\""),
            ("memory=ratio:1.2345", "ratio \"1.2345\""),
            ("memory=ratio:1001", "ratio \"1001\""),
            ("memory=ratio:-2", "ratio \"-2\""),
            ("memory=ratio:1e3", "ratio \"1e3\""),
            ("memory=ratio:NaN", "ratio \"NaN\""),
            ("cpu=unset,cpu=keep-ratio", "cpu of * is given twice"),
            (
                "app/cpu=unset,unset-cpu,app/unset-cpu",
                "cpu of app is given twice",
            ),
        ];
        for (text, want) in cases {
            let got = error(text);
            assert!(got.contains(want), "{text}: {got}");
            assert!(
                got.starts_with("annotation tailor.dev/limit-policy"),
                "{got}"
            );
        }
        // A container named in the entry wins; * and no container are the same scope.
        assert!(LimitPolicy::parse("*/cpu=unset,cpu=unset").is_err());
        assert!(LimitPolicy::parse("app/cpu=unset,cpu=keep-ratio").is_ok());
    }

    #[test]
    fn ratios_are_exact_thousandths_within_bounds() {
        for (text, want) in [
            ("1", 1000),
            ("1.5", 1500),
            ("1.05", 1050),
            ("2.125", 2125),
            ("1000", 1_000_000),
            ("0001.000", 1000),
        ] {
            assert_eq!(parse_ratio(text), Ok(want), "{text}");
        }
        for text in ["0.999", "1000.001", "99999", "", "1,5", "+2", " 2"] {
            assert!(parse_ratio(text).is_err(), "{text}");
        }
    }

    #[test]
    fn oversized_and_hostile_values_are_refused_without_echoing_them_whole() {
        let long = format!("cpu=unset,{}", "x".repeat(MAX_POLICY_BYTES));
        assert_eq!(
            LimitPolicy::parse(&long),
            Err(LimitPolicyError::TooLong(long.len()))
        );
        let exactly = "m".repeat(MAX_POLICY_BYTES);
        assert!(matches!(
            LimitPolicy::parse(&exactly),
            Err(LimitPolicyError::Entry { .. })
        ));
        let many = vec!["keep-ratio-typo"; MAX_POLICY_ENTRIES + 1].join(",");
        assert!(LimitPolicy::parse(&many).is_err());
        let entries: Vec<String> = (0..=MAX_POLICY_ENTRIES)
            .map(|i| format!("c{i}/cpu=unset"))
            .collect();
        assert_eq!(
            LimitPolicy::parse(&entries.join(",")),
            Err(LimitPolicyError::TooManyEntries)
        );
        let most: Vec<String> = (0..MAX_POLICY_ENTRIES)
            .map(|i| format!("c{i}/cpu=unset"))
            .collect();
        assert!(LimitPolicy::parse(&most.join(",")).is_ok());
        // Control characters, quotes and non-ASCII text are shown escaped and cut.
        let hostile = format!("cpu=\u{1b}[31m\"\n{}é", "y".repeat(200));
        let message = error(&hostile);
        assert!(
            !message.contains('\u{1b}') && !message.contains('\n'),
            "{message}"
        );
        assert!(message.len() < 400, "{message}");
        let quantity = format!("memory=request+{}", "9".repeat(500));
        assert!(error(&quantity).contains("invalid quantity"));
        for text in [
            "=",
            "/",
            "/=",
            "*/=",
            "==",
            "cpu==unset",
            "cpu=unset=unset",
            "\u{0}",
        ] {
            assert!(LimitPolicy::parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn rules_print_as_written() {
        for text in [
            "keep-ratio",
            "unset",
            "request+256Mi",
            "request+500m",
            "ratio:1",
            "ratio:1.5",
            "ratio:1.05",
        ] {
            let p = LimitPolicy::parse(&format!("memory={text}")).expect("parses");
            assert_eq!(rule(&p, "c", MEMORY), text);
        }
    }
}
