//! Output formats of `tailor recommend`: table (for people), json/yaml (docs/design/trace-format.md §1.4), csv,
//! vpa.
//!
//! The sources (traces, Prometheus) produce [`Recommendations`]; this module only prints them and depends
//! on neither.

use std::io::Write;

use clap::ValueEnum;
use serde_json::{Value, json};
use tailor_crds::PodResourcePolicy;
use tailor_engine::policy::Resources;
use tailor_engine::replay::ReplayOutput;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable table.
    Table,
    /// The docs/design/trace-format.md §1.4 shape.
    Json,
    /// The same as YAML.
    Yaml,
    /// One row per container and resource.
    Csv,
    /// Tailor VerticalPodAutoscaler manifests carrying the recommendation in their status.
    Vpa,
}

/// The workload a recommendation is for, and the VPA spec `-o vpa` gives it.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// Workload kind (`Deployment`, `StatefulSet`, `DaemonSet`, …); empty when unknown (printed as
    /// `Deployment`).
    pub kind: String,
    /// VPA `spec.resourcePolicy`.
    pub policy: Option<PodResourcePolicy>,
    /// VPA update mode (`Off` when none).
    pub update_mode: Option<String>,
}

/// One workload's recommendation (id `namespace/name` or the trace id).
#[derive(Debug, Clone)]
pub struct Recommendation {
    /// The recommendation in the docs/design/trace-format.md §1.4 shape.
    pub output: ReplayOutput,
    /// What it is for.
    pub target: Target,
    /// Usage samples dropped as impossible by `--skip-bad-samples`: (CPU, memory).
    pub skipped: [u64; 2],
    /// With `--snapshot`: the conditions sizing within the cluster set on the VPA.
    pub cluster: Vec<ClusterCondition>,
}

/// A VPA condition set by sizing within the cluster (`CappedToNodeSize`, `ResourcesLeftToHPA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCondition {
    /// Condition type.
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

