//! `tailor backtest --plot DIR`: one SVG per container and strategy — CPU and memory usage, the request and
//! memory limit in effect, and the samples above them marked.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::{
    BLACK, BLUE, ChartBuilder, Circle, Color, DrawingArea, DrawingBackend, GREEN, IntoDrawingArea,
    LineSeries, MAGENTA, PathElement, RED, SVGBackend, SeriesLabelPosition, TriangleMarker, WHITE,
};
use tailor_engine::backtest::{Point, Series, StrategyResult};

/// Points drawn per line at most (longer series are thinned evenly; breaches are thinned separately).
const MAX_POINTS: usize = 4000;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Writes every container's plot of every strategy into `dir` (created if missing).
pub fn write_all(dir: &Path, results: &[StrategyResult]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for r in results {
        for c in &r.containers {
            let Some(series) = &c.series else { continue };
            let file = dir.join(format!("{}.{}.svg", file_name(&c.name), r.name));
            plot(&file, &format!("{} — {}", c.name, r.name), series)
                .with_context(|| format!("plotting {}", file.display()))?;
        }
    }
    Ok(())
}

/// The y axis reaches this multiple of the highest value, so the legend (upper right) sits above the data.
const LEGEND_HEADROOM: f64 = 1.45;

/// A file name from a container name: path separators and other odd bytes become `_`, at most 120 bytes.
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect()
}

fn thin<T: Copy>(v: impl Iterator<Item = T> + Clone) -> Vec<T> {
    let n = v.clone().count();
    let step = n.div_ceil(MAX_POINTS).max(1);
    v.step_by(step).collect()
}

fn plot(file: &Path, title: &str, s: &Series) -> anyhow::Result<()> {
    let root = SVGBackend::new(file, (1200, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (top, bottom) = root.split_vertically(330);
    panel(&top, "CPU (cores)", &s.cpu, 1.0, &[])?;
    panel(&bottom, "memory (GiB)", &s.memory, GIB, &s.ooms)?;
    root.present()?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    label: &str,
    points: &[Point],
    unit: f64,
    ooms: &[f64],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let t0 = points.first().map_or(0.0, |p| p.t);
    let days = |t: f64| (t - t0) / 86_400.0;
    let x_max = points.last().map_or(1.0, |p| days(p.t)).max(1e-3);
    let y_max = points
        .iter()
        .map(|p| {
            p.usage
                .max(p.request.unwrap_or(0.0))
                .max(p.limit.unwrap_or(0.0))
        })
        .fold(0.0, f64::max)
        / unit
        * LEGEND_HEADROOM;
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("days")
        .y_desc(label)
        .disable_mesh()
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            thin(points.iter().map(|p| (days(p.t), p.usage / unit))),
            BLUE.mix(0.6),
        ))?
        .label("usage")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(
            thin(
                points
                    .iter()
                    .filter_map(|p| p.request.map(|r| (days(p.t), r / unit))),
            ),
            GREEN.stroke_width(2),
        ))?
        .label("request")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
    if points.iter().any(|p| p.limit.is_some()) {
        chart
            .draw_series(LineSeries::new(
                thin(
                    points
                        .iter()
                        .filter_map(|p| p.limit.map(|l| (days(p.t), l / unit))),
                ),
                BLACK.mix(0.5),
            ))?
            .label("limit")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .draw_series(
            thin(
                points
                    .iter()
                    .filter(|p| p.request.is_some_and(|r| p.usage > r)),
            )
            .into_iter()
            .map(|p| Circle::new((days(p.t), p.usage / unit), 2, RED.filled())),
        )?
        .label("above request")
        .legend(|(x, y)| Circle::new((x + 10, y), 3, RED.filled()));
    if !ooms.is_empty() {
        chart
            .draw_series(
                ooms.iter()
                    .map(|&t| TriangleMarker::new((days(t), y_max * 0.95), 6, MAGENTA.filled())),
            )?
            .label("OOM in data")
            .legend(|(x, y)| TriangleMarker::new((x + 10, y), 5, MAGENTA.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
