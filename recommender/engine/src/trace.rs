//! Parsing usage input: a JSON trace, a JSON array of traces, or CSV usage rows. Errors name the input and
//! the line (and field). Pure: bytes in, traces out. [`parse_each`] streams: each trace of a JSON array is
//! handed over as soon as it has been read, so a large file is never held whole; usage values that cannot be
//! real are kept, rejected or skipped and counted ([`BadSamples`]).

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::de::{Deserializer as _, SeqAccess, Visitor};

use crate::replay::{Trace, TraceContainer, TracePod};
use crate::samples::{BadSamples, Resource, Rules, count_skipped, implausible};

/// Input that cannot be parsed; the message starts with `name:line`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// What the input held.
#[derive(Debug)]
pub struct Loaded {
    /// The traces.
    pub traces: Vec<Trace>,
    /// Whether the input was a single JSON object (output is then a single object too).
    pub single: bool,
}

/// One trace as parsed, and the samples [`BadSamples::Skip`] dropped from it: (CPU, memory).
#[derive(Debug)]
pub struct Parsed {
    /// The trace.
    pub trace: Trace,
    /// Samples dropped as impossible: (CPU, memory).
    pub skipped: [u64; 2],
}

/// Hands each trace of a JSON array to a callback as soon as it has been read.
struct EachTrace<'f>(&'f mut dyn FnMut(Parsed));

impl<'de> Visitor<'de> for EachTrace<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of traces")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        Rules::take_skipped();
        while let Some(trace) = seq.next_element::<Trace>()? {
            (self.0)(Parsed {
                trace,
                skipped: Rules::take_skipped(),
            });
        }
        Ok(())
    }
}

/// Reads JSON (one trace object, or an array streamed trace by trace) or CSV, chosen by the first non-blank
/// byte, and hands every trace to `each`. Returns whether the input was a single JSON object. Impossible
/// usage values follow `rule`.
pub fn parse_each<R: BufRead>(
    name: &str,
    mut reader: R,
    rule: BadSamples,
    each: &mut dyn FnMut(Parsed),
) -> Result<bool, ParseError> {
    let io = |e: std::io::Error| ParseError(format!("{name}: {e}"));
    let first = loop {
        let buf = reader.fill_buf().map_err(io)?;
        if buf.is_empty() {
            break None;
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let b = buf[i];
                reader.consume(i);
                break Some(b);
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    };
    let _rules = Rules::scope(rule);
    match first {
        Some(b'{') => {
            Rules::take_skipped();
            let trace: Trace = serde_json::from_reader(reader).map_err(|e| json_error(name, &e))?;
            each(Parsed {
                trace,
                skipped: Rules::take_skipped(),
            });
            Ok(true)
        }
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            de.deserialize_seq(EachTrace(each))
                .and_then(|()| de.end())
                .map_err(|e| json_error(name, &e))?;
            Ok(false)
        }
        Some(_) => {
            for p in parse_csv_checked(name, reader, rule)? {
                each(p);
            }
            Ok(false)
        }
        None => Err(ParseError(format!("{name}: empty input"))),
    }
}

/// Parses JSON (object or array) or CSV, chosen by the first non-blank byte; every usage value is kept.
pub fn parse(name: &str, data: &[u8]) -> Result<Loaded, ParseError> {
    let first = data.iter().find(|b| !b.is_ascii_whitespace()).copied();
    match first {
        Some(b'{') => {
            let t: Trace = serde_json::from_slice(data).map_err(|e| json_error(name, &e))?;
            Ok(Loaded {
                traces: vec![t],
                single: true,
            })
        }
        Some(b'[') => {
            let ts: Vec<Trace> = serde_json::from_slice(data).map_err(|e| json_error(name, &e))?;
            Ok(Loaded {
                traces: ts,
                single: false,
            })
        }
        Some(_) => Ok(Loaded {
            traces: parse_csv(name, data)?,
            single: false,
        }),
        None => Err(ParseError(format!("{name}: empty input"))),
    }
}

fn json_error(name: &str, e: &serde_json::Error) -> ParseError {
    // The position leads the message; serde_json's own " at line L column C" would repeat it.
    let msg = e.to_string();
    let msg = match msg.rsplit_once(" at line ") {
        Some((m, _)) if e.line() > 0 => m.to_string(),
        _ => msg,
    };
    ParseError(format!("{name}:{}:{}: {msg}", e.line(), e.column()))
}