impl ClusterCondition {
    /// A condition as the recommender writes it.
    pub fn new(type_: &str, status: bool, reason: &str, message: &str) -> ClusterCondition {
        ClusterCondition {
            type_: type_.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The condition in the API's JSON form.
    fn to_json(&self) -> Value {
        json!({"type": self.type_, "status": self.status, "reason": self.reason, "message": self.message})
    }
}

/// The upstream release whose algorithm and output shape Tailor follows (docs/design/trace-format.md §1.4,
/// `upstream`).
pub const UPSTREAM: &str = "vertical-pod-autoscaler/v1.2.2";

/// What a source produced, in output order.
#[derive(Debug, Clone, Default)]
pub struct Recommendations {
    /// One per trace or workload.
    pub items: Vec<Recommendation>,
    /// The input was one trace object (json/yaml print an object, not an array).
    pub single: bool,
}

/// Writes the recommendations in the chosen format.
pub fn write(
    w: &mut dyn Write,
    format: OutputFormat,
    recs: &Recommendations,
    explain: bool,
) -> anyhow::Result<()> {
    let outputs: Vec<&ReplayOutput> = recs.items.iter().map(|r| &r.output).collect();
    let shaped: Vec<Value> = recs.items.iter().map(|r| shape(r, explain)).collect();
    let single = recs.single;
    match format {
        OutputFormat::Json => {
            let v = if single && shaped.len() == 1 {
                shaped[0].clone()
            } else {
                Value::Array(shaped)
            };
            serde_json::to_writer_pretty(&mut *w, &v)?;
            writeln!(w)?;
        }
        OutputFormat::Yaml => {
            let v = if single && shaped.len() == 1 {
                shaped[0].clone()
            } else {
                Value::Array(shaped)
            };
            w.write_all(serde_saphyr::to_string(&v)?.as_bytes())?;
        }
        OutputFormat::Csv => write_csv(w, &outputs)?,
        OutputFormat::Table => write_table(w, &recs.items, explain)?,
        OutputFormat::Vpa => {
            let docs: Vec<Value> = recs
                .items
                .iter()
                .filter(|r| r.output.error.is_none())
                .map(|r| vpa(&r.output, &r.target))
                .collect();
            w.write_all(serde_saphyr::to_string_multiple(&docs)?.as_bytes())?;
        }
    }
    Ok(())
}

/// The docs/design/trace-format.md §1.4 object: `id`, `recommendations`, `discarded`, `error` (when the trace
/// could not be run), `upstream`; plus Tailor's `explain` (with `--explain`) and `skipped` (samples
/// `--skip-bad-samples` dropped, when there were any).
fn shape(r: &Recommendation, explain: bool) -> Value {
    let o = &r.output;
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        if !explain {
            m.remove("explain");
        }
        if !m.contains_key("discarded") {
            m.insert("discarded".into(), json!({"cpu": 0, "memory": 0, "oom": 0}));
        }
        if r.skipped != [0, 0] {
            m.insert(
                "skipped".into(),
                json!({"cpu": r.skipped[0], "memory": r.skipped[1]}),
            );
        }
        if !r.cluster.is_empty() {
            let conditions: Vec<Value> = r.cluster.iter().map(ClusterCondition::to_json).collect();
            m.insert("conditions".into(), Value::Array(conditions));
        }
        m.insert("upstream".into(), json!(UPSTREAM));
    }
    v
}

fn write_csv(w: &mut dyn Write, outputs: &[&ReplayOutput]) -> anyhow::Result<()> {
    writeln!(
        w,
        "id,container,resource,target,lower_bound,upper_bound,uncapped_target"
    )?;
    for o in outputs {
        for r in &o.recommendations {
            for (res, unit) in [("cpu", "millicores"), ("memory", "bytes")] {
                let g = |x: &Resources| if res == "cpu" { x.cpu } else { x.memory };
                let Some(t) = g(&r.target) else { continue };
                let _ = unit;
                let cell = |x: Option<i64>| x.map_or(String::new(), |v| v.to_string());
                writeln!(
                    w,
                    "{},{},{},{},{},{},{}",
                    csv_escape(&o.id),
                    csv_escape(&r.container_name),
                    res,
                    t,
                    cell(g(&r.lower_bound)),
                    cell(g(&r.upper_bound)),
                    cell(g(&r.uncapped_target))
                )?;
            }
        }
    }
    Ok(())
}

fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `627m`, `2`, `1.5` cores.
pub fn fmt_cpu(m: Option<i64>) -> String {
    match m {
        None => "-".into(),
        Some(v) if v % 1000 == 0 => format!("{}", v / 1000),
        Some(v) => format!("{v}m"),
    }
}

/// `512Mi`, `1.25Gi`, … (2 decimals at most).
pub fn fmt_mem(b: Option<i64>) -> String {
    let Some(b) = b else { return "-".into() };
    // Up to `Ti`: larger memory requests are not worth a shorter column.
    for power in (1..=4).rev() {
        let d = 1i64 << (10 * power);
        if let (true, Some(u)) = (b >= d, tailor_core::quantity::binary_suffix(power)) {
            let v = b as f64 / d as f64;
            let s = format!("{v:.2}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{u}");
        }
    }
    format!("{b}")
}

fn fmt_span(ns: i64) -> String {
    let s = ns / 1_000_000_000;
    let (d, h, m) = (s / 86400, (s % 86400) / 3600, (s % 3600) / 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else {
        format!("{m}m")
    }
}

fn write_table(w: &mut dyn Write, items: &[Recommendation], explain: bool) -> anyhow::Result<()> {
    let mut rows: Vec<[String; 6]> = vec![[
        "TRACE".into(),
        "CONTAINER".into(),
        "CPU target (lower..upper)".into(),
        "MEMORY target (lower..upper)".into(),
        "HISTORY".into(),
        "NOTES".into(),
    ]];
    let mut details = Vec::new();
    for item in items {
        let o = &item.output;
        let skipped = item.skipped[0] + item.skipped[1];
        if let Some(e) = &o.error {
            rows.push([
                o.id.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("error: {e}"),
            ]);
            continue;
        }
        if o.recommendations.is_empty() {
            rows.push([
                o.id.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "no recommendation".into(),
            ]);
        }
        for (i, r) in o.recommendations.iter().enumerate() {
            let ex = o.explain.as_ref().and_then(|e| e.get(i));
            let history = ex.map_or(String::new(), |e| {
                format!(
                    "{} cpu samples over {}, confidence {:.2}",
                    e.detail.cpu_samples,
                    fmt_span(e.detail.history_span_ns),
                    e.detail.confidence_cpu
                )
            });
            let mut notes = Vec::new();
            if i == 0 {
                notes.extend(
                    (item.cluster.iter())
                        .map(|c| format!("{}={}: {}", c.type_, c.status, c.message)),
                );
            }
            if i == 0 && skipped > 0 {
                notes.push(format!(
                    "{skipped} bad sample(s) skipped ({} cpu, {} memory)",
                    item.skipped[0], item.skipped[1]
                ));
            }
            if let Some(e) = ex {
                if !e.oom_bumps.is_empty() {
                    notes.push(format!("{} OOM bump(s)", e.oom_bumps.len()));
                }
                if !e.detail.caps.is_empty() {
                    notes.push("capped by policy".to_string());
                }
                if e.detail
                    .steps
                    .iter()
                    .any(|s| s.bound == "target" && s.minimum_applied)
                {
                    notes.push("pod minimum applied".to_string());
                }
                if e.detail.confidence_cpu < 1.0 {
                    notes.push("low confidence (<1 day)".to_string());
                }
            }
            rows.push([
                o.id.clone(),
                r.container_name.clone(),
                format!(
                    "{} ({}..{})",
                    fmt_cpu(r.target.cpu),
                    fmt_cpu(r.lower_bound.cpu),
                    fmt_cpu(r.upper_bound.cpu)
                ),
                format!(
                    "{} ({}..{})",
                    fmt_mem(r.target.memory),
                    fmt_mem(r.lower_bound.memory),
                    fmt_mem(r.upper_bound.memory)
                ),
                history,
                notes.join("; "),
            ]);
            if explain && let Some(e) = ex {
                details.push(explain_text(&o.id, e, r));
            }
        }
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c == 5 {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        writeln!(w, "{}", line.trim_end())?;
    }
    for d in details {
        writeln!(w)?;
        w.write_all(d.as_bytes())?;
    }
    Ok(())
}

/// The `--explain` text of one container (also `tailor report`'s explanation).
pub(crate) fn explain_text(
    id: &str,
    e: &tailor_engine::replay::TraceExplain,
    r: &tailor_engine::replay::OutputRecommendation,
) -> String {
    let d = &e.detail;
    let mut s = format!(
        "{id} / {}: {} cpu samples, {} memory samples, history {}, confidence cpu {:.4} memory {:.4}\n",
        d.container,
        d.cpu_samples,
        e.memory_samples,
        fmt_span(d.history_span_ns),
        d.confidence_cpu,
        d.confidence_memory
    );
    s.push_str(&format!(
        "  per-container minimum: cpu {} memory {}\n",
        fmt_cpu(d.minimum.cpu),
        fmt_mem(d.minimum.memory)
    ));
    if let Some(rule) = &d.cpu_rule {
        s.push_str(&format!("  cpu rule: {} — {}\n", rule.rule, rule.reason));
    }
    if let Some(rule) = &d.memory_rule {
        s.push_str(&format!("  memory rule: {} — {}\n", rule.rule, rule.reason));
    }
    for st in &d.steps {
        let fmt = |v: i64| {
            if st.resource == "cpu" {
                fmt_cpu(Some(v))
            } else {
                format!("{v} bytes ({})", fmt_mem(Some(v)))
            }
        };
        let bound = match st.bound {
            "lowerBound" => &r.lower_bound,
            "upperBound" => &r.upper_bound,
            _ => &r.target,
        };
        let fin = if st.resource == "cpu" {
            bound.cpu
        } else {
            bound.memory
        };
        s.push_str(&format!(
            "  {:<6} {:<10} p{:<5} bucket {:>4} -> {} +margin {} x{:.4} = {}{}; final {}\n",
            st.resource,
            st.bound,
            st.percentile,
            st.bucket.map_or("empty".to_string(), |b| b.to_string()),
            fmt(st.percentile_amount),
            fmt(st.with_margin),
            st.multiplier,
            fmt(st.estimate),
            if st.minimum_applied {
                ", raised to the minimum"
            } else {
                ""
            },
            fin.map_or("- (not controlled)".to_string(), fmt)
        ));
    }
    for c in &d.caps {
        s.push_str(&format!("  cap: {c}\n"));
    }
    if !e.oom_bumps.is_empty() {
        let v: Vec<String> = e.oom_bumps.iter().map(|b| fmt_mem(Some(*b))).collect();
        s.push_str(&format!(
            "  OOM bumps recorded as peaks: {}\n",
            v.join(", ")
        ));
    }
    s
}

fn quantities(r: &Resources) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(c) = r.cpu {
        m.insert("cpu".into(), json!(format!("{c}m")));
    }
    if let Some(b) = r.memory {
        m.insert("memory".into(), json!(b.to_string()));
    }
    Value::Object(m)
}

fn dns_name(id: &str) -> String {
    let s: String = id
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "vpa".into()
    } else {
        s.chars().take(63).collect()
    }
}

/// The `apiVersion` of a workload kind's `targetRef`; None for kinds outside the built-in API groups.
fn api_version(kind: &str) -> Option<&'static str> {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => Some("apps/v1"),
        "Job" | "CronJob" => Some("batch/v1"),
        "ReplicationController" => Some("v1"),
        _ => None,
    }
}

