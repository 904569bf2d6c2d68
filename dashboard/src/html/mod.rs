//! The pages as HTML: one self-contained document each (styles inline, charts as inline SVG, no script, no
//! request to anything but the page's own links). Built with `maud`, which escapes every interpolated
//! value, so names, labels and annotation values cannot become markup.
//!
//! - [`fleet`]: totals, the namespaces, and the paged, sortable, filterable table of workloads.
//! - [`workload`]: one workload's containers, usage charts, conditions and explanation.
//! - [`chart`]: a usage histogram with the request and the target drawn on it.

pub mod chart;
pub mod fleet;
pub mod workload;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::model::{Fleet, Resources};

/// How pages link to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Served: `/?…` and `/workloads/NS/VPA`.
    Server,
    /// One offline file: every workload on the same page, linked by anchor.
    Report,
}

impl Links {
    /// The link to a workload's page.
    pub fn workload(self, namespace: &str, vpa: &str) -> String {
        match self {
            Links::Server => format!("/workloads/{}/{}", encode(namespace), encode(vpa)),
            Links::Report => format!("#{}", anchor(namespace, vpa)),
        }
    }

    /// The link to the fleet page with `query`.
    pub fn fleet(self, query: &[(&str, String)]) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in query {
            s.append_pair(k, v);
        }
        match self {
            Links::Server => format!("/?{}", s.finish()),
            Links::Report => "#fleet".into(),
        }
    }
}

/// A path segment, percent-encoded.
fn encode(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

/// The anchor of a workload in a report.
pub fn anchor(namespace: &str, vpa: &str) -> String {
    format!("w-{}-{}", encode(namespace), encode(vpa))
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2327}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccd0d4;padding:.25em .5em;text-align:right}\
th{background:#f0f0f1}td.l,th.l{text-align:left}.warn{color:#b32d2e;font-weight:600}.ok{color:#00733a}\
.flag{display:inline-block;background:#fcf0f1;color:#8a2424;border-radius:3px;padding:0 .35em;margin:0 .15em;font-size:.85em}\
.muted{color:#646970}nav a{margin-right:.6em}pre{background:#f6f7f7;padding:.6em;overflow:auto}\
form{margin:.6em 0}input,select{font:inherit}";

/// A whole document: title, a line on where the numbers come from, and `body`.
pub fn document(title: &str, fleet: &Fleet, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // No icon to fetch: the page loads nothing but itself.
                link rel="icon" href="data:,";
                title { (title) " · Tailor" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                p.muted {
                    "From " (fleet.source.producer) " at " (fleet.source.generated_at)
                    ". Costs at " (format!("{:.6}", fleet.prices.vcpu_hour)) " " (fleet.prices.currency) " per vCPU-hour and "
                    (format!("{:.6}", fleet.prices.gib_hour)) " " (fleet.prices.currency) " per GiB-hour ("
                    (fleet.prices.source) "), 730 hours a month."
                    @if !fleet.prices.families.is_empty() {
                        " Instance families with their own prices: "
                        @for (name, p) in &fleet.prices.families {
                            span.family data-family=(name) { (name) " (" (format!("{:.6}", p.vcpu_hour)) " / " (format!("{:.6}", p.gib_hour)) ") " }
                        }
                    }
                }
                (body)
            }
        }
    }
}

/// CPU for people: `250m`, `1.5`.
pub fn cpu(millicores: Option<i64>) -> String {
    match millicores {
        None => "–".into(),
        Some(m) if m.abs() >= 1000 => format!("{:.2}", m as f64 / 1000.0),
        Some(m) => format!("{m}m"),
    }
}

/// Memory for people: `512Mi`, `1.50Gi`.
pub fn memory(bytes: Option<i64>) -> String {
    const MI: f64 = 1024.0 * 1024.0;
    match bytes {
        None => "–".into(),
        Some(b) if (b.abs() as f64) >= 1024.0 * MI => format!("{:.2}Gi", b as f64 / (1024.0 * MI)),
        Some(b) => format!("{:.0}Mi", b as f64 / MI),
    }
}

/// Money for people: `12.34 USD`.
pub fn money(amount: f64, currency: &str) -> String {
    format!("{amount:.2} {currency}")
}

/// `cpu / memory` of `r`.
pub fn both(r: Resources) -> String {
    format!("{} / {}", cpu(r.cpu_millicores()), memory(r.memory_bytes()))
}