/// (pod, container) → index in a trace's `containers`.
type ContainerIndex = BTreeMap<(String, String), usize>;

/// The CSV header Tailor expects.
pub const CSV_HEADER: [&str; 6] = [
    "timestamp",
    "namespace",
    "pod",
    "container",
    "cpu_cores",
    "memory_bytes",
];

/// Strips replica suffixes from a pod name: `web-7d9f8c6b5-x2x9z` → `web`, `db-0` → `db`.
pub fn workload_of(pod: &str) -> String {
    let parts: Vec<&str> = pod.split('-').collect();
    if parts.len() < 2 {
        return pod.to_string();
    }
    let is_hash = |s: &str, lens: &[usize]| {
        lens.contains(&s.len())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    let mut n = parts.len();
    if parts[n - 1].chars().all(|c| c.is_ascii_digit()) {
        n -= 1;
    } else if is_hash(parts[n - 1], &[5]) {
        n -= 1;
        if n >= 2
            && is_hash(parts[n - 1], &[6, 7, 8, 9, 10])
            && parts[n - 1].chars().any(|c| c.is_ascii_digit())
        {
            n -= 1;
        }
    }
    if n == 0 {
        pod.to_string()
    } else {
        parts[..n].join("-")
    }
}

fn parse_time(s: &str) -> Option<f64> {
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_secs_f64())
}

/// Parses `timestamp,namespace,pod,container,cpu_cores,memory_bytes` rows (header required) into one trace per
/// (namespace, workload); replicas of a workload share labels so they aggregate like a Deployment's pods.
/// An empty cpu or memory cell means no sample of that resource.
pub fn parse_csv(name: &str, data: &[u8]) -> Result<Vec<Trace>, ParseError> {
    Ok(parse_csv_checked(name, data, BadSamples::Accept)?
        .into_iter()
        .map(|p| p.trace)
        .collect())
}

/// [`parse_csv`] from a reader, impossible usage values following `rule` (errors name the line and field).
pub fn parse_csv_checked<R: std::io::Read>(
    name: &str,
    data: R,
    rule: BadSamples,
) -> Result<Vec<Parsed>, ParseError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(data);
    check_csv_header(name, &mut rdr)?;
    let mut groups = CsvGroups::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            ParseError(format!("{name}:{line}: {e}"))
        })?;
        let row = CsvRow::parse(name, &rec, rule)?;
        let skipped = Rules::take_skipped();
        row.add_to(&mut groups, skipped);
    }
    if groups.is_empty() {
        return Err(ParseError(format!("{name}: no data rows")));
    }
    Ok(groups
        .into_values()
        .map(|(trace, _, skipped)| Parsed { trace, skipped })
        .collect())
}

/// (namespace, workload) → its trace, the index of its containers, and the samples skipped in its rows.
type CsvGroups = BTreeMap<(String, String), (Trace, ContainerIndex, [u64; 2])>;

/// Reads the CSV header and requires it to be [`CSV_HEADER`].
fn check_csv_header<R: std::io::Read>(
    name: &str,
    rdr: &mut csv::Reader<R>,
) -> Result<(), ParseError> {
    let headers = rdr
        .headers()
        .map_err(|e| ParseError(format!("{name}:1: {e}")))?
        .clone();
    let got: Vec<&str> = headers.iter().collect();
    if got != CSV_HEADER {
        return Err(ParseError(format!(
            "{name}:1: expected header `{}`, got `{}`",
            CSV_HEADER.join(","),
            got.join(",")
        )));
    }
    Ok(())
}

/// One CSV data row, its fields checked.
struct CsvRow<'a> {
    ts: f64,
    ns: &'a str,
    pod: &'a str,
    container: &'a str,
    /// None when the cell is empty or the sample was skipped under [`BadSamples::Skip`].
    cpu: Option<f64>,
    /// As `cpu`.
    mem: Option<f64>,
}