fn target_ref(kind: &str, name: &str) -> Value {
    let kind = if kind.is_empty() { "Deployment" } else { kind };
    match api_version(kind) {
        Some(v) => json!({"apiVersion": v, "kind": kind, "name": name}),
        None => json!({"kind": kind, "name": name}),
    }
}

fn vpa(o: &ReplayOutput, t: &Target) -> Value {
    let (namespace, workload) = o.id.split_once('/').unwrap_or(("default", o.id.as_str()));
    let recs: Vec<Value> = o
        .recommendations
        .iter()
        .map(|r| {
            json!({
                "containerName": r.container_name,
                "target": quantities(&r.target),
                "lowerBound": quantities(&r.lower_bound),
                "upperBound": quantities(&r.upper_bound),
                "uncappedTarget": quantities(&r.uncapped_target),
            })
        })
        .collect();
    let mut spec = json!({
        "targetRef": target_ref(&t.kind, &dns_name(workload)),
        "updatePolicy": {"updateMode": t.update_mode.clone().unwrap_or_else(|| "Off".into())},
    });
    if let Some(p) = &t.policy {
        spec["resourcePolicy"] = serde_json::to_value(p).unwrap_or(Value::Null);
    }
    json!({
        "apiVersion": "autoscaling.tailor.dev/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": dns_name(workload), "namespace": namespace},
        "spec": spec,
        "status": {"recommendation": {"containerRecommendations": recs}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ref_names_the_real_kind() {
        let r = |kind: &str| target_ref(kind, "w");
        assert_eq!(
            r(""),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"})
        );
        assert_eq!(r("StatefulSet")["kind"], "StatefulSet");
        assert_eq!(r("DaemonSet")["apiVersion"], "apps/v1");
        assert_eq!(r("CronJob")["apiVersion"], "batch/v1");
        // A custom kind's API group is unknown: no apiVersion is guessed.
        assert_eq!(r("Rollout"), json!({"kind": "Rollout", "name": "w"}));
    }

    #[test]
    fn vpa_documents_carry_the_target_kind() {
        let recs = Recommendations {
            items: vec![Recommendation {
                output: ReplayOutput {
                    id: "shop/db".into(),
                    ..Default::default()
                },
                target: Target {
                    kind: "StatefulSet".into(),
                    ..Target::default()
                },
                skipped: [0, 0],
                cluster: Vec::new(),
            }],
            single: false,
        };
        let mut out = Vec::new();
        write(&mut out, OutputFormat::Vpa, &recs, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("kind: StatefulSet"), "{text}");
        assert!(text.contains("namespace: shop"), "{text}");
    }
}
