//! A usage histogram as inline SVG: the model's buckets as bars on a logarithmic axis (the buckets grow
//! exponentially), today's request and the target as vertical lines, each labelled. Every element a test
//! or a person looks for has a class (`bar`, `request`, `target`) and its value in a `data-` attribute.

use maud::{Markup, html};

use crate::model::Distribution;

const WIDTH: f64 = 520.0;
const HEIGHT: f64 = 190.0;
const LEFT: f64 = 10.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 44.0;

/// The x position of `v` on the log axis `[lo, hi]`.
fn x(v: f64, lo: f64, hi: f64) -> f64 {
    let (l, h) = (lo.ln(), hi.ln());
    let t = if h > l {
        (v.max(lo).ln() - l) / (h - l)
    } else {
        0.5
    };
    LEFT + t.clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
}

/// The chart of `d` for `resource` (`cpu` in cores, `memory` in bytes), with `request` and `target` in the
/// same unit; `label` prints a value.
pub fn usage(
    resource: &str,
    d: &Distribution,
    request: Option<f64>,
    target: Option<f64>,
    label: impl Fn(f64) -> String,
) -> Markup {
    let max_weight = d.buckets.iter().map(|b| b.weight).fold(0.0, f64::max);
    let first = d.buckets.first().map_or(1.0, |b| b.start.max(b.end / 2.0));
    let last = d.buckets.last().map_or(2.0, |b| b.end);
    let marks = [request, target].into_iter().flatten().filter(|v| *v > 0.0);
    let lo = marks.clone().fold(first, f64::min).max(1e-6) * 0.8;
    let hi = marks.fold(last, f64::max) * 1.25;
    let plot = HEIGHT - TOP - BOTTOM;
    html! {
        svg.usage xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(HEIGHT)
            viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img" data-resource=(resource)
            aria-label={(resource) " usage distribution"} {
            rect x="0" y="0" width=(WIDTH) height=(HEIGHT) fill="#fbfbfc" stroke="#dcdcde" {}
            @for b in &d.buckets {
                @let (x0, x1) = (x(b.start.max(lo), lo, hi), x(b.end, lo, hi));
                @let h = if max_weight > 0.0 { b.weight / max_weight * plot } else { 0.0 };
                rect.bar x=(format!("{x0:.1}")) y=(format!("{:.1}", TOP + plot - h))
                    width=(format!("{:.1}", (x1 - x0).max(1.0))) height=(format!("{h:.1}"))
                    fill="#72aee6" data-start=(b.start) data-end=(b.end) data-weight=(b.weight) {}
            }
            @if let Some(r) = request {
                (mark("request", r, lo, hi, "#d63638", &label(r), TOP - 6.0))
            }
            @if let Some(t) = target {
                (mark("target", t, lo, hi, "#00a32a", &label(t), HEIGHT - BOTTOM + 30.0))
            }
            text x=(LEFT) y=(HEIGHT - BOTTOM + 13.0) font-size="10" fill="#646970" { (label(lo)) }
            text x=(WIDTH - RIGHT) y=(HEIGHT - BOTTOM + 13.0) font-size="10" fill="#646970" text-anchor="end" { (label(hi)) }
        }
    }
}

fn mark(class: &str, v: f64, lo: f64, hi: f64, color: &str, text: &str, text_y: f64) -> Markup {
    let px = x(v, lo, hi);
    html! {
        line class=(class) x1=(format!("{px:.1}")) x2=(format!("{px:.1}")) y1=(TOP) y2=(HEIGHT - BOTTOM)
            stroke=(color) stroke-width="2" data-value=(v) {}
        text class={(class) "-label"} x=(format!("{px:.1}")) y=(text_y) font-size="11" fill=(color)
            text-anchor="middle" { (class) " " (text) }
    }
}