impl<'a> CsvRow<'a> {
    /// The row's fields in column order, impossible usage values following `rule`; errors name the line and
    /// field.
    fn parse(name: &str, rec: &'a csv::StringRecord, rule: BadSamples) -> Result<Self, ParseError> {
        let line = rec.position().map_or(0, |p| p.line());
        let field = |i: usize| rec.get(i).unwrap_or("");
        let ts = parse_time(field(0)).ok_or_else(|| {
            ParseError(format!(
                "{name}:{line}: field timestamp: {:?} is neither unix seconds nor RFC 3339",
                field(0)
            ))
        })?;
        let (ns, pod, container) = (field(1), field(2), field(3));
        for (i, col) in [(1, "namespace"), (2, "pod"), (3, "container")] {
            if field(i).is_empty() {
                return Err(ParseError(format!("{name}:{line}: field {col} is empty")));
            }
        }
        let num = |i: usize, col: &str| -> Result<Option<f64>, ParseError> {
            let s = field(i);
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<f64>().map(Some).map_err(|_| {
                ParseError(format!("{name}:{line}: field {col}: {s:?} is not a number"))
            })
        };
        let checked = |i: usize, col: &str, res: Resource| -> Result<Option<f64>, ParseError> {
            let v = num(i, col)?;
            let Some(why) = v.and_then(|v| implausible(res, v)) else {
                return Ok(v);
            };
            match rule {
                BadSamples::Accept => Ok(v),
                BadSamples::Reject => Err(ParseError(format!(
                    "{name}:{line}: field {col}: {why} (--skip-bad-samples drops such samples)"
                ))),
                BadSamples::Skip => {
                    count_skipped(res);
                    Ok(None)
                }
            }
        };
        let cpu = checked(4, "cpu_cores", Resource::Cpu)?;
        let mem = checked(5, "memory_bytes", Resource::Memory)?;
        Ok(CsvRow {
            ts,
            ns,
            pod,
            container,
            cpu,
            mem,
        })
    }

    /// Adds the row's samples to its workload's trace (creating the trace, pod and container on first sight),
    /// and `skipped` to the workload's skipped samples.
    fn add_to(self, groups: &mut CsvGroups, skipped: [u64; 2]) {
        let CsvRow {
            ts,
            ns,
            pod,
            container,
            cpu,
            mem,
        } = self;
        let workload = workload_of(pod);
        let (trace, index, skips) = groups
            .entry((ns.to_string(), workload.clone()))
            .or_insert_with(|| {
                (
                    Trace {
                        id: format!("{ns}/{workload}"),
                        pods: Some(Vec::new()),
                        ..Default::default()
                    },
                    BTreeMap::new(),
                    [0, 0],
                )
            });
        skips[0] += skipped[0];
        skips[1] += skipped[1];
        let ci = container_slot(trace, index, &workload, pod, container);
        let c = &mut trace.containers[ci];
        if let Some(v) = cpu {
            c.cpu_samples.push([ts, v]);
        }
        if let Some(v) = mem {
            c.memory_samples.push([ts, v]);
        }
        trace.now = Some(trace.now.map_or(ts, |n: f64| n.max(ts)));
    }
}

/// The index in `trace.containers` of `container` of `pod`, adding the pod (labelled `app: workload`) and the
/// container to the trace on first sight.
fn container_slot(
    trace: &mut Trace,
    index: &mut ContainerIndex,
    workload: &str,
    pod: &str,
    container: &str,
) -> usize {
    let key = (pod.to_string(), container.to_string());
    match index.get(&key) {
        Some(&i) => i,
        None => {
            let pods = trace.pods.get_or_insert_with(Vec::new);
            if !pods.iter().any(|p| p.name == pod) {
                let labels = [("app".to_string(), workload.to_string())]
                    .into_iter()
                    .collect();
                pods.push(TracePod {
                    name: pod.to_string(),
                    labels: Some(labels),
                });
            }
            trace.containers.push(TraceContainer {
                name: container.to_string(),
                pod: Some(pod.to_string()),
                ..Default::default()
            });
            index.insert(key, trace.containers.len() - 1);
            trace.containers.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads() {
        assert_eq!(workload_of("web-7d9f8c6b5-x2x9z"), "web");
        assert_eq!(workload_of("db-0"), "db");
        assert_eq!(workload_of("api"), "api");
        assert_eq!(workload_of("node-exporter-abcde"), "node-exporter");
    }

    #[test]
    fn csv_errors_name_line_and_field() {
        let data = b"timestamp,namespace,pod,container,cpu_cores,memory_bytes\n1,ns,p,c,0.1,100\n2,ns,p,c,abc,100\n";
        let e = parse_csv("f.csv", data).unwrap_err().0;
        assert!(e.contains("f.csv:3") && e.contains("cpu_cores"), "{e}");
        let e = parse_csv("f.csv", b"a,b\n1,2\n").unwrap_err().0;
        assert!(e.contains("f.csv:1"), "{e}");
    }
}
